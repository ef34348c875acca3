//! What the event loop and the tracer thread say to each other: the commands and events, and
//! the pipes that wake the other side.

use std::fs::File;
use std::io::Read;

use crate::agent::conn::ConnId;
use crate::ids::Pid;
use crate::proto::{AgentMsg, ShimMsg};

/// A request to the tracer thread.
#[derive(Debug)]
pub enum Cmd {
    /// Take control of `pid`, known to the node as connection `conn`.
    Seize {
        /// The process.
        pid: Pid,
        /// Its connection id.
        conn: ConnId,
        /// Its start time when discovery found it (`Identity::start`): a process found
        /// under the pid with another is not the one discovered, and is left alone.
        start: u64,
    },
    /// An executor command for a tracee.
    Command {
        /// The process.
        pid: Pid,
        /// The command.
        msg: AgentMsg,
    },
    /// Resume and detach `pid`.
    Leave {
        /// The process.
        pid: Pid,
        /// Why (logged).
        why: String,
    },
    /// Leave every tracee, then end the thread.
    Shutdown,
}

/// What the tracer thread reports.
#[derive(Debug)]
pub enum Event {
    /// `pid` is traced and debug-enabled; its registry follows as a message.
    Seized {
        /// The process.
        pid: Pid,
        /// Its connection id.
        conn: ConnId,
    },
    /// `pid` could not be taken (already traced, not runtime-enabled, permission).
    Refused {
        /// The process.
        pid: Pid,
        /// Why, naming the rule and the fix.
        reason: String,
    },
    /// A session message (registry, activity, ack) of tracee `conn`.
    Msg {
        /// Its connection id.
        conn: ConnId,
        /// The message.
        msg: ShimMsg,
    },
    /// The tracee is no longer traced (exited, exec'd, left).
    Gone {
        /// Its connection id.
        conn: ConnId,
        /// The process.
        pid: Pid,
        /// Why.
        why: String,
    },
}

pub(super) fn wake_pipe() -> std::io::Result<(File, File)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
    Ok((File::from(r), File::from(w)))
}

pub(super) fn drain(f: &mut File) {
    let mut buf = [0u8; 64];
    while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
}
