//! The `/proc/<pid>` reads an identity is made of: the cgroup v2 path and fields of `stat`
//! (the parent, the start time), and which read errors mean the process exited.

use crate::ids::Pid;

/// `pid`'s cgroup v2 path (`/proc/<pid>/cgroup`'s `0::` line; empty on a v1-only host).
pub(super) fn cgroup_of(pid: u32) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
        .unwrap_or_default())
}

/// True for the errors of reading a process that exited (it ends an ancestor walk).
pub(super) fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ESRCH)
}

/// Field `n` (numbered from 1, as proc(5) does; a numeric one) of `/proc/<pid>/stat`.
fn stat_field(pid: u32, n: usize) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    crate::procfs::stat_fields(&stat, [n])
        .map(|[v]| v)
        .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/stat: no field {n}")))
}

/// The parent pid of `pid` (`/proc/<pid>/stat`'s fourth field).
pub(super) fn parent_of(pid: u32) -> Option<u32> {
    stat_field(pid, 4).ok().and_then(|p| u32::try_from(p).ok())
}

/// `pid`'s start time, in clock ticks after boot (`/proc/<pid>/stat`'s field 22, proc(5)).
pub fn start_time(pid: Pid) -> std::io::Result<u64> {
    stat_field(pid.0, 22)
}
