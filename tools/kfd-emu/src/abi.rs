//! Argument structs as bytes: the kfd uapi structs the handlers read from and write to the raw
//! argument buffers FUSE passes. The conversions are the zerocopy derives kfd-sys gives the
//! structs it lists (kfd-sys/build/derives.rs), so a struct used here must be on that list.
//! Reading one (`load`) and a request number's fields are kfd-sys's `ioc`, shared with the
//! launch shim's ioctl hook.

use kfd_sys::zerocopy::{Immutable, IntoBytes};

/// Reads a `T` from the front of `buf` (missing trailing bytes read as zero).
pub(crate) use kfd_sys::ioc::load;

/// Writes `v` to the front of `buf` (truncated to `buf.len()`).
pub(crate) fn store<T: IntoBytes + Immutable>(buf: &mut [u8], v: &T) {
    let b = v.as_bytes();
    let n = buf.len().min(b.len());
    buf[..n].copy_from_slice(&b[..n]);
}

/// The bytes of a value.
pub(crate) fn bytes_of<T: IntoBytes + Immutable>(v: &T) -> Vec<u8> {
    v.as_bytes().to_vec()
}

// Fixed-width fields of byte buffers (uapi and DRM structs, AQL packets, kernel arguments, code
// objects) in the host's byte order: the emulator serves x86-64 clients, whose order is also the
// GPU's and the AMDGPU ELF format's (little-endian). `None` past the end of the buffer.

/// The `u16` at byte `at` of `b`.
pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

/// The `u32` at byte `at` of `b`.
pub(crate) fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

/// The `u64` at byte `at` of `b`.
pub(crate) fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Writes `v` at byte `at` of `b` (nothing past the end).
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    if let Some(d) = b.get_mut(at..at.saturating_add(4)) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
}

/// Writes `v` at byte `at` of `b` (nothing past the end).
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    if let Some(d) = b.get_mut(at..at.saturating_add(8)) {
        d.copy_from_slice(&v.to_ne_bytes());
    }
}
