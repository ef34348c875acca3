//! The shim's request hints (`kfdq_request_begin()` / `kfdq_request_end()`,
//! shim/include/kfdq.h), looked up at run time with `dlsym(RTLD_DEFAULT)`: with the shim
//! preloaded they are its functions, without it there are none and nothing is called.

use std::ffi::{CStr, c_int};

type RequestFn = unsafe extern "C" fn() -> c_int;

/// The two hint functions, when the shim is loaded.
#[derive(Debug, Clone, Copy)]
pub struct Hints {
    begin: Option<RequestFn>,
    end: Option<RequestFn>,
}

fn lookup(name: &CStr) -> Option<RequestFn> {
    // SAFETY: RTLD_DEFAULT searches the loaded objects; `name` is NUL-terminated.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    // SAFETY: when non-null, `p` is the shim's `int kfdq_request_begin(void)` (or `_end`), whose
    // prototype `RequestFn` states; function and data pointers have one size.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, RequestFn>(p) })
}

impl Hints {
    /// Looks the functions up (`None` of each without the shim).
    pub fn find() -> Hints {
        Hints {
            begin: lookup(c"kfdq_request_begin"),
            end: lookup(c"kfdq_request_end"),
        }
    }

    /// Whether the shim's functions were found.
    pub fn present(&self) -> bool {
        self.begin.is_some() && self.end.is_some()
    }

    /// kfdq_request_begin(), when present: its status.
    pub fn begin(&self) -> Option<c_int> {
        // SAFETY: the shim's function, taking nothing; safe to call from any thread.
        self.begin.map(|f| unsafe { f() })
    }

    /// kfdq_request_end(), when present: its status.
    pub fn end(&self) -> Option<c_int> {
        // SAFETY: as for `begin`.
        self.end.map(|f| unsafe { f() })
    }
}
