//! Pointers to the real HIP functions, resolved behind the preload and cached once found.
//!
//! Where: first `RTLD_NEXT` (the runtime in the global scope, as a program linked with HIP has
//! it), then any `libamdhip64.*` in the link map (a runtime an `RTLD_LOCAL` library pulled in:
//! ctypes, CPython extension modules). A lookup that finds nothing is not cached: the runtime
//! may be loaded later, and the next call looks again.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// `hipErrorNotSupported`: what a wrapper returns when the real library lacks its symbol.
pub const HIP_ERROR_NOT_SUPPORTED: i32 = 801;

const UNRESOLVED: usize = 0;

/// One real function: name, version node, cached address.
pub struct Real {
    name: &'static CStr,
    node: &'static CStr,
    ptr: AtomicUsize,
    warned: AtomicBool,
}

impl Real {
    /// A not yet resolved function `name@node`.
    pub const fn new(name: &'static CStr, node: &'static CStr) -> Real {
        Real {
            name,
            node,
            ptr: AtomicUsize::new(UNRESOLVED),
            warned: AtomicBool::new(false),
        }
    }

    /// The symbol name.
    pub fn name(&self) -> &'static str {
        self.name.to_str().unwrap_or("?")
    }

    /// The real function's address, resolving it until found (see the module); never an address
    /// inside the shim.
    #[inline(always)]
    pub fn get(&self) -> Option<usize> {
        match self.ptr.load(Ordering::Relaxed) {
            UNRESOLVED => self.resolve(),
            p => Some(p),
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self) -> Option<usize> {
        crate::init::ensure_init();
        let r = crate::sys::resolve_next(self.name, Some(self.node))
            .or_else(|| crate::sys::resolve_in_loaded_runtime(self.name, Some(self.node)));
        if let Some(p) = r {
            self.ptr.store(p, Ordering::Relaxed);
        }
        r
    }

    /// Called when no loaded HIP runtime defines the symbol (none is loaded yet, or it lacks
    /// this entry point): warns once, returns `hipErrorNotSupported`.
    #[cold]
    pub fn missing(&self) -> i32 {
        if !self.warned.swap(true, Ordering::Relaxed) {
            let msg = format!(
                "{}@{} is defined by no loaded HIP runtime (libamdhip64.*, global or RTLD_LOCAL); the call returns hipErrorNotSupported (801) until one is loaded",
                self.name(),
                self.node.to_str().unwrap_or("?")
            );
            crate::log::warn_always(&msg);
            let _ = crate::guard::guarded(|| crate::state::STATE.lock().warn(msg.clone()));
        }
        HIP_ERROR_NOT_SUPPORTED
    }
}
