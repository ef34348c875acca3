//! Why a process should be in its run state: the policy's reason or a text, in words only
//! when it changes (a decision formats no reason it already showed).

use crate::policy::Reason;

/// Why a process should be running or preempted.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Why {
    /// The policy's reason.
    Policy(Reason),
    /// Anything else (a manual preemption, the tracer's only level).
    Text(String),
}

impl From<&str> for Why {
    fn from(s: &str) -> Why {
        Why::Text(s.to_owned())
    }
}

impl Why {
    /// In words.
    pub(super) fn text(&self) -> String {
        match self {
            Why::Policy(r) => reason_text(r),
            Why::Text(t) => t.clone(),
        }
    }
}

/// The policy's reason in words.
pub(super) fn reason_text(r: &Reason) -> String {
    match r {
        Reason::Free => "no higher class busy".into(),
        Reason::Unpreemptible => "its class is never preempted".into(),
        Reason::HigherClassBusy(c) => format!("class {c} is busy"),
        Reason::Hysteresis(c) => format!("held after class {c} went idle (the release rule)"),
        Reason::StarvationGuard => "starvation guard: running its share".into(),
        Reason::ResidencyGuard(g) => {
            format!("residency guard: more active queues than slots on gpu {g}")
        }
        Reason::RateLimited => "waiting for the minimum interval between preempts".into(),
    }
}
