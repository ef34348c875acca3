//! amdkfd's HWS preemption timeout, as a user process sees it (an injected
//! `preempt-timeout` fault: `faults.rs`).
//!
//! On hardware, `unmap_queues_cpsch` waits `queue_preemption_timeout_ms` for the HWS to confirm
//! the unmap; when it does not, amdkfd logs "The cp might be in an unrecoverable state due to an
//! unsuccessful queues preemption", marks the HWS hung and schedules a GPU reset; the ioctl that
//! asked for the preempt (UPDATE_QUEUE, DESTROY_QUEUE, DBG_TRAP SUSPEND_QUEUES) fails with
//! `ETIME`. The reset loses what the partition's queues were running (docs/kfd-emulator.md has
//! the sources). Modelled: the call fails with `ETIME` and changes nothing else in the calling
//! process's request; every queue of every process on the partitions the target process has
//! queues on stops (the CP reads no more of its ring: `stopped` in `stats.json`), and the
//! partition counts a reset. Not modelled: the reset's HW-exception event (ROCr aborts the
//! process on it; here its waits time out instead) and the `EIO` other calls get while the
//! reset runs.

use std::collections::BTreeSet;

use crate::state::State;

/// The preempt of a call on behalf of `target` (a tgid) timed out: resets the partitions its
/// queues are on. Returns the number of queues lost.
pub(crate) fn preempt_timeout(st: &mut State, target: u32) -> usize {
    let gpus: BTreeSet<usize> = st
        .processes
        .get(&target)
        .map(|p| p.queues.values().map(|q| q.gpu).collect())
        .unwrap_or_default();
    let mut lost = 0;
    for p in st.processes.values_mut() {
        for q in p.queues.values_mut().filter(|q| gpus.contains(&q.gpu)) {
            if !q.cp_failed {
                q.cp_failed = true;
                lost += 1;
            }
        }
    }
    for g in &gpus {
        st.partitions[*g].resets += 1;
    }
    tracing::warn!(
        target,
        ?gpus,
        lost,
        "injected HWS preemption timeout: the call fails with ETIME and the partition is reset \
         (its queues stop)"
    );
    lost
}
