//! The tracer thread's loop: it owns every tracee (ptrace is per thread), the KFD descriptor the
//! debugger API needs, and the `SIGCHLD` signalfd its tracees' stops arrive on; it wakes for the
//! event loop's commands, those stops, and its sampling, scan and retry deadlines.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, ppoll};
use nix::sys::signalfd::SignalFd;
use nix::sys::time::TimeSpec;

use super::TracerSettings;
use super::channel::{Cmd, Event, drain};
use super::error::TracerError;
use super::periods::next_fine as next_fine_at;
use super::tracee::Tracee;
use crate::ids::Pid;
use crate::kfd::{Kfd, Root};
use crate::proto::ShimMsg;

pub(super) struct Thread {
    pub(super) root: Root,
    pub(super) settings: TracerSettings,
    /// How long a suspension holds without a renewal (`lease.rs`).
    pub(super) lease: Duration,
    pub(super) kfd: Option<Kfd>,
    pub(super) tracees: BTreeMap<u32, Tracee>,
    pub(super) cmd_read: File,
    pub(super) cmds: Receiver<Cmd>,
    pub(super) sigfd: SignalFd,
    pub(super) events: Sender<Event>,
    pub(super) event_wake: File,
    /// Shutdown requested at.
    pub(super) stopping: Option<Instant>,
}

/// How long shutdown waits for the tracees' detach stops.
pub(super) const LEAVE_WAIT: Duration = Duration::from_millis(1500);

impl Thread {
    pub(super) fn emit(&mut self, e: Event) {
        if self.events.send(e).is_ok() {
            let _ = self.event_wake.write(&[1]);
        }
    }

    pub(super) fn run(&mut self) {
        let mut next_sample = Instant::now();
        // Due while a tracee whose class preempts others has a busy queue.
        let mut next_fine: Option<Instant> = None;
        let mut next_scan = Instant::now() + self.settings.scan;
        loop {
            if let Some(t) = self.stopping
                && (self.tracees.is_empty() || t.elapsed() >= LEAVE_WAIT)
            {
                if !self.tracees.is_empty() {
                    tracing::warn!(
                        "tracer: {} tracee(s) did not stop to be detached within {LEAVE_WAIT:?}; the kernel detaches them when kfdqd exits",
                        self.tracees.len()
                    );
                }
                return;
            }
            // ppoll: sub-millisecond activity periods must not round up to poll's 1 ms.
            let timeout = (!self.tracees.is_empty()).then(|| {
                let retry = self
                    .tracees
                    .values()
                    .filter_map(|t| t.owed.next)
                    .min()
                    .unwrap_or(next_scan);
                let due = next_sample
                    .min(next_scan)
                    .min(retry)
                    .min(next_fine.unwrap_or(next_scan))
                    .min(self.next_lapse().unwrap_or(next_scan));
                TimeSpec::from_duration(
                    due.saturating_duration_since(Instant::now())
                        .min(Duration::from_secs(1)),
                )
            });
            let (cmd_ready, sig_ready) = {
                let mut fds = [
                    PollFd::new(self.cmd_read.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN),
                ];
                match ppoll(&mut fds, timeout, None) {
                    Ok(_) | Err(Errno::EINTR) => {}
                    Err(e) => {
                        tracing::error!("tracer: poll: {e}; the tracer stops");
                        return;
                    }
                }
                let r = |f: &PollFd| !f.revents().unwrap_or(PollFlags::empty()).is_empty();
                (r(&fds[0]), r(&fds[1]))
            };
            if cmd_ready {
                drain(&mut self.cmd_read);
                while let Ok(cmd) = self.cmds.try_recv() {
                    self.command(cmd);
                }
            }
            if sig_ready {
                while let Ok(Some(_)) = self.sigfd.read_signal() {}
            }
            // Stops are checked on every wake-up: SIGCHLD coalesces, and a stop must not wait.
            self.stops();
            self.retry_resumes();
            let now = Instant::now();
            self.lapse(now);
            if now >= next_sample {
                self.sample(false);
                next_sample = now + self.settings.activity;
            } else if next_fine.is_some_and(|t| now >= t) {
                self.sample(true);
            }
            next_fine = next_fine_at(self.fine_sampling(), next_fine, now);
            if now >= next_scan {
                self.refresh_all();
                next_scan = now + self.settings.scan;
            }
        }
    }

    fn command(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Seize {
                pid: Pid(pid),
                conn,
                start,
            } => match self.seize(pid, conn, start) {
                Ok(t) => {
                    let reg = t.registry(pid);
                    self.tracees.insert(pid, t);
                    tracing::info!(pid, "tracer: seized and debug-enabled");
                    self.emit(Event::Seized {
                        pid: Pid(pid),
                        conn,
                    });
                    self.emit(Event::Msg {
                        conn,
                        msg: ShimMsg::Registry(reg),
                    });
                }
                Err(e) => {
                    let reason = e.to_string();
                    tracing::warn!(pid, "tracer: not controlled: {reason}");
                    self.emit(Event::Refused {
                        pid: Pid(pid),
                        reason,
                    });
                }
            },
            Cmd::Command { pid: Pid(pid), msg } => self.execute(pid, msg),
            Cmd::Leave { pid: Pid(pid), why } => self.leave(pid, why),
            Cmd::Shutdown => {
                if self.stopping.is_none() {
                    self.stopping = Some(Instant::now());
                    let pids: Vec<u32> = self.tracees.keys().copied().collect();
                    for pid in pids {
                        self.leave(pid, "kfdqd stops".into());
                    }
                }
            }
        }
    }

    pub(super) fn kfd(&mut self) -> Result<&Kfd, TracerError> {
        if self.kfd.is_none() {
            let k = Kfd::open(&self.root).map_err(|source| TracerError::OpenKfd {
                path: self.root.kfd_device(),
                source,
            })?;
            self.kfd = Some(k);
        }
        self.kfd.as_ref().ok_or(TracerError::NoKfd)
    }
}
