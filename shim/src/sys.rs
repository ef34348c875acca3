//! Low-level helpers: symbol resolution behind the preload, and caller lookup.

use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The process's effective user id.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

/// Base address of the shim's own image (for "is this address inside the shim?").
pub fn self_base() -> usize {
    static BASE: AtomicUsize = AtomicUsize::new(0);
    let b = BASE.load(Ordering::Relaxed);
    if b != 0 {
        return b;
    }
    let b = object_of(self_base as *const () as usize)
        .map(|o| o.base)
        .unwrap_or(usize::MAX);
    BASE.store(b, Ordering::Relaxed);
    b
}

/// The loaded object an address belongs to.
pub struct Object {
    /// Load base.
    pub base: usize,
    /// File name (last path component), lossy.
    pub file: String,
    /// True for the main program.
    pub main_program: bool,
}

/// `dladdr` on `addr`.
pub fn object_of(addr: usize) -> Option<Object> {
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the address value and fills the out struct.
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 {
        return None;
    }
    let path = if info.dli_fname.is_null() {
        String::new()
    } else {
        // SAFETY: dladdr returns a NUL-terminated string owned by the loader, valid while the
        // object stays loaded; we copy it at once.
        unsafe { CStr::from_ptr(info.dli_fname) }
            .to_string_lossy()
            .into_owned()
    };
    let main_program = main_base() == Some(info.dli_fbase as usize);
    let file = path.rsplit('/').next().unwrap_or("").to_string();
    Some(Object {
        base: info.dli_fbase as usize,
        file,
        main_program,
    })
}

/// Load base of the main program (the object `dlopen(NULL)` names).
fn main_base() -> Option<usize> {
    static BASE: AtomicUsize = AtomicUsize::new(0);
    let b = BASE.load(Ordering::Relaxed);
    if b != 0 {
        return Some(b);
    }
    // SAFETY: `getauxval(AT_PHDR)` reads the auxiliary vector; no pointer is dereferenced.
    let phdr = unsafe { libc::getauxval(libc::AT_PHDR) } as usize;
    if phdr == 0 {
        return None;
    }
    let mut info = libc::Dl_info {
        dli_fname: std::ptr::null(),
        dli_fbase: std::ptr::null_mut(),
        dli_sname: std::ptr::null(),
        dli_saddr: std::ptr::null_mut(),
    };
    // SAFETY: as in `object_of`.
    if unsafe { libc::dladdr(phdr as *const c_void, &mut info) } == 0 {
        return None;
    }
    let b = info.dli_fbase as usize;
    BASE.store(b, Ordering::Relaxed);
    Some(b)
}

/// Resolves `name` (preferably at version `node`) in the objects loaded after the shim
/// (`RTLD_NEXT`), refusing any definition that lies inside the shim itself.
pub fn resolve_next(name: &CStr, node: Option<&CStr>) -> Option<usize> {
    let mut p: *mut c_void = std::ptr::null_mut();
    if let Some(node) = node {
        // SAFETY: both strings are NUL-terminated and outlive the call.
        p = unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), node.as_ptr()) };
    }
    if p.is_null() {
        // SAFETY: as above.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    }
    if p.is_null() {
        return None;
    }
    let addr = p as usize;
    // docs/field-reports.md, lesson 1: never hand back a pointer into ourselves (that recurses forever).
    match object_of(addr) {
        Some(o) if o.base == self_base() => None,
        _ => Some(addr),
    }
}

/// Resolves `name` (preferably at version `node`) in a HIP runtime that is loaded but not in
/// the global scope: one an `RTLD_LOCAL` library pulled in (ctypes, CPython extension modules).
/// Walks the link map (`dl_iterate_phdr`) for objects named `libamdhip64.*`, takes a handle on
/// each without loading anything (`RTLD_NOLOAD`; the handle is kept, so the runtime stays
/// loaded while the shim holds pointers into it) and looks the symbol up there.
pub fn resolve_in_loaded_runtime(name: &CStr, node: Option<&CStr>) -> Option<usize> {
    let me = self_base();
    for path in loaded_objects()
        .into_iter()
        .filter(|(base, path)| *base != me && is_hip_runtime_path(path))
        .map(|(_, path)| path)
    {
        let Ok(c) = std::ffi::CString::new(path) else {
            continue;
        };
        // SAFETY: `c` is NUL-terminated; RTLD_NOLOAD only returns a handle on an object that is
        // already loaded (bumping its reference count), it never runs initialisers.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if h.is_null() {
            continue;
        }
        // glibc's own functions: the exported dlsym would hand back the shim's wrapper.
        let mut p: *mut c_void = std::ptr::null_mut();
        if let Some(node) = node {
            p = crate::libc_dlsym::dlvsym_real(h, name, node);
        }
        if p.is_null() {
            p = crate::libc_dlsym::dlsym_real(h, name);
        }
        if !p.is_null() && object_of(p as usize).is_none_or(|o| o.base != me) {
            return Some(p as usize);
        }
    }
    None
}

/// Whether `addr` lies in a loaded HIP runtime (`libamdhip64.so*`).
pub fn in_hip_runtime(addr: usize) -> bool {
    object_of(addr).is_some_and(|o| is_hip_runtime_path(&o.file))
}

/// `libamdhip64.so`, `libamdhip64.so.6`, `/opt/rocm/lib/libamdhip64.so.6.4.60403`, ...
fn is_hip_runtime_path(path: &str) -> bool {
    path.rsplit('/')
        .next()
        .is_some_and(|f| f.starts_with("libamdhip64.so"))
}

/// (load base, path) of every loaded object with a path.
fn loaded_objects() -> Vec<(usize, String)> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: glibc passes a valid `dl_phdr_info` for the duration of the callback, and
        // `data` is the `Vec` passed to `dl_iterate_phdr` below, alive and unaliased meanwhile.
        unsafe {
            let out = &mut *(data as *mut Vec<(usize, String)>);
            let info = &*info;
            if !info.dlpi_name.is_null() {
                let name = CStr::from_ptr(info.dlpi_name)
                    .to_string_lossy()
                    .into_owned();
                if !name.is_empty() {
                    out.push((info.dlpi_addr as usize, name));
                }
            }
        }
        0
    }
    let mut out: Vec<(usize, String)> = Vec::new();
    // SAFETY: the callback only reads the info glibc hands it and appends to `out`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut out as *mut _ as *mut c_void) };
    out
}

/// Return address of the first frame outside the shim: the code that called the exported
/// wrapper. Uses glibc's `backtrace` (the unwinder, through `.eh_frame`), so it needs no frame
/// pointers and does not depend on how the wrapper was inlined. Microseconds: slow path only.
pub fn external_caller() -> Option<usize> {
    let mut frames = [std::ptr::null_mut::<c_void>(); 32];
    // SAFETY: the buffer holds 32 entries and we pass 32.
    let n = unsafe { libc::backtrace(frames.as_mut_ptr(), frames.len() as libc::c_int) };
    let me = self_base();
    frames[..n.max(0) as usize]
        .iter()
        .map(|f| *f as usize)
        .find(|&ra| {
            object_of(ra.saturating_sub(1))
                .map(|o| o.base != me)
                .unwrap_or(true)
        })
}
