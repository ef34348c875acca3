//! The watcher's scheduling request: a short time slice, so that its wake-up preempts a
//! thread that is running on its CPU instead of waiting for that thread's slice to end.
//!
//! Linux's EEVDF scheduler (6.6) gives each task a deadline of its eligible time plus its
//! slice; since 6.12 a task may ask for its own slice (`sched_setattr` with `SCHED_OTHER` and
//! `sched_runtime`, 0.1-100 ms, no privilege needed), and a woken task whose deadline comes
//! earlier than the running one's preempts it. The watcher runs for microseconds per edge, so
//! a 100 µs slice costs the process nothing; it asks once, at its start. A thread under another
//! policy (an application run with `chrt`, `SCHED_BATCH` or `SCHED_IDLE`) keeps it: the request
//! is made only for `SCHED_OTHER`, at the thread's own nice value and flags. Before 6.12 the
//! kernel accepts the call and ignores the field, so whether it was taken is read back.

use std::time::Duration;

/// The slice the watcher asks for: the shortest the kernel takes (100 µs).
pub const WATCHER_SLICE: Duration = Duration::from_micros(100);

/// `struct sched_attr` (include/uapi/linux/sched/types.h), the first version's 48 bytes with
/// the utilization clamps of version 1 (56 bytes).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
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

/// `SCHED_FLAG_RESET_ON_FORK`: the one flag `sched_getattr` reports that a request keeps.
const RESET_ON_FORK: u64 = 0x01;

/// The calling thread's `sched_attr`, or `None` if the kernel has no `sched_getattr`.
fn get() -> Option<SchedAttr> {
    let mut a = SchedAttr::default();
    // SAFETY: sched_getattr(0, a, size, 0) writes at most `size` bytes into `a`, which is that
    // large, about the calling thread; on failure it writes nothing that is read.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            0,
            &mut a as *mut SchedAttr,
            std::mem::size_of::<SchedAttr>() as u32,
            0,
        )
    };
    (rc == 0).then_some(a)
}

/// Sets the calling thread's `sched_attr` to `a` (its size field set to this struct's, whatever
/// `sched_getattr` wrote there); whether the kernel accepted it.
fn set(mut a: SchedAttr) -> bool {
    a.size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: sched_setattr(0, a, 0) reads `a.size` bytes, which is the struct passed, and
    // writes nothing; it acts on the calling thread only.
    unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &a as *const SchedAttr, 0) == 0 }
}

/// Asks the kernel for a `slice` for the calling thread if it runs `SCHED_OTHER` (its nice
/// value and reset-on-fork flag kept). Whether the thread now has that slice: false under
/// another policy and on a kernel without custom slices (before Linux 6.12).
pub fn request_slice(slice: Duration) -> bool {
    let Some(mut a) = get() else { return false };
    if a.sched_policy != libc::SCHED_OTHER as u32 {
        return false;
    }
    let want = u64::try_from(slice.as_nanos()).unwrap_or(u64::MAX);
    a.sched_flags &= RESET_ON_FORK;
    a.sched_runtime = want;
    a.sched_deadline = 0;
    a.sched_period = 0;
    set(a) && get().is_some_and(|b| b.sched_runtime == want)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `f` on a thread of its own (the test changes its scheduling).
    fn on_a_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().expect("the test thread");
    }

    #[test]
    fn the_slice_is_taken_or_nothing_changes_and_the_nice_value_is_kept() {
        on_a_thread(|| {
            // SAFETY: setpriority takes its arguments by value; 0 is the calling thread.
            let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 5) };
            assert_eq!(rc, 0, "a thread may lower its own priority");
            let before = get().expect("sched_getattr");
            let taken = request_slice(WATCHER_SLICE);
            let after = get().expect("sched_getattr");
            assert_eq!(after.sched_nice, 5, "the nice value is kept");
            assert_eq!(after.sched_policy, libc::SCHED_OTHER as u32);
            assert_eq!(taken, after.sched_runtime == 100_000, "{after:?}");
            if !taken {
                assert_eq!(
                    after.sched_runtime, before.sched_runtime,
                    "refused: unchanged"
                );
            }
        });
    }

    #[test]
    fn a_thread_under_another_policy_keeps_it() {
        on_a_thread(|| {
            let mut a = get().expect("sched_getattr");
            a.sched_policy = libc::SCHED_BATCH as u32;
            a.sched_runtime = 0;
            assert!(set(a), "any thread may move itself to SCHED_BATCH");
            let before = get().expect("sched_getattr");
            assert!(!request_slice(WATCHER_SLICE));
            let after = get().expect("sched_getattr");
            assert_eq!(after.sched_policy, libc::SCHED_BATCH as u32);
            assert_eq!(after.sched_runtime, before.sched_runtime);
        });
    }
}
