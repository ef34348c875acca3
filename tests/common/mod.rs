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

/// Whether `addr` lies in a mapping of this process (`/proc/self/maps`).
pub fn mapped(addr: u64) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    maps.lines().any(|l| {
        let range = l.split_whitespace().next().unwrap_or("");
        let mut ends = range.split('-').map(|x| u64::from_str_radix(x, 16));
        matches!((ends.next(), ends.next()), (Some(Ok(a)), Some(Ok(b))) if (a..b).contains(&addr))
    })
}
