//! The debugger interface's test helpers, shared by the suites that debug their own process.

use std::os::fd::{AsRawFd, OwnedFd};

use kfd_sys::*;

use super::Session;

/// This process's pid, as DBG_TRAP names its target.
pub fn me() -> u32 {
    std::process::id()
}

/// A pipe whose write end serves as `dbg_fd`.
pub fn pipe() -> (OwnedFd, OwnedFd) {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK).expect("pipe2")
}

/// DBG_TRAP ENABLE on this process with exception mask `mask`; the runtime info it wrote.
pub fn enable_self(s: &Session, w: &OwnedFd, mask: u64) -> kfd_runtime_info {
    let mut info = kfd_runtime_info::default();
    let mut e = kfd_ioctl_dbg_trap_enable_args {
        exception_mask: mask,
        rinfo_ptr: &raw mut info as u64,
        rinfo_size: size_of::<kfd_runtime_info>() as u32,
        dbg_fd: w.as_raw_fd() as u32,
    };
    s.kfd
        .dbg_trap(me(), KFD_IOC_DBG_TRAP_ENABLE, &mut e)
        .expect("DBG_TRAP ENABLE");
    assert_eq!(e.rinfo_size, 16);
    // SAFETY: written by the emulator through process_vm_writev.
    unsafe { std::ptr::read_volatile(&raw const info) }
}
