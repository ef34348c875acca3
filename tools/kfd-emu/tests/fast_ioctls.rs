//! DBG_TRAP SUSPEND_QUEUES and RESUME_QUEUES answered by a `/dev/fuse` proxy reader thread after
//! it handed its reading to the other reader thread (`handover`; "the fast path" below): the
//! same results as the FUSE workers give (a mount without the proxy), an unreadable queue array
//! included; a queue array in a device-file page that thread faults in while the new reader
//! serves the READ; and, while it is held in a fault on a userfaultfd page of this test, another
//! suspend goes to the workers, the reader keeps serving, a signal of the held caller changes
//! nothing of its answer, and a blocked WAIT_EVENTS still ends on its signal.

mod common;

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, mpsc};

use kfd_emu::{EmuConfig, Preset};
use kfd_sys::*;

use common::debug::{enable_self, me, pipe};
use common::events::{event_data, wait_events};
use common::uffd::{Uffd, blocked_in_ioctl, gettid, reader_serves};
use common::*;

/// One of the emulator's two reader threads (`kfd-emu-fuse-in` and `kfd-emu-fuse-in2`, of which
/// the kernel keeps 15 bytes) waits for the reading role: it sleeps in a futex (syscall 202 on
/// x86-64), the channel's receive; the reading one sleeps in `read`. Between two calls of one
/// test thread nothing else makes either wait in a futex.
fn fast_path_ready(t: &TestEmu) -> bool {
    let tasks = format!("/proc/{}/task", t.emu.pid());
    let Ok(dir) = std::fs::read_dir(&tasks) else {
        return false;
    };
    dir.flatten().any(|task| {
        let path = task.path();
        std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim() == "kfd-emu-fuse-in")
            && std::fs::read_to_string(path.join("syscall")).is_ok_and(|s| s.starts_with("202 "))
    })
}

/// RUNTIME_ENABLE, DBG_TRAP ENABLE on this process, and `n` queues whose EC_QUEUE_NEW is cleared
/// (GET_QUEUE_SNAPSHOT), so they can be suspended.
fn debugged_queues(s: &Session, w: &OwnedFd, n: usize) -> Vec<(Queue, QueueBufs)> {
    s.kfd.runtime_enable().expect("RUNTIME_ENABLE");
    enable_self(s, w, 0);
    let queues: Vec<_> = (0..n).map(|_| s.queue(100, 7)).collect();
    let mut buf = vec![kfd_queue_snapshot_entry::default(); n];
    let mut a = kfd_ioctl_dbg_trap_queue_snapshot_args {
        exception_mask: kfd_ec_mask(EC_QUEUE_NEW),
        snapshot_buf_ptr: buf.as_mut_ptr() as u64,
        num_queues: n as u32,
        entry_size: size_of::<kfd_queue_snapshot_entry>() as u32,
    };
    s.kfd
        .dbg_trap(me(), KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT, &mut a)
        .expect("GET_QUEUE_SNAPSHOT");
    queues
}

/// SUSPEND_QUEUES (grace period 0) or RESUME_QUEUES of `n` ids in the array at `array`.
fn queue_op_at(kfd: &Kfd, op: u32, array: u64, n: u32) -> Result<i32, i32> {
    if op == KFD_IOC_DBG_TRAP_SUSPEND_QUEUES {
        let mut a = kfd_ioctl_dbg_trap_suspend_queues_args {
            exception_mask: 0,
            queue_array_ptr: array,
            num_queues: n,
            grace_period: 0,
        };
        kfd.dbg_trap(me(), op, &mut a)
    } else {
        let mut a = kfd_ioctl_dbg_trap_resume_queues_args {
            queue_array_ptr: array,
            num_queues: n,
            pad: 0,
        };
        kfd.dbg_trap(me(), op, &mut a)
    }
}

/// SUSPEND_QUEUES or RESUME_QUEUES on `ids`; (result, the array the emulator wrote back).
fn queue_op(kfd: &Kfd, op: u32, ids: &[u32]) -> (Result<i32, i32>, Vec<u32>) {
    let mut arr = ids.to_vec();
    let r = queue_op_at(kfd, op, arr.as_mut_ptr() as u64, arr.len() as u32);
    // SAFETY: the emulator rewrote the array in place, through process_vm_writev.
    let out = (0..arr.len())
        .map(|i| unsafe { std::ptr::read_volatile(arr.as_ptr().add(i)) })
        .collect();
    (r, out)
}

/// One step's record: what was called, its result, the array after, and which queues are
/// suspended then.
type Step = (&'static str, Result<i32, i32>, Vec<u32>, Vec<bool>);

/// Suspends and resumes through `t` (the same sequence on any mount), and returns each step's
/// record. With `through_fast`, each call is made while a reader thread waits for the role and
/// must be answered on the fast path.
fn suspend_resume_sequence(t: &TestEmu, through_fast: bool) -> Vec<Step> {
    let s = Session::new(t, 0);
    let (_r, w) = pipe();
    let queues = debugged_queues(&s, &w, 2);
    let (a, b) = (queues[0].0.id, queues[1].0.id);
    let unreadable = Mapping::inaccessible(4096);
    let (suspend, resume) = (
        KFD_IOC_DBG_TRAP_SUSPEND_QUEUES,
        KFD_IOC_DBG_TRAP_RESUME_QUEUES,
    );
    let mut steps = Vec::new();
    let mut step = |name: &'static str, call: &mut dyn FnMut() -> (Result<i32, i32>, Vec<u32>)| {
        let before = t.stats();
        if through_fast {
            wait_for_idle(t, name);
        }
        let (res, out) = call();
        let after = t.stats();
        if through_fast {
            assert_eq!(
                (after.fuse_fast_ioctls, after.fuse_fast_ioctls_passed_on),
                (
                    before.fuse_fast_ioctls + 1,
                    before.fuse_fast_ioctls_passed_on
                ),
                "{name}: answered on the fast path"
            );
        }
        let suspended = after.queues.iter().map(|q| q.suspended).collect();
        steps.push((name, res, out, suspended));
    };
    step("suspend a and an unknown id", &mut || {
        queue_op(&s.kfd, suspend, &[a, 77])
    });
    step("suspend a again and b", &mut || {
        queue_op(&s.kfd, suspend, &[a, b])
    });
    step("resume a and an unknown id", &mut || {
        queue_op(&s.kfd, resume, &[a, 77])
    });
    step("resume a, not suspended", &mut || {
        queue_op(&s.kfd, resume, &[a])
    });
    step("suspend, array unreadable", &mut || {
        (
            queue_op_at(&s.kfd, suspend, unreadable.addr(), 1),
            Vec::new(),
        )
    });
    step("resume, array unreadable", &mut || {
        (
            queue_op_at(&s.kfd, resume, unreadable.addr(), 2),
            Vec::new(),
        )
    });
    step("suspend, too many entries", &mut || {
        (
            queue_op_at(&s.kfd, suspend, unreadable.addr(), (1 << 20) + 1),
            Vec::new(),
        )
    });
    std::fs::write(
        t.path("kfd-emu/faults"),
        "dbg_trap/resume_queues=EBUSY,times=1\n",
    )
    .expect("write kfd-emu/faults");
    step("resume b, injected EBUSY", &mut || {
        queue_op(&s.kfd, resume, &[b])
    });
    step("resume b", &mut || queue_op(&s.kfd, resume, &[b]));
    steps
}

fn wait_for_idle(t: &TestEmu, what: &str) {
    assert!(
        wait_until(WAIT_LIMIT, || fast_path_ready(t)),
        "{what}: no reader thread ever waited for the role"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_fast_path_answers_suspend_and_resume_as_the_workers_do_unreadable_arrays_included() {
    require_root();
    let fast = mount_preset(Preset::Mi308x);
    let through_fast = suspend_resume_sequence(&fast, true);
    let config = EmuConfig {
        preset: Preset::Mi308x,
        ..EmuConfig::default()
    };
    let workers = mount_with_env(config, &[("KFD_EMU_FUSE_PROXY", "0")]);
    let through_workers = suspend_resume_sequence(&workers, false);
    assert_eq!(through_fast, through_workers);
    // What the sequence is about: the kernel's answers (`tests/debugger.rs` has the rules).
    let results: Vec<_> = through_fast.iter().map(|s| s.1).collect();
    assert_eq!(
        results,
        [
            Ok(1),
            Ok(1),
            Ok(1),
            Ok(0),
            Err(libc::EFAULT),
            Err(libc::EFAULT),
            Err(libc::ENOMEM),
            Err(libc::EBUSY),
            Ok(1)
        ]
    );
    assert_eq!(
        workers.stats().fuse_fast_ioctls,
        0,
        "no proxy, no fast path"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_queue_array_in_a_device_page_is_read_on_the_fast_path_through_the_new_reader() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (_r, w) = pipe();
    let queues = debugged_queues(&s, &w, 1);
    assert_eq!(queues[0].0.id, 0, "the array's zero bytes name this queue");
    // An untouched VRAM BO page: the former reader's read of the array faults it in, a READ that
    // only the new reader serves, while the former reader holds the state lock.
    let len = 1 << 20;
    let bo = s.map_vram_bo(len);
    for op in [
        KFD_IOC_DBG_TRAP_SUSPEND_QUEUES,
        KFD_IOC_DBG_TRAP_RESUME_QUEUES,
    ] {
        let before = t.stats();
        wait_for_idle(&t, "the device-page array");
        let at = bo as u64
            + if op == KFD_IOC_DBG_TRAP_SUSPEND_QUEUES {
                0
            } else {
                256 << 10
            };
        assert_eq!(queue_op_at(&s.kfd, op, at, 1), Ok(1), "op {op}");
        let after = t.stats();
        assert_eq!(after.fuse_fast_ioctls, before.fuse_fast_ioctls + 1);
        assert_eq!(
            after.queues[0].suspended,
            op == KFD_IOC_DBG_TRAP_SUSPEND_QUEUES
        );
    }
    // SAFETY: unmaps the BO mapping made above.
    unsafe { libc::munmap(bo, len) };
}

static SIGNALLED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(_: i32) {
    SIGNALLED.fetch_add(1, Ordering::SeqCst);
}

/// A handler for SIGUSR2 without `SA_RESTART`: an interrupted WAIT_EVENTS returns `EINTR`.
fn install_handler() {
    // SAFETY: a zeroed sigaction is valid; the handler only touches an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(i32) as usize;
        sa.sa_flags = 0;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
    }
}

fn own_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() }
}

fn signal_thread(t: libc::pthread_t) {
    // SAFETY: `t` is a live thread of this process (it is blocked in an ioctl, answered later).
    assert_eq!(unsafe { libc::pthread_kill(t, libc::SIGUSR2) }, 0);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn while_the_fast_path_is_held_suspends_go_to_the_workers_and_interrupts_still_end_waits() {
    require_root();
    install_handler();
    let t = mount_preset(Preset::Mi308x);
    let conn = fuse_connection(t.root());
    let s = Arc::new(Session::new(&t, 0));
    let (_r, w) = pipe();
    let queues = debugged_queues(&s, &w, 1);
    let q = queues[0].0.id;
    assert_eq!(q, 0, "the filled page's zero bytes name this queue");
    let len = 1 << 20;
    let probe = s.map_vram_bo(len) as usize;
    let uffd = Uffd::new();
    wait_for_idle(&t, "the held suspend");
    let before = t.stats();

    // SUSPEND with its array on the userfaultfd page: the reader hands its reading over, reads
    // the array under the state lock and waits in the fault until the test fills the page.
    let (tx, held) = mpsc::channel();
    let (thread_tx, thread_rx) = mpsc::channel();
    let (s1, page) = (s.clone(), uffd.page.addr());
    std::thread::spawn(move || {
        let _ = thread_tx.send(own_thread());
        let r = queue_op_at(&s1.kfd, KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, page, 1);
        let _ = tx.send(r);
    });
    let held_thread = thread_rx.recv().expect("the held thread");
    if !uffd.wait_fault(WAIT_LIMIT) {
        let _ = abort_fuse_connection(conn);
        panic!("the suspend's read of the queue array never faulted on the page");
    }
    // Its caller is signalled: the kernel sends FUSE_INTERRUPT for the request the former
    // reader runs (its handler holds no request: nothing to end, the answer is still to come).
    signal_thread(held_thread);

    // A second suspend: the other reader thread is busy, so the reading one passes it to the
    // workers, where it waits for the state lock.
    let (tx, passed) = mpsc::channel();
    let (tid_tx, tid_rx) = mpsc::channel();
    let s2 = s.clone();
    std::thread::spawn(move || {
        let _ = tid_tx.send(gettid());
        let _ = tx.send(queue_op(&s2.kfd, KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &[q]));
    });
    let tid = tid_rx.recv().expect("the second suspend's thread id");
    let in_ioctl = wait_until(WAIT_LIMIT, || blocked_in_ioctl(tid));
    // The reader serves a READ queued after both: it never waited for the held thread.
    let reader_free = reader_serves(probe);
    let still_held = (held.try_recv().is_err(), passed.try_recv().is_err());
    let done = uffd.fill_and_collect(conn, &held, &passed, "the suspends");
    assert!(in_ioctl, "the second suspend never blocked in its ioctl");
    assert!(
        reader_free,
        "a device-page READ was not served while the former reader was held"
    );
    assert_eq!(still_held, (true, true), "a suspend returned while held");
    // The held one suspended the queue (its interrupt changed nothing), the second found it
    // suspended.
    assert_eq!(done.0, Ok(1));
    assert_eq!(done.1, (Ok(0), vec![q]));
    assert!(
        SIGNALLED.load(Ordering::SeqCst) >= 1,
        "the signal's handler ran"
    );
    let after = t.stats();
    assert_eq!(after.fuse_fast_ioctls, before.fuse_fast_ioctls + 1);
    assert_eq!(
        after.fuse_fast_ioctls_passed_on,
        before.fuse_fast_ioctls_passed_on + 1
    );
    assert!(after.queues[0].suspended);

    // A request that must end on FUSE_INTERRUPT still does: a WAIT_EVENTS on an event nobody
    // sets ends with EINTR on its signal.
    let mut ev = kfd_ioctl_create_event_args {
        event_type: KFD_IOC_EVENT_SIGNAL,
        ..Default::default()
    };
    s.kfd
        .ioctl(AMDKFD_IOC_CREATE_EVENT, &mut ev)
        .expect("CREATE_EVENT");
    let id = ev.event_id;
    let (tx, waited) = mpsc::channel();
    let (thread_tx, thread_rx) = mpsc::channel();
    let s3 = s.clone();
    std::thread::spawn(move || {
        let _ = thread_tx.send(own_thread());
        let w = wait_events(&s3.kfd, &[event_data(id, 0)], false, u32::MAX);
        let _ = tx.send(w.result);
    });
    let waiter = thread_rx.recv().expect("the waiting thread");
    assert!(
        wait_until(WAIT_LIMIT, || t
            .stats()
            .processes
            .iter()
            .any(|p| p.pid == me() && p.blocked_waits == 1)),
        "the WAIT_EVENTS was never held"
    );
    signal_thread(waiter);
    assert_eq!(waited.recv_timeout(WAIT_LIMIT), Ok(Err(libc::EINTR)));
    // SAFETY: unmaps the BO mapping made above.
    unsafe { libc::munmap(probe as *mut libc::c_void, len) };
}
