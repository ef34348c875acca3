//! ptrace: taking a process (`PTRACE_SEIZE`, then DBG_TRAP ENABLE), restarting it at its stops,
//! and leaving it (DBG_TRAP DISABLE, `PTRACE_INTERRUPT`, `PTRACE_DETACH` at the stop).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::os::fd::AsFd;
use std::time::Instant;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::channel::Event;
use super::error::TracerError;
use super::thread::{LEAVE_WAIT, Thread};
use super::tracee::Tracee;
use crate::agent::conn::ConnId;
use crate::ids::Pid;
use crate::kfd::EXCEPTION_QUEUE_NEW;
use crate::kfd::ptrace::{self, Stop};
use crate::policy::retry::Owed;

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into())
}

impl Thread {
    /// Takes `pid`, found by discovery with start time `start`: once seized, the process is
    /// checked to be that one (a pid reused between discovery and `PTRACE_SEIZE` names
    /// another process, which is detached at once and left alone).
    pub(super) fn seize(
        &mut self,
        pid: u32,
        conn: ConnId,
        start: u64,
    ) -> Result<Tracee, TracerError> {
        match ptrace::tracer_of(pid) {
            None => return Err(TracerError::Exited),
            Some(0) => {}
            Some(t) => {
                return Err(TracerError::AlreadyTraced {
                    tracer: t,
                    comm: comm(t),
                });
            }
        }
        ptrace::seize(pid).map_err(|e| match e {
            Errno::EPERM => TracerError::SeizeRefused(e),
            Errno::ESRCH => TracerError::Exited,
            e => TracerError::Seize(e),
        })?;
        // Whether this tracer's ENABLE took: only then is a DISABLE ours to send. (DBG_TRAP
        // DISABLE needs no ptrace link: sent after an ENABLE refused with EALREADY, it would end
        // the debug session the process holds on itself — its shim's level 3 — and resume
        // what that shim suspended behind its back. Found by the soak.)
        let mut enabled = false;
        let attached = (|| {
            // Seized: the pid cannot change hands now. Is it still the process discovered?
            match crate::agent::identity::start_time(Pid(pid)) {
                Ok(s) if s == start => {}
                Ok(_) => return Err(TracerError::Reused),
                Err(_) => return Err(TracerError::Exited),
            }
            let kfd = self.kfd()?;
            let att = kfd
                .dbg_enable(pid, 0)
                .map_err(TracerError::call("DBG_TRAP ENABLE"))?;
            enabled = true;
            if !att.runtime.runtime_enabled() {
                let _ = kfd.dbg_disable(pid);
                return Err(TracerError::NotRuntimeEnabled);
            }
            let queues = kfd
                .queue_snapshot(pid, EXCEPTION_QUEUE_NEW)
                .map_err(TracerError::call("DBG_TRAP GET_QUEUE_SNAPSHOT"))?;
            let mem = File::open(format!("/proc/{pid}/mem"))
                .map_err(|source| TracerError::Mem { pid, source })?;
            Ok((att, queues, mem))
        })();
        match attached {
            Ok((att, queues, mem)) => Ok(Tracee {
                conn,
                mem,
                _attachment: att,
                queues,
                suspended: BTreeSet::new(),
                busy: BTreeMap::new(),
                edges: false,
                idle_scans: 0,
                leaving: None,
                owed: Owed::new(),
                lease_end: None,
            }),
            Err(e) => {
                if enabled && let Some(k) = &self.kfd {
                    let _ = k.dbg_disable(pid);
                }
                self.detach_now(pid);
                Err(e)
            }
        }
    }

    /// Detaches a tracee that is not (yet) in `tracees`: interrupt, wait for its stop, detach.
    fn detach_now(&mut self, pid: u32) {
        if ptrace::interrupt(pid).is_err() {
            return;
        }
        let deadline = Instant::now() + LEAVE_WAIT;
        while Instant::now() < deadline {
            match ptrace::poll_stop(pid) {
                Ok(Stop::None) => {
                    let mut fds = [PollFd::new(self.sigfd.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, PollTimeout::from(10u8));
                    while let Ok(Some(_)) = self.sigfd.read_signal() {}
                }
                Ok(Stop::Signal(s)) => {
                    let _ = ptrace::detach(pid, Some(s));
                    return;
                }
                Ok(Stop::Exited) | Err(_) => return,
                Ok(_) => {
                    let _ = ptrace::detach(pid, None);
                    return;
                }
            }
        }
        tracing::warn!(
            pid,
            "tracer: no stop to detach at; the kernel detaches when kfdqd exits"
        );
    }

    pub(super) fn leave(&mut self, pid: u32, why: String) {
        let Some(t) = self.tracees.get_mut(&pid) else {
            return;
        };
        if t.leaving.is_some() {
            return;
        }
        t.leaving = Some(why);
        if let Some(k) = &self.kfd
            && let Err(e) = k.dbg_disable(pid)
        {
            tracing::debug!(pid, "tracer: DBG_TRAP DISABLE: {e}");
        }
        if ptrace::interrupt(pid).is_err() {
            // Gone already: the next stop check reports the exit.
            tracing::debug!(pid, "tracer: PTRACE_INTERRUPT failed");
        }
    }

    fn gone(&mut self, pid: u32, why: String) {
        if let Some(t) = self.tracees.remove(&pid) {
            tracing::info!(pid, "tracer: no longer traced: {why}");
            self.emit(Event::Gone {
                conn: t.conn,
                pid: Pid(pid),
                why,
            });
        }
    }

    pub(super) fn stops(&mut self) {
        let pids: Vec<u32> = self.tracees.keys().copied().collect();
        for pid in pids {
            loop {
                let leaving = self.tracees.get(&pid).and_then(|t| t.leaving.clone());
                let stop = match ptrace::poll_stop(pid) {
                    Ok(s) => s,
                    Err(e) => {
                        self.gone(pid, format!("waitpid: {e}"));
                        break;
                    }
                };
                let r = match (stop, &leaving) {
                    (Stop::None, _) => break,
                    (Stop::Exited, _) => {
                        self.gone(pid, "exited".into());
                        break;
                    }
                    (Stop::Exec, _) => {
                        // The old image's KFD context went with it; the new one is found
                        // again by discovery if it uses the GPU.
                        let _ = ptrace::detach(pid, None);
                        self.gone(pid, leaving.unwrap_or_else(|| "it called execve".into()));
                        break;
                    }
                    (Stop::Signal(s), Some(why)) => {
                        let r = ptrace::detach(pid, Some(s));
                        self.gone(pid, why.clone());
                        r
                    }
                    (Stop::Group(_) | Stop::Trap, Some(why)) => {
                        let r = ptrace::detach(pid, None);
                        self.gone(pid, why.clone());
                        r
                    }
                    (Stop::Signal(s), None) => ptrace::cont(pid, Some(s)),
                    (Stop::Group(_), None) => ptrace::listen(pid),
                    (Stop::Trap, None) => ptrace::cont(pid, None),
                };
                if let Err(e) = r {
                    tracing::debug!(pid, "tracer: restarting after {stop:?}: {e}");
                }
            }
        }
    }
}
