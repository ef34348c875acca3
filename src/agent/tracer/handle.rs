//! The event loop's handle on the tracer thread: starts it, sends it commands, takes its events
//! (`channel.rs`).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::TracerSettings;
use super::channel::{Cmd, Event, drain, wake_pipe};
use super::thread::Thread;
use crate::kfd::Root;

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
    /// thread inherits the mask and its signalfd sees every tracee stop). Every suspension it
    /// carries out holds for `lease` unless the event loop renews it (`[agent] lease_ms`).
    pub fn start(root: Root, settings: TracerSettings, lease: Duration) -> std::io::Result<Tracer> {
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
                    lease,
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
