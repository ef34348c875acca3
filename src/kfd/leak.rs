//! What kfdq leaves to the kernel when the kernel will not let go: a queue whose DESTROY_QUEUE
//! failed still runs on its ring and may write its read index, context save area and EOP buffer;
//! a buffer whose UNMAP or FREE failed may still be reached by the GPU. Freeing or unmapping
//! their memory would let the GPU write into whatever the process puts there next, so they are
//! leaked instead — kept allocated and mapped, never reused — and each is reported once: one
//! `warn` line and one entry in [`super::Kfd::leaks`]. The kernel reclaims them when the process
//! exits.

use nix::errno::Errno;

use super::error::Error;
use super::ids::{GpuId, QueueId};

/// One object left to the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Leaked {
    /// A queue whose DESTROY_QUEUE failed, with its buffers (ring, pointer page, CWSR area, EOP).
    Queue {
        /// The queue.
        id: QueueId,
        /// Its GPU.
        gpu: GpuId,
        /// Buffers kept with it.
        buffers: usize,
        /// Their bytes.
        bytes: u64,
    },
    /// A buffer whose UNMAP_MEMORY_FROM_GPU or FREE_MEMORY_OF_GPU failed.
    Allocation {
        /// Its KFD handle.
        handle: u64,
        /// Its GPU (and CPU) address.
        va: u64,
        /// Its bytes.
        size: u64,
    },
}

/// A leak and why: the kernel's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leak {
    /// What was left.
    pub what: Leaked,
    /// The errno of the refused call, if it reached the kernel.
    pub errno: Option<Errno>,
    /// The refusal, in words (the kernel rule, as [`Error`] states it).
    pub reason: String,
}

impl Leak {
    pub(crate) fn new(what: Leaked, error: &Error) -> Leak {
        Leak {
            what,
            errno: error.errno(),
            reason: error.to_string(),
        }
    }
}

impl std::fmt::Display for Leak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.what {
            Leaked::Queue {
                id,
                gpu,
                buffers,
                bytes,
            } => write!(
                f,
                "{id} on gpu {gpu} and its {buffers} buffers ({bytes} bytes) are left to the kernel"
            )?,
            Leaked::Allocation { handle, va, size } => write!(
                f,
                "buffer {handle:#x} ({size} bytes at {va:#x}) is left to the kernel"
            )?,
        }
        write!(
            f,
            ", kept mapped and never reused, until the process exits: {}",
            self.reason
        )
    }
}
