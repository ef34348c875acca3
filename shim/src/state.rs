//! The registry: streams, the KFD queues the runtime created, and which stream runs on which
//! queue; plus the fast-path flags derived from it.
//!
//! Everything here is plain data behind one [`PMutex`]; the exported wrappers and the ioctl hook
//! take it only on slow paths.
//!
//! Reading the queues' indices (the runtime's memory, valid until its DESTROY_QUEUE of the queue
//! returns) follows one of two rules:
//!
//! * Under the registry lock ([`State::indices`] and the other `State` methods): the queue is
//!   registered, not dying, and control runs. The ioctl hook marks a queue dying under the lock
//!   before its DESTROY_QUEUE goes to the kernel and removes it after; control stops (after which
//!   the hook forwards DESTROY_QUEUE untouched) under the lock too (`guard.rs`). The types make
//!   these reads happen under the lock: the only [`State`] outside this module is the one behind
//!   [`STATE`] (`State::new` is private, `State` is neither `Clone` nor `Default`), so a `&State`
//!   exists only while the lock is held; a queue is added only by [`State::add_queue`] (`unsafe`:
//!   the caller vouches for the addresses), [`Queue`] is not `Clone`, its address fields are
//!   private. These reads also survive memory the runtime freed without a DESTROY_QUEUE the hook
//!   saw (`self_mem.rs`): such a queue leaves the registry ([`State::forget_unmapped`]).
//! * Without the lock, by the in-flight window: [`Queue::index_addresses`] hands the addresses
//!   out, under the lock, to the window's lookup only, which pairs them with the generation read
//!   before it; they are read only inside a read section at that generation, and whatever lets a
//!   queue's memory go waits for those sections (`index_reads.rs` states the rule).
//!
//! The unit tests assert the missing traits.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use kfdq::policy::class::PriorityPolicy;
use kfdq::proto::{self, StreamKind};
use kfdq::{GpuId, Pid, QueueId};

use crate::kfd_fd::KfdFd;
use crate::pmutex::PMutex;
use crate::self_mem::Words;

/// `FLAGS` bit: initialisation finished.
pub const F_READY: u32 = 1;
/// `FLAGS` bit: some stream is held (level 1), or new streams are to be held.
pub const F_HOLDS: u32 = 2;
/// `FLAGS` bit: the null stream's queue is not known yet.
pub const F_NULL_PENDING: u32 = 4;
/// `FLAGS` bit: some created stream's queue is not known yet.
pub const F_CREATED_PENDING: u32 = 8;
/// `FLAGS` bit: control stopped after an internal error; everything is forwarded untouched.
pub const F_DISABLED: u32 = 16;
/// `FLAGS` bit: an in-flight window is in effect (`window.rs`).
pub const F_WINDOW: u32 = 32;
/// `FLAGS` bit: the agent asked for busy edges (`edges.rs`): stream-ordered calls report the
/// launch that makes the process busy.
pub const F_EDGES: u32 = 64;

/// Fast-path flags: one relaxed load decides whether a launch needs the slow path.
pub static FLAGS: AtomicU32 = AtomicU32::new(0);

/// Bumped on every CREATE_QUEUE the hook records: a synchronising call that saw it unchanged
/// created no queue and has nothing to register.
pub static QUEUES_CREATED: AtomicU64 = AtomicU64::new(0);

/// How long work may sit on a compute queue that no stream claims before it is reported.
pub const UNCLAIMED_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// The start of the warning about work no stream claims.
pub const UNCLAIMED_WARNING: &str =
    "a KFD queue runs work that no HIP call through the shim submitted";

/// The start of the warning about streams sharing queues.
pub const SHARED_WARNING: &str = "streams share KFD queues";

/// Bumped by the fork child handler; thread-local caches compare against it.
pub static FORK_GEN: AtomicU64 = AtomicU64::new(0);

/// The registry.
pub static STATE: PMutex<State> = PMutex::new(State::new());

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
}

/// Launches after which attribution of a stream gives up (the write-index comparison stayed
/// ambiguous, e.g. many threads launching at once, or the runtime never submits to a queue the
/// shim saw created). The stream then leaves the slow path and is reported.
pub const MAX_ATTEMPTS: u32 = 64;

/// A KFD queue observed through CREATE_QUEUE. Made only by [`State::add_queue`], never copied:
/// its index addresses are valid only while it is registered.
#[derive(Debug)]
pub struct Queue {
    /// KFD queue id.
    pub id: u32,
    /// GPU node.
    pub gpu_id: u32,
    /// Priority the runtime asked for (CREATE_QUEUE or its last UPDATE_QUEUE).
    pub requested: u32,
    /// Priority in effect.
    pub effective: u32,
    /// Priority set by the agent (level 0), overriding the class mapping.
    pub override_priority: Option<u32>,
    /// Ring address.
    pub ring_base: u64,
    /// Ring bytes.
    pub ring_size: u32,
    /// Address of the 64-bit write index (private: see the module).
    wptr: u64,
    /// Address of the 64-bit read index (private: see the module).
    rptr: u64,
    /// Percentage word the runtime wants (restored on release of level 2).
    pub runtime_percentage: u32,
    /// Deactivated by the shim (level 2).
    pub deactivated: bool,
    /// Suspended by the shim (level 3).
    pub suspended: bool,
    /// Its EC_QUEUE_NEW was cleared by a GET_QUEUE_SNAPSHOT of this shim (amdkfd raises it
    /// only at CREATE_QUEUE, and SUSPEND_QUEUES refuses a queue that carries it): a level 3
    /// needs no snapshot for it.
    pub new_cleared: bool,
    /// Busy at the last sample.
    pub busy: bool,
    /// DESTROY_QUEUE in flight: its memory may go away, do not read it.
    pub dying: bool,
    /// A compute queue (`KFD_IOC_QUEUE_TYPE_COMPUTE` / `_COMPUTE_AQL`). Copy-engine (SDMA)
    /// queues are registered but never attributed to a stream.
    pub compute: bool,
    /// Streams mapped onto it.
    pub streams: Vec<u64>,
    /// Launches that waited at the in-flight window.
    pub window_waits: u64,
    /// Of those, waits that gave up on a stalled read index.
    pub window_stalls: u64,
    /// Some stream was ever attributed to it.
    pub claimed: bool,
    /// When work (a write index above 0) was first seen on it while unclaimed.
    pub unclaimed_work: Option<std::time::Instant>,
    /// A read found its index memory unmapped: the runtime freed it without a DESTROY_QUEUE the
    /// hook saw. Removed by [`State::forget_unmapped`].
    unmapped: std::cell::Cell<bool>,
}

impl Queue {
    /// The addresses (not the values) of the 64-bit write and read indices, as the runtime gave
    /// them to CREATE_QUEUE (0: none). Reading the memory they name is [`State::indices`]'s
    /// business, or the in-flight window's, which reads them under the rule of `index_reads.rs`
    /// (its lookup, in `launch.rs`, is the only caller).
    pub fn index_addresses(&self) -> (u64, u64) {
        (self.wptr, self.rptr)
    }

    /// Current (write index, read index), read from the runtime's memory; (0, 0) when the queue
    /// is dying, has no (aligned) index addresses, control stopped, or the memory is no longer
    /// mapped (then the queue is marked for [`State::forget_unmapped`]).
    ///
    /// Private to this module: callers reach it through [`State::indices`] (a `&State` proves the
    /// registry lock is held) or from a `State` method on one of `self.queues`.
    fn read_indices(&self) -> (u64, u64) {
        if self.dying
            || self.unmapped.get()
            || self.wptr == 0
            || self.rptr == 0
            || self.wptr % 8 != 0
            || self.rptr % 8 != 0
            // Control stopped (set under the lock): the ioctl hook forwards DESTROY_QUEUE without
            // removing the queue.
            || FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0
        {
            return (0, 0);
        }
        match crate::self_mem::read_pair(self.wptr, self.rptr) {
            Words::Read(w, r) => (w, r),
            Words::Unmapped => {
                self.unmapped.set(true);
                (0, 0)
            }
            // SAFETY: the addresses are the queue's 64-bit write/read indices as the runtime
            // handed them to a CREATE_QUEUE that succeeded (`State::add_queue`'s contract),
            // 8-byte aligned (checked). The runtime keeps that memory until its DESTROY_QUEUE of
            // the queue returns, and the ioctl hook marks the queue dying, under the registry
            // lock, before that DESTROY_QUEUE goes to the kernel (while control runs, checked
            // above under the same lock). `self` is in the registry and the lock is held: only
            // `State`'s methods call this, on a queue of `self.queues`, and a `&State` exists only
            // behind the lock (see the module). Volatile because the GPU/CP writes them.
            Words::Unsupported => unsafe {
                (
                    std::ptr::read_volatile(self.wptr as *const u64),
                    std::ptr::read_volatile(self.rptr as *const u64),
                )
            },
        }
    }
}

/// What a successful CREATE_QUEUE tells about the new queue.
#[derive(Debug)]
pub struct CreatedQueue {
    /// KFD queue id.
    pub id: u32,
    /// GPU node.
    pub gpu_id: u32,
    /// Priority the runtime asked for.
    pub requested: u32,
    /// Priority in effect.
    pub effective: u32,
    /// Ring address.
    pub ring_base: u64,
    /// Ring bytes.
    pub ring_size: u32,
    /// Address of the 64-bit write index.
    pub wptr: u64,
    /// Address of the 64-bit read index.
    pub rptr: u64,
    /// Percentage word the runtime asked for.
    pub runtime_percentage: u32,
    /// A compute queue (see [`Queue::compute`]).
    pub compute: bool,
}

/// The whole registry.
#[derive(Debug)]
pub struct State {
    /// Streams.
    pub streams: Vec<Stream>,
    /// Queues (private: see the module; [`Self::queues`], [`Self::queue_mut`]).
    queues: Vec<Queue>,
    /// Queues created during a stream-creation call whose stream is not registered yet.
    pub inflight: Vec<(u64, u32)>,
    /// Warnings.
    pub warnings: Vec<String>,
    /// Next stream id.
    pub next_stream_id: u64,
    /// Bumped on every change the agent or `kfdq ps` should see.
    pub generation: u64,
    /// The runtime's `/dev/kfd` fd (`None` until its first CREATE_QUEUE).
    pub kfd_fd: Option<KfdFd>,
    /// Level-3 attachment: DBG_TRAP ENABLE on this process (holds KFD's event pipe).
    pub debug: Option<kfdq::kfd::DebugAttachment>,
    /// Streams registered from now on start held (level 1 on `All`).
    pub hold_new: bool,
    /// Static priority policy.
    pub policy: PriorityPolicy,
    /// Class name in effect.
    pub class: Option<String>,
    /// The agent asked for busy edges (`AgentMsg::Edges`; sets [`F_EDGES`]).
    pub edges: bool,
    /// Leases that ran out (the control thread released everything on its own).
    pub lease_expiries: u64,
    /// Releases the kernel refused, retried until they hold (`kfdq::policy::retry`).
    pub owed: kfdq::policy::retry::Owed,
}

impl State {
    /// Empty registry: private, so that the one behind [`STATE`] is the only one (see the module).
    const fn new() -> State {
        State {
            streams: Vec::new(),
            queues: Vec::new(),
            inflight: Vec::new(),
            warnings: Vec::new(),
            next_stream_id: 1,
            generation: 1,
            kfd_fd: None,
            debug: None,
            hold_new: false,
            policy: PriorityPolicy {
                class: None,
                forced: None,
            },
            class: None,
            edges: false,
            lease_expiries: 0,
            owed: kfdq::policy::retry::Owed::new(),
        }
    }

    /// The queues.
    pub fn queues(&self) -> &[Queue] {
        &self.queues
    }

    /// Registers a queue the runtime just created, in place of any stale entry with its id.
    ///
    /// # Safety
    /// `q.wptr` and `q.rptr` are 0, or the addresses of the queue's 64-bit write and read
    /// indices as the runtime handed them to a CREATE_QUEUE on its `/dev/kfd` fd that succeeded
    /// (memory the runtime keeps until its DESTROY_QUEUE of the queue returns) and `self` is the
    /// registry behind [`STATE`], whose ioctl hook sees that DESTROY_QUEUE and removes the queue
    /// before it returns.
    pub unsafe fn add_queue(&mut self, q: CreatedQueue) {
        self.queues.retain(|x| x.id != q.id);
        self.queues.push(Queue {
            id: q.id,
            gpu_id: q.gpu_id,
            requested: q.requested,
            effective: q.effective,
            override_priority: None,
            ring_base: q.ring_base,
            ring_size: q.ring_size,
            wptr: q.wptr,
            rptr: q.rptr,
            runtime_percentage: q.runtime_percentage,
            deactivated: false,
            suspended: false,
            new_cleared: false,
            busy: false,
            dying: false,
            compute: q.compute,
            streams: Vec::new(),
            claimed: false,
            unclaimed_work: None,
            window_waits: 0,
            window_stalls: 0,
            unmapped: Default::default(),
        });
    }

    /// Current (write index, read index) of queue `qid`, read from the runtime's memory; (0, 0)
    /// when no such queue is registered, it is dying, has no (aligned) index addresses, or
    /// control stopped.
    ///
    /// The registry lock is part of the signature: a `&State` exists only behind [`STATE`]'s
    /// lock, and the queue is looked up in it, so the read happens under the lock on a queue
    /// that is registered (see the module).
    pub fn indices(&self, qid: u32) -> (u64, u64) {
        self.queue(qid).map_or((0, 0), Queue::read_indices)
    }

    /// Marks a change.
    pub fn changed(&mut self) {
        self.generation += 1;
        crate::window_setting::WINDOW_GEN.fetch_add(1, Ordering::AcqRel);
        // Wakes the control thread when it has no agent (it publishes the registry file);
        // callers hold the registry lock, under which broadcasting is allowed.
        STATE.notify_all();
    }

    /// Adds a warning once; returns true when it is new.
    pub fn warn(&mut self, w: String) -> bool {
        if self.warnings.contains(&w) {
            return false;
        }
        self.warnings.push(w);
        self.changed();
        true
    }

    /// Compute queues with work that no stream claims: submitted through a path around the
    /// shim's wrappers (a second copy of the runtime, a function it does not wrap, a program
    /// driving KFD itself). A queue counts once work has been on it unclaimed for
    /// [`UNCLAIMED_GRACE`] (a wrapped call attributes its queue when it returns); the first such
    /// queue is reported once per process. Returns true while a queue is still being watched
    /// (the caller then checks again within the grace).
    pub fn check_unclaimed(&mut self, now: std::time::Instant) -> bool {
        let mut watching = false;
        let mut report = None;
        for q in self
            .queues
            .iter_mut()
            .filter(|q| q.compute && !q.dying && !q.claimed)
        {
            if self.inflight.iter().any(|(_, qid)| *qid == q.id) {
                continue;
            }
            match q.unclaimed_work {
                None if q.read_indices().0 > 0 => {
                    q.unclaimed_work = Some(now);
                    watching = true;
                }
                Some(t) if now.duration_since(t) >= UNCLAIMED_GRACE => {
                    report.get_or_insert(q.id);
                }
                Some(_) => watching = true,
                None => {}
            }
        }
        if let Some(qid) = report {
            self.report_once(UNCLAIMED_WARNING, || {
                format!(
                    "{UNCLAIMED_WARNING} (first: queue {qid}): it was submitted through a path around the shim's \
                     wrappers (a second copy of the HIP runtime, a function the shim does not wrap, or code driving \
                     /dev/kfd itself); that work is preempted with the process at levels 2 and 3 but is not held at \
                     level 1 nor counted by the in-flight window (docs/shim.md, \"What is managed\")"
                )
            });
        }
        self.forget_unmapped();
        watching
    }

    /// Samples every live queue's activity: busy (write index > read index) transitions since
    /// the last sample, as (queue, busy).
    pub fn sample_busy(&mut self) -> Vec<(u32, bool)> {
        let mut out = Vec::new();
        for q in self.queues.iter_mut().filter(|q| !q.dying) {
            let (w, r) = q.read_indices();
            let busy = w > r;
            if busy != q.busy {
                q.busy = busy;
                out.push((q.id, busy));
            }
        }
        self.forget_unmapped();
        out
    }

    /// Adds a warning and prints it on stderr, unless the same text was reported before.
    pub fn report(&mut self, w: String) {
        if self.warn(w.clone()) {
            crate::log::warn_always(&w);
        }
    }

    /// As [`Self::report`], once per process for warnings starting with `kind`; the text is
    /// built only then.
    pub fn report_once(&mut self, kind: &str, w: impl FnOnce() -> String) {
        if !self.warnings.iter().any(|x| x.starts_with(kind)) {
            self.report(w());
        }
    }

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

    /// The queue with `id`.
    pub fn queue(&self, id: u32) -> Option<&Queue> {
        self.queues.iter().find(|q| q.id == id)
    }

    /// The queue with `id`, mutably.
    pub fn queue_mut(&mut self, id: u32) -> Option<&mut Queue> {
        self.queues.iter_mut().find(|q| q.id == id)
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

    /// Removes a stream (destroyed by the application).
    pub fn remove_stream(&mut self, sid: u64) {
        self.streams.retain(|s| s.id != sid);
        for q in &mut self.queues {
            q.streams.retain(|x| *x != sid);
        }
        self.changed();
        self.refresh_flags();
    }

    /// Removes a destroyed queue and forgets it on its streams.
    pub fn remove_queue(&mut self, qid: u32) {
        self.queues.retain(|q| q.id != qid);
        // A per-thread stream's queue goes away with its thread (or a device reset); a thread
        // that launches again registers a fresh per-thread stream.
        self.streams
            .retain(|s| !(s.kind == StreamKind::PerThread && s.queue == Some(qid)));
        for s in &mut self.streams {
            if s.queue == Some(qid) {
                s.queue = None;
            }
        }
        self.changed();
        self.refresh_flags();
    }

    /// Removes the queues whose index memory a read found unmapped (the runtime freed it without
    /// a DESTROY_QUEUE the hook saw), reporting each. Every caller of [`Self::indices`] calls
    /// this once it is done reading.
    pub fn forget_unmapped(&mut self) {
        let gone: Vec<u32> = self
            .queues
            .iter()
            .filter(|q| q.unmapped.get())
            .map(|q| q.id)
            .collect();
        for id in gone {
            self.remove_queue(id);
            self.report(format!(
                "queue {id}: its index memory is no longer readable, though no DESTROY_QUEUE of it \
                 passed the shim (the runtime freed it another way); the queue leaves the registry \
                 and kfdq no longer acts on it"
            ));
        }
    }

    /// Number of held streams.
    pub fn held_count(&self) -> usize {
        self.streams.iter().filter(|s| s.held).count()
    }

    /// Anything of this process preempted: a held stream, new streams held, or a queue
    /// deactivated or suspended.
    pub fn preempted_anything(&self) -> bool {
        self.held_count() > 0
            || self.hold_new
            || self.queues().iter().any(|q| q.deactivated || q.suspended)
    }

    /// Recomputes the fast-path flags from the registry (caller holds the lock).
    pub fn refresh_flags(&self) {
        let mut set = 0;
        if self.held_count() > 0 || self.hold_new {
            set |= F_HOLDS;
        }
        let null_known = self
            .stream(NULL_STREAM_ID)
            .is_some_and(|s| s.queue.is_some() || s.gave_up);
        if !null_known {
            set |= F_NULL_PENDING;
        }
        if self
            .streams
            .iter()
            .any(|s| s.kind == StreamKind::Created && s.queue.is_none() && !s.gave_up)
        {
            set |= F_CREATED_PENDING;
        }
        if crate::window_setting::get().is_some() {
            set |= F_WINDOW;
        }
        if self.edges {
            set |= F_EDGES;
        }
        let mask = F_HOLDS | F_NULL_PENDING | F_CREATED_PENDING | F_WINDOW | F_EDGES;
        let cur = FLAGS.load(Ordering::Relaxed);
        if cur & F_DISABLED != 0 {
            return;
        }
        FLAGS.store((cur & !mask) | set, Ordering::Release);
    }

    /// The registry in protocol form.
    pub fn to_proto(&self, pid: Pid) -> proto::Registry {
        proto::Registry {
            pid,
            class: self.class.clone(),
            streams: self
                .streams
                .iter()
                .map(|s| proto::StreamInfo {
                    stream_id: s.id,
                    kind: s.kind,
                    handle: s.handle as u64,
                    hip_priority: s.hip_priority,
                    queue_id: s.queue.map(QueueId),
                    creator: s.creator.clone(),
                    held: s.held,
                    held_calls: s.held_calls,
                })
                .collect(),
            queues: self
                .queues
                .iter()
                .map(|q| proto::QueueInfo {
                    queue_id: QueueId(q.id),
                    gpu_id: GpuId(q.gpu_id),
                    requested_priority: q.requested,
                    effective_priority: q.effective,
                    ring_base: q.ring_base,
                    ring_size: q.ring_size,
                    streams: q.streams.clone(),
                    deactivated: q.deactivated,
                    suspended: q.suspended,
                    busy: q.busy,
                    window_waits: q.window_waits,
                    window_stalls: q.window_stalls,
                })
                .collect(),
            warnings: self.warnings.clone(),
            window: crate::window_setting::get(),
            lease_expiries: self.lease_expiries,
            release_failures: self.owed.failures,
        }
    }
}

/// In a `fork` child: an empty registry, with a fresh lock (the parent's state is left behind,
/// see [`PMutex::reset_after_fork`]).
///
/// # Safety
/// Only in the child handler of `pthread_atfork`, where the calling thread is the only one.
pub unsafe fn reset_after_fork() {
    // SAFETY: per this function's contract.
    unsafe { STATE.reset_after_fork(State::new()) };
}

/// A registry of its own for other modules' unit tests (index addresses 0 only: nothing adds a
/// queue with real ones there).
#[cfg(test)]
pub fn registry_for_tests() -> State {
    State::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(id: u32) -> Queue {
        Queue {
            id,
            gpu_id: 1,
            requested: 7,
            effective: 7,
            override_priority: None,
            ring_base: 0,
            ring_size: 4096,
            wptr: 0,
            rptr: 0,
            runtime_percentage: 100,
            deactivated: false,
            suspended: false,
            new_cleared: false,
            busy: false,
            dying: false,
            compute: true,
            streams: vec![],
            claimed: false,
            unclaimed_work: None,
            window_waits: 0,
            window_stalls: 0,
            unmapped: Default::default(),
        }
    }

    /// The compile-time half of the module's guarantee: `Queue` and `State` are not `Clone`,
    /// `State` is not `Default`. `check` below is ambiguous, and the test does not compile, for
    /// a type that has either trait.
    #[test]
    fn queues_and_the_registry_cannot_be_copied_or_made() {
        trait Lacks<Which> {
            fn check() {}
        }
        struct Neither;
        struct HasClone;
        struct HasDefault;
        impl<T> Lacks<Neither> for T {}
        impl<T: Clone> Lacks<HasClone> for T {}
        impl<T: Default> Lacks<HasDefault> for T {}
        <Queue as Lacks<_>>::check();
        <State as Lacks<_>>::check();
    }

    #[test]
    fn indices_are_read_from_registered_live_queues_only() {
        let idx = Box::new([5u64, 2]);
        let base = idx.as_ptr() as u64;
        let mut st = State::new();
        let mut q = queue(1);
        q.wptr = base;
        q.rptr = base + 8;
        st.queues.push(q);
        assert_eq!(st.indices(1), (5, 2));
        assert_eq!(st.indices(2), (0, 0), "not registered");
        st.queue_mut(1).unwrap().dying = true;
        assert_eq!(st.indices(1), (0, 0), "DESTROY_QUEUE in flight");
        st.remove_queue(1);
        assert_eq!(st.indices(1), (0, 0), "destroyed");
        drop(idx);
    }

    #[test]
    fn work_no_stream_claims_is_reported_once_after_the_grace() {
        // The queues' indices: 3 packets written on each.
        let idx = Box::new([3u64, 0, 3, 0]);
        let base = idx.as_ptr() as u64;
        let mut st = State::new();
        for (id, off) in [(1u32, 0u64), (2, 16)] {
            let mut q = queue(id);
            q.wptr = base + off;
            q.rptr = base + off + 8;
            st.queues.push(q);
        }
        st.register_stream(7, StreamKind::Created, 0x70, None, None);
        st.attribute(7, 2);
        let t0 = std::time::Instant::now();
        assert!(st.check_unclaimed(t0), "queue 1 is watched");
        assert!(st.warnings.is_empty(), "not before the grace");
        let later = t0 + UNCLAIMED_GRACE;
        st.check_unclaimed(later);
        assert_eq!(st.warnings.len(), 1, "{:?}", st.warnings);
        assert!(
            st.warnings[0].starts_with(UNCLAIMED_WARNING) && st.warnings[0].contains("queue 1)"),
            "{}",
            st.warnings[0]
        );
        st.check_unclaimed(later + UNCLAIMED_GRACE);
        assert_eq!(st.warnings.len(), 1, "once per process");
        drop(idx);
    }

    #[test]
    fn inflight_attribution_lands_on_registration() {
        let mut st = State::new();
        st.queues.push(queue(3));
        let sid = st.reserve_stream_id();
        st.attribute(sid, 3);
        assert_eq!(st.inflight, vec![(sid, 3)]);
        st.register_stream(sid, StreamKind::Created, 0x1000, Some(-1), None);
        assert!(st.inflight.is_empty());
        assert_eq!(st.stream(sid).unwrap().queue, Some(3));
        assert_eq!(st.queue(3).unwrap().streams, vec![sid]);
        assert!(st.warnings.is_empty());
    }

    #[test]
    fn sharing_is_reported() {
        let mut st = State::new();
        st.queues.push(queue(5));
        st.register_stream(1, StreamKind::Created, 0x10, None, None);
        st.register_stream(2, StreamKind::Created, 0x20, None, None);
        st.register_stream(3, StreamKind::Created, 0x30, None, None);
        st.attribute(1, 5);
        st.attribute(2, 5);
        st.attribute(3, 5);
        assert_eq!(st.queue(5).unwrap().streams, vec![1, 2, 3]);
        assert_eq!(st.warnings.len(), 1, "once per process: {:?}", st.warnings);
        assert!(
            st.warnings[0].starts_with(SHARED_WARNING)
                && st.warnings[0].contains("stream 2 on queue 5 with [1]"),
            "{}",
            st.warnings[0]
        );
        let r = st.to_proto(Pid(42));
        assert_eq!(r.pid, Pid(42));
        assert_eq!(r.streams.len(), 3);
        assert_eq!(r.queues[0].streams, vec![1, 2, 3]);
    }

    #[test]
    fn removal_forgets_mappings() {
        let mut st = State::new();
        st.queues.push(queue(1));
        st.register_stream(NULL_STREAM_ID, StreamKind::Null, 0, None, None);
        st.attribute(NULL_STREAM_ID, 1);
        st.remove_queue(1);
        assert_eq!(st.stream(NULL_STREAM_ID).unwrap().queue, None);
        st.remove_stream(NULL_STREAM_ID);
        assert!(st.streams.is_empty());
    }

    #[test]
    fn the_first_queue_created_during_a_call_is_the_streams() {
        let mut st = State::new();
        st.queues.push(queue(1));
        st.queues.push(queue(2));
        st.register_stream(NULL_STREAM_ID, StreamKind::Null, 0, None, None);
        assert!(st.attribute_created(NULL_STREAM_ID, 1));
        // e.g. ROCr's blit queue, created right after during the same first copy
        assert!(!st.attribute_created(NULL_STREAM_ID, 2));
        assert_eq!(st.stream(NULL_STREAM_ID).unwrap().queue, Some(1));
        assert!(st.queue(2).unwrap().streams.is_empty());
        // The same for a stream still being created (in flight).
        let sid = st.reserve_stream_id();
        st.queues.push(queue(3));
        st.queues.push(queue(4));
        assert!(st.attribute_created(sid, 3));
        assert!(!st.attribute_created(sid, 4));
        assert_eq!(st.inflight, vec![(sid, 3)]);
        // Once its queue is gone, a new one is taken.
        st.remove_queue(1);
        assert!(st.attribute_created(NULL_STREAM_ID, 2));
        assert_eq!(st.stream(NULL_STREAM_ID).unwrap().queue, Some(2));
    }

    #[test]
    fn a_queue_created_during_a_sync_registers_its_stream() {
        let mut st = State::new();
        st.queues.push(queue(7));
        // Nothing created: nothing registered.
        assert!(!st.adopt_inflight(NULL_STREAM_ID, StreamKind::Null));
        assert!(st.streams.is_empty());
        assert!(st.attribute_created(NULL_STREAM_ID, 7));
        assert!(st.adopt_inflight(NULL_STREAM_ID, StreamKind::Null));
        let s = st.stream(NULL_STREAM_ID).unwrap();
        assert_eq!((s.kind, s.queue), (StreamKind::Null, Some(7)));
        assert!(st.inflight.is_empty());
        assert!(!st.adopt_inflight(NULL_STREAM_ID, StreamKind::Null));
    }

    #[test]
    fn new_streams_start_held_when_asked() {
        let mut st = State::new();
        st.hold_new = true;
        st.register_stream(4, StreamKind::Created, 0x40, None, None);
        assert!(st.stream(4).unwrap().held);
        assert_eq!(st.held_count(), 1);
    }
}
