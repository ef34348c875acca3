//! One turn of a session's loop: wait for the agent, a watch or the next sample; answer the
//! agent's message; sample the queues and report their busy edges; send the registry.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kfdq::QueueId;
use kfdq::chain::Stage;
use kfdq::proto::{self, AgentMsg, DecodeError, ShimMsg};

use crate::commands::handle;
use crate::guard::guarded;
use crate::registry_file::{EXITING, publish_file};
use crate::state::{F_DISABLED, F_EDGES, FLAGS, STATE};

use super::session::{Broken, End, Session, send};
use super::unclaimed::UnclaimedWatch;
use super::{W_MALFORMED, pid, retry_releases};

impl Session {
    /// One turn of the loop: wait for the agent, a watch or the next sample; answer what came;
    /// sample and report the queues' edges; send the registry when it changed.
    pub(super) fn tick(
        &mut self,
        last_published: &mut u64,
        watch: &mut UnclaimedWatch,
    ) -> Result<(), End> {
        if EXITING.load(Ordering::Relaxed) || FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0 {
            return Err(End::Error(Broken::Stopped));
        }
        let edges = FLAGS.load(Ordering::Relaxed) & F_EDGES != 0;
        if edges && !self.offered {
            // Once per session, when the agent turns edges on: the launches ring the doorbell
            // once it is taken (edges.rs).
            self.offered = true;
            if let Err(e) = crate::edges::offer(&self.w, &proto::encode(&ShimMsg::Doorbell {})) {
                crate::log::debug(|| format!("no doorbell: {e}"));
            }
        }
        let readable = self.wait(edges);
        let mut woke_us = crate::chain::on().then(kfdq::chain::now_us);
        if let Some(w) = self.wake {
            crate::edges::drain(w);
        }
        let mut rang = false;
        if readable {
            match self.answer(&mut woke_us)? {
                Some(r) => rang = r,
                // A watch's message: the loop starts over.
                None => return Ok(()),
            }
        }
        for m in crate::watch::take_outbox() {
            send(&mut self.w, &m).map_err(End::Error)?;
        }
        self.lease.check(Instant::now());
        retry_releases();
        let edges_seen = self.sample_edges(edges, rang, watch);
        // Before the queues' edges: the agent keeps the process busy through the idle reports
        // that follow a hint's ring.
        if let Some(m) = self.hints.next(Instant::now()) {
            send(&mut self.w, &m).map_err(End::Error)?;
        }
        for (queue_id, busy) in edges_seen {
            let queue_id = QueueId(queue_id);
            if busy && let Some(t) = woke_us {
                // Before the write: the agent may read it before the write returns.
                crate::chain::mark_at(Stage::HpWoke, t);
                crate::chain::mark(Stage::EdgeSent);
            }
            send(&mut self.w, &ShimMsg::Activity { queue_id, busy }).map_err(End::Error)?;
        }
        let (gen_now, reg) = {
            let st = STATE.lock();
            (
                st.generation,
                (st.generation != self.sent_gen).then(|| st.to_proto(pid())),
            )
        };
        if let Some(reg) = reg {
            send(&mut self.w, &ShimMsg::Registry(reg)).map_err(End::Error)?;
            self.sent_gen = gen_now;
        }
        publish_file(last_published);
        crate::chain::flush();
        Ok(())
    }

    /// Waits until the agent's socket is readable, a watch pokes, or the next sample is due
    /// (finely while a busy report is outstanding); whether the socket has a line.
    fn wait(&mut self, edges: bool) -> bool {
        let cfg = crate::config::config();
        let period = if edges && crate::edges::armed() {
            proto::BUSY_SAMPLE_PERIOD
        } else {
            cfg.activity_period
        };
        let now = Instant::now();
        let timeout = self.lease.bound(period, now);
        let timeout = STATE
            .lock()
            .owed
            .wait(now)
            .map_or(timeout, |w| w.min(timeout));
        !self.reader.get_ref().buffer().is_empty() || poll_readable(self.fd, self.wake, timeout)
    }

    /// Reads and answers the agent's next message: `Some(whether it was a Rang)`, or `None`
    /// for a watch's message (handed to `watch.rs`).
    fn answer(&mut self, woke_us: &mut Option<u64>) -> Result<Option<bool>, End> {
        let msg = match self.reader.next::<AgentMsg>() {
            Ok(msg) => msg,
            Err(DecodeError::Malformed(m)) => {
                crate::log::warn_repeating(
                    &W_MALFORMED,
                    &format!("ignoring a malformed message from the agent: {m}"),
                );
                return Ok(Some(false));
            }
            Err(DecodeError::Closed) => return Err(End::Closed),
            Err(e) => return Err(End::Error(Broken::Protocol(e))),
        };
        let preempt = matches!(msg, AgentMsg::Preempt { .. });
        let rang = matches!(msg, AgentMsg::Rang {});
        if rang && woke_us.take().is_some() {
            // The launch rang: its time stands for the wake-up and the edge sent (the busy
            // edges this wake-up sends are not the chain's).
            if let Some(t) = crate::edges::rung_at_us() {
                crate::chain::mark_at(Stage::HpWoke, t);
                crate::chain::mark_at(Stage::EdgeSent, t);
            }
        }
        if preempt {
            crate::chain::mark(Stage::CmdRecv);
        }
        self.lease.heard(&msg, Instant::now());
        if matches!(
            msg,
            AgentMsg::BoardWriter { .. }
                | AgentMsg::Watch { .. }
                | AgentMsg::Unwatch { .. }
                | AgentMsg::BoardChanged {}
        ) {
            crate::watch::handle(msg, self.lease.length);
            return Ok(None);
        }
        // The command's fd duplicate is closed after its acknowledgement went out.
        let _closes = crate::kfd_fd::defer_closes();
        let replies = guarded(|| handle(msg)).unwrap_or_default();
        for r in replies {
            send(&mut self.w, &r).map_err(End::Error)?;
        }
        if preempt {
            crate::chain::mark(Stage::AckSent);
        }
        Ok(Some(rang))
    }

    /// Samples the queues: the busy/idle edges to report (with edges on: the slot and the busy
    /// report's flag kept in step; after a `Rang`: every queue's state; while busy: the busy
    /// queues again every `BUSY_RENEW_PERIOD`).
    fn sample_edges(
        &mut self,
        edges: bool,
        rang: bool,
        watch: &mut UnclaimedWatch,
    ) -> Vec<(u32, bool)> {
        let (mut edges_seen, busy) = sample_activity(watch);
        // An open request hint holds the process busy (hint.rs).
        let hinted = crate::hint::tick(!busy.is_empty());
        if edges {
            if !busy.is_empty() || hinted {
                crate::edges::arm();
                crate::edges::board_busy();
            } else if crate::edges::armed() {
                // Every queue idle: the next launch rings again. One more sample catches a
                // launch (or a hint) that saw the report still outstanding (edges.rs).
                crate::edges::board_idle();
                crate::edges::disarm();
                let (again, busy) = sample_activity(watch);
                edges_seen.extend(again);
                if !busy.is_empty() || crate::hint::open() {
                    crate::edges::arm();
                    crate::edges::board_busy();
                }
            }
        }
        if rang {
            // The agent took the ring as busy for every queue: each queue's state now, after it
            // (an idle edge sent before the ring may have been read before it).
            let st = STATE.lock();
            for q in st.queues() {
                if !edges_seen.iter().any(|(id, _)| *id == q.id) {
                    edges_seen.push((q.id, q.busy && !q.dying));
                }
            }
        }
        // While busy, say so again now and then: the agent takes a busy queue of a process that
        // has said nothing for a while as idle (a stopped process preempts nobody for long).
        let now = Instant::now();
        if edges
            && !busy.is_empty()
            && now.duration_since(self.last_renew) >= proto::BUSY_RENEW_PERIOD
        {
            self.last_renew = now;
            for &queue_id in &busy {
                if !edges_seen.iter().any(|(q, _)| *q == queue_id) {
                    edges_seen.push((queue_id, true));
                }
            }
        }
        edges_seen
    }
}

fn poll_readable(fd: i32, wake: Option<i32>, timeout: Duration) -> bool {
    let mut p = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            // A negative fd is ignored by ppoll.
            fd: wake.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Sub-millisecond periods need ppoll's timespec (poll's milliseconds would round 500 µs to
    // a busy loop).
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: two valid pollfds and a timespec on the stack; `fd` is the open socket owned by
    // the session's reader, the second the watches' eventfd (never closed) or -1 (ignored); a
    // null signal mask pointer leaves the mask unchanged.
    let n = unsafe { libc::ppoll(p.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    n > 0 && p[0].revents != 0
}

/// Busy (write index > read index) transitions since the last sample, and the queues busy
/// now (and the unclaimed-work check of this tick).
pub(super) fn sample_activity(watch: &mut UnclaimedWatch) -> (Vec<(u32, bool)>, Vec<u32>) {
    let mut st = STATE.lock();
    // The same tick looks for work that no stream claims, under the same lock.
    watch.check(&mut st, Instant::now());
    let edges = st.sample_busy();
    let busy = st
        .queues()
        .iter()
        .filter(|q| q.busy && !q.dying)
        .map(|q| q.id)
        .collect();
    (edges, busy)
}
