//! Reaction-chain timestamps: where a preemption's time goes, stamped where things happen.
//!
//! When [`ENV`] (`KFDQ_CHAIN_TRACE`) names a file, the shim's control thread and the agent
//! append one line per event to it, `<stage> <t_us>` (CLOCK_MONOTONIC, µs), in the order
//! of a preemption's chain ([`Stage`]). The events are kept in memory where they happen and
//! written once the thread recorded nothing for [`QUIET`] (a chain is over by then), so the
//! file's I/O does not take the CPU from the chain it measures. Without the variable nothing is recorded, and nothing of this
//! is on the shim's launch path (docs/performance.md, "Reaction chain (emulator)"; `kfdq demo`
//! reads the files, docs/demo.md).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The environment variable naming the file to append to.
pub const ENV: &str = "KFDQ_CHAIN_TRACE";

/// How long after its last event a recorder writes its events ([`Recorder::flush_when_quiet`]):
/// longer than a reaction chain takes (under 1 ms unless the host is starved), shorter than the
/// demo's latency request (8 ms), so that the latency client's shim writes its last request's
/// events before it exits.
pub const QUIET: std::time::Duration = std::time::Duration::from_millis(5);

/// A point of the reaction chain, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Stage {
    /// The preempting process's control thread woke for a launch (its eventfd), recorded
    /// with the busy edge it then sent.
    HpWoke,
    /// The busy edge (`activity`, busy) was written to the agent.
    EdgeSent,
    /// The agent woke with a busy edge among what it read.
    AgentRead,
    /// The agent's decision returned (before its commands were written).
    AgentDecided,
    /// The agent wrote a preempt command.
    AgentWritten,
    /// The preempted process's control thread read a preempt command.
    CmdRecv,
    /// A preempt ioctl was issued.
    IoctlIn,
    /// A preempt ioctl returned.
    IoctlOut,
    /// The preempt's acknowledgement was written.
    AckSent,
}

impl Stage {
    /// Every stage, in chain order.
    pub const ALL: [Stage; 9] = [
        Stage::HpWoke,
        Stage::EdgeSent,
        Stage::AgentRead,
        Stage::AgentDecided,
        Stage::AgentWritten,
        Stage::CmdRecv,
        Stage::IoctlIn,
        Stage::IoctlOut,
        Stage::AckSent,
    ];

    /// The name in the file.
    pub fn name(self) -> &'static str {
        match self {
            Stage::HpWoke => "hp_woke",
            Stage::EdgeSent => "edge_sent",
            Stage::AgentRead => "agent_read",
            Stage::AgentDecided => "agent_decided",
            Stage::AgentWritten => "agent_written",
            Stage::CmdRecv => "cmd_recv",
            Stage::IoctlIn => "ioctl_in",
            Stage::IoctlOut => "ioctl_out",
            Stage::AckSent => "ack_sent",
        }
    }

    fn from_name(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|st| st.name() == s)
    }
}

/// CLOCK_MONOTONIC in µs (the clock of the latency client's request starts and of kfd-emu's
/// `stopped_at_us`).
pub fn now_us() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000)
        .unwrap_or(0)
}

/// Events kept in memory until [`Recorder::flush`].
#[derive(Debug)]
pub struct Recorder {
    file: File,
    path: PathBuf,
    buf: String,
    last_us: u64,
}

/// Why the trace file could not be opened or written.
#[derive(Debug, thiserror::Error)]
#[error("{ENV}={}: {source}; reaction-chain timestamps are not recorded", path.display())]
pub struct TraceError {
    path: PathBuf,
    source: std::io::Error,
}

impl Recorder {
    /// Opens `path` for appending (created if missing).
    pub fn open(path: &Path) -> Result<Recorder, TraceError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| TraceError {
                path: path.to_owned(),
                source,
            })?;
        Ok(Recorder {
            file,
            path: path.to_owned(),
            buf: String::with_capacity(4096),
            last_us: 0,
        })
    }

    /// The recorder [`ENV`] asks for, if any.
    pub fn from_env() -> Option<Result<Recorder, TraceError>> {
        let p = std::env::var_os(ENV).filter(|v| !v.is_empty())?;
        Some(Recorder::open(Path::new(&p)))
    }

    /// `stage` now.
    pub fn mark(&mut self, stage: Stage) {
        self.mark_at(stage, now_us());
    }

    /// `stage` at `t_us`.
    pub fn mark_at(&mut self, stage: Stage, t_us: u64) {
        use std::fmt::Write as _;
        let _ = writeln!(self.buf, "{} {t_us}", stage.name());
        self.last_us = self.last_us.max(t_us);
    }

    /// Writes what was recorded once nothing was for [`QUIET`].
    pub fn flush_when_quiet(&mut self) -> Result<(), TraceError> {
        if self.buf.is_empty() || now_us().saturating_sub(self.last_us) < QUIET.as_micros() as u64 {
            return Ok(());
        }
        self.flush()
    }

    /// Writes what was recorded (one append).
    pub fn flush(&mut self) -> Result<(), TraceError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let r = self.file.write_all(self.buf.as_bytes());
        self.buf.clear();
        r.map_err(|source| TraceError {
            path: self.path.clone(),
            source,
        })
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// The events of a trace file, in file order; lines that are not `<stage> <t_us>` are skipped.
pub fn parse(text: &str) -> Vec<(Stage, f64)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_ascii_whitespace();
            let s = Stage::from_name(w.next()?)?;
            let t: f64 = w.next()?.parse().ok()?;
            w.next().is_none().then_some((s, t))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_events_come_back_from_the_file_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("t.chain");
        let mut r = Recorder::open(&p).expect("open");
        r.mark_at(Stage::EdgeSent, 10);
        r.mark_at(Stage::AckSent, 25);
        assert_eq!(
            std::fs::read_to_string(&p).expect("read"),
            "",
            "kept until flushed"
        );
        // Long ago: quiet since.
        r.flush_when_quiet().expect("flush");
        assert!(!std::fs::read_to_string(&p).expect("read").is_empty());
        let before = now_us();
        r.mark(Stage::IoctlIn);
        r.flush_when_quiet().expect("not yet");
        assert_eq!(
            std::fs::read_to_string(&p).expect("read").lines().count(),
            2
        );
        drop(r);
        let text = std::fs::read_to_string(&p).expect("read") + "garbage line\nioctl_out x\n";
        let ev = parse(&text);
        assert_eq!(ev.len(), 3, "{text}");
        assert_eq!(ev[0], (Stage::EdgeSent, 10.0));
        assert_eq!(ev[1], (Stage::AckSent, 25.0));
        assert_eq!(ev[2].0, Stage::IoctlIn);
        assert!(ev[2].1 >= before as f64);
    }

    #[test]
    fn an_unwritable_path_is_refused_with_the_variable_named() {
        let e = Recorder::open(Path::new("/nonexistent-dir/x.chain")).expect_err("no dir");
        assert!(e.to_string().contains(ENV), "{e}");
    }
}
