//! Locks that survive a panicking holder: a thread that panicked while holding one of the
//! emulator's locks must not turn every other thread's next lock into a panic (FUSE threads, the
//! CP, the reaper). The data behind the lock is used as the panicking thread left it, and the
//! first recovery of each lock is logged.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{
    Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
};

/// Whether a recovery was already logged (one line per process is enough to point at the panic
/// that caused it, which was logged when it happened).
static LOGGED: AtomicBool = AtomicBool::new(false);

fn recovered<G>(what: &str, e: PoisonError<G>) -> G {
    if !LOGGED.swap(true, Ordering::Relaxed) {
        tracing::error!(
            lock = what,
            "a thread panicked holding this lock; going on with its data"
        );
    }
    e.into_inner()
}

/// Locks `m`, recovering it if a holder panicked.
pub(crate) fn lock<'a, T>(m: &'a Mutex<T>, what: &str) -> MutexGuard<'a, T> {
    m.lock().unwrap_or_else(|e| recovered(what, e))
}

/// Locks `m` if no other thread holds it now (recovering it if a holder panicked); `None`
/// when one does.
pub(crate) fn try_lock<'a, T>(m: &'a Mutex<T>, what: &str) -> Option<MutexGuard<'a, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(recovered(what, e)),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Read-locks `l`, recovering it if a writer panicked.
pub(crate) fn read<'a, T>(l: &'a RwLock<T>, what: &str) -> RwLockReadGuard<'a, T> {
    l.read().unwrap_or_else(|e| recovered(what, e))
}

/// Write-locks `l`, recovering it if a holder panicked.
pub(crate) fn write<'a, T>(l: &'a RwLock<T>, what: &str) -> RwLockWriteGuard<'a, T> {
    l.write().unwrap_or_else(|e| recovered(what, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_is_recovered_with_its_data() {
        let m = std::sync::Arc::new(Mutex::new(5));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let mut g = m2.lock().unwrap();
            *g = 6;
            panic!("holder panics");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m, "test"), 6);
        let l = std::sync::Arc::new(RwLock::new(1));
        let l2 = l.clone();
        let _ = std::thread::spawn(move || {
            let _g = l2.write().unwrap();
            panic!("writer panics");
        })
        .join();
        assert_eq!(*read(&l, "test"), 1);
        *write(&l, "test") = 2;
        assert_eq!(*read(&l, "test"), 2);
    }
}
