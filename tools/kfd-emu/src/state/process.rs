//! Per-process KFD state (a `kfd_process`): its devices and buffer objects, its events and
//! signal page, its debugger link.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use fuser::ReplyIoctl;

use super::Queue;

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
