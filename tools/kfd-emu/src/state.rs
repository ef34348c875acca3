//! The emulator's data model: the shared `Emu` core, per-process KFD state (devices,
//! buffer objects, queues, debugger links), per-partition HWS counters, and the
//! side effects a handler queues while holding the state lock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use std::time::Instant;

use fuser::ReplyIoctl;

use crate::config::{EmuConfig, Topology};

/// A queue is identified by its owner's tgid and its per-process queue id.
pub(crate) type QueueKey = (u32, u32);

/// Page size of the emulated GPU VM and of the render-node backing store.
pub(crate) const PAGE: u64 = 4096;

/// The shared core of one mounted emulator.
pub(crate) struct Emu {
    pub config: EmuConfig,
    pub topo: Topology,
    /// Canonical path of the mount point (for `readlink /proc/<pid>/fd/<n>` checks).
    pub root: PathBuf,
    pub state: Mutex<State>,
    /// Wakes the CP thread when queues may have become runnable.
    pub cp_wake: Condvar,
    pub shutdown: AtomicBool,
    /// Backing bytes of GTT/VRAM BOs by render-node mmap offset. Kept outside `state`
    /// so render-node page faults never wait for the state lock.
    pub bos: BoStore,
    /// The mount's open files.
    pub handles: crate::handles::Handles,
    /// Ioctls the `/dev/fuse` proxy's reader thread answered itself (`reader_ioctl`).
    pub reader_ioctls: std::sync::atomic::AtomicU64,
    /// Ioctls it passed on to the FUSE workers because the state lock was taken.
    pub reader_ioctls_passed_on: std::sync::atomic::AtomicU64,
    /// DBG_TRAP suspends and resumes a proxy reader thread answered after handing its reading
    /// over (`handover`).
    pub fast_ioctls: std::sync::atomic::AtomicU64,
    /// Such requests the reader passed on to the FUSE workers because the other reader thread
    /// was busy.
    pub fast_ioctls_passed_on: std::sync::atomic::AtomicU64,
    /// Cache of thread id -> thread-group id.
    pub tgids: Mutex<HashMap<u32, u32>>,
    /// Time 0 of the partition models.
    pub epoch: Instant,
    /// `major:minor` of the FUSE mount (set once mounted): with [`Emu::render_inos`] it
    /// identifies a render node behind any path (bind mounts, chroots, mount namespaces).
    pub fuse_dev: OnceLock<String>,
    /// Inode number of each GPU node's render node (set when the tree is built).
    pub render_inos: OnceLock<Vec<u64>>,
    /// Inode number of `dev/kfd` (set when the tree is built).
    pub kfd_ino: OnceLock<u64>,
    /// Kernels of the code objects clients loaded, by descriptor address.
    pub kernels: crate::code_object::KernelCache,
    /// The emulator's own threads that panicked ("name: message").
    pub dead_threads: Mutex<Vec<String>>,
    /// Failures a test injected into chosen ioctls.
    pub faults: crate::faults::Faults,
    /// Set when the FUSE session has ended (the mount is gone, whoever unmounted it).
    pub session_over: (Mutex<bool>, Condvar),
    /// Partitions taken out of the topology (`kfd-emu/unplug`).
    pub unplugged: crate::unplug::Unplugged,
    /// Bytes of the largest FUSE request or reply the proxy carried (`fuse_proxy`).
    pub fuse_largest_message: std::sync::atomic::AtomicU64,
}

impl Emu {
    pub fn new(config: EmuConfig, topo: Topology, root: PathBuf) -> Emu {
        let partitions = topo
            .gpus
            .iter()
            .enumerate()
            .map(|(i, g)| PartitionState {
                model: gfx_model::Partition::new(
                    crate::config::model_shape(g),
                    crate::config::model_params(&config, i),
                ),
                known: BTreeMap::new(),
                resets: 0,
            })
            .collect();
        Emu {
            config,
            topo,
            root,
            state: Mutex::new(State {
                processes: BTreeMap::new(),
                partitions,
                next_seq: 0,
                next_mmap_offset: 1 << 32,
                next_pasid: 0x8001,
                pending_destroys: Vec::new(),
                finished: Vec::new(),
                interrupted: BTreeMap::new(),
            }),
            cp_wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            bos: BoStore::default(),
            handles: Default::default(),
            reader_ioctls: Default::default(),
            reader_ioctls_passed_on: Default::default(),
            fast_ioctls: Default::default(),
            fast_ioctls_passed_on: Default::default(),
            tgids: Mutex::new(HashMap::new()),
            epoch: Instant::now(),
            fuse_dev: OnceLock::new(),
            render_inos: OnceLock::new(),
            kfd_ino: OnceLock::new(),
            kernels: Default::default(),
            dead_threads: Mutex::new(Vec::new()),
            faults: Default::default(),
            session_over: (Mutex::new(false), Condvar::new()),
            unplugged: Default::default(),
            fuse_largest_message: Default::default(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        crate::locks::lock(&self.state, "state")
    }

    /// Waits on `cp_wake` for at most `d`; true when woken rather than timed out.
    pub fn wait_cp<'a>(
        &self,
        st: MutexGuard<'a, State>,
        d: std::time::Duration,
    ) -> (MutexGuard<'a, State>, bool) {
        let (g, r) = self
            .cp_wake
            .wait_timeout(st, d)
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (g, !r.timed_out())
    }

    /// The GPU clock counter now: ticks of `GPU_COUNTER_HZ` since the emulator started
    /// (GET_CLOCK_COUNTERS, SDMA timestamps).
    pub fn gpu_counter(&self) -> u64 {
        let ns = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
        ns / (1_000_000_000 / crate::config::GPU_COUNTER_HZ)
    }

    pub fn is_shutdown(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }
}

/// Everything behind the state lock.
pub(crate) struct State {
    pub processes: BTreeMap<u32, Process>,
    /// One per topology GPU node, same index as `Topology::gpus`.
    pub partitions: Vec<PartitionState>,
    /// Creation order of queues (the runlist order).
    pub next_seq: u64,
    pub next_mmap_offset: u64,
    pub next_pasid: u32,
    /// DESTROY_QUEUE calls blocked on a debugger-suspended queue.
    pub pending_destroys: Vec<PendingDestroy>,
    /// Completed packets whose memory work the CP thread still has to do (outside the lock).
    pub finished: Vec<Finished>,
    /// FUSE_INTERRUPTs for requests that were not held when they came (request id, when).
    pub interrupted: BTreeMap<u64, Instant>,
}

impl State {
    pub fn queue(&self, key: QueueKey) -> Option<&Queue> {
        self.processes.get(&key.0)?.queues.get(&key.1)
    }

    pub fn queue_mut(&mut self, key: QueueKey) -> Option<&mut Queue> {
        self.processes.get_mut(&key.0)?.queues.get_mut(&key.1)
    }

    /// Remembers a FUSE_INTERRUPT for request `unique`, which is not held (yet). Request ids are
    /// never reused; ones older than a minute (answered without blocking) are forgotten.
    pub fn note_interrupt(&mut self, unique: u64) {
        let now = Instant::now();
        self.interrupted
            .retain(|_, at| now.duration_since(*at) < std::time::Duration::from_secs(60));
        self.interrupted.insert(unique, now);
    }

    /// Whether request `unique` was interrupted before it could block (the note is taken).
    pub fn take_interrupt(&mut self, unique: u64) -> bool {
        self.interrupted.remove(&unique).is_some()
    }

    /// Bytes of the BOs every process holds on GPU node `gpu`: VRAM BOs (`vram`), or the other
    /// memory-backed ones (GTT and the MMIO remap page).
    pub fn bo_bytes(&self, gpu: usize, vram: bool) -> u64 {
        self.processes
            .values()
            .filter_map(|p| p.devices.get(gpu))
            .flat_map(|d| d.bos.values())
            .filter(|b| b.vram == vram && (b.vram || b.backed))
            .map(|b| b.size)
            .sum()
    }

    /// All queues of all processes on partition `part`.
    pub fn queues_on(&self, part: usize) -> impl Iterator<Item = (QueueKey, &Queue)> {
        self.processes.iter().flat_map(move |(tgid, p)| {
            p.queues
                .iter()
                .filter(move |(_, q)| q.gpu == part)
                .map(move |(qid, q)| ((*tgid, *qid), q))
        })
    }
}

/// One partition: the model of its HWS and CUs, and what the model was last told about each
/// queue (so a runlist update sends only the differences).
pub(crate) struct PartitionState {
    pub model: gfx_model::Partition,
    pub known: BTreeMap<gfx_model::QueueKey, Mirror>,
    /// GPU resets after an (injected) HWS preemption timeout (`reset.rs`).
    pub resets: u64,
}

/// What the model was last told about a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mirror {
    pub active: bool,
    pub priority: u8,
    pub cu_mask: Option<Vec<u32>>,
}

/// A blocked DESTROY_QUEUE: answered when the queue is resumed or the debugger goes.
pub(crate) struct PendingDestroy {
    pub key: QueueKey,
    /// FUSE request id (for FUSE_INTERRUPT).
    pub unique: u64,
    pub reply: ReplyIoctl,
    pub buf: Vec<u8>,
    pub out_len: usize,
}

/// Per-process KFD state (a `kfd_process`).
pub(crate) struct Process {
    pub tgid: u32,
    /// `/proc/<pid>/stat` start time, to notice pid reuse.
    pub start_time: Option<u64>,
    pub pasid: u32,
    /// Open `dev/kfd` handles of this process.
    pub kfd_opens: u32,
    /// One per topology GPU node.
    pub devices: Vec<ProcessDevice>,
    pub queues: BTreeMap<u32, Queue>,
    pub runtime_enabled: bool,
    pub r_debug: u64,
    pub ttmp_setup: bool,
    /// Set while debug trap is enabled on this process.
    pub debug: Option<DebugLink>,
    /// Events, the signal page and blocked WAIT_EVENTS calls.
    pub events: EventTable,
    /// XNACK (GPU page-fault retry) mode of the process (SET_XNACK_MODE).
    pub xnack: bool,
    /// Kernel dispatches by kernel name (dispatches of readable code objects).
    pub kernel_dispatches: BTreeMap<String, u64>,
}

impl Process {
    pub fn new(tgid: u32, start_time: Option<u64>, pasid: u32, n_gpus: usize) -> Process {
        Process {
            tgid,
            start_time,
            pasid,
            kfd_opens: 0,
            devices: (0..n_gpus).map(|_| ProcessDevice::default()).collect(),
            queues: BTreeMap::new(),
            runtime_enabled: false,
            r_debug: 0,
            ttmp_setup: false,
            debug: None,
            events: EventTable::default(),
            xnack: false,
            kernel_dispatches: BTreeMap::new(),
        }
    }

    /// Queues on GPU node `gpu`.
    pub fn queue_count_on(&self, gpu: usize) -> usize {
        self.queues.values().filter(|q| q.gpu == gpu).count()
    }

    /// The BO (of any device of this process) that is GPU-mapped on `gpu` and whose
    /// range contains `addr`.
    pub fn mapping_at(&self, gpu: usize, addr: u64) -> Option<(BoKey, &Bo)> {
        self.devices.iter().enumerate().find_map(|(owner, d)| {
            d.bos.values().find_map(|bo| {
                let hit = bo.mapped_on.contains(&gpu) && addr >= bo.va && addr - bo.va < bo.size;
                hit.then_some((
                    BoKey {
                        gpu: owner,
                        id: bo.id,
                    },
                    bo,
                ))
            })
        })
    }

    pub fn bo_mut(&mut self, key: BoKey) -> Option<&mut Bo> {
        self.devices.get_mut(key.gpu)?.bos.get_mut(&key.id)
    }
}

/// One KFD event (`struct kfd_event`).
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// `KFD_IOC_EVENT_*`.
    pub kind: u32,
    pub auto_reset: bool,
    pub signaled: bool,
    /// Bumped by every set (event age, KFD 1.14); starts at 1, never wraps to 0 or 1.
    pub age: u64,
}

/// The process's signal page: the BO the thunk passed with its first signal event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SignalPage {
    /// GPU (and CPU) address of the page's slots.
    pub va: u64,
    /// Slots the page holds (`signal_mapped_size / 8`).
    pub slots: u32,
}

/// A WAIT_EVENTS call that blocked: answered when its events signal, one is destroyed, its
/// deadline passes or the process goes.
pub(crate) struct PendingWait {
    /// FUSE request id (for FUSE_INTERRUPT) and the waiting thread.
    pub unique: u64,
    pub tid: u32,
    pub ids: Vec<u32>,
    /// Per event: signalled for this waiter.
    pub activated: Vec<bool>,
    /// Per event: on the event's wait queue (not activated when the wait began).
    pub queued: Vec<bool>,
    /// Per event: the caller tracks the event age (signal events, `last_event_age != 0`).
    pub age_enabled: Vec<bool>,
    pub all: bool,
    pub deadline: Option<Instant>,
    pub events_ptr: u64,
    pub reply: ReplyIoctl,
    pub buf: Vec<u8>,
    pub out_len: usize,
}

/// Per-process events (`p->event_idr`, `p->signal_page`).
#[derive(Default)]
pub(crate) struct EventTable {
    pub events: BTreeMap<u32, Event>,
    pub page: Option<SignalPage>,
    /// Signal events that exist, plus the reserved id 0 (the kernel starts it at 1).
    pub signal_count: u32,
    pub waits: Vec<PendingWait>,
}

/// Debugger attachment of a process (`debug_trap_enabled`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DebugLink {
    /// tgid of the debugger; `None` when the process debugs itself.
    pub debugger: Option<u32>,
    /// Process whose fd table holds `dbg_fd`.
    pub fd_owner: u32,
    pub dbg_fd: u32,
    /// Exceptions the debugger subscribed to.
    pub exception_enable: u64,
}

/// Per-process, per-GPU data (a `kfd_process_device`).
#[derive(Default)]
pub(crate) struct ProcessDevice {
    /// Render-node fd passed to ACQUIRE_VM.
    pub drm_fd: Option<u32>,
    pub bos: BTreeMap<u32, Bo>,
    pub next_bo_id: u32,
    /// Doorbell indices in use (0..1024).
    pub doorbells: BTreeSet<u32>,
}

/// Identifies a BO: owning device index and per-device id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BoKey {
    pub gpu: usize,
    pub id: u32,
}

/// A buffer object (ALLOC_MEMORY_OF_GPU).
pub(crate) struct Bo {
    pub id: u32,
    pub va: u64,
    pub size: u64,
    /// Render-node mmap offset (GTT/VRAM), CPU address (USERPTR), or doorbell offset.
    pub mmap_offset: u64,
    /// Whether `mmap_offset` names bytes in `Emu::bos`.
    pub backed: bool,
    /// Allocated in VRAM (counts against AVAILABLE_MEMORY).
    pub vram: bool,
    /// GPU nodes whose VM maps this BO.
    pub mapped_on: BTreeSet<usize>,
    /// References held by live queues (Linux 6.12 `queue_refcount`).
    pub queue_refs: u32,
}

/// Kind of a user queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueKind {
    ComputePm4,
    ComputeAql,
    Sdma,
    SdmaXgmi,
    SdmaByEngId,
}

impl QueueKind {
    /// From `KFD_IOC_QUEUE_TYPE_*`.
    pub fn from_user(t: u32) -> Option<QueueKind> {
        Some(match t {
            kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE => QueueKind::ComputePm4,
            kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA => QueueKind::Sdma,
            kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL => QueueKind::ComputeAql,
            kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA_XGMI => QueueKind::SdmaXgmi,
            kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID => QueueKind::SdmaByEngId,
            _ => return None,
        })
    }

    /// Back to `KFD_IOC_QUEUE_TYPE_*` (queue snapshots).
    pub fn user_type(self) -> u32 {
        match self {
            QueueKind::ComputePm4 => kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE,
            QueueKind::ComputeAql => kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
            QueueKind::Sdma => kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA,
            QueueKind::SdmaXgmi => kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA_XGMI,
            QueueKind::SdmaByEngId => kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID,
        }
    }

    /// The kernel queue type printed in `proc/<pid>/queues/<qid>/type`.
    pub fn sysfs_type(self) -> u32 {
        match self {
            QueueKind::ComputePm4 | QueueKind::ComputeAql => 0,
            QueueKind::Sdma => 1,
            QueueKind::SdmaXgmi => 3,
            QueueKind::SdmaByEngId => 4,
        }
    }

    pub fn stats_name(self) -> &'static str {
        match self {
            QueueKind::ComputeAql => "compute_aql",
            QueueKind::ComputePm4 => "compute_pm4",
            QueueKind::Sdma | QueueKind::SdmaXgmi | QueueKind::SdmaByEngId => "sdma",
        }
    }

    pub fn is_compute(self) -> bool {
        matches!(self, QueueKind::ComputePm4 | QueueKind::ComputeAql)
    }
}

/// What the emulator does to memory when a recognised runtime kernel completes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KernelEffect {
    /// Copy `len` bytes from GPU address `src` to `dst`.
    Copy { src: u64, dst: u64, len: u64 },
    /// Fill `len` bytes at `dst` with the 32-bit `value` repeated.
    Fill { dst: u64, len: u64, value: u32 },
}

/// A packet in flight.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// Completion signal address (0: none).
    pub signal: u64,
    /// Done to memory when the packet completes.
    pub effect: Option<KernelEffect>,
    /// GPU counter when the CP took the packet, on a queue with profiling enabled (then the
    /// completion writes the model's start and end as `start_ts` and `end_ts`).
    pub start_ts: Option<u64>,
}

/// A completed packet's memory work (see `cp::finish_completed`).
#[derive(Debug)]
pub(crate) struct Finished {
    pub key: QueueKey,
    pub gpu: usize,
    pub effect: Option<KernelEffect>,
    /// Completion signal address (0: none).
    pub signal: u64,
    /// `start_ts` and `end_ts` of a packet of a profiling queue: the model's start of its first
    /// work-group and end of its last, in GPU counter ticks (see `Pending`).
    pub timestamps: Option<(u64, u64)>,
    /// Read index to publish: (address, value).
    pub rptr: Option<(u64, u64)>,
    /// Address of the packet's header in the ring, set to INVALID once it is consumed.
    pub header: Option<u64>,
}

/// Queue buffers referenced under Linux 6.12 rules.
#[derive(Debug, Default, Clone)]
pub(crate) struct QueueRefs {
    pub ring: Option<BoKey>,
    pub others: Vec<BoKey>,
}

impl QueueRefs {
    pub fn all(&self) -> impl Iterator<Item = BoKey> + '_ {
        self.ring.iter().copied().chain(self.others.iter().copied())
    }
}

/// A user queue and its HWS/CP model state.
pub(crate) struct Queue {
    pub qid: u32,
    /// Topology GPU node (partition) index.
    pub gpu: usize,
    pub kind: QueueKind,
    /// Creation order (runlist order).
    pub seq: u64,
    pub ring_base: u64,
    pub ring_size: u32,
    pub wptr_addr: u64,
    pub rptr_addr: u64,
    pub ctx_addr: u64,
    pub ctx_size: u32,
    /// Low byte: percentage; bits 8-15: pm4_target_xcc.
    pub percentage: u32,
    pub priority: u32,
    pub doorbell_index: u32,
    pub suspended: bool,
    pub exception_status: u64,
    pub cu_mask: Option<Vec<u32>>,
    pub refs: QueueRefs,
    // --- CP ---
    /// Read index published to the client: every packet before it completed.
    pub read_index: u64,
    /// Last write index the CP read.
    pub write_index: u64,
    /// Next ring index the CP reads and hands to the model.
    pub fetch_index: u64,
    /// Packets handed to the model and not completed, by ring index.
    pub pending: BTreeMap<u64, Pending>,
    pub packets_done: u64,
    /// Client memory could not be read; the CP stopped this queue.
    pub cp_failed: bool,
    /// When it stopped being runnable and became runnable again (set by [`crate::hws`]).
    pub runnable_log: crate::runnable::RunnableLog,
}

impl Queue {
    /// The kernel's `QUEUE_IS_ACTIVE`.
    pub fn is_active(&self) -> bool {
        self.ring_size > 0 && self.ring_base != 0 && (self.percentage & 0xff) > 0 && !self.suspended
    }

    /// Whether the CP reads this queue's ring.
    pub fn fetchable(&self) -> bool {
        self.is_active() && !self.cp_failed && self.kind == QueueKind::ComputeAql
    }
}

/// Backing bytes of a GTT/VRAM BO, allocated page by page on first write.
pub(crate) struct Backing {
    pub size: u64,
    pages: Mutex<BTreeMap<u64, Box<[u8]>>>,
}

impl Backing {
    pub fn new(size: u64) -> Backing {
        Backing {
            size,
            pages: Mutex::new(BTreeMap::new()),
        }
    }

    fn pages(&self) -> MutexGuard<'_, BTreeMap<u64, Box<[u8]>>> {
        crate::locks::lock(&self.pages, "BO backing")
    }

    /// Copies bytes at `offset` (within the BO) into `out`; unwritten bytes read 0.
    fn read(&self, offset: u64, out: &mut [u8]) {
        let pages = self.pages();
        let mut done = 0usize;
        while done < out.len() {
            let pos = offset + done as u64;
            let (page, inpage) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (PAGE as usize - inpage).min(out.len() - done);
            match pages.get(&page) {
                Some(p) => out[done..done + n].copy_from_slice(&p[inpage..inpage + n]),
                None => out[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Stores `data` at `offset` (within the BO).
    fn write(&self, offset: u64, data: &[u8]) {
        let mut pages = self.pages();
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let (page, inpage) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (PAGE as usize - inpage).min(data.len() - done);
            let p = pages
                .entry(page)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            p[inpage..inpage + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }
}

/// Render-node offset -> backing store.
#[derive(Default)]
pub(crate) struct BoStore {
    map: RwLock<BTreeMap<u64, Arc<Backing>>>,
}

impl BoStore {
    pub fn insert(&self, offset: u64, backing: Arc<Backing>) {
        crate::locks::write(&self.map, "BO store").insert(offset, backing);
    }

    pub fn remove(&self, offset: u64) {
        crate::locks::write(&self.map, "BO store").remove(&offset);
    }

    /// Visits every (BO, offset in BO, range in the request) overlapping
    /// `[offset, offset + len)`.
    fn overlapping(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(&Backing, u64, std::ops::Range<usize>),
    ) {
        if len == 0 {
            return;
        }
        let map = crate::locks::read(&self.map, "BO store");
        let end = offset.saturating_add(len as u64);
        // The BO starting at or before `offset`, plus all starting inside the range.
        let first = map.range(..=offset).next_back();
        let rest = map.range(offset.saturating_add(1)..end.max(offset.saturating_add(1)));
        for (start, b) in first.into_iter().chain(rest) {
            let bo_end = start.saturating_add(b.size);
            let lo = offset.max(*start);
            let hi = end.min(bo_end);
            if lo < hi {
                let r = (lo - offset) as usize..(hi - offset) as usize;
                f(b, lo - start, r);
            }
        }
    }

    /// Render-node read: BO bytes where a BO lives, zeros elsewhere.
    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.read_into(offset, &mut out);
        out
    }

    /// [`BoStore::read`] into `out` (which the caller zeroed), allocating nothing.
    pub fn read_into(&self, offset: u64, out: &mut [u8]) {
        self.overlapping(offset, out.len(), |b, at, r| b.read(at, &mut out[r]));
    }

    /// Render-node write (page-cache writeback of a BO mapping).
    pub fn write(&self, offset: u64, data: &[u8]) {
        self.overlapping(offset, data.len(), |b, at, r| b.write(at, &data[r]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bo_store_reads_across_bos_and_holes() {
        let s = BoStore::default();
        s.insert(8192, Arc::new(Backing::new(4096)));
        s.insert(16384, Arc::new(Backing::new(8192)));
        s.write(8192 + 4090, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        s.write(16384 + 4095, &[42, 43]);
        let r = s.read(8192 + 4088, 12);
        assert_eq!(r, vec![0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0]);
        let r = s.read(16384 + 4094, 4);
        assert_eq!(r, vec![0, 42, 43, 0]);
        assert_eq!(s.read(0, 3), vec![0, 0, 0]);
    }
}
