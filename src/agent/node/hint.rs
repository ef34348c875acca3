//! Request hints on the agent's side (`ShimMsg::Hint`, docs/shim.md "Request hints").
//!
//! A process whose class preempts others may say that a request is starting before its first
//! launch. While its hint holds, every queue of the process counts as busy, exactly as a busy
//! report would make it: the policy preempts, the release rule sees the hint's end (or the
//! queues draining after it) as the idle edge, and the starvation guard treats a process that
//! hints without end like any process that stays busy.
//!
//! The shim is not trusted to end or expire its own hint: a hint holds here only while the
//! process's busy edges are on (its class preempts someone; a batch process's hint is ignored
//! and counted), and only for the class's `hint_timeout_ms` without work — counted from the
//! hint, then from each busy report (a claimed busy queue is held to the staleness and
//! starvation rules instead). Past that it expires (counted, warned in `kfdq status`), the
//! process counts as idle and its board slot is cleared (`direct.rs`), until the shim says the
//! hint is off.

use std::time::{Duration, Instant};

use super::NodeState;
use crate::ids::Pid;
use crate::policy::PolicyConfig;
use crate::proto::control::Counters;

/// A process's request hint, as the agent holds it.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Hint {
    /// The shim says a hint is open.
    open: bool,
    /// It expired here: the process is not busy by it until the shim says it is off.
    expired: bool,
    /// Since when the process has had no work under the hint: the hint's arrival, then each
    /// busy report while it is open.
    since: Option<Instant>,
    /// The bound sent with `AgentMsg::Edges` (`None`: hints refused).
    pub(super) timeout: Option<Duration>,
}

impl Hint {
    /// The hint makes the process busy now.
    pub(super) fn holds(&self) -> bool {
        self.open && !self.expired && self.timeout.is_some()
    }

    /// It expired here and the shim has not said it is off yet.
    pub(super) fn expired(&self) -> bool {
        self.open && self.expired
    }

    /// A busy report (or a report that changed a queue's state) while open: the bound counts
    /// from now.
    pub(super) fn work(&mut self, now: Instant) {
        if self.open {
            self.since = Some(now);
        }
    }
}

/// `hint_timeout_ms` for a process of class `class` whose busy edges are `on` (`None`: hints
/// refused).
pub(super) fn timeout_for(policy: &PolicyConfig, class: &str, on: bool) -> Option<Duration> {
    let ms = policy.class(class).and_then(|c| c.hint_timeout_ms);
    on.then(|| {
        ms.map_or(crate::proto::DEFAULT_HINT_TIMEOUT, |m| {
            Duration::from_millis(m.into())
        })
    })
}

/// `Duration` as the wire's ms.
pub(super) fn as_ms(t: Option<Duration>) -> Option<u32> {
    t.map(|t| u32::try_from(t.as_millis()).unwrap_or(u32::MAX))
}

impl NodeState {
    /// `ShimMsg::Hint` from `pid`. Returns whether a decision is due (a queue's busy state
    /// changed).
    pub(super) fn hint_message(&mut self, pid: Pid, on: bool, expired: bool, now: Instant) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        if on == p.hint.open {
            // A renewal (its `last_heard` was taken), or an off repeated.
            return false;
        }
        let before: Vec<_> = p
            .registry
            .queues
            .iter()
            .map(|q| (q.queue_id, p.queue_busy(q.queue_id)))
            .collect();
        let allowed = p.hint.timeout.is_some();
        if on {
            p.hint.open = true;
            p.hint.expired = false;
            p.hint.since = Some(now);
            if allowed {
                self.counters.hints += 1;
            } else {
                self.counters.hints_ignored += 1;
                p.warn(
                    "sent a request hint, ignored: its class preempts nobody (hints are for classes that preempt others)"
                        .into(),
                );
            }
        } else {
            if expired && allowed && !p.hint.expired {
                // The shim expired it first (its clock started before the message came).
                self.counters.hint_expiries += 1;
            }
            p.hint.open = false;
            p.hint.expired = false;
            p.hint.since = None;
        }
        p.refresh_busy();
        let mut due = false;
        for (q, was) in before {
            let busy = p.queue_busy(q);
            if busy != was {
                self.edges_pending.push((pid, q, busy));
                due = true;
            }
        }
        due
    }
}

/// Expires `hint` when it held for its bound without work (part of the staleness walk,
/// `decide.rs`; `working`: the process's reports count a queue busy, or went stale). `st` is
/// (when the next one expires, whether one expired now). Returns the process's warning when
/// it expired now (its caller recomputes its busy state).
pub(super) fn expire(
    counters: &mut Counters,
    pid: Pid,
    hint: &mut Hint,
    working: bool,
    now: Instant,
    st: &mut (Option<Instant>, bool),
) -> Option<String> {
    if !hint.holds() || working {
        return None;
    }
    let (Some(since), Some(t)) = (hint.since, hint.timeout) else {
        return None;
    };
    let at = since + t;
    if now < at {
        st.0 = Some(st.0.map_or(at, |n: Instant| n.min(at)));
        return None;
    }
    hint.expired = true;
    counters.hint_expiries += 1;
    st.1 = true;
    tracing::info!(pid = %pid, "request hint expired");
    Some(format!(
        "its request hint expired: {} ms without GPU work (never followed by work, or never ended); its queues count as idle until the hint ends",
        t.as_millis()
    ))
}
