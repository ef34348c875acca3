//! glibc's own `dlsym` and `dlvsym`, for the shim's lookups on real handles.
//!
//! The shim exports `dlsym` and `dlvsym` itself (`dl.rs`), so glibc's functions cannot be looked
//! up with `dlsym` (that is the function being replaced): they are read once from libc's dynamic
//! symbol table (`bootstrap`): the default-version definitions (`dlsym@@GLIBC_2.34` on current
//! glibc).

use std::ffi::{CStr, c_char, c_void};
use std::sync::Once;
use std::sync::atomic::{AtomicUsize, Ordering};

/// glibc's `dlsym`, once found (0 before; the exported stubs jump to it).
pub static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
/// glibc's `dlvsym`, once found (0 before; the exported stubs jump to it).
pub static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type DlvsymFn = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// Finds glibc's `dlsym` and `dlvsym` (once; later calls return at once).
pub fn bootstrap() {
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

/// The address in `slot`, after a first [`bootstrap`] if it is not known yet (0: not found).
fn found(slot: &AtomicUsize) -> usize {
    match slot.load(Ordering::Acquire) {
        0 => {
            bootstrap();
            slot.load(Ordering::Acquire)
        }
        p => p,
    }
}

/// glibc's `dlsym`, for the shim's own lookups on real handles (no substitution).
pub fn dlsym_real(handle: *mut c_void, name: &CStr) -> *mut c_void {
    let p = found(&REAL_DLSYM);
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
    let p = found(&REAL_DLVSYM);
    if p == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `p` is glibc's dlvsym (bootstrap found it in libc's symbol table).
    let f = unsafe { std::mem::transmute::<usize, DlvsymFn>(p) };
    // SAFETY: both strings are NUL-terminated; the handle is the caller's.
    unsafe { f(handle, name.as_ptr(), version.as_ptr()) }
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
