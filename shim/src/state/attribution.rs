//! Attribution: which stream runs on which KFD queue, including queues created while a stream's
//! call was in flight, and the report of streams that share a queue.

use super::State;
use super::warnings::SHARED_WARNING;
use kfdq::proto::StreamKind;

impl State {
    /// Records that stream `sid` runs on queue `qid`. A queue already used by another stream
    /// is reported as shared (those streams serialize on one ring).
    pub fn attribute(&mut self, sid: u64, qid: u32) {
        let Some(s) = self.streams.iter_mut().find(|s| s.id == sid) else {
            if !self.inflight.contains(&(sid, qid)) {
                self.inflight.push((sid, qid));
            }
            return;
        };
        if s.queue == Some(qid) {
            return;
        }
        let old = s.queue.replace(qid);
        if let Some(old) = old.and_then(|o| self.queues.iter_mut().find(|q| q.id == o)) {
            old.streams.retain(|x| *x != sid);
        }
        let mut shared_with = Vec::new();
        if let Some(q) = self.queues.iter_mut().find(|q| q.id == qid) {
            shared_with = q.streams.clone();
            if !q.streams.contains(&sid) {
                q.streams.push(sid);
            }
            q.claimed = true;
        }
        if !shared_with.is_empty() {
            crate::log::debug(|| {
                format!("stream {sid} shares KFD queue {qid} with stream(s) {shared_with:?}")
            });
            // One line per process: sharing is what the class's hw_queues chose, the registry's
            // queues list which streams share.
            self.report_once(SHARED_WARNING, || {
                format!(
                    "{SHARED_WARNING}: the runtime's GPU_MAX_HW_QUEUES={} hardware queues per \
                     stream priority are in use (first: stream {sid} on queue {qid} with {shared_with:?}); \
                     streams on one queue serialize and are preempted together (for a queue each, raise \
                     the class's hw_queues or GPU_MAX_HW_QUEUES)",
                    std::env::var("GPU_MAX_HW_QUEUES").unwrap_or_else(|_| "?".into())
                )
            });
        }
        self.changed();
        self.refresh_flags();
    }

    /// A compute queue the runtime created while a call of stream `sid` was in flight on the
    /// same thread. The first one is the stream's: a stream that already has a queue (or one
    /// waiting for its registration) keeps it, because a later creation during such a call is
    /// the runtime's own (e.g. ROCr's blit-kernel queue, created lazily at the first copy right
    /// after the stream's queue). Returns whether `qid` was attributed to `sid`.
    pub fn attribute_created(&mut self, sid: u64, qid: u32) -> bool {
        let taken = match self.stream(sid) {
            Some(s) => s.queue.is_some(),
            None => self.inflight.iter().any(|(s, _)| *s == sid),
        };
        if !taken {
            self.attribute(sid, qid);
        }
        !taken
    }

    /// After a synchronising call under the id `sid` of a stream that was not registered: if
    /// the runtime created a queue for it meanwhile (held in `inflight`), registers the stream,
    /// which takes that queue. Returns whether it did.
    pub fn adopt_inflight(&mut self, sid: u64, kind: StreamKind) -> bool {
        if self.stream(sid).is_some() || !self.inflight.iter().any(|(s, _)| *s == sid) {
            return false;
        }
        self.register_stream(sid, kind, 0, None, None);
        true
    }
}
