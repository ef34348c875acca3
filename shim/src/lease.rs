//! The lease of the process's preemptions (docs/shim.md, "Leases"): the control thread's
//! record of when the agent last renewed it, and the release when it runs out. It also bounds
//! the watches of edge boards (`watch.rs`): a watch acts only within the lease.

use std::time::{Duration, Instant};

use kfdq::proto::AgentMsg;

use crate::levels::fail_open;
use crate::state::STATE;

/// The lease of this process's preemptions: every preempt command starts it and every
/// `AgentMsg::Renew` extends it; when it runs out while anything is preempted, the shim
/// releases everything on its own — the agent hung — and says so once (log, registry
/// warning, the registry's `lease_expiries`).
pub struct Lease {
    /// The lease's length (`None`: an agent without leases).
    pub length: Option<Duration>,
    until: Option<Instant>,
}

impl Lease {
    pub fn new(length: Option<Duration>) -> Lease {
        Lease {
            length,
            until: None,
        }
    }

    /// A message from the agent: a preempt starts the lease, a renewal extends it.
    pub fn heard(&mut self, msg: &AgentMsg, now: Instant) {
        if matches!(
            msg,
            AgentMsg::Preempt { .. } | AgentMsg::Renew {} | AgentMsg::Watch { .. }
        ) {
            self.until = self.length.map(|l| now + l);
            if let Some(u) = self.until {
                crate::watch::renew(u);
            }
        }
    }

    /// How long the control thread may sleep: `period`, or less when the lease runs out first.
    pub fn bound(&self, period: Duration, now: Instant) -> Duration {
        match self.until {
            Some(u) => period.min(u.saturating_duration_since(now)),
            None => period,
        }
    }

    /// Releases everything if the lease ran out with anything preempted.
    pub fn check(&mut self, now: Instant) {
        let Some(until) = self.until else { return };
        if now < until {
            return;
        }
        self.until = None;
        let mut st = STATE.lock();
        // A watch of an edge board undoes its own level when the lease runs out (`watch.rs`);
        // if it did so first, it is this expiry all the same.
        let undone_by_watch = crate::watch::took_lease_undo();
        if !st.preempted_anything() && !undone_by_watch {
            return;
        }
        let errors = fail_open(&mut st);
        st.lease_expiries += 1;
        st.report(format!(
            "{LEASE_WARNING}: the agent did not renew this process's preemption within {} ms (hung, stopped or \
             overloaded); it runs uncontrolled until the agent preempts it again (check kfdqd: systemctl status kfdqd)",
            self.length.map_or(0, |l| l.as_millis())
        ));
        st.changed();
        drop(st);
        STATE.notify_all();
        for e in errors {
            crate::log::warn_always(&format!("{LEASE_WARNING}; releasing: {e}"));
        }
    }
}

/// The start of the warning a lease that ran out leaves.
pub const LEASE_WARNING: &str = "lease expired, released on its own";
