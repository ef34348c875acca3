//! Pointers to the real HIP functions, resolved once behind the preload and cached.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// `hipErrorNotSupported`: what a wrapper returns when the real library lacks its symbol.
pub const HIP_ERROR_NOT_SUPPORTED: i32 = 801;

const UNRESOLVED: usize = 0;
const MISSING: usize = 1;

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

    /// The real function's address, resolving it on first use: `dlvsym(RTLD_NEXT, name, node)`,
    /// then `dlsym(RTLD_NEXT, name)`; never an address inside the shim.
    #[inline(always)]
    pub fn get(&self) -> Option<usize> {
        match self.ptr.load(Ordering::Relaxed) {
            UNRESOLVED => self.resolve(),
            MISSING => None,
            p => Some(p),
        }
    }

    #[cold]
    #[inline(never)]
    fn resolve(&self) -> Option<usize> {
        // Environment defaults must be in place before the runtime initialises (first call).
        crate::init::ensure_init();
        let r = crate::sys::resolve_next(self.name, Some(self.node));
        self.ptr.store(r.unwrap_or(MISSING), Ordering::Relaxed);
        r
    }

    /// Called when the real library has no such symbol: warns once, returns
    /// `hipErrorNotSupported`.
    #[cold]
    pub fn missing(&self) -> i32 {
        if !self.warned.swap(true, Ordering::Relaxed) {
            let msg = format!(
                "{}@{} is not defined by the HIP runtime loaded after the shim; the call returns hipErrorNotSupported (801)",
                self.name(),
                self.node.to_str().unwrap_or("?")
            );
            crate::log::warn_always(&msg);
            let _ = crate::launch::guarded(|| crate::state::STATE.lock().warn(msg.clone()));
        }
        HIP_ERROR_NOT_SUPPORTED
    }
}
