//! One reconcile step: what the node wants of a process (from the policy, a manual
//! preemption, its class's settings) compared with what was sent to it, and the commands that
//! close the gap. Pure: it reads and updates the process's "sent" state and returns
//! [`Command`]s; the node numbers, counts and sends them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::command::{Command, CuMaskCmd};
use super::process::Proc;
use super::why::Why;
use crate::ids::{GpuId, QueueId};
use crate::policy::Run;
use crate::proto::control::Control;
use crate::proto::{CuMask, Level};

/// After a command failed, the same level is not retried on that process for this long.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(5);

/// What the node wants of one process now.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Want {
    /// Running or preempted, and why; `None`: this decision leaves its run state as it is
    /// (a tracer session being ended, or a manual preemption of a process leaving).
    pub(super) run: Option<(Run, Why)>,
    /// The KFD priority its queues should have, when the shim's own class band does not give
    /// it.
    pub(super) priority: Option<u32>,
    /// Its class's in-flight window (`None`: unbounded).
    pub(super) window: Option<u32>,
    /// Its class's CU masks, partition -> 32-bit words (empty: no CU share).
    pub(super) cu_masks: BTreeMap<GpuId, Vec<u32>>,
}

/// The releases and preempts of one step: at most a release of the level applied and a
/// preempt at the level wanted, inline (a step allocates nothing for its run state).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct RunCmds {
    /// Release from this level (goes out first).
    pub(super) release: Option<Level>,
    /// Preempt at this level.
    pub(super) preempt: Option<Level>,
}

impl RunCmds {
    /// Nothing to send.
    pub(super) fn is_empty(&self) -> bool {
        self.release.is_none() && self.preempt.is_none()
    }

    /// The commands, in the order they go out.
    pub(super) fn iter(&self) -> impl Iterator<Item = Command> + use<> {
        self.release
            .map(Command::Release)
            .into_iter()
            .chain(self.preempt.map(Command::Preempt))
    }
}

/// The commands one step sends one process, by phase: a decision sends each phase to every
/// process before the next (preempts and releases first, in partition order).
#[derive(Debug, Default, PartialEq)]
pub(super) struct Step {
    /// Releases and preempts.
    pub(super) run: RunCmds,
    /// Level 0.
    pub(super) priority: Option<Command>,
    /// The in-flight window.
    pub(super) window: Option<Command>,
    /// CU masks.
    pub(super) cu_mask: Option<Command>,
    /// Decide again then even if nothing arrives (a failed level may be retried).
    pub(super) retry_at: Option<Instant>,
}

impl Step {
    /// Nothing to send.
    pub(super) fn is_empty(&self) -> bool {
        self.run.is_empty()
            && self.priority.is_none()
            && self.window.is_none()
            && self.cu_mask.is_none()
    }

    /// Every command, in the order they go out.
    #[cfg(test)]
    pub(super) fn commands(&self) -> impl Iterator<Item = Command> + '_ {
        self.run
            .iter()
            .chain(self.priority.clone())
            .chain(self.window.clone())
            .chain(self.cu_mask.clone())
    }
}

/// Compares what was sent to `p` with `want` at `now`; returns the commands that bring it
/// there and records them in `p` as sent.
pub(super) fn reconcile(p: &mut Proc, want: Want, now: Instant) -> Step {
    let mut step = Step::default();
    if let Some((run, why)) = want.run {
        step.retry_at = run_state(p, run, why, now, &mut step.run);
    }
    step.priority = want.priority.and_then(|w| priority(p, w));
    step.window = window(p, want.window);
    step.cu_mask = cu_mask(p, &want.cu_masks);
    step
}

/// The run state alone (an edge decision: nothing but busy edges changed, so the priority,
/// window and CU masks are as the last full decision left them): the commands, and when to
/// decide again (a failed level may be retried).
pub(super) fn reconcile_run(
    p: &mut Proc,
    run: Run,
    why: Why,
    now: Instant,
) -> (RunCmds, Option<Instant>) {
    let mut cmds = RunCmds::default();
    let retry_at = run_state(p, run, why, now, &mut cmds);
    (cmds, retry_at)
}

/// Running or preempted: a release of the level applied and a preempt of the level wanted
/// when they differ; when they agree at level 2/3, a preempt again for queues created since
/// (the shim skips those already at the level). A level whose command failed is not retried
/// for [`RETRY_AFTER`]: the process runs meanwhile, and the returned time says when to look
/// again.
fn run_state(
    p: &mut Proc,
    run: Run,
    why: Why,
    now: Instant,
    cmds: &mut RunCmds,
) -> Option<Instant> {
    let mut want = run;
    let mut retry_at = None;
    if let (Run::Preempted(l), Some((fl, at))) = (want, p.failed)
        && l == fl
    {
        if now.duration_since(at) < RETRY_AFTER {
            want = Run::Running;
            retry_at = Some(at + RETRY_AFTER);
        } else {
            p.failed = None;
        }
    }
    if let Some(at) = super::direct::self_handles(p, want, &why, now) {
        if p.why.as_ref() != Some(&why) {
            p.why = Some(why);
        }
        return at.or(retry_at);
    }
    if p.why.as_ref() != Some(&why) {
        p.why = Some(why);
    }
    let applied = p.applied;
    if applied != want {
        p.applied = want;
        if let Run::Preempted(l) = applied {
            cmds.release = Some(l);
        }
        if let Run::Preempted(l) = want {
            cmds.preempt = Some(l);
        }
    } else if let Run::Preempted(l @ (Level::Deactivate | Level::Suspend)) = want {
        let behind = p.registry.queues.iter().any(|q| match l {
            Level::Deactivate => !q.deactivated,
            _ => !q.suspended,
        });
        let in_flight = p.pending.values().any(|c| c.preempt);
        if behind && !in_flight && p.registry_gen > p.preempt_gen {
            cmds.preempt = Some(l);
        }
    }
    retry_at
}

/// Level 0: the priority, once per registry that shows a queue without it, and not while a
/// priority (or another level-less command) is unacknowledged.
fn priority(p: &mut Proc, want: u32) -> Option<Command> {
    if p.via != Control::Shim {
        return None;
    }
    let differs = p
        .registry
        .queues
        .iter()
        .any(|q| q.effective_priority != want);
    let in_flight = p.pending.values().any(|c| c.level.is_none());
    let sent = p.priority_sent == Some((want, p.registry_gen));
    if !differs || in_flight || sent {
        return None;
    }
    p.priority_sent = Some((want, p.registry_gen));
    Some(Command::SetPriority(want))
}

/// The class's in-flight window, sent whenever the shim's registry shows another one than the
/// class's: once per registry (re-sent only for a newer registry that still shows it missing,
/// as after a lease expiry, when the shim fails open and drops the agent's window with
/// everything else). A shim that never had one needs no "unbounded".
fn window(p: &mut Proc, want: Option<u32>) -> Option<Command> {
    if p.registry_gen == 0 || p.via != Control::Shim || p.registry.window == want {
        return None;
    }
    if p.window_sent == Some((want, p.registry_gen)) {
        return None;
    }
    p.window_sent = Some((want, p.registry_gen));
    Some(Command::SetWindow(want))
}

/// CU masks of a class with a CU share, once per registry that shows new queues: each
/// SET_CU_MASK is an UPDATE_QUEUE in amdkfd (a device-wide preempt), so only queues without
/// the mask get it.
fn cu_mask(p: &mut Proc, want: &BTreeMap<GpuId, Vec<u32>>) -> Option<Command> {
    if want.is_empty() || p.via == Control::Tracer {
        return None;
    }
    let masks: Vec<CuMask> = want
        .iter()
        .map(|(g, w)| CuMask {
            gpu_id: *g,
            words: w.clone(),
        })
        .collect();
    let queues: Vec<QueueId> = p.registry.queues.iter().map(|q| q.queue_id).collect();
    let todo: Vec<QueueId> = match &p.cu_sent {
        Some((m, done)) if *m == masks => queues
            .iter()
            .copied()
            .filter(|q| !done.contains(q))
            .collect(),
        _ => queues.clone(),
    };
    if todo.is_empty() {
        return None;
    }
    p.cu_sent = Some((masks.clone(), queues));
    Some(Command::SetCuMask(Box::new(CuMaskCmd {
        queues: todo,
        masks,
    })))
}
