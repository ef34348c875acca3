//! The end of a debug session (DBG_TRAP DISABLE semantics), also when the debugger or the
//! target goes away: its suspended queues resume and blocked destroyers finish.

use crate::effects::Effects;
use crate::hws;
use crate::state::{Emu, QueueKey, State};

/// DBG_TRAP DISABLE semantics (also used when a debugger or the target goes away):
/// resumes every suspended queue of `target`, drops the debugger link, and lets
/// blocked destroyers finish.
pub(crate) fn disable(emu: &Emu, st: &mut State, target: u32, effects: &mut Effects) {
    let Some(p) = st.processes.get(&target) else {
        return;
    };
    if p.debug.is_none() {
        return;
    }
    let suspended: Vec<(QueueKey, usize)> = p
        .queues
        .values()
        .filter(|q| q.suspended)
        .map(|q| ((target, q.qid), q.gpu))
        .collect();
    let parts: Vec<usize> = suspended.iter().map(|(_, g)| *g).collect();
    let change = (!parts.is_empty()).then(|| hws::begin(emu, st, &parts));
    for (key, _) in &suspended {
        resume_one(st, *key);
    }
    if let Some(p) = st.processes.get_mut(&target) {
        p.debug = None;
    }
    if let Some(c) = change {
        hws::commit(emu, st, c);
    }
    super::queue::complete_pending(emu, st, effects);
    tracing::debug!(target, "debug trap disabled");
}

/// Lets queue `key` run again after a debugger suspended it.
pub(crate) fn resume_one(st: &mut State, key: QueueKey) {
    if let Some(q) = st.queue_mut(key) {
        q.suspended = false;
    }
}
