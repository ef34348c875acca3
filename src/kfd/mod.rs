//! The safe, typed layer over `/dev/kfd` and its sysfs topology.
//!
//! | concern | file |
//! |---|---|
//! | request numbers, one wrapper per ioctl | `ioctl.rs` |
//! | open, version, ACQUIRE_VM | `device.rs` |
//! | topology (`nodes/*/properties`) | `topology.rs` |
//! | CWSR / control-stack / debug sizes | `cwsr.rs` |
//! | processes and their queues (sysfs `proc/`) | `procfs.rs` |
//! | GPU memory (ALLOC/MAP/UNMAP/FREE) | `memory.rs` |
//! | what the kernel refused to destroy or free, left to it | `leak.rs` |
//! | queues (CREATE/UPDATE/CU mask/wave state/DESTROY, submit) | `queue.rs` |
//! | doorbell page | `doorbell.rs` |
//! | an edge board mapped: its atomic words, seals and futex (agent and shim) | `board.rs` |
//! | AQL packets, completion signals | `aql.rs` |
//! | debugger API (RUNTIME_ENABLE, DBG_TRAP) | `debug.rs` |
//! | being the ptrace tracer DBG_TRAP on another process needs | `ptrace.rs` |
//! | another process's dumpable mode, by pidfd (`PIDFD_GET_INFO`) | `pidfd.rs` |
//! | typed values, errors, paths | `types.rs`, `error.rs`, `paths.rs` |
//!
//! ```no_run
//! use kfdq::kfd::{Kfd, Priority, QueueSpec, Root};
//! let kfd = Kfd::open(&Root::from_env())?;
//! let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).expect("a GPU");
//! let mut q = kfd.create_queue(QueueSpec::aql(gpu).priority(Priority::HIGH))?;
//! q.deactivate()?; // unmapped, waves saved
//! q.activate()?;
//! # Ok::<(), kfdq::kfd::Error>(())
//! ```

// Casts of kfd-sys constants are deliberate: their Rust types depend on the bound header
// (a #define becomes u32 or i32, an enum becomes its own alias), so the code casts every time.
#![allow(clippy::unnecessary_cast)]
#![deny(missing_debug_implementations)]

pub mod aql;
pub mod board;
pub mod cwsr;
pub mod debug;
pub mod device;
pub mod doorbell;
pub mod error;
pub mod ids;
pub mod ioctl;
pub mod leak;
pub mod memory;
pub mod paths;
pub mod pidfd;
pub mod procfs;
pub mod ptrace;
pub mod queue;
pub mod topology;
pub mod types;

pub use aql::{DispatchPacket, Signal};
pub use cwsr::CwsrSizes;
pub use debug::{DebugAttachment, EXCEPTION_QUEUE_NEW, QueueSnapshot, QueueStatus, RuntimeInfo};
pub use device::{Capabilities, Kfd, Version};
pub use error::{Error, IoctlError, KfdIoctl, Result};
pub use ids::{GpuId, QueueId};
pub use leak::{Leak, Leaked};
pub use memory::{AllocFlags, Allocation};
pub use paths::Root;
pub use queue::{Queue, QueueSpec, WaveState};
pub use topology::{Node, Topology};
pub use types::{CuMask, Percentage, Priority, QueueKind};
