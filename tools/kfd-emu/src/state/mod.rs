//! The emulator's data model: the shared `Emu` core, per-process KFD state (devices,
//! buffer objects, queues, debugger links), per-partition HWS counters, and the
//! side effects a handler queues while holding the state lock.
//!
//! This file holds the core (`Emu`, `State`) and the partitions; `process.rs` a process's
//! KFD state (devices, buffer objects, events, debugger links); `queue.rs` user queues and
//! the kernels in flight on them; `memory.rs` the BOs' backing bytes.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use fuser::ReplyIoctl;

use crate::config::{EmuConfig, Topology};

mod memory;
mod process;
mod queue;

pub(crate) use memory::{Backing, BoStore};
pub(crate) use process::{Bo, BoKey, DebugLink, Event, PendingWait, Process, SignalPage};
pub(crate) use queue::{Finished, KernelEffect, Pending, Queue, QueueKind, QueueRefs};

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
