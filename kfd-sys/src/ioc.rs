//! Reading a request: the fields of a Linux ioctl request number (`_IOC_NR`, `_IOC_TYPE`,
//! `_IOC_SIZE`, `_IOC_DIR` of `asm-generic/ioctl.h`, the encoding amdkfd's `AMDKFD_IO*` macros
//! use), and copying an argument struct out of the caller's bytes.
//!
//! Hand-written beside the bindings because the header has these as function-like macros, which
//! bindgen does not turn into functions. Everything that decodes a request the process did not
//! build itself (the launch shim's `ioctl` hook, the emulator's dispatch) uses these, once.
//!
//! The kernel takes the request as an `unsigned int` (`SYSCALL_DEFINE3(ioctl, unsigned int fd,
//! unsigned int cmd, ...)`), so a caller's wider value is truncated to `u32` before decoding, as
//! the kernel truncates it.

use zerocopy::{FromBytes, IntoBytes};

/// `_IOC_WRITE`: user space writes the argument (the kernel copies it in).
pub const WRITE: u32 = 1;
/// `_IOC_READ`: user space reads the argument (the kernel copies it back out).
pub const READ: u32 = 2;
/// `AMDKFD_IOCTL_BASE`: the type byte of every amdkfd request.
pub const KFD_TYPE: u32 = b'K' as u32;

/// `_IOC(dir, type, nr, size)`: the request number of an ioctl; for amdkfd's own,
/// `request(READ | WRITE, KFD_TYPE, nr, size_of::<Args>())` is `AMDKFD_IOWR(nr, Args)`.
pub const fn request(dir: u32, kind: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | (((size as u32) & 0x3fff) << 16) | ((kind & 0xff) << 8) | (nr & 0xff)
}

/// `_IOC_NR`: the request's number within its type (what amdkfd dispatches on).
pub const fn nr(request: u32) -> u32 {
    request & 0xff
}

/// `_IOC_TYPE`: the driver's type byte (`'K'` for amdkfd).
pub const fn kind(request: u32) -> u32 {
    (request >> 8) & 0xff
}

/// `_IOC_SIZE`: the size of the argument struct the request was built with.
pub const fn size(request: u32) -> usize {
    ((request >> 16) & 0x3fff) as usize
}

/// `_IOC_DIR`: [`WRITE`], [`READ`], both, or neither.
pub const fn dir(request: u32) -> u32 {
    request >> 30
}

/// True when the request has the [`READ`] direction (the kernel copies the argument back out).
pub const fn copies_out(request: u32) -> bool {
    dir(request) & READ != 0
}

/// True for an amdkfd request (type `'K'`). Other drivers use `'K'` too (the keyboard's
/// `KDGKBTYPE` is `0x4B33`): the type byte alone does not say the fd is `/dev/kfd`.
pub const fn is_kfd(request: u32) -> bool {
    kind(request) == KFD_TYPE
}

/// A `T` from the front of `bytes`: as many of its bytes as `bytes` holds, the rest zero. This
/// is how the kernel reads an argument an older caller built smaller (amdkfd copies `_IOC_SIZE`
/// of the caller's request into a zeroed buffer of its own size).
pub fn load<T: FromBytes + IntoBytes>(bytes: &[u8]) -> T {
    let mut v = T::new_zeroed();
    let dst = v.as_mut_bytes();
    let n = bytes.len().min(dst.len());
    dst[..n].copy_from_slice(&bytes[..n]);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kfd_ioctl_create_queue_args;

    #[test]
    fn fields_of_a_kfd_request() {
        let create = crate::AMDKFD_IOC_CREATE_QUEUE;
        assert_eq!(nr(create), 0x02);
        assert!(is_kfd(create));
        assert_eq!(dir(create), READ | WRITE);
        assert!(copies_out(create));
        assert_eq!(size(create), size_of::<kfd_ioctl_create_queue_args>());
        let update = crate::AMDKFD_IOC_UPDATE_QUEUE;
        assert_eq!((nr(update), dir(update)), (0x07, WRITE));
        assert!(!copies_out(update));
        let bytes = size_of::<kfd_ioctl_create_queue_args>();
        assert_eq!(request(READ | WRITE, KFD_TYPE, 0x02, bytes), create);
        // KDGKBTYPE: type 'K', no size, no direction; a keyboard ioctl, not amdkfd's.
        assert!(is_kfd(0x4B33));
        assert_eq!((nr(0x4B33), size(0x4B33), dir(0x4B33)), (0x33, 0, 0));
    }

    #[test]
    fn load_zero_fills_what_a_short_caller_left_out() {
        let full = kfd_ioctl_create_queue_args {
            ring_size: 4096,
            ctl_stack_size: 7,
            sdma_engine_id: 9,
            ..Default::default()
        };
        let short: kfd_ioctl_create_queue_args = load(&full.as_bytes()[..88]);
        assert_eq!((short.ring_size, short.ctl_stack_size), (4096, 7));
        assert_eq!(short.sdma_engine_id, 0, "past the caller's 88 bytes");
        let long = [full.as_bytes(), &[0xff; 8]].concat();
        assert_eq!(load::<kfd_ioctl_create_queue_args>(&long), full);
    }
}
