//! A pthread mutex with a condition variable that survives `fork` (the child re-initialises it).
//!
//! Public only so that the doctests below, which must not compile, can name it; nothing outside
//! the shim uses it.
//!
//! Which threads may touch what (the rules of `std::sync::Mutex`, for the same reasons):
//!
//! * [`PMutex<T>`] is `Sync` when `T: Send`: the lock hands the value to one thread at a time,
//!   so the value moves between threads but is never shared. A `T` that is not `Send` (an `Rc`)
//!   makes the mutex unshareable:
//!
//!   ```compile_fail,E0277
//!   fn shared<T: Sync>() {}
//!   shared::<kfdq_shim::pmutex::PMutex<std::rc::Rc<u32>>>();
//!   ```
//!
//! * [`PGuard`] is not `Send`: POSIX leaves unlocking a mutex from a thread that does not own it
//!   undefined, and dropping the guard unlocks. A guard cannot leave its thread:
//!
//!   ```compile_fail,E0277
//!   static M: kfdq_shim::pmutex::PMutex<u32> = kfdq_shim::pmutex::PMutex::new(0);
//!   let guard = M.lock();
//!   std::thread::spawn(move || drop(guard));
//!   ```
//!
//! * [`PGuard`] is `Sync` only when `T: Sync`: a `&PGuard` hands out `&T`, so sharing the guard
//!   shares the value. A guard of a `Cell` cannot be read from two threads:
//!
//!   ```compile_fail,E0277
//!   static M: kfdq_shim::pmutex::PMutex<std::cell::Cell<u32>> =
//!       kfdq_shim::pmutex::PMutex::new(std::cell::Cell::new(0));
//!   let guard = M.lock();
//!   std::thread::scope(|s| {
//!       s.spawn(|| guard.get());
//!   });
//!   ```
//!
//! The same three with types the rules allow compile, so the ones above fail for the reason
//! they state:
//!
//! ```no_run
//! use kfdq_shim::pmutex::PMutex;
//! fn shared<T: Sync>() {}
//! shared::<PMutex<std::cell::Cell<u32>>>();
//! static M: PMutex<u32> = PMutex::new(0);
//! let guard = M.lock();
//! std::thread::scope(|s| {
//!     s.spawn(|| *guard + 1);
//! });
//! drop(guard);
//! std::thread::spawn(|| *M.lock() += 1);
//! ```

use std::cell::UnsafeCell;
use std::marker::PhantomData;

/// A value guarded by a pthread mutex with an attached condition variable.
///
/// Not `std::sync::Mutex` because the `fork` child handler must reset the lock without knowing
/// whether another (now vanished) thread held it: [`PMutex::reset_after_fork`] overwrites both
/// the mutex and the condition variable with their static initialisers.
pub struct PMutex<T> {
    mutex: UnsafeCell<libc::pthread_mutex_t>,
    cond: UnsafeCell<libc::pthread_cond_t>,
    value: UnsafeCell<T>,
}

// SAFETY: every access to `value` goes through a guard, which exists only while its thread holds
// the pthread mutex, so one thread at a time reaches the value: it moves between threads (hence
// `T: Send`) but is never shared through the mutex (a shared guard needs `T: Sync`, below). The
// pthread objects themselves are designed for concurrent use.
unsafe impl<T: Send> Sync for PMutex<T> {}
// SAFETY: moving the container moves a `T: Send`; the pthread objects are not tied to a thread
// while unlocked, and a locked one cannot move (the guard borrows it).
unsafe impl<T: Send> Send for PMutex<T> {}

impl<T> PMutex<T> {
    /// A new unlocked mutex.
    pub const fn new(value: T) -> Self {
        PMutex {
            mutex: UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER),
            cond: UnsafeCell::new(libc::PTHREAD_COND_INITIALIZER),
            value: UnsafeCell::new(value),
        }
    }

    /// Locks the mutex.
    pub fn lock(&self) -> PGuard<'_, T> {
        // SAFETY: the mutex is initialised (static initialiser) and lives as long as `self`.
        unsafe { libc::pthread_mutex_lock(self.mutex.get()) };
        PGuard {
            m: self,
            _owner_thread: PhantomData,
        }
    }

    /// Wakes every thread waiting on the condition variable.
    pub fn notify_all(&self) {
        // SAFETY: initialised condition variable owned by `self`.
        unsafe { libc::pthread_cond_broadcast(self.cond.get()) };
    }

    /// In a `fork` child: forgets whatever state the parent's threads left (without dropping
    /// it: it may be half-updated) and installs `value` with a fresh, unlocked mutex.
    ///
    /// # Safety
    /// Only in the child handler of `pthread_atfork`, where the calling thread is the only one.
    pub unsafe fn reset_after_fork(&self, value: T) {
        // SAFETY: single-threaded child; nobody else can observe the objects while they are
        // overwritten. The old value is leaked on purpose (see above).
        unsafe {
            std::ptr::write(self.mutex.get(), libc::PTHREAD_MUTEX_INITIALIZER);
            std::ptr::write(self.cond.get(), libc::PTHREAD_COND_INITIALIZER);
            std::ptr::write(self.value.get(), value);
        }
    }
}

/// The locked value. Unlocks on drop, on the thread that locked (it is not `Send`).
pub struct PGuard<'a, T> {
    m: &'a PMutex<T>,
    /// Not `Send` (nor, by default, `Sync`: see the `Sync` impl).
    _owner_thread: PhantomData<*const ()>,
}

// SAFETY: a shared guard gives out `&T` only (`DerefMut` needs `&mut PGuard`), so sharing it
// between threads shares a `&T`, which `T: Sync` allows; unlocking stays with the owning thread,
// which alone can drop the guard.
unsafe impl<T: Sync> Sync for PGuard<'_, T> {}

impl<T> std::fmt::Debug for PMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PMutex").finish_non_exhaustive()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for PGuard<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PGuard").field(&**self).finish()
    }
}

impl<T> PGuard<'_, T> {
    /// Waits on the condition variable (releases and re-takes the lock), at most `timeout`.
    pub fn wait_timeout(&mut self, timeout: std::time::Duration) {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: valid out pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut now) };
        let total = now.tv_nsec as u64 + timeout.subsec_nanos() as u64;
        let deadline = libc::timespec {
            tv_sec: now.tv_sec
                + timeout.as_secs() as libc::time_t
                + (total / 1_000_000_000) as libc::time_t,
            tv_nsec: (total % 1_000_000_000) as _,
        };
        // SAFETY: we hold the mutex (this guard exists), both objects are initialised.
        unsafe { libc::pthread_cond_timedwait(self.m.cond.get(), self.m.mutex.get(), &deadline) };
    }
}

impl<T> std::ops::Deref for PGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the mutex is held for the guard's lifetime.
        unsafe { &*self.m.value.get() }
    }
}

impl<T> std::ops::DerefMut for PGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the mutex is held for the guard's lifetime and the guard is borrowed mutably.
        unsafe { &mut *self.m.value.get() }
    }
}

impl<T> Drop for PGuard<'_, T> {
    fn drop(&mut self) {
        // SAFETY: the guard is not `Send`, so this is the thread that locked the mutex in `lock`.
        unsafe { libc::pthread_mutex_unlock(self.m.mutex.get()) };
    }
}
