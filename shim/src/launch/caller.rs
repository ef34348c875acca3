//! Which library the exported call in progress comes from: a passthrough library's calls are
//! never held. Classified once per return address (a lock-free cache).

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

/// Caller classification cache: return address -> passthrough or not. Fixed size, lock-free,
/// open addressing; a full neighbourhood just means "classify again".
const CACHE_SLOTS: usize = 256;
static CACHE_KEYS: [AtomicUsize; CACHE_SLOTS] = [const { AtomicUsize::new(0) }; CACHE_SLOTS];
static CACHE_VALS: [AtomicU8; CACHE_SLOTS] = [const { AtomicU8::new(0) }; CACHE_SLOTS];
const CLASS_APP: u8 = 1;
const CLASS_PASSTHROUGH: u8 = 2;

/// True when the exported call in progress comes from a passthrough library (never held).
pub(super) fn caller_is_passthrough() -> bool {
    let Some(ra) = crate::sys::external_caller() else {
        return false;
    };
    let start = (ra >> 2).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
    for i in 0..8 {
        let slot = (start + i) % CACHE_SLOTS;
        let k = CACHE_KEYS[slot].load(Ordering::Acquire);
        if k == ra {
            match CACHE_VALS[slot].load(Ordering::Acquire) {
                CLASS_PASSTHROUGH => return true,
                CLASS_APP => return false,
                _ => break, // being filled in
            }
        }
        if k == 0 {
            break;
        }
    }
    let obj = crate::sys::object_of(ra.saturating_sub(1));
    let pass = obj.as_ref().is_some_and(|o| {
        !o.main_program
            && (crate::config::is_hip_runtime(&o.file)
                || crate::config::is_passthrough(&crate::config::config().passthrough, &o.file))
    });
    crate::log::debug(|| {
        format!(
            "caller {ra:#x} in {:?}: passthrough={pass}",
            obj.as_ref().map(|o| o.file.as_str())
        )
    });
    for i in 0..8 {
        let slot = (start + i) % CACHE_SLOTS;
        if CACHE_KEYS[slot]
            .compare_exchange(0, ra, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            CACHE_VALS[slot].store(
                if pass { CLASS_PASSTHROUGH } else { CLASS_APP },
                Ordering::Release,
            );
            break;
        }
    }
    pass
}
