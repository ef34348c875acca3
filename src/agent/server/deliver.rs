//! Delivery: the node's messages encoded into the connections' buffers (the edge boards'
//! descriptors passed with theirs, slots cleared), the tracer's commands, and the writes.

use super::Server;
use crate::agent::node::Out;
use crate::chain::Stage;
use crate::proto::AgentMsg;

impl Server<'_> {
    pub(super) fn deliver(&mut self) {
        // Drained, not dropped: a burst's buffer is reused by the next one.
        let mut outbox = std::mem::take(&mut self.out);
        let preempts = self.chain.is_some()
            && outbox
                .iter()
                .any(|o| matches!(o, Out::Shim(_, AgentMsg::Preempt { .. })));
        for o in outbox.drain(..) {
            // Encoded straight into the connection's buffer.
            let (cid, queued) = match o {
                Out::Shim(c, msg) if self.tracer.owns(c) => {
                    self.tracer.command(c, msg);
                    continue;
                }
                Out::Untrace(c, why) => {
                    self.tracer.untrace(c, why);
                    continue;
                }
                Out::Shim(c, m) => (c, self.peers.get_mut(&c).map(|p| p.conn.queue_msg(&m))),
                Out::ShimBoard {
                    conn,
                    msg,
                    board,
                    writable,
                } => {
                    let Some(p) = self.peers.get_mut(&conn) else {
                        continue;
                    };
                    match self.boards.fd(board, writable) {
                        Ok(fd) => (conn, Some(p.conn.queue_msg_fd(&msg, fd))),
                        Err(e) => {
                            // The process keeps the agent's commands (its watch is awaited
                            // for the grace only).
                            tracing::warn!(conn, "{e}");
                            continue;
                        }
                    }
                }
                Out::ClearSlot { board, slot } => {
                    if let Err(e) = self.boards.clear(board, slot) {
                        tracing::warn!("{e}");
                    }
                    continue;
                }
                Out::Control(c, r) => (c, self.peers.get_mut(&c).map(|p| p.conn.queue_msg(&r))),
            };
            if queued == Some(false)
                && let Some(p) = self.peers.get_mut(&cid)
            {
                tracing::warn!(
                    conn = cid,
                    pid = %p.id.pid,
                    "peer leaves its messages unread; disconnecting it"
                );
                p.conn.closing = true;
                p.conn.eof = true;
            }
        }
        self.out = outbox;
        // Before the writes: the shim may read its command before the write returns.
        if preempts && let Some(c) = self.chain.as_mut() {
            c.mark(Stage::AgentWritten);
        }
        for (cid, p) in &mut self.peers {
            if p.conn.wants_write()
                && let Err(e) = p.conn.flush()
            {
                tracing::debug!(conn = cid, "write: {e}");
                p.conn.eof = true;
                p.conn.closing = true;
            }
        }
    }
}
