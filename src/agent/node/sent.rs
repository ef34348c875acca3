//! Commands on their way out: a command is numbered and its message built at once, and
//! everything else about it — the process's record of it as awaiting its ack, its class's
//! count, its device-wide preempts — is kept as a compact record and done after the
//! decision's commands are written ([`NodeState::account`]), so that a decision sending 63
//! commands touches no process entry for them. The server is single-threaded (decide ->
//! write -> account), and every path that reads what awaits an ack first records what is
//! still kept here ([`NodeState::record_pending`]).

use std::time::Instant;

use super::super::conn::ConnId;
use super::command::Command;
use super::{NodeState, Out};
use crate::ids::Pid;

/// A command sent whose bookkeeping is not done yet.
#[derive(Debug)]
pub(super) struct Sent {
    pub(super) pid: Pid,
    pub(super) seq: u64,
    pub(super) cmd: Command,
}

/// The commands sent since the last [`NodeState::account`].
#[derive(Debug, Default)]
pub(super) struct SentLog {
    /// In the order sent (keeps its capacity between decisions).
    pub(super) sent: Vec<Sent>,
    /// How many of them (from the front) their processes already await acks for.
    pub(super) recorded: usize,
    /// When they were sent (one decision's time: the log is recorded before the next).
    pub(super) at: Option<Instant>,
}

impl NodeState {
    /// Sends `cmd` to `pid`'s shim (or tracer session) on `conn` as the next command; its
    /// bookkeeping waits in the log. Returns its sequence number.
    pub(super) fn send_to(
        &mut self,
        pid: Pid,
        conn: ConnId,
        cmd: Command,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> u64 {
        if self.sent_log.at.is_some_and(|at| at != now) {
            // Another decision's commands: their processes await them first.
            self.record_pending();
        }
        self.seq += 1;
        let seq = self.seq;
        self.counters.commands += 1;
        let msg = cmd.message(seq, self.cfg.grace_period);
        tracing::debug!(pid = %pid, "command {msg:?}");
        out.push(Out::Shim(conn, msg));
        self.sent_log.at = Some(now);
        self.sent_log.sent.push(Sent { pid, seq, cmd });
        seq
    }

    /// Each process awaits the acks of the commands sent to it ([`super::process::Pending`]).
    /// Done by [`NodeState::account`]; called first wherever what awaits an ack is read.
    pub(super) fn record_pending(&mut self) {
        let log = &mut self.sent_log;
        let Some(at) = log.at else {
            return;
        };
        for s in &log.sent[log.recorded..] {
            if let Some(p) = self.procs.get_mut(&s.pid) {
                p.sent(s.seq, &s.cmd, at);
            }
        }
        log.recorded = log.sent.len();
    }

    /// Commands sent whose processes do not await them yet.
    pub(super) fn unrecorded(&self) -> usize {
        self.sent_log.sent.len() - self.sent_log.recorded
    }

    /// Counts the commands sent since the last call: each preempt for its class, and what
    /// each costs in device-wide preempts (counted at `now`, the decision's time).
    pub(super) fn count_sent(&mut self, now: Instant) {
        self.record_pending();
        let mut sent = std::mem::take(&mut self.sent_log.sent);
        for Sent { pid, cmd, .. } in sent.drain(..) {
            let Some(p) = self.procs.get_mut(&pid) else {
                continue;
            };
            if let Command::Preempt(l) = cmd {
                self.rec.preempted(p.class(), l);
                p.preemptions += 1;
            }
            let preempts = &mut self.preempts;
            cmd.cost(&p.registry, |gpu, c| preempts.count(gpu, c, now));
        }
        // The buffer keeps its capacity for the next decision.
        self.sent_log = super::sent::SentLog {
            sent,
            recorded: 0,
            at: None,
        };
        self.preempts.trim(now);
    }
}
