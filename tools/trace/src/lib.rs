//! Kernel traces: a GPU job's dispatches as measured (`tools/preempt-lab/examples/traces/`,
//! the `h100-*.csv` files written by `tools/preempt-lab/real-gpu/to_traces.py`) or written by
//! hand. One format, read here for every user: preempt-lab's simulated jobs (`--hp-trace`,
//! `--lp-trace`), `kfdq demo`'s ResNet-18 request and `kfdq-hipwork`'s spin launches.
//!
//! A file is CSV (a header, then one dispatch a line; [`CSV_HEADER`], [`CSV_OPTIONAL`]) or JSON
//! if its name ends in `.json` (`{"dispatches": [...]}`). Each dispatch ([`Dispatch`]) has these
//! columns; the meaning is the one `to_traces.py` writes and docs/experiments.md ("Trace files")
//! states, and each reader takes it through the [`Dispatch`] method named:
//!
//! | column | meaning | rule | read as |
//! |---|---|---|---|
//! | `workgroups` | work-groups in the grid | integer, at least 1 | the grid (a HIP launch: at most `u32::MAX`) |
//! | `waves_per_wg` | wave-slot footprint of one work-group in waves of 64 threads: its own waves, more where registers or LDS let fewer share a CU (an H100 SM's 2048 threads are 32 slots) | integer 1..=32 | the model: slots as given; a HIP launch: [`Dispatch::hip_waves`] (at most 16, 1024 threads; [`Trace::hip_launches`]) |
//! | `wg_us` | time of one work-group once it has its slots, µs (with `cu_util`: alone on its CU) | number above 0 | [`Dispatch::wg_ns`] |
//! | `stream` | the HIP stream it was launched on | integer, at least 0 | |
//! | `barrier` | the host waits for it: it ends a request | `true`/`false`/`1`/`0` | [`Trace::request_ends`] |
//! | `cu_util` (optional, with `dram_bytes`) | share of its CU's issue rate one work-group uses alone | number 0..=1 | [`Dispatch::cu_util_permille`] |
//! | `dram_bytes` (optional, with `cu_util`) | DRAM bytes one work-group moves | number, at least 0 | [`Dispatch::dram_bytes`] |
//!
//! Errors ([`TraceError`]) name the file, the line, the field and the rule.

mod csv_file;
mod error;
mod json_file;
mod record;
mod rules;

use std::path::Path;

pub use error::TraceError;
pub use record::{Dispatch, Footprint, HIP_MAX_WAVES, HipLaunch, MAX_WAVES_PER_WG, WAVE_THREADS};

/// The CSV header, in this order; [`CSV_OPTIONAL`] may follow it.
pub const CSV_HEADER: [&str; 5] = ["workgroups", "waves_per_wg", "wg_us", "stream", "barrier"];

/// Optional CSV columns after [`CSV_HEADER`], both or neither.
pub const CSV_OPTIONAL: [&str; 2] = ["cu_util", "dram_bytes"];

/// Emulator time per traced time: the one factor by which kfdq's emulator runs a trace's
/// work-group times (`kfdq demo`'s ResNet-18 request, `kfdq-hipwork`'s traces). kfd-emu's CP
/// looks at rings every 200 µs while work is in flight and every 1.6 ms while idle
/// (docs/kfd-emulator.md), so a request's first kernel waits up to a poll before it starts and
/// the ResNet-18 request's 0.56 ms alone on the H100 would measure the polls, not the GPU. At
/// 10x its 505 µs of block time is ~5 ms. A request's reaction and save are then the same
/// fraction of it as on the H100 only if they scale too — they do not (the agent's ~300 µs is
/// host time), so the scaled request is, relative to its reaction, 10x easier to protect than
/// the H100's; docs/demo.md states the measurement.
pub const EMULATOR_TIME_SCALE: f64 = 10.0;

/// A trace: its dispatches in file order, at least one.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Its dispatches in order.
    pub dispatches: Vec<Dispatch>,
}

impl Trace {
    /// Reads a trace file: JSON if its name ends in `.json`, CSV otherwise.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let name = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(source) => return Err(TraceError::Read { name, source }),
        };
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            Trace::from_json(&name, &text)
        } else {
            Trace::from_csv(&name, &text)
        }
    }

    /// Parses the CSV form; `name` names the file in errors.
    pub fn from_csv(name: &str, text: &str) -> Result<Trace, TraceError> {
        Trace::new(name, csv_file::read(name, text)?)
    }

    /// Parses the JSON form; `name` names the file in errors.
    pub fn from_json(name: &str, text: &str) -> Result<Trace, TraceError> {
        Trace::new(name, json_file::read(name, text)?)
    }

    fn new(name: &str, dispatches: Vec<Dispatch>) -> Result<Trace, TraceError> {
        if dispatches.is_empty() {
            return Err(TraceError::NoDispatches { name: name.into() });
        }
        Ok(Trace { dispatches })
    }

    /// Where each request ends (exclusive indices): after every dispatch with `barrier` set,
    /// and at the end (dispatches after the last barrier make a last request).
    pub fn request_ends(&self) -> Vec<usize> {
        let mut ends: Vec<usize> = self
            .dispatches
            .iter()
            .enumerate()
            .filter(|(_, d)| d.barrier)
            .map(|(i, _)| i + 1)
            .collect();
        if ends.last() != Some(&self.dispatches.len()) {
            ends.push(self.dispatches.len());
        }
        ends
    }

    /// The dispatches as HIP launches ([`Dispatch::hip_launch`]), in order; `name` names the
    /// file in the error for a grid a HIP launch cannot take.
    pub fn hip_launches(&self, name: &str) -> Result<Vec<HipLaunch>, TraceError> {
        self.dispatches
            .iter()
            .enumerate()
            .map(|(i, d)| {
                d.hip_launch().ok_or_else(|| TraceError::Grid {
                    name: name.into(),
                    dispatch: i + 1,
                    workgroups: d.workgroups,
                })
            })
            .collect()
    }

    /// The streams used.
    pub fn streams(&self) -> usize {
        let mut s: Vec<u32> = self.dispatches.iter().map(|d| d.stream).collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    }
}
