//! The root crate's test harness: what tools/test-support shares (the privileged-test rule, a
//! private kfd-emu mount per test, waiting on conditions), and kfdq's view of a mount.
#![allow(dead_code, unused_imports)]

pub use test_support::bins::workspace_bin;
pub use test_support::emu::{Emu, EmuConfig, MountedEmu, Preset, Stats, mount, mount_preset};
pub use test_support::hold::Holder;
pub use test_support::wait::WAIT_LIMIT;
pub use test_support::wait_for;

use kfdq::kfd::Root;

/// The emulator as kfdq's safe layer sees it.
pub trait KfdRoot {
    /// The mount point as a [`Root`].
    fn kfd_root(&self) -> Root;
}

impl KfdRoot for Emu {
    fn kfd_root(&self) -> Root {
        Root::new(self.root())
    }
}
