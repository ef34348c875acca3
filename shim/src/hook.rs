//! The `ioctl` observer: every amdkfd queue ioctl of the process passes through here.
//!
//! * CREATE_QUEUE: the priority is rewritten by the class mapping (the runtime's request is
//!   recorded), then the queue is registered (id, gpu, ring, read/write index addresses) and
//!   attributed to the stream whose call is in flight on this thread.
//! * UPDATE_QUEUE from the runtime: rewritten so that it cannot undo the shim's state (a queue
//!   the shim holds deactivated stays at percentage 0; the priority stays the managed one).
//! * DESTROY_QUEUE: the queue is marked dying and lock-free readers of its indices are waited
//!   for (`index_reads.rs`), the call is forwarded, then the queue is dropped from the registry.
//!
//! The shim's own ioctls (through `kfdq::kfd`, which calls libc's `ioctl` and so lands in this
//! same export) set the bypass flag (`bypass.rs`) and go straight to libc.

use std::cell::Cell;
use std::ffi::{c_int, c_ulong, c_void};
use std::sync::atomic::Ordering;

use kfd_sys as sys;
use kfd_sys::ioc;
use kfd_sys::zerocopy::{FromBytes, IntoBytes};

use crate::bypass::BYPASS;
use crate::context::{CTX, NO_STREAM};
use crate::guard::guarded;
use crate::kfd_fd::KfdFd;
use crate::libc_ioctl::forward;
use crate::state::{CreatedQueue, F_DISABLED, FLAGS, QUEUES_CREATED, STATE, State};
use crate::window_setting::WINDOW_GEN;

/// `kfd_ioctl_create_queue_args` up to `ctl_stack_size` (the KFD 1.11 layout); newer headers
/// add `sdma_engine_id` and a pad/`metadata_ring_size` (96 bytes). Both are accepted.
const CREATE_QUEUE_MIN: usize = 88;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Update,
    Destroy,
}

/// True when `request` is one of amdkfd's ('K'); the kernel reads the request as a 32-bit
/// `unsigned int`, and so does this.
#[inline(always)]
pub fn is_kfd(request: c_ulong) -> bool {
    ioc::is_kfd(request as u32)
}

/// The queue request `request` is, with its argument size: the number and direction of the
/// header's request, and a size the hook can read (CREATE_QUEUE of older runtimes is shorter).
fn classify(request: c_ulong) -> Option<(Op, usize)> {
    let request = request as u32;
    let same =
        |kernel: u32| ioc::nr(request) == ioc::nr(kernel) && ioc::dir(request) == ioc::dir(kernel);
    let size = ioc::size(request);
    if same(sys::AMDKFD_IOC_CREATE_QUEUE)
        && (CREATE_QUEUE_MIN..=ioc::size(sys::AMDKFD_IOC_CREATE_QUEUE)).contains(&size)
    {
        return Some((Op::Create, size));
    }
    for (kernel, op) in [
        (sys::AMDKFD_IOC_UPDATE_QUEUE, Op::Update),
        (sys::AMDKFD_IOC_DESTROY_QUEUE, Op::Destroy),
    ] {
        if same(kernel) && size == ioc::size(kernel) {
            return Some((op, size));
        }
    }
    None
}

/// The caller's argument as a `T`: its first `size` bytes, the rest zero (kfd-sys's `load`, the
/// kernel's rule). `T` is one of kfd-sys's plain argument structs (no padding, any bytes valid).
///
/// # Safety
/// `arg` must be non-null and readable for `size` bytes, and not written while this runs.
unsafe fn read_arg<T: FromBytes + IntoBytes>(arg: *const c_void, size: usize) -> T {
    // SAFETY: by the caller's contract `arg` is non-null and readable for `size` bytes, and
    // nothing writes them meanwhile; bytes need no alignment.
    let src = unsafe { std::slice::from_raw_parts(arg.cast::<u8>(), size) };
    ioc::load(src)
}

/// An amdkfd ioctl ('K' type) — the slow side of the exported `ioctl`.
///
/// # Safety
/// As for `ioctl(2)`: `arg` is what the request expects.
#[cold]
#[inline(never)]
pub unsafe fn kfd_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    let op = classify(request);
    let Some((op, size)) = op else {
        // SAFETY: forwarded unchanged.
        return unsafe { forward(fd, request, arg) };
    };
    if arg.is_null()
        || BYPASS.with(Cell::get)
        || FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0
        || !is_kfd_fd(fd)
    {
        // SAFETY: forwarded unchanged.
        return unsafe { forward(fd, request, arg) };
    }
    // SAFETY: `arg` is the caller's argument of this request, `size` bytes long (classify).
    unsafe {
        match op {
            Op::Create => create_queue(fd, request, arg, size),
            Op::Update => update_queue(fd, request, arg),
            Op::Destroy => destroy_queue(fd, request, arg),
        }
    }
}

/// True when `fd` is open on amdkfd's device (`…/dev/kfd`: the real node, or kfd-emu's under its
/// mount point): the 'K' type byte alone is not enough (any driver or a pipe may be asked for
/// it), and the shim must not initialise for a process that never opened KFD. One `readlink`
/// per queue ioctl (they are rare: creation, update, destruction), never a cached answer: a
/// number the runtime closed may be open on another file by the next call.
fn is_kfd_fd(fd: c_int) -> bool {
    fd >= 0
        && std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok_and(|p| p.ends_with("dev/kfd"))
}

/// A compute queue type (PM4 or AQL): the kind a stream runs on. SDMA queues (the runtime's
/// copy engines, created lazily at a first copy) belong to no stream.
fn is_compute(queue_type: u32) -> bool {
    queue_type == sys::KFD_IOC_QUEUE_TYPE_COMPUTE
        || queue_type == sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL
}

/// Byte offset of `queue_priority` in `kfd_ioctl_create_queue_args`.
const PRIORITY_OFFSET: usize =
    std::mem::offset_of!(sys::kfd_ioctl_create_queue_args, queue_priority);

unsafe fn create_queue(fd: c_int, request: c_ulong, arg: *mut c_void, size: usize) -> c_int {
    crate::init::ensure_init();
    // SAFETY: the caller's CREATE_QUEUE argument, `size` bytes.
    let a: sys::kfd_ioctl_create_queue_args = unsafe { read_arg(arg, size) };
    let requested = a.queue_priority;
    let effective = guarded(|| STATE.lock().policy.effective(requested)).unwrap_or(requested);
    let prio_ptr = (arg as *mut u8).wrapping_add(PRIORITY_OFFSET) as *mut u32;
    // SAFETY: `queue_priority` lies inside the caller's struct (offset 48 < 88 <= size).
    unsafe { prio_ptr.write_unaligned(effective) };
    // SAFETY: the caller's struct, with only the priority changed (still in 0..=15).
    let r = unsafe { forward(fd, request, arg) };
    // SAFETY: as above; the runtime gets its own value back (transparency).
    unsafe { prio_ptr.write_unaligned(requested) };
    if r == 0 {
        // SAFETY: the kernel filled `queue_id` / `doorbell_offset` in the caller's struct.
        let out: sys::kfd_ioctl_create_queue_args = unsafe { read_arg(arg, size) };
        guarded(|| record_queue(fd, &out, requested, effective));
    }
    r
}

fn record_queue(fd: c_int, a: &sys::kfd_ioctl_create_queue_args, requested: u32, effective: u32) {
    // The file the runtime's fd is open on now: commands check it is still the same (kfd_fd.rs).
    let kfd_fd = KfdFd::identify(fd);
    if let Err(e) = &kfd_fd {
        crate::log::debug(|| format!("CREATE_QUEUE on fd {fd}: {e}"));
    }
    let mut st = STATE.lock();
    st.kfd_fd = kfd_fd.ok();
    let created = CreatedQueue {
        id: a.queue_id,
        gpu_id: a.gpu_id,
        requested,
        effective,
        ring_base: a.ring_base_address,
        ring_size: a.ring_size,
        wptr: a.write_pointer_address,
        rptr: a.read_pointer_address,
        runtime_percentage: a.queue_percentage,
        compute: is_compute(a.queue_type),
    };
    // SAFETY: the index addresses are the ones the runtime gave this CREATE_QUEUE, which just
    // succeeded on its /dev/kfd fd (`is_kfd_fd`); `st` is the registry, and the runtime's
    // DESTROY_QUEUE of the queue passes `destroy_queue` below, which removes it before returning
    // (once control has stopped and that is no longer so, the registry reads no indices).
    unsafe { st.add_queue(created) };
    QUEUES_CREATED.fetch_add(1, Ordering::Relaxed);
    let sid = CTX.with(Cell::get);
    let attributed =
        sid != NO_STREAM && is_compute(a.queue_type) && st.attribute_created(sid, a.queue_id);
    st.changed();
    st.refresh_flags();
    crate::log::debug(|| {
        format!(
            "CREATE_QUEUE gpu {} -> queue {} (type {}) priority {requested} -> {effective}, stream {}",
            a.gpu_id,
            a.queue_id,
            a.queue_type,
            if attributed {
                sid.to_string()
            } else if sid == NO_STREAM {
                "?".to_string()
            } else {
                format!(
                    "? (not taken by stream {sid}: it has a queue, or this is not a compute queue)"
                )
            }
        )
    });
}

unsafe fn update_queue(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: the caller's UPDATE_QUEUE argument (size checked by classify).
    let mut a: sys::kfd_ioctl_update_queue_args =
        unsafe { read_arg(arg, size_of::<sys::kfd_ioctl_update_queue_args>()) };
    // The registry stays locked from the rewrite until the kernel answered, so that no command
    // of the agent's changes the queue in between. Nothing inside runs under `guarded` again:
    // a panic stops control (`guard.rs`), which takes this lock.
    let forwarded = Cell::new(None);
    let done = guarded(|| {
        let mut st = STATE.lock();
        let r = match rewrite(&mut st, &mut a) {
            Some((pct, prio)) => {
                crate::log::debug(|| {
                    format!(
                        "runtime UPDATE_QUEUE {} ({pct}%, priority {prio}) sent as ({}%, {})",
                        a.queue_id, a.queue_percentage, a.queue_priority
                    )
                });
                let ours = &mut a as *mut sys::kfd_ioctl_update_queue_args as *mut c_void;
                // SAFETY: our copy of the caller's struct, same request size (write-only request).
                unsafe { forward(fd, request, ours) }
            }
            // SAFETY: forwarded unchanged.
            None => unsafe { forward(fd, request, arg) },
        };
        forwarded.set(Some(r));
        if r == 0 {
            st.changed();
        }
        r
    });
    match (done, forwarded.get()) {
        (Some(r), _) | (None, Some(r)) => r,
        // The rewrite panicked before the call: the runtime's own, unchanged.
        // SAFETY: forwarded unchanged.
        (None, None) => unsafe { forward(fd, request, arg) },
    }
}

/// Rewrites the runtime's UPDATE_QUEUE `a` so that it cannot undo the shim's state (a queue
/// held deactivated stays at percentage 0; the priority stays the managed one), recording what
/// the runtime asked for. Returns what it asked for (percentage, priority), or `None` for a queue
/// the registry does not know (forwarded unchanged).
fn rewrite(st: &mut State, a: &mut sys::kfd_ioctl_update_queue_args) -> Option<(u32, u32)> {
    let policy = st.policy;
    let q = st.queue_mut(a.queue_id)?;
    q.runtime_percentage = a.queue_percentage;
    if a.queue_priority != q.requested {
        q.requested = a.queue_priority;
        q.effective = q
            .override_priority
            .unwrap_or_else(|| policy.effective(a.queue_priority));
    }
    if a.ring_base_address != 0 && a.ring_size != 0 {
        q.ring_base = a.ring_base_address;
        q.ring_size = a.ring_size;
    }
    let wanted = (a.queue_percentage, a.queue_priority);
    if q.deactivated {
        a.queue_percentage &= !0xff;
    }
    a.queue_priority = q.effective;
    Some(wanted)
}

unsafe fn destroy_queue(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    // SAFETY: the caller's DESTROY_QUEUE argument (size checked by classify).
    let a: sys::kfd_ioctl_destroy_queue_args =
        unsafe { read_arg(arg, size_of::<sys::kfd_ioctl_destroy_queue_args>()) };
    destroy_begin(a.queue_id);
    // SAFETY: forwarded unchanged.
    let r = unsafe { forward(fd, request, arg) };
    destroy_end(a.queue_id, r);
    r
}

/// Before the runtime's DESTROY_QUEUE of queue `id` reaches the kernel (after which the runtime
/// frees the queue's memory): resumes the queue if level 3 suspended it (KFD blocks the destroy
/// of a suspended queue), marks it dying under the registry lock (reads under the lock skip it,
/// lookups no longer hand out its addresses), then moves the generation and waits until no
/// lock-free read of its indices is still in progress (`index_reads.rs`).
pub(crate) fn destroy_begin(id: u32) {
    let before = guarded(|| {
        let mut st = STATE.lock();
        let suspended = st.queue(id).is_some_and(|q| q.suspended);
        if suspended {
            if let Err(e) = crate::levels::resume(&mut st, &[id]) {
                crate::log::warn_always(&format!(
                    "resuming queue {id} before its destruction: {e}"
                ));
            }
        }
        if let Some(q) = st.queue_mut(id) {
            q.dying = true;
        }
        WINDOW_GEN.fetch_add(1, Ordering::SeqCst)
    });
    // (A panic above stopped control, which waits for the readers itself.)
    if let Some(before) = before {
        crate::index_reads::retire(before);
    }
}

/// After the kernel answered DESTROY_QUEUE `id` with `r`: the queue leaves the registry, or
/// lives on if the kernel refused.
pub(crate) fn destroy_end(id: u32, r: c_int) {
    guarded(|| {
        let mut st = STATE.lock();
        if r == 0 {
            st.remove_queue(id);
            crate::log::debug(|| format!("DESTROY_QUEUE {id}"));
        } else if let Some(q) = st.queue_mut(id) {
            q.dying = false;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_reused_fd_number_is_not_taken_for_kfd() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("dev")).expect("mkdir");
        // A file whose path ends in dev/kfd passes (kfd-emu's node is such a path).
        let kfd = std::fs::File::create(dir.path().join("dev/kfd")).expect("create");
        let other = std::fs::File::create(dir.path().join("other")).expect("create");
        let fd = kfd.as_raw_fd();
        assert!(is_kfd_fd(fd));
        assert!(!is_kfd_fd(other.as_raw_fd()));
        // The same number, now open on another file (the runtime closed it and it was
        // reused): no longer KFD.
        // SAFETY: both are open fds this test owns; dup2 replaces `fd`'s file description,
        // which `kfd` still owns and closes at drop (closing the other file then, harmlessly).
        assert_eq!(unsafe { libc::dup2(other.as_raw_fd(), fd) }, fd);
        assert!(!is_kfd_fd(fd));
        assert!(!is_kfd_fd(-1));
    }

    #[test]
    fn classifies_kfd_requests() {
        assert!(is_kfd(sys::AMDKFD_IOC_CREATE_QUEUE as c_ulong));
        assert!(!is_kfd(libc::TCGETS as c_ulong));
        assert!(!is_kfd(libc::FIONREAD as c_ulong));
        assert_eq!(
            classify(sys::AMDKFD_IOC_CREATE_QUEUE as c_ulong),
            Some((Op::Create, 96))
        );
        // The 88-byte (KFD 1.11) CREATE_QUEUE of older runtimes.
        let create = sys::AMDKFD_IOC_CREATE_QUEUE;
        let old = ioc::request(ioc::dir(create), ioc::kind(create), ioc::nr(create), 88) as c_ulong;
        assert_eq!(classify(old), Some((Op::Create, 88)));
        assert_eq!(
            classify(sys::AMDKFD_IOC_UPDATE_QUEUE as c_ulong),
            Some((Op::Update, 24))
        );
        assert_eq!(
            classify(sys::AMDKFD_IOC_DESTROY_QUEUE as c_ulong),
            Some((Op::Destroy, 8))
        );
        assert_eq!(classify(sys::AMDKFD_IOC_GET_VERSION as c_ulong), None);
        assert_eq!(classify(sys::AMDKFD_IOC_DBG_TRAP as c_ulong), None);
        // Keyboard ioctls share type 'K' (KDGKBTYPE = 0x4B33) but are not queue requests.
        assert_eq!(classify(0x4B33), None);
        assert_eq!(PRIORITY_OFFSET, 48);
    }

    #[test]
    fn only_compute_queues_belong_to_streams() {
        assert!(is_compute(sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL));
        assert!(is_compute(sys::KFD_IOC_QUEUE_TYPE_COMPUTE));
        for t in [
            sys::KFD_IOC_QUEUE_TYPE_SDMA,
            sys::KFD_IOC_QUEUE_TYPE_SDMA_XGMI,
            sys::KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID,
        ] {
            assert!(!is_compute(t), "type {t}");
        }
    }
}
