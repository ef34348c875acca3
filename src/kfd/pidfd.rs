//! What the kernel tells of another process through a pidfd (`pidfd_open(2)`,
//! `PIDFD_GET_INFO`): here, its dumpable mode, which the tracer respects before it takes a
//! process ("it asked not to be traced").
//!
//! `/proc/<pid>` tells a non-dumpable process only by its files' owner (root instead of its
//! effective uid, proc(5)), which says nothing of a process whose effective uid is 0. Since
//! Linux 6.16 `PIDFD_GET_INFO` with `PIDFD_INFO_COREDUMP` answers a running process's mode in
//! `coredump_mask` (`include/uapi/linux/pidfd.h`; `fs/pidfs.c` maps the mm's
//! `SUID_DUMP_DISABLE`/`USER`/`ROOT` to `PIDFD_COREDUMP_SKIP`/`USER`/`ROOT`): for every uid.
//! The first release of it (6.16) left the mask of a running process empty (fixed in a later
//! release: "if ((kinfo.mask & PIDFD_INFO_COREDUMP) && !(kinfo.coredump_mask))"), and older
//! kernels refuse the ioctl: both are "cannot tell" ([`None`]).
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A process's dumpable mode (prctl(2) `PR_SET_DUMPABLE`, and `/proc/sys/fs/suid_dumpable`
/// after a credential change).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dumpable {
    /// `SUID_DUMP_USER` (1): ptrace by its own user is allowed; the ordinary state.
    User,
    /// `SUID_DUMP_DISABLE` (0): `prctl(PR_SET_DUMPABLE, 0)`, or a set-id program.
    Disabled,
    /// `SUID_DUMP_ROOT` (2): a set-id program under `suid_dumpable = 2`; ptrace(2) treats it
    /// as not dumpable (only `CAP_SYS_PTRACE` may attach).
    Root,
}

/// `struct pidfd_info` (include/uapi/linux/pidfd.h, `PIDFD_INFO_SIZE_VER2`: 80 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct PidfdInfo {
    mask: u64,
    cgroupid: u64,
    pid: u32,
    tgid: u32,
    ppid: u32,
    ruid: u32,
    rgid: u32,
    euid: u32,
    egid: u32,
    suid: u32,
    sgid: u32,
    fsuid: u32,
    fsgid: u32,
    exit_code: i32,
    coredump_mask: u32,
    coredump_signal: u32,
    supported_mask: u64,
}

const PIDFD_INFO_COREDUMP: u64 = 1 << 4;
const PIDFD_COREDUMP_SKIP: u32 = 1 << 1;
const PIDFD_COREDUMP_USER: u32 = 1 << 2;
const PIDFD_COREDUMP_ROOT: u32 = 1 << 3;

mod sys {
    // PIDFD_GET_INFO: _IOWR(PIDFS_IOCTL_MAGIC 0xFF, 11, struct pidfd_info).
    nix::ioctl_readwrite!(pidfd_get_info, 0xFF, 11, super::PidfdInfo);
}

/// A pidfd of process `pid` (`pidfd_open(2)`, Linux 5.3).
pub fn open(pid: u32) -> std::io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and a flags word and returns a new descriptor or -1; no
    // memory is passed.
    let fd = unsafe { nix::libc::syscall(nix::libc::SYS_pidfd_open, pid as nix::libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a non-negative return is a descriptor the kernel just opened for us alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// The dumpable mode of the pidfd's process; `None` when the kernel does not say (before
/// Linux 6.16, its first release of it, a process without memory, an exited one).
pub fn dumpable(pidfd: &OwnedFd) -> Option<Dumpable> {
    let mut info = PidfdInfo {
        mask: PIDFD_INFO_COREDUMP,
        ..PidfdInfo::default()
    };
    // SAFETY: `info` is a live, writable `struct pidfd_info` of the size the request number
    // encodes (80 bytes); the kernel copies at most that much in and out, and on failure
    // (ENOTTY, EINVAL, ESRCH) leaves nothing we read: we return before reading it.
    unsafe { sys::pidfd_get_info(pidfd.as_raw_fd(), &mut info) }.ok()?;
    of_mask(info.mask, info.coredump_mask)
}

fn of_mask(mask: u64, coredump: u32) -> Option<Dumpable> {
    if mask & PIDFD_INFO_COREDUMP == 0 {
        return None;
    }
    if coredump & PIDFD_COREDUMP_USER != 0 {
        Some(Dumpable::User)
    } else if coredump & PIDFD_COREDUMP_ROOT != 0 {
        Some(Dumpable::Root)
    } else if coredump & PIDFD_COREDUMP_SKIP != 0 {
        Some(Dumpable::Disabled)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_struct_is_the_kernels_size() {
        assert_eq!(std::mem::size_of::<PidfdInfo>(), 80);
    }

    #[test]
    fn the_mask_is_read_as_the_kernel_writes_it() {
        assert_eq!(of_mask(0, PIDFD_COREDUMP_USER), None, "not answered");
        assert_eq!(of_mask(PIDFD_INFO_COREDUMP, 0), None, "6.16: empty");
        assert_eq!(
            of_mask(PIDFD_INFO_COREDUMP, PIDFD_COREDUMP_USER),
            Some(Dumpable::User)
        );
        assert_eq!(
            of_mask(PIDFD_INFO_COREDUMP, PIDFD_COREDUMP_SKIP),
            Some(Dumpable::Disabled)
        );
        assert_eq!(
            of_mask(PIDFD_INFO_COREDUMP, PIDFD_COREDUMP_ROOT),
            Some(Dumpable::Root)
        );
    }

    #[test]
    fn a_process_that_made_itself_non_dumpable_is_told_apart() {
        // This test process is dumpable; a child that calls prctl(PR_SET_DUMPABLE, 0) is not.
        let me = open(std::process::id()).unwrap();
        let Some(mode) = dumpable(&me) else {
            eprintln!("this kernel does not answer PIDFD_INFO_COREDUMP for a running process");
            return;
        };
        assert_eq!(mode, Dumpable::User);
        let mut child = std::process::Command::new("python3")
            .args([
                "-c",
                "import ctypes,sys; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); print('ok', flush=True); sys.stdin.read()",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line.trim(), "ok");
        let fd = open(child.id()).unwrap();
        assert_eq!(dumpable(&fd), Some(Dumpable::Disabled));
        drop(child.stdin.take());
        child.wait().unwrap();
        assert_eq!(dumpable(&fd), None, "exited: no memory to tell of");
    }
}
