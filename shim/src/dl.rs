//! `dlsym` and `dlvsym`, interposed: a lookup on a handle of the HIP runtime that finds a function
//! the shim wraps hands out the wrapper (what ctypes, hip-python and code that dlopens the
//! runtime itself get), as `hipGetProcAddress` already does.
//!
//! glibc resolves `RTLD_NEXT` (and the namespace of `RTLD_DEFAULT`) relative to its caller's
//! return address, so a wrapper that called the real `dlsym` would make every library's
//! `RTLD_NEXT` relative to the shim. The exported symbols are therefore assembly stubs: for those
//! two pseudo-handles they tail-jump to glibc with the caller's return address untouched; only a
//! real handle reaches Rust. glibc's own `dlsym`/`dlvsym` cannot be looked up with `dlsym` (that
//! is the function being replaced), so they are read once from libc's dynamic symbol table
//! (`bootstrap`): the default-version definitions (`dlsym@@GLIBC_2.34` on current glibc).

use std::ffi::{CStr, c_char, c_void};
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

/// glibc's `dlsym`, once found (0 before).
static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// glibc's `dlvsym`, once found (0 before).
static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

// The exported `dlsym(handle, name)` and `dlvsym(handle, name, version)`, naked so that they
// are exported by name (rustc exports `no_mangle` items) yet run no prologue. RTLD_NEXT is
// (void *)-1 and RTLD_DEFAULT is 0 in glibc. Until `bootstrap` has run, the pseudo-handle path
// calls it first (arguments saved, the stack 16-byte aligned at the call), then jumps; if
// glibc's function could not be found the lookup fails (NULL) instead of crashing. Not in the
// unit-test binary: exported there, they would interpose on the test harness.

/// `dlsym(3)`: pseudo-handles go to glibc with the caller's frame untouched; real handles to
/// [`dlsym_on_handle`].
///
/// # Safety
/// As for `dlsym(3)`.
#[cfg(not(test))]
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
#[cfg(not(test))]
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
#[cfg(not(test))]
extern "C" fn bootstrap_from_asm() {
    bootstrap();
}

/// Finds glibc's `dlsym` and `dlvsym` (once; later calls return at once).
fn bootstrap() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // A panic here must not unwind into the assembly stub or C.
        let found = std::panic::catch_unwind(find_in_libc).ok().flatten();
        match found {
            Some((s, v)) => {
                REAL_DLSYM.store(s, Ordering::Release);
                REAL_DLVSYM.store(v, Ordering::Release);
            }
            None => crate::log::warn_always(
                "could not find glibc's dlsym/dlvsym in libc's symbol table: dlsym and dlvsym return NULL in this process; unset LD_PRELOAD to run without the shim",
            ),
        }
    });
}

/// (dlsym, dlvsym) of the libc this process runs: its file's dynamic symbols at their default
/// version, relocated by its load base.
fn find_in_libc() -> Option<(usize, usize)> {
    let probe = libc::gnu_get_libc_version as *const () as usize;
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables and fills `info`.
    if unsafe { libc::dladdr(probe as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr set a NUL-terminated path owned by the loader.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_str().ok()?;
    let data = std::fs::read(path).ok()?;
    let base = info.dli_fbase as usize;
    let s = default_definition(&data, b"dlsym")?;
    let v = default_definition(&data, b"dlvsym")?;
    Some((base.checked_add(s)?, base.checked_add(v)?))
}

/// The value of the default-version (not hidden) dynamic definition of `name` in `elf`.
fn default_definition(elf: &[u8], name: &[u8]) -> Option<usize> {
    use object::elf::{FileHeader64, SHN_UNDEF, SHT_DYNSYM};
    use object::read::elf::{FileHeader, Sym};
    let header = FileHeader64::<object::Endianness>::parse(elf).ok()?;
    let endian = header.endian().ok()?;
    let sections = header.sections(endian, elf).ok()?;
    let dynsym = sections.symbols(endian, elf, SHT_DYNSYM).ok()?;
    let versions = sections.versions(endian, elf).ok()?;
    dynsym.enumerate().find_map(|(index, sym)| {
        let hidden = versions
            .as_ref()
            .is_some_and(|t| t.version_index(endian, index).is_hidden());
        (sym.name(endian, dynsym.strings()).ok()? == name
            && sym.st_shndx(endian) != SHN_UNDEF
            && !hidden)
            .then(|| sym.st_value(endian) as usize)
    })
}

/// glibc's `dlsym`, for the shim's own lookups on real handles (no substitution).
pub fn dlsym_real(handle: *mut c_void, name: &CStr) -> *mut c_void {
    let p = REAL_DLSYM.load(Ordering::Acquire);
    let p = if p == 0 {
        bootstrap();
        REAL_DLSYM.load(Ordering::Acquire)
    } else {
        p
    };
    if p == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `p` is glibc's dlsym (bootstrap found it in libc's symbol table).
    let f = unsafe { std::mem::transmute::<usize, DlsymFn>(p) };
    // SAFETY: `name` is NUL-terminated; the handle is the caller's.
    unsafe { f(handle, name.as_ptr()) }
}

/// glibc's `dlvsym`, for the shim's own lookups on real handles (no substitution).
pub fn dlvsym_real(handle: *mut c_void, name: &CStr, version: &CStr) -> *mut c_void {
    let p = REAL_DLVSYM.load(Ordering::Acquire);
    let p = if p == 0 {
        bootstrap();
        REAL_DLVSYM.load(Ordering::Acquire)
    } else {
        p
    };
    if p == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `p` is glibc's dlvsym (bootstrap found it in libc's symbol table).
    let f = unsafe { std::mem::transmute::<usize, DlvsymFn>(p) };
    // SAFETY: both strings are NUL-terminated; the handle is the caller's.
    unsafe { f(handle, name.as_ptr(), version.as_ptr()) }
}

/// `dlsym` on a real handle (the stub's jump target; `caller` is the return address).
///
/// # Safety
/// As for `dlsym(3)`.
#[cfg(not(test))]
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
#[cfg(not(test))]
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
#[cfg(not(test))]
fn substitute(name: &CStr, got: *mut c_void, caller: usize) -> *mut c_void {
    if got.is_null() || !name.to_bytes().starts_with(b"hip") || crate::sys::in_hip_runtime(caller) {
        return got;
    }
    crate::launch::guarded(|| crate::exports::wrapper_for(name, got as usize))
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

#[cfg(test)]
mod tests {
    #[test]
    fn libc_s_dlsym_is_found_at_its_default_version() {
        let (s, v) = super::find_in_libc().expect("libc's dlsym and dlvsym");
        // The unit-test binary does not export the stubs, so libc's symbols are what the
        // loader binds `libc::dlsym`/`libc::dlvsym` to here.
        assert_eq!(s, libc::dlsym as *const () as usize);
        assert_eq!(v, libc::dlvsym as *const () as usize);
    }
}
