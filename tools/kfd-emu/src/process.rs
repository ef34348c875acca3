//! Client process identity and lifetime: thread id -> tgid, `/proc` lookups (ptrace
//! tracer, fd targets, liveness), creation of per-process KFD state at the first
//! `open(dev/kfd)`, and its destruction on the last close or when the reaper sees the
//! process gone.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::ioctl;
use crate::state::{Effects, Emu, Process, State};

/// How often the reaper looks for vanished processes.
const REAP_PERIOD: Duration = Duration::from_millis(200);

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

/// Thread-group id of the thread FUSE reported, cached.
pub(crate) fn tgid_of(emu: &Emu, tid: u32) -> Option<u32> {
    if tid == 0 {
        return None;
    }
    if let Some(t) = crate::locks::lock(&emu.tgids, "tgid cache").get(&tid) {
        return Some(*t);
    }
    let tgid = read_tgid(tid)?;
    crate::locks::lock(&emu.tgids, "tgid cache").insert(tid, tgid);
    Some(tgid)
}

/// `TracerPid` of a process (its leader thread), 0 when not traced.
pub(crate) fn tracer_of(pid: u32) -> Option<u32> {
    status_field(pid, "TracerPid")?.parse().ok()
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

/// Writes one byte to a debugger's event fd through `/proc/<owner>/fd/<fd>` (best effort).
pub(crate) fn notify_fd(owner: u32, fd: u32) {
    let opened = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/{owner}/fd/{fd}"));
    match opened {
        Ok(mut f) => {
            if let Err(e) = f.write_all(&[1]) {
                tracing::debug!(owner, fd, "debugger notification write failed: {e}");
            }
        }
        Err(e) => tracing::debug!(owner, fd, "debugger fd not reachable: {e}"),
    }
}

/// The KFD state of `tgid` (started at `started`, from [`start_time`]), created if
/// missing (sysfs `proc/<pid>` appears). State left over from an earlier process
/// with the same pid is destroyed first.
pub(crate) fn ensure<'a>(
    emu: &Emu,
    state: &'a mut State,
    tgid: u32,
    started: Option<u64>,
    effects: &mut Effects,
) -> &'a mut Process {
    let stale = state
        .processes
        .get(&tgid)
        .is_some_and(|p| p.start_time.is_some() && started.is_some() && p.start_time != started);
    if stale {
        destroy(emu, state, tgid, effects);
    }
    let n_gpus = emu.topo.gpus.len();
    let pasid = &mut state.next_pasid;
    state.processes.entry(tgid).or_insert_with(|| {
        let p = Process::new(tgid, started, *pasid, n_gpus);
        *pasid = pasid.wrapping_add(1);
        tracing::debug!(tgid, "process created");
        p
    })
}

/// `open(dev/kfd)` by `tgid`.
pub(crate) fn open_kfd(emu: &Emu, tgid: u32) {
    let started = start_time(tgid);
    let mut effects = Effects::default();
    {
        let mut st = emu.lock();
        ensure(emu, &mut st, tgid, started, &mut effects).kfd_opens += 1;
    }
    effects.run(emu);
}

/// Last close of one `dev/kfd` handle of `tgid`.
pub(crate) fn release_kfd(emu: &Emu, tgid: u32) {
    let mut effects = Effects::default();
    {
        let mut st = emu.lock();
        let last = match st.processes.get_mut(&tgid) {
            Some(p) => {
                p.kfd_opens = p.kfd_opens.saturating_sub(1);
                p.kfd_opens == 0
            }
            None => false,
        };
        if last {
            destroy(emu, &mut st, tgid, &mut effects);
        }
    }
    effects.run(emu);
}

/// Tears down the KFD state of `tgid`: disables debugging it performs or undergoes
/// (resuming queues), destroys its queues (counted like DESTROY_QUEUE), frees its BOs.
pub(crate) fn destroy(emu: &Emu, state: &mut State, tgid: u32, effects: &mut Effects) {
    if !state.processes.contains_key(&tgid) {
        return;
    }
    let debuggees: Vec<u32> = state
        .processes
        .values()
        .filter(|p| p.debug.is_some_and(|d| d.debugger == Some(tgid)))
        .map(|p| p.tgid)
        .collect();
    for target in debuggees {
        ioctl::debug::disable(emu, state, target, effects);
    }
    if state
        .processes
        .get(&tgid)
        .is_some_and(|p| p.debug.is_some())
    {
        ioctl::debug::disable(emu, state, tgid, effects);
    }
    // Blocked destroyers of this process: their queues go now.
    let mut i = 0;
    while i < state.pending_destroys.len() {
        if state.pending_destroys[i].key.0 == tgid {
            let pd = state.pending_destroys.swap_remove(i);
            effects.replies.push((pd.reply, pd.buf, Err(libc::EINTR)));
        } else {
            i += 1;
        }
    }
    let qids: Vec<u32> = state
        .processes
        .get(&tgid)
        .map(|p| p.queues.keys().copied().collect())
        .unwrap_or_default();
    for qid in qids {
        ioctl::queue::destroy_now(emu, state, (tgid, qid));
    }
    if let Some(mut p) = state.processes.remove(&tgid) {
        ioctl::events::drop_waits(&mut p);
        emu.kernels.forget(tgid);
        for d in &p.devices {
            for bo in d.bos.values() {
                if bo.backed {
                    emu.bos.remove(bo.mmap_offset);
                }
            }
        }
        tracing::debug!(tgid, "process destroyed");
    }
}

/// Every ~200 ms: destroys the state of processes that are gone and prunes the
/// tid cache.
pub(crate) fn reaper_thread(emu: Arc<Emu>) {
    loop {
        {
            let st = emu.lock();
            let st = emu
                .cp_wake
                .wait_timeout_while(st, REAP_PERIOD, |_| !emu.is_shutdown())
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            drop(st);
        }
        if emu.is_shutdown() {
            return;
        }
        let procs: Vec<(u32, Option<u64>)> = emu
            .lock()
            .processes
            .values()
            .map(|p| (p.tgid, p.start_time))
            .collect();
        let gone: Vec<u32> = procs
            .into_iter()
            .filter(|(pid, started)| !is_alive(*pid, *started))
            .map(|(pid, _)| pid)
            .collect();
        if !gone.is_empty() {
            let mut effects = Effects::default();
            {
                let mut st = emu.lock();
                for tgid in gone {
                    destroy(&emu, &mut st, tgid, &mut effects);
                }
            }
            effects.run(&emu);
        }
        let tids: Vec<u32> = crate::locks::lock(&emu.tgids, "tgid cache")
            .keys()
            .copied()
            .collect();
        let dead: Vec<u32> = tids
            .into_iter()
            .filter(|t| !std::path::Path::new(&format!("/proc/{t}")).exists())
            .collect();
        if !dead.is_empty() {
            let mut cache = crate::locks::lock(&emu.tgids, "tgid cache");
            for t in dead {
                cache.remove(&t);
            }
        }
    }
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
}
