//! libc's `ioctl`, behind the shim's own export: resolved once (`RTLD_NEXT`, never the shim), the
//! raw system call when it cannot be found. Every ioctl the shim does not handle, and every one
//! it handles, ends here.

use std::ffi::{c_int, c_ulong, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// libc's `ioctl` (variadic in C; calling a C-variadic function pointer is stable Rust).
type LibcIoctl = unsafe extern "C" fn(c_int, c_ulong, ...) -> c_int;

static REAL_IOCTL: AtomicUsize = AtomicUsize::new(0);
/// Marker: libc's `ioctl` could not be resolved; use the raw system call.
const USE_SYSCALL: usize = 1;

/// Forwards to libc's `ioctl`.
///
/// # Safety
/// `arg` must be what the request expects (the caller's contract with the kernel).
#[inline(always)]
pub unsafe fn forward(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let p = REAL_IOCTL.load(Ordering::Relaxed);
    if p > USE_SYSCALL {
        // SAFETY: `p` is libc's `ioctl` (resolved below); arguments are the caller's.
        return unsafe { std::mem::transmute::<usize, LibcIoctl>(p)(fd, request, arg) };
    }
    // SAFETY: as above.
    unsafe { forward_cold(fd, request, arg) }
}

#[cold]
#[inline(never)]
unsafe fn forward_cold(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let mut p = REAL_IOCTL.load(Ordering::Relaxed);
    if p == 0 {
        p = crate::sys::resolve_next(c"ioctl", Some(c"GLIBC_2.2.5")).unwrap_or(USE_SYSCALL);
        REAL_IOCTL.store(p, Ordering::Relaxed);
    }
    if p > USE_SYSCALL {
        // SAFETY: `p` is libc's `ioctl`.
        return unsafe { std::mem::transmute::<usize, LibcIoctl>(p)(fd, request, arg) };
    }
    // SAFETY: the raw system call with the caller's arguments; errno is set by `syscall`.
    unsafe { libc::syscall(libc::SYS_ioctl, fd, request, arg) as c_int }
}
