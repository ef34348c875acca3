//! libc's `ioctl`, behind the shim's own export: resolved once, when the shim is loaded (an
//! `.init_array` entry: `RTLD_NEXT`, never the shim), the raw system call when it cannot be
//! found or before that entry ran (an ioctl from an earlier constructor). Nothing is resolved on
//! first use: that first use may be in a signal handler or a forked child, where `dlsym` is not
//! safe. Every ioctl the shim does not handle, and every one it handles, ends here.

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
        // SAFETY: `p` is libc's `ioctl` (`resolve_at_load` stores only what `resolve_next` found,
        // a definition outside the shim, or a marker at most USE_SYSCALL); arguments are the
        // caller's.
        return unsafe { std::mem::transmute::<usize, LibcIoctl>(p)(fd, request, arg) };
    }
    // SAFETY: the caller's contract is `forward_cold`'s.
    unsafe { forward_cold(fd, request, arg) }
}

#[cold]
#[inline(never)]
/// # Safety
/// As [`forward`].
unsafe fn forward_cold(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // Unresolved (before the load-time entry ran) or not found: the system call itself, which
    // needs nothing resolved.
    // SAFETY: the raw system call with the caller's arguments; errno is set by `syscall`.
    unsafe { libc::syscall(libc::SYS_ioctl, fd, request, arg) as c_int }
}

/// Resolves libc's `ioctl`: the shim's load-time entry runs this once (at `LD_PRELOAD` before
/// `main`, at `dlopen` in the calling thread); a call through the export that comes before it
/// takes the system call.
pub fn resolve_at_load() {
    let p = crate::sys::resolve_next(c"ioctl", Some(c"GLIBC_2.2.5")).unwrap_or(USE_SYSCALL);
    REAL_IOCTL.store(p, Ordering::Relaxed);
}

extern "C" fn resolve_at_load_entry() {
    resolve_at_load();
}

#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_at_load_entry;
