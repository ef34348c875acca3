//! Control without the shim: the tracer thread. A process whose class says `control =
//! "tracer"` and that has KFD queues but no shim session is `PTRACE_SEIZE`d, debug-enabled
//! (DBG_TRAP ENABLE; it must be runtime-enabled, as every ROCr process is) and from then on
//! driven like a shim session: the executor's level-3 commands become DBG_TRAP SUSPEND/RESUME
//! of all its queues in one call, its activity is sampled from its queues' read and write
//! indexes through `/proc/<pid>/mem`, and its queue set is refreshed by GET_QUEUE_SNAPSHOT.
//!
//! ptrace is per thread: the kernel lets only the thread that seized a process issue DBG_TRAP
//! on it, so one thread owns every tracee, the KFD file descriptor the debugger API needs,
//! and the waits for their stops (a `SIGCHLD` signalfd; `SIGCHLD` is blocked in the agent).
//! The event loop talks to it over two channels, each with a pipe that wakes the other side.
//!
//! Leaving a tracee (its class changed, a shim connected for it, it stopped using the GPU,
//! the agent stops) is DBG_TRAP DISABLE, which resumes whatever was suspended, then
//! `PTRACE_INTERRUPT` and `PTRACE_DETACH` at the stop. If the agent dies instead, the kernel
//! does both: it drops the ptrace link, and releasing the agent's KFD context disables
//! debugging of every process it debugged (docs/kernel-interface.md §4).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll, ppoll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;

use super::conn::ConnId;
use crate::ids::Pid;
use crate::kfd::debug::{DebugAttachment, QueueSnapshot, QueueStatus};
use crate::kfd::ptrace::{self, Stop};
use crate::kfd::{EXCEPTION_QUEUE_NEW, Kfd, QueueId, Root};
use crate::policy::retry::{Owed, RETRY_MAX};
use crate::proto::{AgentMsg, QueueInfo, Registry, ShimMsg, Target};

mod settings;

pub use settings::{DEFAULT_SCAN, TracerSettings};
pub(crate) use settings::{FileTracer, apply as apply_settings};

/// While a tracee whose class preempts others has a busy queue, it is sampled this often, so
/// its idle edge (which releases the processes it preempted) is seen within it rather than up to
/// a whole activity period late; its busy edge still waits for the next regular sample (a traced
/// process reports no launches). Longer than a shim's [`crate::proto::BUSY_SAMPLE_PERIOD`]
/// (100 µs): a tracer sample reads each queue's indexes through `/proc/<pid>/mem` from another
/// process, and at 100 µs the tracer thread took 12 % of a core while a latency tracee was busy
/// (docs/performance.md, "Tracer path"); 250 µs is the shortest activity period the
/// configuration accepts (`ACTIVITY_RANGE_US`).
pub const BUSY_SAMPLE: Duration = Duration::from_micros(250);

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

fn drain(f: &mut File) {
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

/// One traced process.
#[derive(Debug)]
struct Tracee {
    conn: ConnId,
    mem: File,
    _attachment: DebugAttachment,
    queues: Vec<QueueSnapshot>,
    suspended: BTreeSet<u32>,
    busy: BTreeMap<u32, bool>,
    /// Its class preempts others ([`AgentMsg::Edges`]): while one of its queues is busy it is
    /// sampled every [`BUSY_SAMPLE`], so its idle edge is seen within that.
    edges: bool,
    /// Scans in a row that found no queue.
    idle_scans: u32,
    /// Leaving: detach at the next stop.
    leaving: Option<String>,
    /// Resumes the kernel refused, retried until they hold.
    owed: Owed,
}

impl Tracee {
    /// Sampled at [`BUSY_SAMPLE`] now: its class preempts others and a queue is busy.
    fn fine(&self) -> bool {
        self.edges && self.leaving.is_none() && self.busy.values().any(|b| *b)
    }
}

struct Thread {
    root: Root,
    settings: TracerSettings,
    kfd: Option<Kfd>,
    tracees: BTreeMap<u32, Tracee>,
    cmd_read: File,
    cmds: Receiver<Cmd>,
    sigfd: SignalFd,
    events: Sender<Event>,
    event_wake: File,
    /// Shutdown requested at.
    stopping: Option<Instant>,
}

/// How long shutdown waits for the tracees' detach stops.
const LEAVE_WAIT: Duration = Duration::from_millis(1500);

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "?".into())
}

impl Thread {
    fn emit(&mut self, e: Event) {
        if self.events.send(e).is_ok() {
            let _ = self.event_wake.write(&[1]);
        }
    }

    fn run(&mut self) {
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
                    .min(next_fine.unwrap_or(next_scan));
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
            if now >= next_sample {
                self.sample(false);
                next_sample = now + self.settings.activity;
            } else if next_fine.is_some_and(|t| now >= t) {
                self.sample(true);
            }
            next_fine = self
                .fine_sampling()
                .then(|| next_fine.filter(|t| *t > now).unwrap_or(now + BUSY_SAMPLE));
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
            } => match self.seize(pid, conn) {
                Ok(t) => {
                    let reg = registry(pid, &t);
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

    fn kfd(&mut self) -> Result<&Kfd, TracerError> {
        if self.kfd.is_none() {
            let k = Kfd::open(&self.root).map_err(|source| TracerError::OpenKfd {
                path: self.root.kfd_device(),
                source,
            })?;
            self.kfd = Some(k);
        }
        self.kfd.as_ref().ok_or(TracerError::NoKfd)
    }

    fn seize(&mut self, pid: u32, conn: ConnId) -> Result<Tracee, TracerError> {
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

    fn leave(&mut self, pid: u32, why: String) {
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

    fn stops(&mut self) {
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

    /// Whether a tracee is sampled at the fine period now: its class preempts others and one
    /// of its queues is busy.
    fn fine_sampling(&self) -> bool {
        self.settings.activity > BUSY_SAMPLE && self.tracees.values().any(Tracee::fine)
    }

    /// Reads each tracee's queues' indexes (with `fine`, only the tracees
    /// [`Tracee::fine`] names) and reports the queues whose busy state changed.
    fn sample(&mut self, fine: bool) {
        let mut changes = Vec::new();
        for t in self.tracees.values_mut() {
            if t.leaving.is_some() || (fine && !t.fine()) {
                continue;
            }
            for q in &t.queues {
                let (Some(r), Some(w)) = (
                    read_u64(&t.mem, q.read_pointer_address),
                    read_u64(&t.mem, q.write_pointer_address),
                ) else {
                    continue;
                };
                let busy = w > r;
                if t.busy.insert(q.queue_id.0, busy) != Some(busy) {
                    changes.push((t.conn, q.queue_id.0, busy));
                }
            }
        }
        for (conn, queue_id, busy) in changes {
            self.emit(Event::Msg {
                conn,
                msg: ShimMsg::Activity {
                    queue_id: QueueId(queue_id),
                    busy,
                },
            });
        }
    }

    /// GET_QUEUE_SNAPSHOT of `pid` (clearing EC_QUEUE_NEW, so new queues can be suspended);
    /// reports a changed queue set as a registry.
    fn refresh(&mut self, pid: u32) {
        let Some(kfd) = &self.kfd else { return };
        let snap = match kfd.queue_snapshot(pid, EXCEPTION_QUEUE_NEW) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(pid, "tracer: snapshot: {e}");
                return;
            }
        };
        let Some(t) = self.tracees.get_mut(&pid) else {
            return;
        };
        let ids = |v: &[QueueSnapshot]| v.iter().map(|q| q.queue_id).collect::<Vec<_>>();
        let changed = ids(&snap) != ids(&t.queues);
        t.idle_scans = if snap.is_empty() { t.idle_scans + 1 } else { 0 };
        if changed {
            t.suspended
                .retain(|q| snap.iter().any(|s| s.queue_id.0 == *q));
            t.busy
                .retain(|q, _| snap.iter().any(|s| s.queue_id.0 == *q));
            t.queues = snap;
            let (conn, reg) = (t.conn, registry(pid, t));
            self.emit(Event::Msg {
                conn,
                msg: ShimMsg::Registry(reg),
            });
        }
        if self.tracees.get(&pid).is_some_and(|t| t.idle_scans >= 2) {
            self.leave(pid, "it has no KFD queue any more".into());
        }
    }

    fn refresh_all(&mut self) {
        let pids: Vec<u32> = self
            .tracees
            .iter()
            .filter(|(_, t)| t.leaving.is_none())
            .map(|(p, _)| *p)
            .collect();
        for pid in pids {
            self.refresh(pid);
        }
    }

    fn execute(&mut self, pid: u32, msg: AgentMsg) {
        let Some(conn) = self.tracees.get(&pid).map(|t| t.conn) else {
            return;
        };
        let (seq, result) = match msg {
            AgentMsg::Preempt {
                seq,
                target,
                grace_period,
                ..
            } => (seq, self.suspend(pid, &target, grace_period)),
            // Not acknowledged: its class preempts others (or no longer does).
            AgentMsg::Edges { on } => {
                if let Some(t) = self.tracees.get_mut(&pid) {
                    t.edges = on;
                }
                return;
            }
            AgentMsg::Release { seq, target, .. } => (seq, self.resume(pid, &target)),
            // The registry every answer is preceded by is the reply.
            AgentMsg::Query { seq } => (seq, Ok("registry sent".into())),
            AgentMsg::SetPriority { seq, .. }
            | AgentMsg::SetCuMask { seq, .. }
            | AgentMsg::SetWindow { seq, .. } => (seq, Err(TracerError::NeedsShim)),
            // A tracee's preemption is the agent's own ptrace session: no lease (a hung agent is
            // killed by systemd's watchdog, and the kernel then drops the debug trap), and the
            // tracer samples, it sees no launches.
            AgentMsg::Welcome { .. }
            | AgentMsg::Refused { .. }
            | AgentMsg::Error { .. }
            | AgentMsg::Renew {}
            | AgentMsg::DoorbellTaken {}
            | AgentMsg::Rang {}
            | AgentMsg::BoardWriter { .. }
            | AgentMsg::Watch { .. }
            | AgentMsg::Unwatch { .. }
            | AgentMsg::BoardChanged {} => {
                return;
            }
        };
        // Every answer comes after the registry it leaves (suspended flags, queue set).
        if let Some(t) = self.tracees.get(&pid) {
            let reg = registry(pid, t);
            self.emit(Event::Msg {
                conn,
                msg: ShimMsg::Registry(reg),
            });
        }
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(e) => (false, e.to_string()),
        };
        self.emit(Event::Msg {
            conn,
            msg: ShimMsg::Ack { seq, ok, detail },
        });
    }

    fn targets(t: &Tracee, target: &Target) -> Vec<QueueId> {
        t.queues
            .iter()
            .map(|q| q.queue_id)
            .filter(|q| match target {
                Target::All | Target::Streams(_) => true,
                Target::Queues(ids) => ids.contains(q),
            })
            .collect()
    }

    fn suspend(&mut self, pid: u32, target: &Target, grace: u32) -> Result<String, TracerError> {
        let mut todo: Vec<QueueId> = {
            let t = self.tracees.get(&pid).ok_or(TracerError::NotTraced)?;
            Self::targets(t, target)
                .into_iter()
                .filter(|q| !t.suspended.contains(&q.0))
                .collect()
        };
        if todo.is_empty() {
            return Ok("suspended (nothing left to suspend)".into());
        }
        // Suspended on purpose now: no resume is owed for them.
        if let Some(t) = self.tracees.get_mut(&pid) {
            for q in &todo {
                t.owed.settled(q.0, true);
            }
        }
        let mut suspended = Vec::new();
        for attempt in 0..2 {
            let kfd = self.kfd.as_ref().ok_or(TracerError::NoKfd)?;
            let (_, statuses) = kfd
                .suspend_queues(pid, &todo, grace)
                .map_err(TracerError::call("DBG_TRAP SUSPEND_QUEUES"))?;
            let mut again = Vec::new();
            for (q, s) in todo.iter().zip(statuses) {
                match s {
                    QueueStatus::Ok => suspended.push(q.0),
                    QueueStatus::Invalid if attempt == 0 => again.push(*q),
                    QueueStatus::Invalid | QueueStatus::Error => {}
                }
            }
            if again.is_empty() {
                break;
            }
            // New queues (EC_QUEUE_NEW) or ones created since the last snapshot.
            self.refresh(pid);
            todo = again;
        }
        let t = self.tracees.get_mut(&pid).ok_or(TracerError::NotTraced)?;
        t.suspended.extend(suspended.iter().copied());
        let missing: Vec<u32> = Self::targets(t, target)
            .into_iter()
            .map(|q| q.0)
            .filter(|q| !t.suspended.contains(q))
            .collect();
        if missing.is_empty() {
            Ok(format!(
                "suspended {} queue(s) through DBG_TRAP",
                suspended.len()
            ))
        } else {
            Err(TracerError::LeftRunning { missing })
        }
    }

    fn resume(&mut self, pid: u32, target: &Target) -> Result<String, TracerError> {
        let todo: Vec<QueueId> = {
            let t = self.tracees.get(&pid).ok_or(TracerError::NotTraced)?;
            Self::targets(t, target)
                .into_iter()
                .filter(|q| t.suspended.contains(&q.0))
                .collect()
        };
        if todo.is_empty() {
            return Ok("running (nothing was suspended)".into());
        }
        let kfd = self.kfd.as_ref().ok_or(TracerError::NoKfd)?;
        let result = kfd
            .resume_queues(pid, &todo)
            .map_err(TracerError::call("DBG_TRAP RESUME_QUEUES"));
        let t = self.tracees.get_mut(&pid).ok_or(TracerError::NotTraced)?;
        match result {
            Ok((n, _)) => {
                for q in &todo {
                    t.suspended.remove(&q.0);
                    if let Some(retries) = t.owed.settled(q.0, true) {
                        tracing::warn!(pid, retries, "tracer: the refused resumes hold now");
                    }
                }
                Ok(format!("resumed {n} queue(s) through DBG_TRAP"))
            }
            Err(e) => {
                // Not forgotten: retried with backoff until the kernel takes it.
                let now = Instant::now();
                let mut first = false;
                for q in &todo {
                    first |= t.owed.failed(q.0, true, now);
                }
                if first {
                    tracing::warn!(
                        pid,
                        "tracer: {e}; its queues stay suspended until a retry (up to every {} ms) holds",
                        RETRY_MAX.as_millis()
                    );
                }
                Err(e)
            }
        }
    }

    /// Retries the resumes the kernel refused, when due, and tells the agent what changed.
    fn retry_resumes(&mut self) {
        let now = Instant::now();
        let due: Vec<u32> = self
            .tracees
            .iter()
            .filter(|(_, t)| t.owed.due(now))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in due {
            let Some(t) = self.tracees.get_mut(&pid) else {
                continue;
            };
            let present: Vec<u32> = t.queues.iter().map(|q| q.queue_id.0).collect();
            let suspended = t.suspended.clone();
            t.owed
                .retain(|q| present.contains(&q) && suspended.contains(&q));
            let ids: Vec<u32> = t.owed.resume.iter().copied().collect();
            if !ids.is_empty() {
                let _ = self.resume(pid, &Target::Queues(ids.into_iter().map(QueueId).collect()));
            }
            if let Some(t) = self.tracees.get_mut(&pid) {
                t.owed.retried(Instant::now());
                let msg = ShimMsg::Registry(registry(pid, t));
                let conn = t.conn;
                self.emit(Event::Msg { conn, msg });
            }
        }
    }
}

/// Why the tracer could not take a process or carry out a command (the text of its refusal or
/// of the command's failed ack).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TracerError {
    /// `/dev/kfd` could not be opened.
    #[error("the agent cannot open {}: {source}", path.display())]
    OpenKfd {
        /// The device.
        path: std::path::PathBuf,
        /// The error.
        source: crate::kfd::Error,
    },
    /// No KFD device is open.
    #[error("no KFD device")]
    NoKfd,
    /// The process is gone.
    #[error("it exited")]
    Exited,
    /// Another tracer holds it.
    #[error(
        "it is already traced by pid {tracer} ({comm}): a debugger or strace is attached, and a process has one tracer; kfdqd leaves it alone and takes it once that tracer detaches"
    )]
    AlreadyTraced {
        /// The tracer's pid.
        tracer: u32,
        /// The tracer's command name.
        comm: String,
    },
    /// PTRACE_SEIZE refused for lack of permission.
    #[error(
        "PTRACE_SEIZE was refused ({0}): kfdqd needs CAP_SYS_PTRACE over it, and the kernel's kernel.yama.ptrace_scope must be below 3 (or another tracer attached first)"
    )]
    SeizeRefused(Errno),
    /// PTRACE_SEIZE failed otherwise.
    #[error("PTRACE_SEIZE: {0}")]
    Seize(Errno),
    /// The process never enabled the debugger runtime.
    #[error(
        "it did not call RUNTIME_ENABLE before its first queue (ROCr does; a program that drives /dev/kfd itself must), and the kernel suspends only runtime-enabled processes' queues"
    )]
    NotRuntimeEnabled,
    /// A DBG_TRAP call failed.
    #[error("{op}: {source}")]
    Call {
        /// The operation.
        op: &'static str,
        /// The error.
        source: crate::kfd::Error,
    },
    /// Its memory could not be opened.
    #[error("/proc/{pid}/mem: {source}")]
    Mem {
        /// The process.
        pid: u32,
        /// The error.
        source: std::io::Error,
    },
    /// The process is not (or no longer) traced.
    #[error("not traced")]
    NotTraced,
    /// Queues the suspend did not stop.
    #[error(
        "DBG_TRAP SUSPEND_QUEUES left queue(s) {missing:?} running (being destroyed, or the hardware did not preempt them)"
    )]
    LeftRunning {
        /// Their ids.
        missing: Vec<u32>,
    },
    /// A command only the shim can carry out.
    #[error(
        "not possible through the tracer: only the process itself may change its queues (run it under the shim, e.g. `kfdq run`)"
    )]
    NeedsShim,
}

impl TracerError {
    fn call(op: &'static str) -> impl FnOnce(crate::kfd::Error) -> TracerError {
        move |source| TracerError::Call { op, source }
    }
}

fn read_u64(mem: &File, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read_exact_at(&mut b, addr).ok()?;
    Some(u64::from_le_bytes(b))
}

/// The registry a tracee shows: its queues as the snapshot gives them; no streams, no
/// priorities (neither can be read from outside the process).
fn registry(pid: u32, t: &Tracee) -> Registry {
    Registry {
        lease_expiries: 0,
        release_failures: t.owed.failures,
        pid: Pid(pid),
        class: None,
        streams: Vec::new(),
        queues: t
            .queues
            .iter()
            .map(|q| QueueInfo {
                queue_id: q.queue_id,
                gpu_id: q.gpu_id,
                requested_priority: 0,
                effective_priority: 0,
                ring_base: q.ring_base_address,
                ring_size: q.ring_size,
                streams: Vec::new(),
                deactivated: false,
                suspended: t.suspended.contains(&q.queue_id.0),
                busy: t.busy.get(&q.queue_id.0).copied().unwrap_or(false),
                window_waits: 0,
                window_stalls: 0,
            })
            .collect(),
        warnings: Vec::new(),
        window: None,
    }
}
