//! The event loop's side of the tracer thread: the commands it sends, the events it reads, and
//! the two channels between them, each with a pipe that wakes the other side.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::sync::mpsc::{Receiver, Sender, channel};

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::settings::TracerSettings;
use super::thread::Thread;
use crate::agent::conn::ConnId;
use crate::ids::Pid;
use crate::kfd::Root;
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

fn wake_pipe() -> std::io::Result<(File, File)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)?;
    Ok((File::from(r), File::from(w)))
}

pub(super) fn drain(f: &mut File) {
    let mut buf = [0u8; 64];
    while matches!(f.read(&mut buf), Ok(n) if n > 0) {}
}

/// The event loop's handle on the tracer thread.
#[derive(Debug)]
pub struct Tracer {
    cmds: Sender<Cmd>,
    cmd_wake: File,
    events: Receiver<Event>,
    event_fd: File,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tracer {
    /// Starts the thread (`SIGCHLD` must already be blocked in the calling thread, so the
    /// thread inherits the mask and its signalfd sees every tracee stop).
    pub fn start(root: Root, settings: TracerSettings) -> std::io::Result<Tracer> {
        let (cmd_read, cmd_wake) = wake_pipe()?;
        let (event_fd, event_wake) = wake_pipe()?;
        let (cmds, cmd_rx) = channel();
        let (event_tx, events) = channel();
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGCHLD);
        let sigfd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)?;
        let thread = std::thread::Builder::new()
            .name("kfdqd-tracer".into())
            .spawn(move || {
                let mut t = Thread {
                    root,
                    settings,
                    kfd: None,
                    tracees: BTreeMap::new(),
                    cmd_read,
                    cmds: cmd_rx,
                    sigfd,
                    events: event_tx,
                    event_wake,
                    stopping: None,
                };
                t.run();
            })?;
        Ok(Tracer {
            cmds,
            cmd_wake,
            events,
            event_fd,
            thread: Some(thread),
        })
    }

    /// Sends `cmd` to the thread.
    pub fn send(&mut self, cmd: Cmd) {
        if self.cmds.send(cmd).is_ok() {
            let _ = self.cmd_wake.write(&[1]);
        }
    }

    /// The fd that is readable when events wait.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.event_fd.as_fd()
    }

    /// The events waiting (drains the wake-up pipe).
    pub fn take_events(&mut self) -> Vec<Event> {
        drain(&mut self.event_fd);
        self.events.try_iter().collect()
    }

    /// True once the thread ended (after [`Cmd::Shutdown`]).
    pub fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        self.send(Cmd::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
