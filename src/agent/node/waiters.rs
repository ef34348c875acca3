//! Control requests waiting for the shims' acks of the commands they caused, and their
//! deadlines.

use std::time::{Duration, Instant};

use super::super::conn::ConnId;
use super::Out;
use crate::ids::Pid;
use crate::proto::Reply;

/// How long a control request waits for the shims' acks.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);

/// A control request waiting for shims' acks.
#[derive(Debug)]
pub(super) struct Waiter {
    pub(super) conn: ConnId,
    pub(super) pid: Pid,
    pub(super) seqs: Vec<u64>,
    pub(super) details: Vec<String>,
    pub(super) failed: bool,
    pub(super) deadline: Instant,
    /// Undo a manual preemption if its command fails.
    pub(super) undo_manual: bool,
}

/// The waiting requests.
#[derive(Debug, Default)]
pub(super) struct Waiters(Vec<Waiter>);

impl Waiters {
    /// Adds one.
    pub(super) fn push(&mut self, w: Waiter) {
        self.0.push(w);
    }

    /// The earliest deadline.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.0.iter().map(|w| w.deadline).min()
    }

    /// Answers those past their deadline (the request stays in effect).
    pub(super) fn expire(&mut self, now: Instant, out: &mut Vec<Out>) {
        let mut i = 0;
        while i < self.0.len() {
            if now >= self.0[i].deadline {
                let w = self.0.swap_remove(i);
                out.push(Out::Control(
                    w.conn,
                    Reply::Error {
                        error: format!(
                            "process {} did not acknowledge within {} s (its shim may be stuck in a GPU call); the request stays in effect",
                            w.pid,
                            ACK_TIMEOUT.as_secs()
                        ),
                    },
                ));
            } else {
                i += 1;
            }
        }
    }

    /// Answers those waiting on `pid`, which went away.
    pub(super) fn process_gone(&mut self, pid: Pid, out: &mut Vec<Out>) {
        let mut keep = Vec::new();
        for w in self.0.drain(..) {
            if w.pid == pid {
                out.push(Out::Control(
                    w.conn,
                    Reply::Error {
                        error: format!(
                            "process {pid} exited (or its shim disconnected) before it acknowledged"
                        ),
                    },
                ));
            } else {
                keep.push(w);
            }
        }
        self.0 = keep;
    }

    /// Drops those of control connection `conn`, which went away.
    pub(super) fn control_gone(&mut self, conn: ConnId) {
        self.0.retain(|w| w.conn != conn);
    }

    /// `pid` acknowledged command `seq`: answers the requests that now have all their acks.
    /// Returns true when one of them failed and asks for its manual preemption to be undone.
    pub(super) fn settle(
        &mut self,
        pid: Pid,
        seq: u64,
        ok: bool,
        detail: &str,
        out: &mut Vec<Out>,
    ) -> bool {
        let mut undo_manual = false;
        let mut i = 0;
        while i < self.0.len() {
            let w = &mut self.0[i];
            if w.pid == pid && w.seqs.contains(&seq) {
                w.seqs.retain(|s| *s != seq);
                w.details.push(detail.to_owned());
                w.failed |= !ok;
                if w.seqs.is_empty() {
                    let w = self.0.swap_remove(i);
                    undo_manual |= w.failed && w.undo_manual;
                    let detail = w.details.join("; ");
                    out.push(Out::Control(
                        w.conn,
                        if w.failed {
                            Reply::Error { error: detail }
                        } else {
                            Reply::Done { detail }
                        },
                    ));
                    continue;
                }
            }
            i += 1;
        }
        undo_manual
    }
}
