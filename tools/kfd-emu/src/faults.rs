//! Injected failures: a test makes chosen `dev/kfd` ioctls fail with a chosen errno, to see what
//! the code above the kernel does when the kernel refuses (a DESTROY_QUEUE that fails leaves the
//! queue and its buffers with the kernel). Set at run time in-process through
//! [`crate::MountedEmu::inject`], from another process through the mount's `kfd-emu/faults`
//! control file, or at start with `kfd-emu --fault SPEC` (the text form: `fault_spec.rs`);
//! none by default.
//!
//! An injected errno answers before the handler runs, so the call changes nothing in the
//! emulator, as a kernel's early `return -E...` would not. A preempt timeout also answers
//! before the handler, and resets the partition ([`crate::reset`]).

use std::sync::Mutex;

pub use kfd_emu_api::{Failure, Fault, FaultSpec, FaultStats, FaultsFile, SpecError, When};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One failure in effect: its spec, the matching calls it has seen and failed, and its random
/// stream (probability faults).
#[derive(Debug)]
struct Active {
    spec: FaultSpec,
    calls: u64,
    failed: u64,
    rng: ChaCha8Rng,
}

/// The failures in effect, with the calls each has seen, and why the control file's last
/// write was refused.
#[derive(Debug, Default)]
pub(crate) struct Faults(Mutex<Vec<Active>>, Mutex<Option<String>>);

impl Faults {
    /// Adds `f` (its call count starts at 0).
    pub fn inject(&self, f: impl Into<FaultSpec>) {
        let spec = f.into();
        let seed = match spec.when {
            When::Probability { seed, .. } => seed,
            When::Every(_) => 0,
        };
        crate::locks::lock(&self.0, "faults").push(Active {
            spec,
            calls: 0,
            failed: 0,
            rng: ChaCha8Rng::seed_from_u64(seed),
        });
    }

    /// Removes every injected failure.
    pub fn clear(&self) {
        crate::locks::lock(&self.0, "faults").clear();
    }

    /// Why the control file's last write was refused (`None`: it was not).
    pub fn refused(&self) -> Option<String> {
        crate::locks::lock(&self.1, "faults").clone()
    }

    /// Records why a write was refused, or that the last one was not.
    pub fn set_refused(&self, why: Option<String>) {
        *crate::locks::lock(&self.1, "faults") = why;
    }

    /// The failures in effect and their counts.
    pub fn list(&self) -> Vec<FaultStats> {
        crate::locks::lock(&self.0, "faults")
            .iter()
            .map(|a| FaultStats {
                spec: a.spec.to_string(),
                calls: a.calls,
                failed: a.failed,
            })
            .collect()
    }

    /// Counts a call of request number `nr` (DBG_TRAP operation `dbg_op`); what it does
    /// instead of running, if a fault says so (the first that fires; every matching fault
    /// counts the call).
    pub fn check(&self, nr: u32, dbg_op: Option<u32>) -> Option<Failure> {
        let mut faults = crate::locks::lock(&self.0, "faults");
        let mut failed = None;
        for a in faults.iter_mut().filter(|a| {
            kfd_sys::ioc::nr(a.spec.ioctl) == nr
                && (a.spec.dbg_op.is_none() || a.spec.dbg_op == dbg_op)
        }) {
            a.calls += 1;
            let fires = match a.spec.when {
                When::Every(n) => a.calls % u64::from(n.max(1)) == 0,
                // Drawn for every matching call, so the sequence depends only on the seed and
                // the calls' order.
                When::Probability { p, .. } => a.rng.random_bool(p),
            };
            let spent = a.spec.times.is_some_and(|t| a.failed >= t);
            if failed.is_none() && fires && !spent {
                a.failed += 1;
                failed = Some(a.spec.failure);
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
        assert_eq!(faults.check(destroy, None), None, "none by default");
        faults.inject(Fault {
            ioctl: kfd_sys::AMDKFD_IOC_DESTROY_QUEUE,
            errno: libc::EBUSY,
            every: 3,
        });
        let seen: Vec<Option<Failure>> = (0..6).map(|_| faults.check(destroy, None)).collect();
        let e = Some(Failure::Errno(libc::EBUSY));
        assert_eq!(seen, [None, None, e, None, None, e]);
        assert_eq!(faults.check(create, None), None, "other ioctls pass");
        faults.clear();
        assert_eq!(faults.check(destroy, None), None);
        faults.inject(Fault::always(kfd_sys::AMDKFD_IOC_CREATE_QUEUE, libc::EIO));
        assert_eq!(faults.check(create, None), Some(Failure::Errno(libc::EIO)));
        assert_eq!(faults.check(create, None), Some(Failure::Errno(libc::EIO)));
    }

    #[test]
    fn probability_faults_repeat_with_their_seed_and_times_bounds_them() {
        let update = kfd_sys::ioc::nr(kfd_sys::AMDKFD_IOC_UPDATE_QUEUE);
        let run = |seed: u64| {
            let faults = Faults::default();
            faults.inject(FaultSpec {
                ioctl: kfd_sys::AMDKFD_IOC_UPDATE_QUEUE,
                dbg_op: None,
                failure: Failure::Errno(libc::EIO),
                when: When::Probability { p: 0.3, seed },
                times: None,
            });
            (0..200)
                .map(|_| faults.check(update, None).is_some())
                .collect::<Vec<bool>>()
        };
        let a = run(7);
        assert_eq!(a, run(7), "same seed, same failures");
        assert_ne!(a, run(8), "another seed, other failures");
        let n = a.iter().filter(|f| **f).count();
        assert!((30..90).contains(&n), "{n} of 200 at p=0.3");

        let faults = Faults::default();
        faults.inject("update_queue=EBUSY,times=2".parse::<FaultSpec>().unwrap());
        let seen: Vec<bool> = (0..4)
            .map(|_| faults.check(update, None).is_some())
            .collect();
        assert_eq!(seen, [true, true, false, false]);
        assert_eq!(
            faults.list(),
            [FaultStats {
                spec: "update_queue=EBUSY,every=1,times=2".into(),
                calls: 4,
                failed: 2
            }]
        );
    }

    #[test]
    fn a_dbg_trap_fault_matches_its_operation_only() {
        let nr = kfd_sys::ioc::nr(kfd_sys::AMDKFD_IOC_DBG_TRAP);
        let suspend = Some(kfd_sys::KFD_IOC_DBG_TRAP_SUSPEND_QUEUES);
        let resume = Some(kfd_sys::KFD_IOC_DBG_TRAP_RESUME_QUEUES);
        let faults = Faults::default();
        faults.inject("dbg_trap/suspend_queues=EIO".parse::<FaultSpec>().unwrap());
        assert_eq!(faults.check(nr, resume), None);
        assert_eq!(faults.check(nr, suspend), Some(Failure::Errno(libc::EIO)));
        assert_eq!(faults.list()[0].calls, 1, "the resume was not counted");
    }
}
