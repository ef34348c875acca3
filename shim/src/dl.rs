//! `dlsym` and `dlvsym`, interposed: a lookup on a handle of the HIP runtime that finds a function
//! the shim wraps hands out the wrapper (what ctypes, hip-python and code that dlopens the
//! runtime itself get), as `hipGetProcAddress` already does.
//!
//! glibc resolves `RTLD_NEXT` (and the namespace of `RTLD_DEFAULT`) relative to its caller's
//! return address, so a wrapper that called the real `dlsym` would make every library's
//! `RTLD_NEXT` relative to the shim. The exported symbols are therefore assembly stubs: for those
//! two pseudo-handles they tail-jump to glibc with the caller's return address untouched; only a
//! real handle reaches Rust. glibc's own `dlsym`/`dlvsym` are found in libc's dynamic symbol
//! table (`libc_dlsym.rs`).
//!
//! Not in the unit-test binary (see `lib.rs`): exported there, the stubs would interpose on the
//! test harness.

use std::ffi::{CStr, c_char, c_void};

use crate::libc_dlsym::{REAL_DLSYM, REAL_DLVSYM, bootstrap, dlsym_real, dlvsym_real};

// The exported `dlsym(handle, name)` and `dlvsym(handle, name, version)`, naked so that they
// are exported by name (rustc exports `no_mangle` items) yet run no prologue. RTLD_NEXT is
// (void *)-1 and RTLD_DEFAULT is 0 in glibc. Until `bootstrap` has run, the pseudo-handle path
// calls it first (arguments saved, the stack 16-byte aligned at the call), then jumps; if
// glibc's function could not be found the lookup fails (NULL) instead of crashing.

/// `dlsym(3)`: pseudo-handles go to glibc with the caller's frame untouched; real handles to
/// [`dlsym_on_handle`].
///
/// # Safety
/// As for `dlsym(3)`.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "je 2f",
        "test rdi, rdi",
        "je 2f",
        // A real handle: the caller's return address becomes the third argument.
        "mov rdx, qword ptr [rsp]",
        "jmp {handle}",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {bootstrap}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "xor eax, eax",
        "ret",
        handle = sym dlsym_on_handle,
        real = sym REAL_DLSYM,
        bootstrap = sym bootstrap_from_asm,
    )
}

/// `dlvsym(3)`, as [`dlsym`].
///
/// # Safety
/// As for `dlvsym(3)`.
#[unsafe(no_mangle)]
#[unsafe(naked)]
pub unsafe extern "C" fn dlvsym(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "je 2f",
        "test rdi, rdi",
        "je 2f",
        // A real handle: the caller's return address becomes the fourth argument.
        "mov rcx, qword ptr [rsp]",
        "jmp {handle}",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "push rdi",
        "push rsi",
        "push rdx",
        "call {bootstrap}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "xor eax, eax",
        "ret",
        handle = sym dlvsym_on_handle,
        real = sym REAL_DLVSYM,
        bootstrap = sym bootstrap_from_asm,
    )
}

/// Called by the stubs before glibc's functions are known.
extern "C" fn bootstrap_from_asm() {
    bootstrap();
}

/// `dlsym` on a real handle (the stub's jump target; `caller` is the return address).
///
/// # Safety
/// As for `dlsym(3)`.
unsafe extern "C" fn dlsym_on_handle(
    handle: *mut c_void,
    name: *const c_char,
    caller: usize,
) -> *mut c_void {
    if name.is_null() {
        return dlsym_real(handle, c"");
    }
    // SAFETY: dlsym's contract: `name` is a NUL-terminated string.
    let name = unsafe { CStr::from_ptr(name) };
    substitute(name, dlsym_real(handle, name), caller)
}

/// `dlvsym` on a real handle (the stub's jump target; `caller` is the return address).
///
/// # Safety
/// As for `dlvsym(3)`.
unsafe extern "C" fn dlvsym_on_handle(
    handle: *mut c_void,
    name: *const c_char,
    version: *const c_char,
    caller: usize,
) -> *mut c_void {
    if name.is_null() || version.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: dlvsym's contract: both are NUL-terminated strings.
    let (name, version) = unsafe { (CStr::from_ptr(name), CStr::from_ptr(version)) };
    substitute(name, dlvsym_real(handle, name, version), caller)
}

/// `got` unless it is the runtime's definition of a function the shim wraps: then the wrapper.
/// A runtime looking itself up (`caller` inside a HIP runtime) gets its own function.
fn substitute(name: &CStr, got: *mut c_void, caller: usize) -> *mut c_void {
    if got.is_null() || !name.to_bytes().starts_with(b"hip") || crate::sys::in_hip_runtime(caller) {
        return got;
    }
    crate::guard::guarded(|| crate::exports::wrapper_for(name, got as usize))
        .flatten()
        .map_or(got, |w| {
            crate::log::debug(|| {
                format!(
                    "dlsym({}) on a handle of the runtime -> shim wrapper",
                    name.to_string_lossy()
                )
            });
            w as *mut c_void
        })
}
