//! Answering the FUSE ioctl requests: the result type of the handlers and the one function that
//! sends a reply (data copied out on success, an errno otherwise).

use fuser::{Errno, ReplyIoctl};

/// The kernel-internal `ENOTSUPP` (not a libc errno; FUSE cannot carry errnos >= 512
/// in its reply header, so it is returned through the ioctl result instead).
pub(crate) const ENOTSUPP: i32 = 524;

/// The kernel-internal `ERESTARTSYS`: an interrupted wait that the kernel restarts after a
/// handler with `SA_RESTART` and turns into `EINTR` otherwise (returned through the ioctl
/// result, like [`ENOTSUPP`]).
pub(crate) const ERESTARTSYS: i32 = 512;

/// Result of a handler: the ioctl return value (usually 0) or an errno.
pub(crate) type KResult<T> = Result<T, i32>;

/// Sends an ioctl reply: `data` is copied out on success; errnos >= 512 travel in the
/// ioctl result because the FUSE reply header cannot carry them, with `data` copied out as the
/// kernel copies the arguments back on error (an interrupted WAIT_EVENTS' remaining timeout).
pub(crate) fn send_reply(reply: ReplyIoctl, data: &[u8], res: KResult<i32>) {
    match res {
        Ok(ret) => reply.ioctl(ret, data),
        Err(e) if (1..512).contains(&e) => reply.error(Errno::from_i32(e)),
        Err(e) => reply.ioctl(-e.abs(), data),
    }
}
