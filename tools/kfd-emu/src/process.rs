//! Client process identity: thread id -> tgid, and the `/proc` lookups (ptrace tracer, fd
//! targets and identities, liveness). The life of a process's KFD state is
//! `ioctl::lifecycle`.

use std::path::PathBuf;

use crate::state::Emu;

/// A field of `/proc/<pid>/status` (text after the colon, trimmed).
pub(crate) fn status_field(pid: u32, field: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == field).then(|| v.trim().to_string())
    })
}

/// Thread-group id of a thread, from `/proc/<tid>/status`.
fn read_tgid(tid: u32) -> Option<u32> {
    status_field(tid, "Tgid")?.parse().ok()
}

/// Whether thread `tid` belongs to thread group `tgid` now, whatever ids were reused:
/// `tgkill(tgid, tid, 0)` looks the thread up by `tid` and compares its group with `tgid`
/// before anything else (`do_send_specific` in `kernel/signal.c`), failing with `ESRCH` when no
/// such thread is in that group; when it is, the answer is success, or `EPERM` from the
/// permission check that comes after the lookup. Signal 0 is delivered to nobody. One system
/// call without a path walk: the procfs lookup it replaces (`lstat` of
/// `/proc/<tgid>/task/<tid>`) cost 20-30 µs p50 on every ioctl of a loaded 2-core machine
/// (docs/performance.md, "Level 3's remaining gap").
fn in_group(tid: u32, tgid: u32) -> bool {
    let (Ok(tid), Ok(tgid)) = (i32::try_from(tid), i32::try_from(tgid)) else {
        return false;
    };
    if tid <= 0 || tgid <= 0 {
        return false;
    }
    // SAFETY: tgkill takes two ids and a signal number, reads no memory of ours, and signal 0
    // sends nothing (a probe of existence and permission).
    let r = unsafe { libc::syscall(libc::SYS_tgkill, tgid, tid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Thread-group id of the thread FUSE reported, cached. A cached entry is checked with one
/// `tgkill` probe ([`in_group`]): the reaper clears dead threads' entries only every 200 ms,
/// and a thread id reused by another process within that window must not act on the old one's
/// state.
pub(crate) fn tgid_of(emu: &Emu, tid: u32) -> Option<u32> {
    if tid == 0 {
        return None;
    }
    let cached = crate::locks::lock(&emu.tgids, "tgid cache")
        .get(&tid)
        .copied();
    if let Some(t) = cached
        && in_group(tid, t)
    {
        return Some(t);
    }
    let tgid = read_tgid(tid)?;
    crate::locks::lock(&emu.tgids, "tgid cache").insert(tid, tgid);
    Some(tgid)
}

/// `TracerPid` of a process (its leader thread), 0 when not traced.
pub(crate) fn tracer_of(pid: u32) -> Option<u32> {
    status_field(pid, "TracerPid")?.parse().ok()
}

/// Whether thread `tid` has a fatal signal pending: SIGKILL in its own pending set
/// (`fatal_signal_pending`; a group exit or core dump puts it there for every thread).
pub(crate) fn fatal_signal_pending(tid: u32) -> bool {
    status_field(tid, "SigPnd")
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .is_some_and(|mask| mask & (1 << (libc::SIGKILL - 1)) != 0)
}

/// Process start time (field 22 of `/proc/<pid>/stat`), to tell pid reuse apart.
pub(crate) fn start_time(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether a process still exists (and is not a zombie), and is the same process.
pub(crate) fn is_alive(pid: u32, started: Option<u64>) -> bool {
    match status_field(pid, "State") {
        None => false,
        Some(s) if s.starts_with('Z') || s.starts_with('X') => false,
        Some(_) => started.is_none() || start_time(pid) == started,
    }
}

/// What `/proc/<pid>/fd/<fd>` points to: `Err(EBADF)` when the fd is not open.
pub(crate) fn fd_target(pid: u32, fd: u32) -> Result<PathBuf, i32> {
    std::fs::read_link(format!("/proc/{pid}/fd/{fd}")).map_err(|_| libc::EBADF)
}

/// `major:minor` of the mount with id `mnt_id` in a mountinfo text.
pub(crate) fn mount_device(mountinfo: &str, mnt_id: &str) -> Option<String> {
    mountinfo.lines().find_map(|l| {
        let mut f = l.split(' ');
        (f.next()? == mnt_id).then(|| f.nth(1).map(str::to_string))?
    })
}

/// (device `major:minor`, inode) of the file behind `/proc/<pid>/fd/<fd>`, read from procfs
/// only (`fdinfo` names the mount and inode; the process's `mountinfo` the mount's device), so
/// asking never sends a request to a FUSE server. `Err(EBADF)` when the fd is not open;
/// `Ok(None)` when this kernel's `fdinfo` has no `ino` line (before Linux 5.14).
pub(crate) fn fd_identity(pid: u32, fd: u32) -> Result<Option<(String, u64)>, i32> {
    let info =
        std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).map_err(|_| libc::EBADF)?;
    let field = |k: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_string()))
    };
    let (Some(mnt), Some(ino)) = (field("mnt_id:"), field("ino:")) else {
        return Ok(None);
    };
    let Ok(ino) = ino.parse::<u64>() else {
        return Ok(None);
    };
    let mounts =
        std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).map_err(|_| libc::EBADF)?;
    Ok(mount_device(&mounts, &mnt).map(|dev| (dev, ino)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_lookups_of_self() {
        let me = std::process::id();
        assert_eq!(read_tgid(me), Some(me));
        assert!(start_time(me).is_some());
        assert!(is_alive(me, start_time(me)));
        assert!(!is_alive(me, Some(1)));
        assert_eq!(tracer_of(me), Some(0));
        assert_eq!(fd_target(me, 999_999), Err(libc::EBADF));
    }

    #[test]
    fn a_stale_cache_entry_is_not_trusted() {
        let config = crate::config::EmuConfig::default();
        let topo = crate::config::Topology::build(&config).unwrap();
        let emu = Emu::new(config, topo, PathBuf::from("/nonexistent"));
        let me = std::process::id();
        // As if this thread id had belonged to process 1 and been reused by this process
        // before the reaper cleared the entry.
        crate::locks::lock(&emu.tgids, "tgid cache").insert(me, 1);
        assert!(!in_group(me, 1));
        assert_eq!(tgid_of(&emu, me), Some(me));
        assert_eq!(
            crate::locks::lock(&emu.tgids, "tgid cache").get(&me),
            Some(&me)
        );
        assert!(in_group(me, me));
    }

    #[test]
    fn group_membership_is_the_thread_and_its_own_group() {
        let me = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(nix::unistd::gettid().as_raw() as u32).unwrap();
            let _ = done_rx.recv();
        });
        let tid = rx.recv().unwrap();
        assert!(in_group(tid, me), "another thread of this process");
        assert!(!in_group(tid, 1), "that thread, asked for in another group");
        assert!(
            !in_group(1, me),
            "another process's thread, asked for in this group"
        );
        // Init's thread in its own group: as root the probe succeeds, otherwise it is EPERM;
        // either way it is there.
        assert!(in_group(1, 1));
        assert!(!in_group(0, me) && !in_group(me, 0) && !in_group(u32::MAX, me));
        done_tx.send(()).unwrap();
        t.join().unwrap();
    }
}
