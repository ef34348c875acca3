//! UPDATE_QUEUE answered by the `/dev/fuse` proxy's reader thread (`reader_ioctl`): it is
//! taken and has its effect; it goes to the FUSE workers when another thread holds the state
//! lock (here: a worker whose write into this process waits in a page fault this test holds
//! open with userfaultfd); injected failures still fire; faults of device-file pages and
//! UPDATE_QUEUE in loops never hang the mount; without the proxy it works as before.

mod common;

use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};

use kfd_emu::{EmuConfig, Preset};
use kfd_sys::*;

use common::uffd::{Uffd, blocked_in_ioctl, gettid, reader_serves};
use common::*;

fn me() -> u32 {
    std::process::id()
}

/// Writes `text` to the mount's fault control file.
fn write_faults(t: &TestEmu, text: &str) {
    std::fs::write(t.path("kfd-emu/faults"), text).expect("write kfd-emu/faults");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn update_queue_is_answered_by_the_reader_thread_with_its_effect_and_errors() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (q, _bufs) = s.queue(100, 7);
    assert!(t.queue(me(), q.id).active);

    // The reader passes a call on when another thread (the CP's) holds the state lock at that
    // moment: the deactivation is tried until the reader answers one, each call with its effect.
    let mut tries = 0;
    let answered = wait_until(WAIT_LIMIT, || {
        tries += 1;
        let before = t.stats();
        let from = monotonic_us();
        assert_eq!(s.kfd.update_queue(&q, 0, 7), Ok(0));
        let to = monotonic_us();
        let after = t.stats();
        assert_eq!(
            after.fuse_reader_ioctls + after.fuse_reader_ioctls_passed_on,
            before.fuse_reader_ioctls + before.fuse_reader_ioctls_passed_on + 1,
            "counted once, answered or passed on"
        );
        let qs = t.queue(me(), q.id);
        assert!(!qs.active, "percentage 0: the queue is inactive");
        let stopped = qs.stopped_at_us.last().copied().unwrap_or_default();
        assert!(
            (from..=to).contains(&stopped),
            "the deactivation at {stopped}, not in [{from}, {to}]"
        );
        if after.fuse_reader_ioctls == before.fuse_reader_ioctls + 1 {
            return true;
        }
        assert_eq!(s.kfd.update_queue(&q, 100, 7), Ok(0));
        false
    });
    assert!(
        answered,
        "the reader answered none of {tries} UPDATE_QUEUEs"
    );
    let total = |st: &kfd_emu::Stats| st.fuse_reader_ioctls + st.fuse_reader_ioctls_passed_on;
    let before = total(&t.stats());

    // Its errors: the kernel's, in the reply header, from the same handler.
    assert_eq!(s.kfd.update_queue(&q, 100, 16), Err(libc::EINVAL));
    let unknown = Queue {
        id: 999,
        args: q.args,
    };
    assert_eq!(s.kfd.update_queue(&unknown, 100, 7), Err(libc::EFAULT));
    // Injected failures, by name and by number, fire on the reader as on the workers.
    write_faults(
        &t,
        "update_queue=EBUSY,times=1\nioctl#7=EIO,every=2,times=1\n",
    );
    assert_eq!(s.kfd.update_queue(&q, 100, 7), Err(libc::EBUSY));
    assert_eq!(s.kfd.update_queue(&q, 100, 7), Err(libc::EIO));
    assert!(
        !t.queue(me(), q.id).active,
        "the failed calls changed nothing"
    );
    assert_eq!(s.kfd.update_queue(&q, 100, 7), Ok(0));
    assert!(t.queue(me(), q.id).active);
    assert_eq!(total(&t.stats()), before + 5);

    // Other ioctls go to the workers without the reader counting them.
    assert_eq!(s.kfd.destroy_queue(q.id), Ok(0));
    assert_eq!(total(&t.stats()), before + 5);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn without_the_proxy_update_queue_goes_through_fuser_as_before() {
    require_root();
    let config = EmuConfig {
        preset: Preset::Mi308x,
        ..EmuConfig::default()
    };
    let t = mount_with_env(config, &[("KFD_EMU_FUSE_PROXY", "0")]);
    let s = Session::new(&t, 0);
    let (q, _bufs) = s.queue(100, 7);
    assert_eq!(s.kfd.update_queue(&q, 0, 7), Ok(0));
    assert!(!t.queue(me(), q.id).active);
    assert_eq!(s.kfd.update_queue(&q, 100, 16), Err(libc::EINVAL));
    let stats = t.stats();
    assert_eq!(stats.fuse_reader_ioctls, 0, "no proxy, no reader thread");
    assert_eq!(stats.fuse_largest_message, 0);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn with_the_state_lock_held_update_queue_goes_to_the_workers_and_completes() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let conn = fuse_connection(t.root());
    let s = Arc::new(Session::new(&t, 0));
    let (q, _bufs) = s.queue(100, 7);
    let probe = s.map_vram_bo(1 << 20).cast::<u8>();
    let before = t.stats();
    let uffd = Uffd::new();
    let (_r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_NONBLOCK).expect("pipe2");

    // DBG_TRAP ENABLE on this process writes the runtime info into `rinfo_ptr` while its
    // worker holds the state lock (`debug::enable`); that write waits in the fault on the
    // userfaultfd page until this test fills it.
    let (tx, enabled) = mpsc::channel();
    let (s2, rinfo, fd) = (s.clone(), uffd.page.addr(), w.as_raw_fd() as u32);
    std::thread::spawn(move || {
        let mut e = kfd_ioctl_dbg_trap_enable_args {
            exception_mask: 0,
            rinfo_ptr: rinfo,
            rinfo_size: size_of::<kfd_runtime_info>() as u32,
            dbg_fd: fd,
        };
        let _ = tx.send(s2.kfd.dbg_trap(me(), KFD_IOC_DBG_TRAP_ENABLE, &mut e));
    });
    if !uffd.wait_fault(WAIT_LIMIT) {
        let _ = abort_fuse_connection(conn);
        panic!("DBG_TRAP ENABLE's write of the runtime info never faulted on the page");
    }

    // Now UPDATE_QUEUE: the reader finds the state lock taken and passes it on; the free worker
    // waits for the lock.
    let (tx, updated) = mpsc::channel();
    let (tid_tx, tid_rx) = mpsc::channel();
    let (s3, args) = (s.clone(), q.args);
    std::thread::spawn(move || {
        let _ = tid_tx.send(gettid());
        let q = Queue { id: q.id, args };
        let _ = tx.send(s3.kfd.update_queue(&q, 0, 7));
    });
    let tid = tid_rx.recv().expect("the updating thread's id");
    let in_ioctl = wait_until(WAIT_LIMIT, || blocked_in_ioctl(tid));
    // A READ of an untouched device page, queued after the UPDATE_QUEUE request: the reader
    // serves requests in order, so once this returns it has dealt with that request. Were the
    // reader waiting for the state lock, it would not return until the fault is filled.
    let reader_free = reader_serves(probe as usize);
    let still_waiting = updated.try_recv().is_err();
    let done = uffd.fill_and_collect(conn, &enabled, &updated, "the calls");
    assert!(in_ioctl, "the updating thread never blocked in its ioctl");
    assert!(
        reader_free,
        "a device-page READ was not served while another thread held the state lock: the \
         reader thread waited for the lock"
    );
    assert!(
        still_waiting,
        "UPDATE_QUEUE returned while another thread held the state lock"
    );
    assert_eq!(done, (Ok(0), Ok(0)));
    let after = t.stats();
    assert_eq!(
        after.fuse_reader_ioctls_passed_on,
        before.fuse_reader_ioctls_passed_on + 1
    );
    assert_eq!(after.fuse_reader_ioctls, before.fuse_reader_ioctls);
    assert!(!t.queue(me(), q.id).active, "the worker deactivated it");
    // SAFETY: unmaps the BO mapping made above.
    unsafe { libc::munmap(probe.cast(), 1 << 20) };
}

/// Threads faulting in device-file pages, by touching them and through ioctls whose results the
/// emulator writes into them, beside UPDATE_QUEUEs in a loop.
const FAULTERS: usize = 3;
/// Rounds of each faulting thread, each on fresh pages.
const ROUNDS: usize = 16;
/// Beyond a fault's read-ahead (64 KiB), so each touch is its own READ.
const STRIDE: usize = 256 << 10;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn faults_of_device_pages_beside_update_queue_loops_never_hang() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let conn = fuse_connection(t.root());
    let s = Arc::new(Session::new(&t, 0));
    let (q, bufs) = s.queue(100, 7);
    // Work on the queue keeps the CP thread taking the state lock and writing completions.
    let signal = Mapping::new(4096);
    signal.i64_at(8).store(1 << 20, Ordering::Release);
    let packets: Vec<[u8; 64]> = (0..32)
        .map(|_| dispatch_packet(200_000, signal.addr()))
        .collect();
    submit(&bufs, 0, &packets);
    let len = 2 * FAULTERS * ROUNDS * STRIDE;
    let base = s.map_vram_bo(len) as usize;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let updates = Arc::new(AtomicUsize::new(0));
    let updater_done = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let (s, stop, updates, failures, args) = (
            s.clone(),
            stop.clone(),
            updates.clone(),
            failures.clone(),
            q.args,
        );
        let updater_done = updater_done.clone();
        std::thread::spawn(move || {
            let q = Queue { id: q.id, args };
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let r = s.kfd.update_queue(&q, if n % 2 == 0 { 0 } else { 100 }, 7);
                if r != Ok(0) {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("UPDATE_QUEUE: {r:?}"));
                }
                n += 1;
                updates.fetch_add(1, Ordering::Relaxed);
            }
            updater_done.store(true, Ordering::Relaxed);
        });
    }
    for i in 0..FAULTERS {
        let (s, done, failures) = (s.clone(), done.clone(), failures.clone());
        std::thread::spawn(move || {
            for r in 0..ROUNDS {
                let at = base + 2 * (r * FAULTERS + i) * STRIDE;
                // The client's own fault: a READ the reader serves.
                // SAFETY: inside the BO's mapping.
                let _ = unsafe { std::ptr::read_volatile(at as *const u8) };
                // The emulator's fault on the client's behalf, from a worker.
                let out = at + STRIDE;
                let mut a = kfd_ioctl_get_process_apertures_new_args {
                    kfd_process_device_apertures_ptr: out as u64,
                    num_of_nodes: 1,
                    ..Default::default()
                };
                if let Err(e) = s.kfd.ioctl(AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut a) {
                    failures
                        .lock()
                        .unwrap()
                        .push(format!("APERTURES into {out:#x}: {e}"));
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let all = FAULTERS * ROUNDS;
    let finished = wait_until(WAIT_LIMIT, || {
        done.load(Ordering::Relaxed) == all && updates.load(Ordering::Relaxed) >= all
    });
    stop.store(true, Ordering::Relaxed);
    if !finished {
        let status = abort_fuse_connection(conn);
        panic!(
            "{} of {all} faulting rounds and {} UPDATE_QUEUEs returned within {WAIT_LIMIT:?} \
             (connection {conn} aborted: {status:?})",
            done.load(Ordering::Relaxed),
            updates.load(Ordering::Relaxed)
        );
    }
    // The updating thread's last call, after `stop`, returns too.
    assert!(wait_until(WAIT_LIMIT, || updater_done.load(Ordering::Relaxed)));
    assert_eq!(*failures.lock().unwrap(), Vec::<String>::new());
    let stats = t.stats();
    assert!(
        stats.fuse_reader_ioctls + stats.fuse_reader_ioctls_passed_on >= all as u64,
        "{stats:?}"
    );
    assert!(stats.fuse_reader_ioctls > 0, "the reader answered none");
    // SAFETY: unmaps the BO mapping made above.
    unsafe { libc::munmap(base as *mut libc::c_void, len) };
}
