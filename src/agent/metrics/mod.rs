//! The agent's Prometheus metrics: what it records as it goes (class busy time, preemptions
//! per class and level, preemption and decision latency histograms) and the exposition of a
//! scrape, built from the node's status plus those records. docs/operations.md lists every
//! series.
//!
//! A scrape builds a fresh registry: totals the node already counts are written as counters of
//! that value, state (partitions, processes) as gauges of the moment, and the two histograms
//! are the live ones. Nothing here does I/O; [`super::http`] serves the text.
//!
//! * `recorder`: [`Recorder`], what the node records between scrapes (time in a state per
//!   class, busy periods, preemptions, the latency histograms).
//! * `labels`: the label sets of the series and the names and numbers of levels.
//! * `render`: [`render`], the text of a scrape, one function per family group.

mod labels;
mod recorder;
mod render;

pub use labels::level_label;
pub use recorder::Recorder;
pub use render::render;

/// The `Content-Type` of what [`render`] returns (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
