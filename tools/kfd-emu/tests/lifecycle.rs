//! Process lifetime: the sysfs process directory, cleanup on close and exit, and the
//! post-fork EBADF rule.

mod common;

use std::os::fd::AsRawFd;
use std::process::Command;

use kfd_emu::Preset;
use kfd_sys::*;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{ForkResult, fork};

use common::*;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn proc_dir_appears_and_disappears() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let pid = std::process::id();
    let dir = format!("sys/class/kfd/kfd/proc/{pid}");
    assert!(!t.path(&dir).exists());
    let kfd = t.open_kfd();
    assert!(t.path(&dir).is_dir());
    let listed: Vec<String> = std::fs::read_dir(t.path("sys/class/kfd/kfd/proc"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(listed, vec![pid.to_string()]);
    let pasid = t.read(&format!("{dir}/pasid"));
    assert!(pasid.parse::<u32>().is_ok(), "{pasid:?}");
    assert!(t.path(&format!("{dir}/queues")).is_dir());
    // A second open shares the process; closing one keeps it.
    let kfd2 = t.open_kfd();
    assert_eq!(t.stats().processes[0].kfd_opens, 2);
    drop(kfd2);
    // The release reaches the emulator after close returns: wait for it, then the state is kept.
    assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0].kfd_opens == 1));
    assert!(t.path(&dir).is_dir());
    assert_eq!(t.stats().processes.len(), 1);
    drop(kfd);
    assert!(wait_until(WAIT_LIMIT, || !t.path(&dir).exists()));
    assert!(t.stats().processes.is_empty());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn exiting_process_loses_its_state_and_queues() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3<>{} && exec sleep 0.5",
            t.path("dev/kfd").display()
        ))
        .spawn()
        .unwrap();
    let dir = format!("sys/class/kfd/kfd/proc/{}", child.id());
    assert!(wait_until(WAIT_LIMIT, || t.path(&dir).exists()));
    child.wait().unwrap();
    assert!(wait_until(WAIT_LIMIT, || !t.path(&dir).exists()));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn queues_of_a_closed_process_are_destroyed_and_counted() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    {
        let s = Session::new(&t, 0);
        let (_q, _b) = s.queue(100, 7);
        let (_q2, _b2) = s.queue(100, 7);
        assert_eq!(t.stats().partitions[0].active_queues, 2);
    }
    assert!(wait_until(WAIT_LIMIT, || t.stats().processes.is_empty()));
    let p = &t.stats().partitions[0];
    assert_eq!(p.active_queues, 0);
    // 2 creates (1 preempt: the second) + 2 destroys of active queues (2 preempts).
    assert_eq!((p.runlist_updates, p.preempts), (4, 3));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn kfd_fd_used_after_fork_is_ebadf() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let kfd = t.open_kfd();
    let fd = kfd.file.as_raw_fd();
    let mut v = kfd_ioctl_get_version_args::default();
    // SAFETY: the child only calls ioctl and _exit.
    match unsafe { fork() }.expect("fork") {
        ForkResult::Child => {
            // SAFETY: raw ioctl on an inherited fd with a valid argument, then _exit.
            unsafe {
                let r = libc::ioctl(fd, AMDKFD_IOC_GET_VERSION as libc::c_ulong, &raw mut v);
                let errno = *libc::__errno_location();
                libc::_exit(if r == -1 && errno == libc::EBADF {
                    0
                } else {
                    1
                });
            }
        }
        ForkResult::Parent { child } => {
            assert_eq!(waitpid(child, None).unwrap(), WaitStatus::Exited(child, 0));
        }
    }
    // The parent still can.
    assert_eq!(kfd.version(), (1, 17));
}
