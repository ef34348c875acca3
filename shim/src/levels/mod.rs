//! The preemption levels (and the other settings an agent makes) executed on this process's
//! own queues and streams, under the registry lock:
//!
//! * Level 0: UPDATE_QUEUE with a new priority (agent's `SetPriority`); CU masks (SET_CU_MASK).
//! * Level 1: hold / release streams (launches and other stream-ordered calls wait in the
//!   wrappers).
//! * Level 2: UPDATE_QUEUE percentage 0 / restore, same ring, size and priority; one call per
//!   queue, issued back to back per GPU.
//! * Level 3: DBG_TRAP on this process itself: ENABLE once (with a pipe), GET_QUEUE_SNAPSHOT to
//!   clear `EC_QUEUE_NEW`, SUSPEND_QUEUES with the grace period, RESUME_QUEUES.
//! * The in-flight window the agent sets for the process's class.
//! * Fail open: everything above undone at once.
//!
//! The ioctls go through the runtime's `/dev/kfd` fd, re-validated for each command
//! (`kfd_fd.rs`), with the bypass flag set so that the ioctl hook passes them through.
//!
//! This file holds level 1, level 0 (priorities, CU masks), the window and fail open;
//! `level2.rs` deactivation; `level3.rs` suspension through DBG_TRAP; `owed.rs` the releases
//! the kernel refused, owed and retried.

use std::os::fd::{AsFd, BorrowedFd};

use kfd_sys as sys;
use kfdq::kfd::QueueId;
use kfdq::policy::class::KFD_PRIORITY_MAX;
use kfdq::proto::{self, Target};

use crate::bypass::with_bypass;
use crate::command_error::{CommandError, QueueFailure};
use crate::kfd_fd::CommandFd;
use crate::state::State;
use crate::targets::queues_of;

mod level2;
mod level3;
mod owed;

pub use level2::{activate, deactivate};
pub use level3::{resume, suspend};
pub use owed::retry_owed;

/// Level 1 on `sids` (and, with `all`, on streams registered from now on).
pub fn hold(st: &mut State, sids: &[u64], all: bool) -> String {
    for s in st.streams.iter_mut().filter(|s| sids.contains(&s.id)) {
        s.held = true;
    }
    if all {
        st.hold_new = true;
    }
    st.changed();
    st.refresh_flags();
    format!(
        "level 1: holding launches and stream-ordered work of stream(s) {sids:?}{}",
        if all {
            " and of streams created from now on"
        } else {
            ""
        }
    )
}

/// Undoes level 1 on `sids` (and, with `all`, for streams registered from now on).
pub fn release(st: &mut State, sids: &[u64], all: bool) -> String {
    for s in st.streams.iter_mut().filter(|s| sids.contains(&s.id)) {
        s.held = false;
    }
    if all {
        st.hold_new = false;
    }
    st.changed();
    st.refresh_flags();
    format!("level 1: released stream(s) {sids:?}")
}

/// A duplicate of the runtime's `/dev/kfd` fd, checked to be open on the file its last
/// CREATE_QUEUE used, for one command: the command acts through it and closes it when it ends
/// (`kfd_fd.rs`; the control thread closes it after the command's acknowledgement). A closed
/// or replaced fd refuses the command before it changes anything.
pub(super) fn kfd_fd(st: &State) -> Result<CommandFd, CommandError> {
    let kfd = st.kfd_fd.ok_or(CommandError::NoKfdFd)?;
    Ok(CommandFd::new(kfd.open()?))
}

pub(super) fn update(
    fd: BorrowedFd<'_>,
    q: &crate::state::Queue,
    percentage: u32,
    priority: u32,
) -> Result<(), QueueFailure> {
    let args = sys::kfd_ioctl_update_queue_args {
        ring_base_address: q.ring_base,
        queue_id: q.id,
        ring_size: q.ring_size,
        queue_percentage: percentage,
        queue_priority: priority,
    };
    // SAFETY: ring base and size are the ones the runtime created the queue with (recorded
    // from its CREATE_QUEUE and from every UPDATE_QUEUE it made since), so the GPU keeps reading
    // the runtime's own ring; only percentage and priority change.
    crate::chain::ioctl(|| with_bypass(|| unsafe { kfdq::kfd::ioctl::update_queue(fd, &args) }))
        .map_err(|source| QueueFailure::Call {
            queue: q.id,
            source,
        })
}

/// Queue ids sorted by GPU (stable), so the calls for one partition go back to back.
pub(super) fn by_gpu(st: &State, qids: &[u32]) -> Vec<u32> {
    let mut v: Vec<(u32, u32)> = qids
        .iter()
        .filter_map(|id| st.queue(*id).map(|q| (q.gpu_id, q.id)))
        .collect();
    v.sort_by_key(|(g, _)| *g);
    v.into_iter().map(|(_, id)| id).collect()
}

/// Level 0: the queues `t` names at KFD priority `priority` (overriding the class mapping).
pub fn set_priority(st: &mut State, t: &Target, priority: u32) -> Result<String, CommandError> {
    if priority > KFD_PRIORITY_MAX {
        return Err(CommandError::PriorityOutOfRange(priority));
    }
    let qids = queues_of(st, t)?;
    let kfd = kfd_fd(st)?;
    let fd = kfd.as_fd();
    let mut errs = Vec::new();
    for id in by_gpu(st, &qids) {
        let Some(q) = st.queue_mut(id) else { continue };
        let pct = if q.deactivated {
            q.runtime_percentage & !0xff
        } else {
            q.runtime_percentage
        };
        match update(fd, q, pct, priority) {
            Ok(()) => {
                q.override_priority = Some(priority);
                q.effective = priority;
            }
            Err(e) => errs.push(e),
        }
    }
    st.changed();
    if errs.is_empty() {
        Ok(format!("level 0: queue(s) {qids:?} at priority {priority}"))
    } else {
        Err(CommandError::Queues {
            what: "UPDATE_QUEUE failed",
            failures: errs,
            done: None,
        })
    }
}

/// SET_CU_MASK on the queues `t` names, each with its partition's mask.
pub fn set_cu_masks(
    st: &mut State,
    t: &Target,
    masks: &[kfdq::proto::CuMask],
) -> Result<String, CommandError> {
    let qids = queues_of(st, t)?;
    let kfd = kfd_fd(st)?;
    let fd = kfd.as_fd();
    let mut done = Vec::new();
    let mut errs = Vec::new();
    for id in by_gpu(st, &qids) {
        let Some(q) = st.queue(id) else { continue };
        let Some(m) = masks.iter().find(|m| m.gpu_id.0 == q.gpu_id) else {
            continue;
        };
        match with_bypass(|| kfdq::kfd::ioctl::set_cu_mask(fd, QueueId(id), &m.words)) {
            Ok(()) => done.push(id),
            Err(source) => errs.push(QueueFailure::Call { queue: id, source }),
        }
    }
    if errs.is_empty() {
        Ok(format!("CU masks set on queue(s) {done:?}"))
    } else {
        Err(CommandError::Queues {
            what: "SET_CU_MASK failed",
            failures: errs,
            done: Some(("set on", done)),
        })
    }
}

/// The agent's in-flight window for this process (a class setting).
pub fn set_window(st: &mut State, dispatches: Option<u32>) -> Result<String, CommandError> {
    if let Some(w) = dispatches
        && !(1..=proto::MAX_WINDOW).contains(&w)
    {
        return Err(CommandError::WindowOutOfRange(w));
    }
    let prev = crate::window_setting::set(dispatches);
    st.refresh_flags();
    st.changed();
    let show = |w: Option<u32>| w.map_or_else(|| "unbounded".to_string(), |w| w.to_string());
    Ok(format!(
        "in-flight window {} (was {})",
        show(dispatches),
        show(prev)
    ))
}

/// Fail open: releases every hold, reactivates every deactivated queue, resumes every
/// suspended one. Returns what failed.
pub fn fail_open(st: &mut State) -> Vec<CommandError> {
    let mut errors = Vec::new();
    let all: Vec<u64> = st.streams.iter().map(|s| s.id).collect();
    release(st, &all, true);
    let suspended: Vec<u32> = st
        .queues()
        .iter()
        .filter(|q| q.suspended)
        .map(|q| q.id)
        .collect();
    if !suspended.is_empty()
        && let Err(e) = resume(st, &suspended)
    {
        errors.push(e);
    }
    let deactivated: Vec<u32> = st
        .queues()
        .iter()
        .filter(|q| q.deactivated)
        .map(|q| q.id)
        .collect();
    if !deactivated.is_empty()
        && let Err(e) = activate(st, &deactivated)
    {
        errors.push(e);
    }
    // The agent's window goes with it: back to the process's own (KFDQ_WINDOW, else none).
    if crate::window_setting::get() != crate::config::config().window {
        crate::window_setting::set(crate::config::config().window);
        st.refresh_flags();
        st.changed();
    }
    errors
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;
    use crate::kfd_fd::{KfdFd, KfdFdError};
    use crate::state::{CreatedQueue, registry_for_tests};

    /// A registry with queue 1 and the runtime's "/dev/kfd" fd recorded on `kfd`.
    fn registry(kfd: &std::fs::File) -> State {
        let mut st = registry_for_tests();
        // SAFETY: no index addresses (0): nothing is read through them.
        unsafe {
            st.add_queue(CreatedQueue {
                id: 1,
                gpu_id: 1,
                requested: 7,
                effective: 7,
                ring_base: 0x1000,
                ring_size: 4096,
                wptr: 0,
                rptr: 0,
                runtime_percentage: 100,
                compute: true,
            })
        };
        st.kfd_fd = Some(KfdFd::identify(kfd.as_raw_fd()).expect("identify"));
        st
    }

    #[test]
    fn commands_on_a_replaced_kfd_fd_are_refused_and_change_nothing() {
        let kfd = tempfile::tempfile().expect("tempfile");
        let other = tempfile::tempfile().expect("tempfile");
        let mut st = registry(&kfd);
        // The runtime closes its fd and the number is reused for another file.
        // SAFETY: dup2 onto a number `kfd` owns (and keeps owning: it closes it once).
        let r = unsafe { libc::dup2(other.as_raw_fd(), kfd.as_raw_fd()) };
        assert_eq!(r, kfd.as_raw_fd());
        let generation = st.generation;
        let refused = [
            set_priority(&mut st, &Target::All, 3),
            deactivate(&mut st, &[1]),
            suspend(&mut st, &[1], 0),
            set_cu_masks(&mut st, &Target::All, &[]),
        ];
        for r in refused {
            let e = r.expect_err("refused");
            assert!(
                matches!(e, CommandError::KfdFd(KfdFdError::Replaced { .. })),
                "{e:?}"
            );
            let e = e.to_string();
            assert!(
                e.contains("/dev/kfd fd") && e.contains("replaced") && e.contains("no ioctl"),
                "{e}"
            );
        }
        let q = st.queue(1).expect("queue 1");
        assert!(!q.deactivated && !q.suspended && q.override_priority.is_none());
        assert_eq!(q.effective, 7);
        assert!(st.debug.is_none(), "no DBG_TRAP ENABLE");
        assert_eq!(st.generation, generation, "nothing changed");
    }
}
