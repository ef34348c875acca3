//! Waking a debugger: one byte written to its event fd (`kfd_dbg_ev_raise`'s effect), reached
//! through `/proc/<owner>/fd/<fd>`.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;

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
