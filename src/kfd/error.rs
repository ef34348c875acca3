//! Typed errors of the KFD layer, each saying which kernel rule was broken and what to do.

use std::io;
use std::path::PathBuf;

use nix::errno::Errno;

use super::ids::{GpuId, QueueId};

/// Result of the KFD layer.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The amdkfd ioctls kfdq issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
#[non_exhaustive]
pub enum KfdIoctl {
    GetVersion,
    CreateQueue,
    DestroyQueue,
    UpdateQueue,
    AcquireVm,
    AllocMemoryOfGpu,
    FreeMemoryOfGpu,
    MapMemoryToGpu,
    UnmapMemoryFromGpu,
    SetCuMask,
    GetQueueWaveState,
    RuntimeEnable,
    DbgTrap,
}

impl KfdIoctl {
    /// Every ioctl kfdq issues, one wrapper each in `ioctl.rs`.
    pub const ALL: [KfdIoctl; 13] = [
        KfdIoctl::GetVersion,
        KfdIoctl::CreateQueue,
        KfdIoctl::DestroyQueue,
        KfdIoctl::UpdateQueue,
        KfdIoctl::AcquireVm,
        KfdIoctl::AllocMemoryOfGpu,
        KfdIoctl::FreeMemoryOfGpu,
        KfdIoctl::MapMemoryToGpu,
        KfdIoctl::UnmapMemoryFromGpu,
        KfdIoctl::SetCuMask,
        KfdIoctl::GetQueueWaveState,
        KfdIoctl::RuntimeEnable,
        KfdIoctl::DbgTrap,
    ];

    /// The kernel's name, without the `AMDKFD_IOC_` prefix.
    pub fn name(self) -> &'static str {
        match self {
            KfdIoctl::GetVersion => "GET_VERSION",
            KfdIoctl::CreateQueue => "CREATE_QUEUE",
            KfdIoctl::DestroyQueue => "DESTROY_QUEUE",
            KfdIoctl::UpdateQueue => "UPDATE_QUEUE",
            KfdIoctl::AcquireVm => "ACQUIRE_VM",
            KfdIoctl::AllocMemoryOfGpu => "ALLOC_MEMORY_OF_GPU",
            KfdIoctl::FreeMemoryOfGpu => "FREE_MEMORY_OF_GPU",
            KfdIoctl::MapMemoryToGpu => "MAP_MEMORY_TO_GPU",
            KfdIoctl::UnmapMemoryFromGpu => "UNMAP_MEMORY_FROM_GPU",
            KfdIoctl::SetCuMask => "SET_CU_MASK",
            KfdIoctl::GetQueueWaveState => "GET_QUEUE_WAVE_STATE",
            KfdIoctl::RuntimeEnable => "RUNTIME_ENABLE",
            KfdIoctl::DbgTrap => "DBG_TRAP",
        }
    }
}

impl std::fmt::Display for KfdIoctl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What an ioctl was about, so the error can name the GPU, queue or pid.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoctlContext {
    /// GPU the call addressed.
    pub gpu: Option<GpuId>,
    /// Queue the call addressed.
    pub queue: Option<QueueId>,
    /// Target process of a DBG_TRAP call.
    pub pid: Option<u32>,
    /// DBG_TRAP operation number.
    pub dbg_op: Option<u32>,
}

/// A failed amdkfd ioctl: which one, the errno, and the kernel rule behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoctlError {
    /// The ioctl.
    pub ioctl: KfdIoctl,
    /// The errno the kernel returned.
    pub errno: Errno,
    /// What the call addressed.
    pub context: IoctlContext,
}

impl IoctlError {
    /// The kernel rule that produced this errno, in words, with the fix where there is one.
    pub fn rule(&self) -> String {
        use Errno::*;
        use KfdIoctl::*;
        let gpu = self
            .context
            .gpu
            .map(|g| format!(" on gpu {g}"))
            .unwrap_or_default();
        let queue = self
            .context
            .queue
            .map(|q| format!(" {q}"))
            .unwrap_or_default();
        let pid = self
            .context
            .pid
            .map(|p| format!(" on pid {p}"))
            .unwrap_or_default();
        match (self.ioctl, self.errno) {
            (_, ENOTTY) => format!(
                "{} is not supported by this amdkfd (unknown ioctl number or an fd that is not /dev/kfd)",
                self.ioctl
            ),
            (_, EBADF) => "the /dev/kfd fd is not usable by this process (KFD fds are bound to the process that opened them; reopen after fork)".into(),
            (CreateQueue, ESRCH) => format!("CREATE_QUEUE{gpu} needs ACQUIRE_VM first"),
            (CreateQueue, ENOSPC) => "process already has 255 queues on this GPU (gfx942 limit)".into(),
            (CreateQueue, EINVAL) => format!(
                "CREATE_QUEUE{gpu} rejected its arguments: priority 0..=15, percentage 0..=100, power-of-two ring, a known gpu_id, and on Linux 6.12+ exactly-sized GPU mappings (rptr/wptr in its own 4 KiB mapping, ring mapping == ring_size, CWSR mapping == ALIGN((cwsr+debug) x num_xcc, 4096), ctl_stack_size == sysfs value)"
            ),
            (CreateQueue, EFAULT) => "CREATE_QUEUE: a ring, pointer, EOP or CWSR address is not a user-space address".into(),
            (CreateQueue, EPERM) => "CREATE_QUEUE refused by the scheduler policy (device queue limit, or HWS without oversubscription is full)".into(),
            (GetQueueWaveState, EINVAL) => format!(
                "GET_QUEUE_WAVE_STATE{queue}: the queue must be a compute queue with CWSR and inactive (deactivate or suspend it first)"
            ),
            (UpdateQueue, EINVAL) => format!("UPDATE_QUEUE{queue}: priority > 15, percentage > 100 or ring size not a power of two"),
            (UpdateQueue, EFAULT) => format!(
                "UPDATE_QUEUE{queue}: no such queue in this process, or the ring is not the exactly-sized mapping the queue was created with"
            ),
            (SetCuMask | GetQueueWaveState, EFAULT) => format!("{}{queue}: no such queue in this process, or the mask pointer is bad", self.ioctl),
            (DestroyQueue, EINVAL) => format!("DESTROY_QUEUE{queue}: no such queue in this process"),
            (SetCuMask, EINVAL) => format!("SET_CU_MASK{queue}: the mask's bit count is 0 or not a multiple of 32"),
            (SetCuMask, EBUSY) => "SET_CU_MASK: a debugger CU-mask workaround is active on this GPU".into(),
            (AcquireVm, EBUSY) => format!("ACQUIRE_VM{gpu}: this process already acquired the VM with another render-node fd"),
            (AcquireVm, EINVAL) => format!("ACQUIRE_VM{gpu}: unknown gpu_id, or the fd is not that GPU's render node"),
            (AllocMemoryOfGpu, EINVAL) => format!("ALLOC_MEMORY_OF_GPU{gpu}: ACQUIRE_VM first, page-aligned address and size, no overlap with an existing allocation"),
            (AllocMemoryOfGpu, EFAULT) => "ALLOC_MEMORY_OF_GPU: the userptr range is not mapped in this process".into(),
            (AllocMemoryOfGpu, ENOMEM) => format!("ALLOC_MEMORY_OF_GPU{gpu}: out of memory in the requested domain"),
            (UnmapMemoryFromGpu | FreeMemoryOfGpu, EBUSY) => "the buffer is in use by a live queue (Linux 6.12+); destroy the queue first".into(),
            (RuntimeEnable, EEXIST) => "RUNTIME_ENABLE must come before the process creates its first queue".into(),
            (RuntimeEnable, EBUSY) => "RUNTIME_ENABLE: the runtime is already enabled for this process".into(),
            (DbgTrap, EPERM) => format!(
                "DBG_TRAP{pid} needs the caller to be its ptrace tracer (attach with PTRACE_SEIZE and issue the call from the tracing thread), and SUSPEND/RESUME need the target runtime-enabled"
            ),
            (DbgTrap, ESRCH) => format!("DBG_TRAP{pid}: no such process, or it has no KFD context"),
            (DbgTrap, EINVAL) => format!("DBG_TRAP{pid}: debugging is not enabled on the target (call ENABLE first), or the GPU runs without HWS"),
            (DbgTrap, EALREADY) => format!("DBG_TRAP ENABLE{pid}: a debugger is already attached"),
            (_, e) => format!("{} failed: {}", self.ioctl, e.desc()),
        }
    }
}

impl std::fmt::Display for IoctlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.rule(), self.errno)
    }
}

impl std::error::Error for IoctlError {}

/// Everything the KFD layer can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An ioctl failed in the kernel.
    #[error(transparent)]
    Ioctl(#[from] IoctlError),
    /// A device node or sysfs file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A sysfs file did not have the kernel's format.
    #[error("{path}: {what}")]
    Sysfs {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: String,
    },
    /// The driver speaks an interface version kfdq does not.
    #[error(
        "amdkfd interface version {major}.{minor} is not supported: kfdq needs major version 1"
    )]
    UnsupportedVersion {
        /// Major version reported by GET_VERSION.
        major: u32,
        /// Minor version reported by GET_VERSION.
        minor: u32,
    },
    /// A feature needs a newer amdkfd.
    #[error(
        "{what} needs amdkfd interface 1.{needs_minor} or newer; this driver is 1.{have_minor}"
    )]
    NeedsNewerKfd {
        /// The feature.
        what: &'static str,
        /// Minor version needed.
        needs_minor: u32,
        /// Minor version present.
        have_minor: u32,
    },
    /// kfdq refused an argument before making the call, with the errno the kernel gives for
    /// the same mistake (or would, for a rule kfdq adds: `EINVAL` for a bad value, `EFAULT`
    /// for an address outside a buffer).
    #[error("{reason}")]
    InvalidArgument {
        /// The errno the kernel returns for this argument.
        errno: Errno,
        /// The rule that was broken and the fix.
        reason: String,
    },
    /// No GPU node with this id in the topology.
    #[error("no GPU with gpu_id {0} in the topology (see `kfdq topology`)")]
    UnknownGpu(GpuId),
    /// A memory mapping failed.
    #[error("mmap of {what}: {source}")]
    Mmap {
        /// What was being mapped.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The AQL ring has no free slot.
    #[error(
        "{queue} ring is full ({capacity} packets in flight); wait for the GPU to consume some"
    )]
    RingFull {
        /// The queue.
        queue: QueueId,
        /// Ring capacity in packets.
        capacity: u64,
    },
    /// An operation did not finish in time.
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(std::time::Duration, String),
}

impl Error {
    /// The errno behind this error: the kernel's, or the one it gives for an argument kfdq
    /// refused before the call.
    pub fn errno(&self) -> Option<Errno> {
        match self {
            Error::Ioctl(e) => Some(e.errno),
            Error::InvalidArgument { errno, .. } => Some(*errno),
            _ => None,
        }
    }

    /// An argument refused before the call, with the kernel's errno for it.
    pub(crate) fn invalid(errno: Errno, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            errno,
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
