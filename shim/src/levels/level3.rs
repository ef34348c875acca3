//! Level 3: DBG_TRAP on this process itself: ENABLE once (with a pipe), GET_QUEUE_SNAPSHOT to
//! clear `EC_QUEUE_NEW`, SUSPEND_QUEUES with the grace period, RESUME_QUEUES.

use std::os::fd::{AsFd, BorrowedFd};

use kfdq::kfd::debug::{QueueStatus, dbg_enable, queue_snapshot, resume_queues, suspend_queues};
use kfdq::kfd::{EXCEPTION_QUEUE_NEW, QueueId};

use crate::bypass::with_bypass;
use crate::command_error::{CommandError, QueueFailure};
use crate::state::State;

use super::kfd_fd;
use super::owed::{owe, settle};

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
