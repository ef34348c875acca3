//! Answering the FUSE ioctl requests: the result type of the handlers, the one rule that makes it
//! a FUSE answer (data copied out on success, an errno otherwise), and the two ways of sending
//! it: through fuser, or as bytes the proxy's reader thread writes to `/dev/fuse` itself.

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

/// What an ioctl's answer is on the wire: errnos 1..512 travel in the reply header, anything
/// else (a return value, or an errno >= 512, which the header cannot carry) in the ioctl result
/// with `data` copied out, as the kernel copies the arguments back on error (an interrupted
/// WAIT_EVENTS' remaining timeout).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wire<'a> {
    /// `fuse_ioctl_out.result` and the bytes copied out.
    Ioctl(i32, &'a [u8]),
    /// A positive errno for the reply header.
    Error(i32),
}

/// The wire form of the answer `res` with argument bytes `data`: the one decision both ways of
/// answering share ([`send_reply`] through fuser, [`encode`] for the proxy's reader thread).
pub(crate) fn wire(data: &[u8], res: KResult<i32>) -> Wire<'_> {
    match res {
        Ok(ret) => Wire::Ioctl(ret, data),
        Err(e) if (1..512).contains(&e) => Wire::Error(e),
        Err(e) => Wire::Ioctl(-e.abs(), data),
    }
}

/// Sends an ioctl reply through fuser.
pub(crate) fn send_reply(reply: ReplyIoctl, data: &[u8], res: KResult<i32>) {
    match wire(data, res) {
        Wire::Ioctl(ret, data) => reply.ioctl(ret, data),
        Wire::Error(e) => reply.error(Errno::from_i32(e)),
    }
}

/// Writes into `out` the bytes fuser 0.18 writes to `/dev/fuse` for [`send_reply`] of request
/// `unique` (`include/uapi/linux/fuse.h`): `struct fuse_out_header` (`len` u32, `error` i32 (0
/// or a negative errno), `unique` u64), then for an ioctl result `struct fuse_ioctl_out`
/// (`result` i32, `flags` u32, `in_iovs` u32, `out_iovs` u32; fuser's `ResponseIoctl::new_ioctl`
/// sets 0, 1 and 1, one out iovec for the data) and the data; for an error the header alone.
pub(crate) fn encode(out: &mut Vec<u8>, unique: u64, data: &[u8], res: KResult<i32>) {
    out.clear();
    let (error, body) = match wire(data, res) {
        Wire::Ioctl(ret, data) => (0, Some((ret, data))),
        Wire::Error(e) => (-e, None),
    };
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&error.to_ne_bytes());
    out.extend_from_slice(&unique.to_ne_bytes());
    if let Some((ret, data)) = body {
        for field in [ret as u32, 0, 1, 1] {
            out.extend_from_slice(&field.to_ne_bytes());
        }
        out.extend_from_slice(data);
    }
    let len = out.len() as u32;
    out[..4].copy_from_slice(&len.to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
    }

    #[test]
    fn an_ioctl_result_is_header_ioctl_out_and_data() {
        let mut out = Vec::new();
        encode(&mut out, 0x1234, &[7, 8, 9], Ok(5));
        assert_eq!(out.len(), 16 + 16 + 3);
        assert_eq!(u32_at(&out, 0), 35);
        assert_eq!(u32_at(&out, 4), 0);
        assert_eq!(u64::from_ne_bytes(out[8..16].try_into().unwrap()), 0x1234);
        assert_eq!([u32_at(&out, 16), u32_at(&out, 20)], [5, 0]);
        assert_eq!([u32_at(&out, 24), u32_at(&out, 28)], [1, 1]);
        assert_eq!(&out[32..], &[7, 8, 9]);
    }

    #[test]
    fn small_errnos_go_in_the_header_large_ones_in_the_result() {
        let mut out = Vec::new();
        encode(&mut out, 9, &[1, 2], Err(libc::EFAULT));
        assert_eq!(out.len(), 16);
        assert_eq!(u32_at(&out, 0), 16);
        assert_eq!(u32_at(&out, 4) as i32, -libc::EFAULT);
        encode(&mut out, 9, &[1, 2], Err(ERESTARTSYS));
        assert_eq!(u32_at(&out, 0), 34);
        assert_eq!(u32_at(&out, 4), 0);
        assert_eq!(u32_at(&out, 16) as i32, -ERESTARTSYS);
        assert_eq!(&out[32..], &[1, 2]);
        assert_eq!(wire(&[], Err(ENOTSUPP)), Wire::Ioctl(-ENOTSUPP, &[]));
    }
}
