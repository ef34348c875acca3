//! The bypass flag: set on a thread while the shim itself issues KFD ioctls (through `kfdq::kfd`,
//! which calls libc's `ioctl` and so lands in the shim's own `ioctl` export), so that the ioctl
//! hook sends them straight to libc.

use std::cell::Cell;

thread_local! {
    /// Set while the shim itself issues KFD ioctls.
    pub static BYPASS: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with [`BYPASS`] set on this thread.
pub fn with_bypass<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            BYPASS.with(|b| b.set(self.0));
        }
    }
    let _restore = Restore(BYPASS.with(|b| b.replace(true)));
    f()
}
