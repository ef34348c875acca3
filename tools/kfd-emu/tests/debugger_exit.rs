//! docs/kernel-interface.md §4: when the debugger process exits, the queues it suspended are resumed.
//!
//! A forked child attaches to this process with PTRACE_SEIZE, enables debugging on
//! it, suspends its queue and exits without DISABLE.

mod common;

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;

use kfd_emu::Preset;
use kfd_sys::*;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};

use common::*;

/// A DBG_TRAP argument block with `op_args` in the union.
fn dbg_args<T: Copy>(pid: u32, op: u32, op_args: &T) -> kfd_ioctl_dbg_trap_args {
    let mut a = kfd_ioctl_dbg_trap_args {
        pid,
        op,
        ..Default::default()
    };
    assert!(size_of::<T>() <= 24);
    // SAFETY: copies a plain-integer op struct into the 24-byte union.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (op_args as *const T).cast::<u8>(),
            (&raw mut a.__bindgen_anon_1).cast::<u8>(),
            size_of::<T>(),
        );
    }
    a
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn debugger_exit_resumes_its_suspended_queues() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    s.kfd.runtime_enable().unwrap();
    let (q, _bufs) = s.queue(100, 7);
    let parent = std::process::id();

    // Everything the child uses is prepared before fork (it must not allocate).
    let kfd_path = CString::new(t.path("dev/kfd").as_os_str().as_bytes()).unwrap();
    let (up_r, up_w) = nix::unistd::pipe().unwrap();
    let (down_r, down_w) = nix::unistd::pipe().unwrap();
    let mut ids = [q.id];
    let mut snap = [kfd_queue_snapshot_entry::default(); 4];
    let mut enable = dbg_args(
        parent,
        KFD_IOC_DBG_TRAP_ENABLE,
        &kfd_ioctl_dbg_trap_enable_args {
            dbg_fd: up_w.as_raw_fd() as u32,
            ..Default::default()
        },
    );
    let mut clear_new = dbg_args(
        parent,
        KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT,
        &kfd_ioctl_dbg_trap_queue_snapshot_args {
            exception_mask: kfd_ec_mask(EC_QUEUE_NEW),
            snapshot_buf_ptr: snap.as_mut_ptr() as u64,
            num_queues: 4,
            entry_size: 64,
        },
    );
    let mut suspend = dbg_args(
        parent,
        KFD_IOC_DBG_TRAP_SUSPEND_QUEUES,
        &kfd_ioctl_dbg_trap_suspend_queues_args {
            exception_mask: 0,
            queue_array_ptr: ids.as_mut_ptr() as u64,
            num_queues: 1,
            grace_period: 0,
        },
    );
    let (up_wfd, down_rfd) = (up_w.as_raw_fd(), down_r.as_raw_fd());

    // SAFETY: the child only makes raw system calls on memory prepared above and
    // leaves with _exit.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            // SAFETY: async-signal-safe calls only.
            unsafe {
                let fd = libc::open(kfd_path.as_ptr(), libc::O_RDWR);
                if fd < 0 {
                    libc::_exit(10);
                }
                let ppid = parent as libc::pid_t;
                if libc::ptrace(libc::PTRACE_SEIZE, ppid, 0, 0) != 0 {
                    libc::_exit(11);
                }
                if libc::ioctl(fd, AMDKFD_IOC_DBG_TRAP as libc::c_ulong, &raw mut enable) != 0 {
                    libc::_exit(12);
                }
                if libc::ioctl(fd, AMDKFD_IOC_DBG_TRAP as libc::c_ulong, &raw mut clear_new) != 0 {
                    libc::_exit(13);
                }
                if libc::ioctl(fd, AMDKFD_IOC_DBG_TRAP as libc::c_ulong, &raw mut suspend) != 1 {
                    libc::_exit(14);
                }
                libc::write(up_wfd, b"s".as_ptr().cast(), 1);
                let mut b = 0u8;
                libc::read(down_rfd, (&raw mut b).cast(), 1);
                libc::_exit(0);
            }
        }
        ForkResult::Parent { child } => {
            drop(up_w);
            drop(down_r);
            let mut b = [0u8; 1];
            let n = nix::unistd::read(&up_r, &mut b).unwrap();
            if n == 0 {
                let status = waitpid(child, None).unwrap();
                panic!("debugger child failed: {status:?}");
            }
            let st = t.stats();
            assert!(st.queues[0].suspended, "suspended by the child");
            let me = st.processes.iter().find(|p| p.pid == parent).unwrap();
            assert_eq!(me.debugger_pid, Some(child.as_raw() as u32));
            // Let the debugger exit without DISABLE.
            nix::unistd::write(&down_w, b"x").unwrap();
            assert_eq!(waitpid(child, None).unwrap(), WaitStatus::Exited(child, 0));
            assert!(
                wait_until(WAIT_LIMIT, || {
                    let st = t.stats();
                    !st.queues[0].suspended && st.queues[0].active
                }),
                "queue stayed suspended after its debugger exited"
            );
            let st = t.stats();
            let me = st.processes.iter().find(|p| p.pid == parent).unwrap();
            assert!(!me.debug_enabled);
            assert!(!st.processes.iter().any(|p| p.pid == child.as_raw() as u32));
        }
    }
}
