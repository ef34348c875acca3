//! kfd-emu: amdkfd (`/dev/kfd`, render nodes, KFD sysfs) emulated over FUSE, with a
//! model of the gfx942 hardware scheduler, so every syscall path of kfdq can be tested
//! on machines without an AMD GPU.
//!
//! ```no_run
//! use kfd_emu::{EmuConfig, MountedEmu, Preset};
//! let emu = MountedEmu::mount(
//!     std::path::Path::new("/run/kfdq-emu"),
//!     EmuConfig { preset: Preset::Mi308x, ..EmuConfig::default() },
//! )?;
//! // open(emu.root()/dev/kfd), ioctl, mmap, read sysfs under emu.root() ...
//! println!("{:?}", emu.stats().partitions);
//! emu.unmount()?;
//! # Ok::<(), kfd_emu::EmuError>(())
//! ```
//!
//! See `docs/kfd-emulator.md` for the tree, the conventions that differ from the
//! kernel, and what is and is not modelled.
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod abi;
mod blit;
mod client_mem;
mod code_object;
mod completion;
mod config;
mod cp;
mod drm;
mod effects;
mod error;
mod events;
mod faults;
mod faults_file;
mod fs;
mod fuse_proxy;
mod gpu_mem;
mod handles;
mod handover;
mod hws;
mod ioctl;
mod iolinks;
mod kfd_mmap;
mod locks;
mod mount;
mod notify;
mod page_io;
mod process;
mod reader_ioctl;
mod reply;
mod reset;
mod runnable;
mod sandbox;
mod sdma;
mod state;
mod stats;
mod sysfs_drm;
mod sysfs_topology;
mod topology;
mod unplug;

pub use config::{ArgTime, EmuConfig, PartitionCosts, Preset, gfx_target_versions};
pub use error::EmuError;
pub use faults::{Failure, Fault, FaultSpec, FaultStats, FaultsFile, SpecError, When};
/// The dispatcher arbitration of [`EmuConfig::arbitration`] (`kfd-emu-api`'s; gfx-model's too).
pub use kfd_emu_api::Arbitration;
pub use kfd_emu_api::{UnknownPreset, parse_fault};
pub use mount::{MountedEmu, SessionEnd, unmount_path};
pub use sandbox::{Sandbox, run as run_sandboxed};
pub use stats::{PartitionStats, ProcessStats, QueueStats, Stats};
pub use topology::{CwsrSizes, cwsr_sizes};
