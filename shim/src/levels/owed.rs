//! Releases the kernel refused: owed, retried with backoff (`kfdq::policy::retry`), and the
//! registry's warning while any is owed.

use std::time::Instant;

use kfdq::policy::retry::RETRY_MAX;

use crate::state::State;

use super::{activate, resume};

/// The start of the registry warning a refused release leaves (once per process).
pub const RELEASE_WARNING: &str = "release failed, retrying";

/// A release of `queue` failed with `e`: owed and retried (`kfdq::policy::retry`); the alarm when
/// this starts an episode.
pub(super) fn owe(st: &mut State, queue: u32, level3: bool, e: &dyn std::fmt::Display) {
    if st.owed.failed(queue, level3, Instant::now()) {
        let what = if level3 {
            "RESUME_QUEUES"
        } else {
            "reactivation (UPDATE_QUEUE)"
        };
        crate::log::warn_always(&format!(
            "{RELEASE_WARNING}: {what} of queue {queue} failed ({e}); the shim retries with backoff \
             (up to every {} ms) until the kernel takes it",
            RETRY_MAX.as_millis()
        ));
        st.report_once(RELEASE_WARNING, || {
            format!(
                "{RELEASE_WARNING}: the kernel refused to release queue {queue} ({e}); retried until it holds \
                 (see release_failures; check the kernel log: dmesg | grep amdgpu)"
            )
        });
    }
}

/// `queue` is released or wanted preempted again at its level: nothing owed for it.
pub(super) fn settle(st: &mut State, queue: u32, level3: bool) {
    if let Some(attempts) = st.owed.settled(queue, level3) {
        crate::log::warn_always(&format!(
            "the releases the kernel refused hold now (after {attempts} retries)"
        ));
    }
}

/// Retries the releases owed, when due (the control thread calls this every turn). Queues
/// already back in the wanted state, or gone, are owed nothing.
pub fn retry_owed(st: &mut State) {
    let now = Instant::now();
    if !st.owed.due(now) {
        return;
    }
    let present: Vec<(u32, bool, bool)> = st
        .queues()
        .iter()
        .map(|q| (q.id, q.deactivated, q.suspended))
        .collect();
    st.owed.retain(|id| present.iter().any(|(q, ..)| *q == id));
    for (id, deactivated, suspended) in &present {
        if !deactivated && st.owed.activate.contains(id) {
            settle(st, *id, false);
        }
        if !suspended && st.owed.resume.contains(id) {
            settle(st, *id, true);
        }
    }
    let resume_ids: Vec<u32> = st.owed.resume.iter().copied().collect();
    if !resume_ids.is_empty() {
        let _ = resume(st, &resume_ids);
    }
    let activate_ids: Vec<u32> = st.owed.activate.iter().copied().collect();
    if !activate_ids.is_empty() {
        let _ = activate(st, &activate_ids);
    }
    st.owed.retried(Instant::now());
}
