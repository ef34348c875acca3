//! Streams: the ones the shim manages, looked up by id or handle, registered and removed.

use kfdq::proto::StreamKind;

use super::State;

/// Stream id of the null stream.
pub const NULL_STREAM_ID: u64 = 0;

/// A stream the shim manages.
#[derive(Debug, Clone)]
pub struct Stream {
    /// Shim id (0 = null stream).
    pub id: u64,
    /// Kind.
    pub kind: StreamKind,
    /// `hipStream_t` value (0 for the null and per-thread streams).
    pub handle: usize,
    /// HIP priority in effect (clamped), when the creator chose one.
    pub hip_priority: Option<i32>,
    /// Backing KFD queue, once known.
    pub queue: Option<u32>,
    /// Library that created it, when not the main program.
    pub creator: Option<String>,
    /// Held at level 1.
    pub held: bool,
    /// Calls waiting for the release of this stream (level 1) right now.
    pub held_calls: u32,
    /// Launches that ended without revealing the stream's queue.
    pub attempts: u32,
    /// Attribution gave up (see [`MAX_ATTEMPTS`]): the stream no longer keeps the slow path.
    pub gave_up: bool,
    /// A launch compared write indices ([`F_REPROBE`](super::F_REPROBE)) and the stream's
    /// queue did not move: the runtime may have moved the stream, so its next launch compares
    /// all compute queues, not just its own.
    pub strayed: bool,
    /// When its launches compare write indices while streams may move.
    pub sampling: super::Sampling,
}

/// Launches after which attribution of a stream gives up (the write-index comparison stayed
/// ambiguous, e.g. many threads launching at once, or the runtime never submits to a queue the
/// shim saw created). The stream then leaves the slow path and is reported.
pub const MAX_ATTEMPTS: u32 = 64;

impl State {
    /// A fresh stream id.
    pub fn reserve_stream_id(&mut self) -> u64 {
        let id = self.next_stream_id;
        self.next_stream_id += 1;
        id
    }

    /// The stream with `id`.
    pub fn stream_mut(&mut self, id: u64) -> Option<&mut Stream> {
        self.streams.iter_mut().find(|s| s.id == id)
    }

    /// Stream `id`, if registered.
    pub fn stream(&self, id: u64) -> Option<&Stream> {
        self.streams.iter().find(|s| s.id == id)
    }

    /// The created stream with handle `h`.
    pub fn stream_by_handle(&self, h: usize) -> Option<u64> {
        self.streams
            .iter()
            .find(|s| s.kind == StreamKind::Created && s.handle == h)
            .map(|s| s.id)
    }

    /// Registers a stream (or returns the existing one with that id). New streams start held
    /// when `hold_new` is set. Consumes attributions recorded while it was being created.
    pub fn register_stream(
        &mut self,
        id: u64,
        kind: StreamKind,
        handle: usize,
        hip_priority: Option<i32>,
        creator: Option<String>,
    ) {
        if self.stream(id).is_some() {
            return;
        }
        let held = self.hold_new;
        self.streams.push(Stream {
            attempts: 0,
            gave_up: false,
            strayed: false,
            sampling: super::Sampling::default(),
            id,
            kind,
            handle,
            hip_priority,
            queue: None,
            creator,
            held,
            held_calls: 0,
        });
        let pending: Vec<u32> = self
            .inflight
            .iter()
            .filter(|(s, _)| *s == id)
            .map(|(_, q)| *q)
            .collect();
        self.inflight.retain(|(s, _)| *s != id);
        for q in pending {
            self.attribute(id, q);
        }
        self.changed();
        self.refresh_flags();
    }

    /// Removes a stream (destroyed by the application).
    pub fn remove_stream(&mut self, sid: u64) {
        self.streams.retain(|s| s.id != sid);
        for q in self.queues.iter_mut() {
            q.streams.retain(|x| *x != sid);
        }
        self.changed();
        self.refresh_flags();
    }

    /// Number of held streams.
    pub fn held_count(&self) -> usize {
        self.streams.iter().filter(|s| s.held).count()
    }
}
