//! The shim <-> agent control protocol, defined once and shared by `libkfdq_shim.so`, `kfdqd`
//! and tests.
//!
//! Transport: a Unix stream socket (`KFDQ_SOCKET`); the agent listens, each shim connects.
//! Framing: one JSON object per line (`\n`-terminated, at most [`MAX_LINE`] bytes). The first
//! line each side sends is a hello carrying [`VERSION`]; a peer with another major version is
//! refused with [`AgentMsg::Refused`]. Commands carry a `seq` echoed by the shim's
//! [`ShimMsg::Ack`]. A message the agent cannot take is answered with [`AgentMsg::Error`] and
//! the session goes on. Control clients (`kfdq`) use the same socket with [`control`]'s
//! requests. Closing the socket means "agent gone": the shim releases every hold and
//! reactivates/resumes every queue (fail open).
#![forbid(unsafe_code)]

pub mod board;
mod codec;
pub mod control;
mod messages;
pub mod peer;
pub mod state;

pub use codec::{DecodeError, LineReader, MAX_LINE, encode, encode_into};
pub use control::{Reply, Request};
pub use messages::*;

/// Where the agent listens unless configured otherwise (kfdqd's `[socket] path`, the CLI's
/// `KFDQ_SOCKET`), and where `kfdq doctor` looks for it.
pub const DEFAULT_SOCKET: &str = "/run/kfdq/kfdq.sock";

/// The fix for a socket directory others can write, as kfdqd (which refuses it) and the doctor
/// give it: another directory, never a chmod (the directory may be a shared one, /tmp, whose
/// mode others rely on).
pub const SOCKET_DIR_FIX: &str = "put the socket in a directory of its own that only root (or the agent's user) can write, e.g. [agent] socket = \"/run/kfdq/kfdq.sock\" (or --socket /run/kfdq/kfdq.sock; kfdqd creates the directory 0755); do not change the mode of a shared directory such as /tmp";

/// Protocol version. Bump on any incompatible change.
pub const VERSION: u32 = 1;

/// How often a queue's activity (write > read index) is sampled: by a connected shim
/// (`KFDQ_ACTIVITY_US`) and by the agent's tracer for processes without it (`[tracer]
/// activity_us`). The agent learns that a latency queue went busy up to one period late, so
/// the period adds up to itself to every reaction; its CPU cost is measured in
/// docs/performance.md ("Activity sampling", "Tracer path"): 2 ms keeps the delay small against
/// a request (the field's 2.65 ms) at about 1 % of a core per process.
pub const DEFAULT_ACTIVITY_PERIOD: std::time::Duration = std::time::Duration::from_millis(2);

/// Accepted activity periods, in µs: below 250 µs sampling costs a good share of a core; above
/// 100 ms the agent reacts later than any request lasts.
pub const ACTIVITY_RANGE_US: std::ops::RangeInclusive<u64> = 250..=100_000;

/// While one of its queues is busy, a shim that reports edges ([`AgentMsg::Edges`]) samples at
/// this period, so the busy -> idle edge reaches the agent within it (the idle -> busy edge
/// is reported by the launch itself). A latency service is busy a small share of the time
/// (the field: under 5 %), so the fine period costs little; measured in docs/performance.md.
pub const BUSY_SAMPLE_PERIOD: std::time::Duration = std::time::Duration::from_micros(100);

/// While a queue is busy, its shim says so again at this period: the agent takes a busy queue
/// whose process has said nothing for [`BUSY_STALE`] as idle, so a process stopped (SIGSTOP) or
/// hung while busy preempts nobody for longer than that.
pub const BUSY_RENEW_PERIOD: std::time::Duration = std::time::Duration::from_millis(20);

/// A request hint ([`ShimMsg::Hint`]) not followed by work expires after this long unless the
/// class sets `hint_timeout_ms` (docs/shim.md, "Request hints"). Long enough for the host work an
/// inference server does between knowing of a request and its first launch (parsing, decoding or
/// tokenizing, the copy to the GPU: about a millisecond to tens of milliseconds); short enough that
/// a hint the application forgets to end costs the batch job at most 50 ms, half the bound
/// ([`BUSY_STALE`]) a stopped busy process already costs it.
pub const DEFAULT_HINT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(50);

/// See [`BUSY_RENEW_PERIOD`]: five renewals missed.
pub const BUSY_STALE: std::time::Duration = std::time::Duration::from_millis(100);

/// The default lease of every preemption ([`AgentMsg::Welcome`]'s `lease_ms`): a hung agent
/// starves a preempted process for at most this long. The agent renews every quarter of it, so
/// a loaded node whose agent is late by up to three quarters of a second does not flap.
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_millis(1000);
