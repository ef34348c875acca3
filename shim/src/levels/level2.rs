//! Level 2: UPDATE_QUEUE percentage 0 / restore, same ring, size and priority; one call per
//! queue, issued back to back per GPU.

use std::os::fd::{AsFd, BorrowedFd};

use crate::command_error::{CommandError, QueueFailure};
use crate::state::State;

use super::owed::{owe, settle};
use super::{by_gpu, kfd_fd, update};

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
