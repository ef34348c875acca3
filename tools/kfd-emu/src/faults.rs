//! Injected failures: a test makes chosen `dev/kfd` ioctls fail with a chosen errno, to see what
//! the code above the kernel does when the kernel refuses (a DESTROY_QUEUE that fails leaves the
//! queue and its buffers with the kernel). Set at run time through [`crate::MountedEmu::inject`];
//! none by default.
//!
//! An injected failure answers before the handler runs, so the call changes nothing in the
//! emulator, as a kernel's early `return -E...` would not.

use std::sync::Mutex;

/// One injected failure: every `every`-th call of `ioctl` (1 = every call) on `dev/kfd` fails
/// with `errno` instead of running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The request, as the kernel header names it (`kfd_sys::AMDKFD_IOC_DESTROY_QUEUE`);
    /// matched by its number (`_IOC_NR`), as the kernel dispatches.
    pub ioctl: u32,
    /// The errno the call fails with (`libc::EBUSY`).
    pub errno: i32,
    /// Fail one call in `every` (the `every`-th, `2 * every`-th, ...); 0 and 1 fail every call.
    pub every: u32,
}

impl Fault {
    /// `ioctl` fails with `errno` on every call.
    pub fn always(ioctl: u32, errno: i32) -> Fault {
        Fault {
            ioctl,
            errno,
            every: 1,
        }
    }
}

/// The failures in effect, with the calls each has seen.
#[derive(Debug, Default)]
pub(crate) struct Faults(Mutex<Vec<(Fault, u64)>>);

impl Faults {
    /// Adds `f` (its call count starts at 0).
    pub fn inject(&self, f: Fault) {
        crate::locks::lock(&self.0, "faults").push((f, 0));
    }

    /// Removes every injected failure.
    pub fn clear(&self) {
        crate::locks::lock(&self.0, "faults").clear();
    }

    /// Counts a call of request number `nr`; the errno it fails with, if a fault says so.
    pub fn check(&self, nr: u32) -> Option<i32> {
        let mut faults = crate::locks::lock(&self.0, "faults");
        let mut failed = None;
        for (f, calls) in faults
            .iter_mut()
            .filter(|(f, _)| kfd_sys::ioc::nr(f.ioctl) == nr)
        {
            *calls += 1;
            if failed.is_none() && *calls % u64::from(f.every.max(1)) == 0 {
                failed = Some(f.errno);
            }
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nth_call_of_the_chosen_ioctl_fails() {
        let faults = Faults::default();
        let destroy = kfd_sys::ioc::nr(kfd_sys::AMDKFD_IOC_DESTROY_QUEUE);
        let create = kfd_sys::ioc::nr(kfd_sys::AMDKFD_IOC_CREATE_QUEUE);
        assert_eq!(faults.check(destroy), None, "none by default");
        faults.inject(Fault {
            ioctl: kfd_sys::AMDKFD_IOC_DESTROY_QUEUE,
            errno: libc::EBUSY,
            every: 3,
        });
        let seen: Vec<Option<i32>> = (0..6).map(|_| faults.check(destroy)).collect();
        let e = Some(libc::EBUSY);
        assert_eq!(seen, [None, None, e, None, None, e]);
        assert_eq!(faults.check(create), None, "other ioctls pass");
        faults.clear();
        assert_eq!(faults.check(destroy), None);
        faults.inject(Fault::always(kfd_sys::AMDKFD_IOC_CREATE_QUEUE, libc::EIO));
        assert_eq!(faults.check(create), Some(libc::EIO));
        assert_eq!(faults.check(create), Some(libc::EIO));
    }
}
