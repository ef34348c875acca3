//! The watcher's scheduling request: a short time slice, so that its wake-up preempts a
//! thread that is running on its CPU instead of waiting for that thread's slice to end.
//!
//! Linux's EEVDF scheduler (6.6) gives each task a deadline of its eligible time plus its
//! slice; since 6.12 a task may ask for its own slice (`sched_setattr` with `SCHED_OTHER` and
//! `sched_runtime`, 0.1-100 ms, no privilege needed), and a woken task whose deadline comes
//! earlier than the running one's preempts it. The watcher runs for microseconds per edge, so
//! a 100 µs slice costs the process nothing; it asks once, at its start. A kernel that does not
//! know the field (before 6.12: EINVAL, or E2BIG for an older struct) leaves the default.

use std::time::Duration;

/// The slice the watcher asks for: the shortest the kernel takes (100 µs).
pub const WATCHER_SLICE: Duration = Duration::from_micros(100);

/// `struct sched_attr` (include/uapi/linux/sched/types.h), the first version's 48 bytes with
/// the utilization clamps of version 1 (56 bytes).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Asks the kernel for a `slice` for the calling thread (`SCHED_OTHER` at its current nice
/// value). Whether it was taken: false on a kernel without custom slices.
pub fn request_slice(slice: Duration) -> bool {
    // SAFETY: getpriority takes its arguments by value and touches no memory of ours; -1 is
    // also a valid nice value, and on failure (none for the calling thread) it is what is kept.
    let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_nice: nice,
        sched_runtime: u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX),
        ..SchedAttr::default()
    };
    // SAFETY: sched_setattr(0, attr, 0) reads `attr.size` bytes, which is the struct passed,
    // and writes nothing; it acts on the calling thread only.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's `sched_attr`.
    fn attr() -> SchedAttr {
        let mut a = SchedAttr::default();
        // SAFETY: sched_getattr(0, a, size, 0) writes at most `size` bytes into `a`, which is
        // that large, about the calling thread.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_sched_getattr,
                0,
                &mut a as *mut SchedAttr,
                std::mem::size_of::<SchedAttr>() as u32,
                0,
            )
        };
        assert_eq!(rc, 0, "sched_getattr: {}", std::io::Error::last_os_error());
        a
    }

    #[test]
    fn the_slice_is_taken_or_nothing_changes_and_the_nice_value_is_kept() {
        std::thread::spawn(|| {
            // SAFETY: setpriority takes its arguments by value; 0 is the calling thread.
            let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) };
            assert_eq!(rc, 0, "a thread may lower its own priority");
            let before = attr();
            let taken = request_slice(WATCHER_SLICE);
            let after = attr();
            assert_eq!(after.sched_nice, 5, "the nice value is kept");
            assert_eq!(after.sched_policy, libc::SCHED_OTHER as u32);
            if taken {
                assert_eq!(after.sched_runtime, 100_000, "the slice, in ns");
            } else {
                assert_eq!(
                    after.sched_runtime, before.sched_runtime,
                    "refused: unchanged"
                );
            }
        })
        .join()
        .expect("the test thread");
    }
}
