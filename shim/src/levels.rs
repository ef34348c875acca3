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

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Instant;

use kfd_sys as sys;
use kfdq::kfd::debug::{QueueStatus, dbg_enable, queue_snapshot, resume_queues, suspend_queues};
use kfdq::kfd::{EXCEPTION_QUEUE_NEW, QueueId};
use kfdq::policy::class::KFD_PRIORITY_MAX;
use kfdq::policy::retry::RETRY_MAX;
use kfdq::proto::{self, Target};

use crate::bypass::with_bypass;
use crate::command_error::{CommandError, QueueFailure};
use crate::kfd_fd::CommandFd;
use crate::state::State;
use crate::targets::queues_of;

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
fn kfd_fd(st: &State) -> Result<CommandFd, CommandError> {
    let kfd = st.kfd_fd.ok_or(CommandError::NoKfdFd)?;
    Ok(CommandFd::new(kfd.open()?))
}

fn update(
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
fn by_gpu(st: &State, qids: &[u32]) -> Vec<u32> {
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

/// Level 2 on `qids`.
pub fn deactivate(st: &mut State, qids: &[u32]) -> Result<String, CommandError> {
    let kfd = kfd_fd(st)?;
    let fd = kfd.as_fd();
    set_level2(st, fd, qids, true)
        .map(|done| format!("level 2: deactivated queue(s) {done:?} (UPDATE_QUEUE percentage 0)"))
        .map_err(|(failures, done)| CommandError::Queues {
            what: "level 2 (UPDATE_QUEUE percentage 0) failed",
            failures,
            done: Some(("deactivated", done)),
        })
}

/// Undoes level 2 on `qids`: the runtime's own percentage comes back.
pub fn activate(st: &mut State, qids: &[u32]) -> Result<String, CommandError> {
    let kfd = kfd_fd(st)?;
    let fd = kfd.as_fd();
    set_level2(st, fd, qids, false)
        .map(|done| format!("level 2: reactivated queue(s) {done:?}"))
        .map_err(|(failures, done)| CommandError::Queues {
            what: "level 2 release failed",
            failures,
            done: Some(("reactivated", done)),
        })
}

/// UPDATE_QUEUE on each of `qids` (grouped by GPU) that is not already in the requested state:
/// percentage 0 (keeping the runtime's `pm4_target_xcc` bits) when `deactivate`, else the
/// runtime's own percentage; always the managed priority. Returns the queues changed, or the
/// failures and the queues changed anyway.
fn set_level2(
    st: &mut State,
    fd: BorrowedFd<'_>,
    qids: &[u32],
    deactivate: bool,
) -> Result<Vec<u32>, (Vec<QueueFailure>, Vec<u32>)> {
    let mut done = Vec::new();
    let mut errs = Vec::new();
    for id in by_gpu(st, qids) {
        let Some(q) = st.queue_mut(id) else { continue };
        if q.deactivated == deactivate || (deactivate && q.dying) {
            if !q.deactivated || deactivate {
                settle(st, id, false);
            }
            continue;
        }
        let percentage = if deactivate {
            q.runtime_percentage & !0xff
        } else {
            q.runtime_percentage
        };
        match update(fd, q, percentage, q.effective) {
            Ok(()) => {
                q.deactivated = deactivate;
                done.push(id);
                settle(st, id, false);
            }
            Err(e) => {
                if !deactivate {
                    owe(st, id, false, &e);
                }
                errs.push(e);
            }
        }
    }
    st.changed();
    if errs.is_empty() {
        Ok(done)
    } else {
        Err((errs, done))
    }
}

/// DBG_TRAP ENABLE on this process, once.
fn ensure_debug(st: &mut State, fd: BorrowedFd<'_>) -> Result<(), CommandError> {
    if st.debug.is_none() {
        let att = with_bypass(|| dbg_enable(fd, std::process::id(), 0))
            .map_err(CommandError::DebugEnable)?;
        crate::log::debug(|| {
            format!(
                "DBG_TRAP ENABLE on self (runtime state {})",
                att.runtime.runtime_state
            )
        });
        st.debug = Some(att);
    }
    Ok(())
}

/// Records what SUSPEND/RESUME_QUEUES did to each of `todo` (`suspended` is the state a queue
/// reported `Ok` is now in) and turns the other statuses into one error naming `op`.
fn record_level3(
    st: &mut State,
    todo: &[u32],
    statuses: &[QueueStatus],
    suspended: bool,
    what: &'static str,
) -> Result<(), CommandError> {
    for (id, s) in todo.iter().zip(statuses) {
        if *s == QueueStatus::Ok
            && let Some(q) = st.queue_mut(*id)
        {
            q.suspended = suspended;
        }
    }
    st.changed();
    let failures: Vec<QueueFailure> = todo
        .iter()
        .zip(statuses)
        .filter(|(_, s)| **s != QueueStatus::Ok)
        .map(|(id, s)| QueueFailure::Status {
            queue: *id,
            status: *s,
        })
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(CommandError::Queues {
            what,
            failures,
            done: None,
        })
    }
}

/// Level 3 on `qids`.
pub fn suspend(st: &mut State, qids: &[u32], grace_period: u32) -> Result<String, CommandError> {
    // The agent wants them suspended: no resume is owed any more.
    for id in qids {
        settle(st, *id, true);
    }
    let kfd = kfd_fd(st)?;
    let fd = kfd.as_fd();
    ensure_debug(st, fd)?;
    let todo: Vec<u32> = qids
        .iter()
        .copied()
        .filter(|id| st.queue(*id).is_some_and(|q| !q.suspended && !q.dying))
        .collect();
    if todo.is_empty() {
        return Ok(format!("level 3: queue(s) {qids:?} already suspended"));
    }
    // Freshly created queues carry EC_QUEUE_NEW and cannot be suspended until it is cleared: a
    // snapshot clears it, once per queue (the two FUSE/kernel round trips of the snapshot are
    // most of a level 3's cost otherwise, docs/performance.md).
    let fresh = todo
        .iter()
        .any(|id| st.queue(*id).is_some_and(|q| !q.new_cleared));
    if fresh {
        clear_new(st, fd)?;
    }
    let ids: Vec<QueueId> = todo.iter().map(|q| QueueId(*q)).collect();
    let call = |ids: &[QueueId]| {
        crate::chain::ioctl(|| {
            with_bypass(|| suspend_queues(fd, std::process::id(), ids, grace_period, 0))
        })
        .map_err(|source| CommandError::Call {
            what: "level 3: SUSPEND_QUEUES",
            source,
        })
    };
    let (_, mut statuses) = call(&ids)?;
    if !fresh && statuses.contains(&QueueStatus::Invalid) {
        // A queue this shim took as cleared was refused (EC_QUEUE_NEW raised again, or a queue
        // id reused behind its back): clear, and suspend the refused ones once more.
        clear_new(st, fd)?;
        let again: Vec<QueueId> = ids
            .iter()
            .zip(&statuses)
            .filter(|(_, s)| **s == QueueStatus::Invalid)
            .map(|(q, _)| *q)
            .collect();
        let (_, retried) = call(&again)?;
        let mut retried = retried.into_iter();
        for s in statuses.iter_mut().filter(|s| **s == QueueStatus::Invalid) {
            *s = retried.next().unwrap_or(QueueStatus::Invalid);
        }
    }
    record_level3(st, &todo, &statuses, true, "level 3: SUSPEND_QUEUES").map(|()| {
        format!("level 3: suspended queue(s) {todo:?} (DBG_TRAP SUSPEND_QUEUES, grace period {grace_period})")
    })
}

/// GET_QUEUE_SNAPSHOT clearing EC_QUEUE_NEW on every queue of this process; the queues it
/// names are marked cleared.
fn clear_new(st: &mut State, fd: BorrowedFd<'_>) -> Result<(), CommandError> {
    let snap = crate::chain::ioctl(|| {
        with_bypass(|| queue_snapshot(fd, std::process::id(), EXCEPTION_QUEUE_NEW))
    })
    .map_err(|source| CommandError::Call {
        what: "level 3: GET_QUEUE_SNAPSHOT (clearing EC_QUEUE_NEW)",
        source,
    })?;
    for e in snap {
        if let Some(q) = st.queue_mut(e.queue_id.0) {
            q.new_cleared = true;
        }
    }
    Ok(())
}

/// Undoes level 3 on `qids`.
pub fn resume(st: &mut State, qids: &[u32]) -> Result<String, CommandError> {
    let todo: Vec<u32> = qids
        .iter()
        .copied()
        .filter(|id| st.queue(*id).is_some_and(|q| q.suspended))
        .collect();
    if todo.is_empty() {
        return Ok(format!("level 3: queue(s) {qids:?} not suspended"));
    }
    let kfd = kfd_fd(st)?;
    let fd = kfd.as_fd();
    let ids: Vec<QueueId> = todo.iter().map(|q| QueueId(*q)).collect();
    let (_, statuses) = match with_bypass(|| resume_queues(fd, std::process::id(), &ids)) {
        Ok(r) => r,
        Err(source)
            if source.errno().map(|e| e as i32) == Some(libc::EINVAL) && st.debug.is_some() =>
        {
            // The kernel no longer has this process debug-enabled: another process's DBG_TRAP
            // DISABLE (it needs no ptrace link) ended the session, and disabling resumes every
            // queue it suspended. Nothing is suspended any more; the next level 3 enables again.
            crate::log::warn_always(&format!(
                "level 3: RESUME_QUEUES: {source}; debugging of this process was disabled from outside, which resumed its queues"
            ));
            st.debug = None;
            for id in &todo {
                if let Some(q) = st.queue_mut(*id) {
                    q.suspended = false;
                }
                settle(st, *id, true);
            }
            st.changed();
            return Ok(format!(
                "level 3: queue(s) {todo:?} resumed (debugging was disabled from outside)"
            ));
        }
        Err(source) => {
            let e = CommandError::Call {
                what: "level 3: RESUME_QUEUES",
                source,
            };
            for id in &todo {
                owe(st, *id, true, &e);
            }
            return Err(e);
        }
    };
    for (id, s) in todo.iter().zip(&statuses) {
        if *s == QueueStatus::Ok {
            settle(st, *id, true);
        } else {
            owe(st, *id, true, &format!("status {s:?}"));
        }
    }
    record_level3(st, &todo, &statuses, false, "level 3: RESUME_QUEUES")
        .map(|()| format!("level 3: resumed queue(s) {todo:?}"))
}

/// The start of the registry warning a refused release leaves (once per process).
pub const RELEASE_WARNING: &str = "release failed, retrying";

/// A release of `queue` failed with `e`: owed and retried (`kfdq::policy::retry`); the alarm when
/// this starts an episode.
fn owe(st: &mut State, queue: u32, level3: bool, e: &dyn std::fmt::Display) {
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
fn settle(st: &mut State, queue: u32, level3: bool) {
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
