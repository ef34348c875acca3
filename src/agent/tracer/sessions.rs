//! The event loop's tracer state: the tracer thread (started at the first process to take),
//! the sessions it runs (connection id -> pid), the processes being seized, the scan's
//! candidates and the processes left alone until a retry. The server's loop calls in here; the
//! node sees a traced process as a session like a shim's.

use std::collections::{BTreeMap, BTreeSet};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use super::channel::{Cmd, Event};
use super::handle::Tracer;
use crate::agent::conn::ConnId;
use crate::agent::discover::{self, Found};
use crate::agent::kubernetes::container::Bindings;
use crate::agent::node::{NodeState, Out};
use crate::chain::{Recorder, Stage};
use crate::ids::Pid;
use crate::kfd::Root;
use crate::proto::{AgentMsg, ShimMsg};

/// A process the tracer could not take is tried again after this long (its debugger may have
/// detached).
const RETRY_LEFT_ALONE: Duration = Duration::from_secs(10);

/// The tracer's sessions, as the event loop keeps them.
#[derive(Debug)]
pub struct Sessions {
    /// Processes without the shim (started at the first one to take).
    tracer: Option<Tracer>,
    /// Tracer sessions: connection id -> pid.
    traced: BTreeMap<ConnId, Pid>,
    /// Sent to the tracer, not answered yet: the process and its class.
    seizing: BTreeMap<Pid, (Found, String)>,
    /// Candidates of the last scan (a process is taken at its second).
    candidates: BTreeSet<Pid>,
    /// Not tried again before.
    retry: BTreeMap<Pid, Instant>,
    next_scan: Instant,
}

impl Sessions {
    /// None yet; the first scan is due at `now`.
    pub fn new(now: Instant) -> Sessions {
        Sessions {
            tracer: None,
            traced: BTreeMap::new(),
            seizing: BTreeMap::new(),
            candidates: BTreeSet::new(),
            retry: BTreeMap::new(),
            next_scan: now,
        }
    }

    /// When the next scan is due.
    pub fn next_scan(&self) -> Instant {
        self.next_scan
    }

    /// The fd that is readable when the tracer's events wait (`None`: no tracer runs).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.tracer.as_ref().map(Tracer::fd)
    }

    /// True when connection `conn` is a tracer session.
    pub fn owns(&self, conn: ConnId) -> bool {
        self.traced.contains_key(&conn)
    }

    /// Hands the executor's command for session `conn` to the tracer.
    pub fn command(&mut self, conn: ConnId, msg: AgentMsg) {
        self.send(conn, |pid| Cmd::Command { pid, msg });
    }

    /// Asks the tracer to leave session `conn`'s process.
    pub fn untrace(&mut self, conn: ConnId, why: String) {
        self.send(conn, |pid| Cmd::Leave { pid, why });
    }

    fn send(&mut self, conn: ConnId, cmd: impl FnOnce(Pid) -> Cmd) {
        if let (Some(t), Some(pid)) = (&mut self.tracer, self.traced.get(&conn)) {
            t.send(cmd(*pid));
        }
    }

    /// The agent stops: the tracer resumes and detaches everyone (sent after the releases).
    pub fn shutdown(&mut self) {
        if let Some(t) = &mut self.tracer {
            t.send(Cmd::Shutdown);
        }
    }

    /// Ends the tracer thread (joins it once it detached its tracees).
    pub fn stop(&mut self) {
        drop(self.tracer.take());
    }

    /// Handles what the tracer reported; true when a decision is due.
    pub fn events(
        &mut self,
        node: &mut NodeState,
        mut chain: Option<&mut Recorder>,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> bool {
        let events = match &mut self.tracer {
            Some(t) => t.take_events(),
            None => return false,
        };
        let mut dirty = false;
        for e in events {
            match e {
                Event::Seized { pid, conn } => {
                    if let Some((found, _)) = self.seizing.remove(&pid) {
                        self.traced.insert(conn, pid);
                        node.traced(conn, found.id, found.requested);
                        dirty = true;
                    }
                }
                Event::Refused { pid, reason } => {
                    if let Some((found, class)) = self.seizing.remove(&pid) {
                        node.left_alone(&found.id, class, reason);
                        self.retry.insert(pid, now + RETRY_LEFT_ALONE);
                    }
                }
                Event::Msg { conn, msg } => {
                    if let Some(pid) = node.pid_of(conn) {
                        // A traced process's busy sample is its edge's arrival, as a shim's is.
                        if let Some(c) = chain.as_deref_mut()
                            && matches!(msg, ShimMsg::Activity { busy: true, .. })
                        {
                            c.mark(Stage::AgentRead);
                        }
                        dirty |= node.shim_message(pid, msg, now, out);
                    }
                }
                Event::Gone { conn, pid, why } => {
                    tracing::debug!(pid = %pid, "tracer session ended: {why}");
                    self.traced.remove(&conn);
                    node.gone(conn, out);
                    dirty = true;
                }
            }
        }
        dirty
    }

    /// Looks for GPU processes without the shim in tracer classes and hands the settled ones
    /// to the tracer (each a new connection id from `next_id`); their allocation claims are
    /// resolved against the container bindings (`grants`) as a connection's are.
    pub fn scan(
        &mut self,
        node: &mut NodeState,
        root: &Root,
        grants: &mut Bindings,
        next_id: &mut ConnId,
        now: Instant,
    ) {
        self.next_scan = now + node.config().tracer.scan;
        node.scanned();
        self.retry.retain(|_, t| *t > now);
        node.forget_left_alone(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        let found = discover::gpu_processes(root, |pid| {
            node.knows(pid) || self.seizing.contains_key(&pid) || self.retry.contains_key(&pid)
        });
        let settled = discover::settled(&self.candidates, &found);
        self.candidates = found.iter().map(|f| f.id.pid).collect();
        for mut f in settled {
            f.id.claim = grants.resolve(&f.id.cgroup, f.id.claim);
            let Some(class) = node.tracer_class(&f.id, f.requested.as_deref()) else {
                continue;
            };
            if f.id.non_dumpable() != Some(false) {
                node.left_alone(
                    &f.id,
                    class,
                    "it is not dumpable (prctl PR_SET_DUMPABLE 0, or a set-id program): it asked not to be traced; run it under the shim (`kfdq run`)".into(),
                );
                self.retry.insert(f.id.pid, now + RETRY_LEFT_ALONE);
                continue;
            }
            if self.tracer.is_none() {
                match Tracer::start(root.clone(), node.config().tracer, node.config().lease) {
                    Ok(t) => self.tracer = Some(t),
                    Err(e) => {
                        tracing::error!("the tracer thread could not start: {e}");
                        return;
                    }
                }
            }
            let conn = *next_id;
            *next_id += 1;
            let (pid, start) = (f.id.pid, f.id.start);
            tracing::debug!(pid = pid.0, start, "tracer: seizing");
            self.seizing.insert(pid, (f, class));
            if let Some(t) = &mut self.tracer {
                t.send(Cmd::Seize { pid, conn, start });
            }
        }
    }
}
