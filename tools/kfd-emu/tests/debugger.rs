//! Debugger API: RUNTIME_ENABLE, DBG_TRAP enable/suspend/resume/snapshot/disable, the
//! blocking destroy of a suspended queue, and the ptrace permission model.

mod common;

use std::os::fd::AsRawFd;
use std::process::{Child, Command};

use kfd_emu::Preset;
use kfd_sys::*;

use common::debug::{enable_self, me, pipe};
use common::*;

/// SUSPEND_QUEUES or RESUME_QUEUES on `ids`; returns (ioctl result, array after).
fn queue_op(s: &Session, target: u32, op: u32, ids: &[u32]) -> (Result<i32, i32>, Vec<u32>) {
    let mut arr = ids.to_vec();
    let r = if op == KFD_IOC_DBG_TRAP_SUSPEND_QUEUES {
        let mut a = kfd_ioctl_dbg_trap_suspend_queues_args {
            exception_mask: 0,
            queue_array_ptr: arr.as_mut_ptr() as u64,
            num_queues: arr.len() as u32,
            grace_period: 0,
        };
        s.kfd.dbg_trap(target, op, &mut a)
    } else {
        let mut a = kfd_ioctl_dbg_trap_resume_queues_args {
            queue_array_ptr: arr.as_mut_ptr() as u64,
            num_queues: arr.len() as u32,
            pad: 0,
        };
        s.kfd.dbg_trap(target, op, &mut a)
    };
    // SAFETY: the emulator rewrote the array in place.
    let out = (0..arr.len())
        .map(|i| unsafe { std::ptr::read_volatile(arr.as_ptr().add(i)) })
        .collect();
    (r, out)
}

/// GET_QUEUE_SNAPSHOT clearing `clear`; returns (total, entries).
fn snapshot(s: &Session, target: u32, clear: u64) -> (u32, Vec<kfd_queue_snapshot_entry>) {
    let mut buf = vec![kfd_queue_snapshot_entry::default(); 8];
    let mut a = kfd_ioctl_dbg_trap_queue_snapshot_args {
        exception_mask: clear,
        snapshot_buf_ptr: buf.as_mut_ptr() as u64,
        num_queues: buf.len() as u32,
        entry_size: size_of::<kfd_queue_snapshot_entry>() as u32,
    };
    s.kfd
        .dbg_trap(target, KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT, &mut a)
        .expect("GET_QUEUE_SNAPSHOT");
    assert_eq!(a.entry_size, 64);
    let n = a.num_queues.min(8) as usize;
    // SAFETY: entries were written by the emulator.
    let entries = (0..n)
        .map(|i| unsafe { std::ptr::read_volatile(buf.as_ptr().add(i)) })
        .collect();
    (a.num_queues, entries)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn suspend_resume_and_queue_new_rule() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    s.kfd.runtime_enable().unwrap();
    assert_eq!(s.kfd.runtime_enable(), Err(libc::EBUSY));
    let (r, w) = pipe();
    let info = enable_self(&s, &w, kfd_ec_mask(EC_QUEUE_NEW));
    assert_eq!(info.runtime_state, DEBUG_RUNTIME_STATE_ENABLED);
    let mut e = kfd_ioctl_dbg_trap_enable_args::default();
    assert_eq!(
        s.kfd.dbg_trap(me(), KFD_IOC_DBG_TRAP_ENABLE, &mut e),
        Err(libc::EALREADY)
    );
    let (q, bufs) = s.queue(100, 7);
    // The debugger subscribed to EC_QUEUE_NEW: one byte on dbg_fd.
    let mut byte = [0u8; 1];
    assert!(wait_until(WAIT_LIMIT, || {
        nix::unistd::read(&r, &mut byte).is_ok()
    }));
    // A new queue cannot be suspended until EC_QUEUE_NEW is cleared.
    let (res, out) = queue_op(&s, me(), KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &[q.id]);
    assert_eq!(res, Ok(0));
    assert_eq!(out, vec![q.id | KFD_DBG_QUEUE_INVALID_MASK]);
    let (total, entries) = snapshot(&s, me(), kfd_ec_mask(EC_QUEUE_NEW));
    assert_eq!(total, 1);
    let e0 = entries[0];
    assert_eq!(e0.queue_id, q.id);
    assert_eq!(e0.gpu_id, s.node.gpu_id);
    assert_eq!(e0.ring_base_address, bufs.ring.addr());
    assert_eq!(e0.ring_size, 4096);
    assert_eq!(e0.queue_type, KFD_IOC_QUEUE_TYPE_COMPUTE_AQL);
    assert_eq!(e0.exception_status, kfd_ec_mask(EC_QUEUE_NEW));
    assert_eq!(
        t.stats().queues[0].exception_status,
        0,
        "cleared by the snapshot"
    );
    // Now it suspends; unknown ids are flagged; repeats are not counted.
    let before = t.stats().partitions[0].preempts;
    let t0 = monotonic_us();
    let (res, out) = queue_op(&s, me(), KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &[q.id, 77]);
    let t1 = monotonic_us();
    assert_eq!(res, Ok(1));
    assert_eq!(out, vec![q.id, 77 | KFD_DBG_QUEUE_INVALID_MASK]);
    let st = t.stats();
    assert!(st.queues[0].suspended && !st.queues[0].active);
    assert_eq!(
        st.partitions[0].preempts,
        before + 1,
        "one device-wide preempt"
    );
    assert_eq!(
        queue_op(&s, me(), KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &[q.id]).0,
        Ok(0)
    );
    // UPDATE_QUEUE does not reactivate a suspended queue.
    s.kfd.update_queue(&q, 100, 9).unwrap();
    assert!(!t.stats().queues[0].active);
    let t2 = monotonic_us();
    let (res, out) = queue_op(&s, me(), KFD_IOC_DBG_TRAP_RESUME_QUEUES, &[q.id, 78]);
    let t3 = monotonic_us();
    assert_eq!(res, Ok(1));
    assert_eq!(out, vec![q.id, 78 | KFD_DBG_QUEUE_INVALID_MASK]);
    let qs = &t.stats().queues[0];
    assert!(qs.active);
    // The stop and restart are timed where they happened; the repeated suspend and the
    // UPDATE_QUEUE of a suspended queue changed nothing.
    one_time_within(&qs.stopped_at_us, t0, t1, "suspended at");
    one_time_within(&qs.runnable_at_us, t2, t3, "resumed at");
    assert_eq!(
        queue_op(&s, me(), KFD_IOC_DBG_TRAP_RESUME_QUEUES, &[q.id]).0,
        Ok(0)
    );
    // DISABLE drops the link; other ops then fail with EINVAL.
    let mut none = 0u64;
    s.kfd
        .dbg_trap(me(), KFD_IOC_DBG_TRAP_DISABLE, &mut none)
        .unwrap();
    assert_eq!(
        queue_op(&s, me(), KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &[q.id]).0,
        Err(libc::EINVAL)
    );
    let p = &t.stats().processes[0];
    assert!(p.runtime_enabled && !p.debug_enabled);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn destroy_blocks_while_debugger_suspended() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    s.kfd.runtime_enable().unwrap();
    let (_r, w) = pipe();
    enable_self(&s, &w, 0);
    let (q, _bufs) = s.queue(100, 7);
    let (q2, _bufs2) = s.queue(100, 7);
    snapshot(&s, me(), kfd_ec_mask(EC_QUEUE_NEW));
    assert_eq!(
        queue_op(&s, me(), KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &[q.id, q2.id]).0,
        Ok(2)
    );
    std::thread::scope(|sc| {
        let h = sc.spawn(|| s.kfd.destroy_queue(q.id));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_destroys
            == 1));
        assert!(
            !h.is_finished(),
            "DESTROY_QUEUE returned while the queue was suspended"
        );
        assert_eq!(t.stats().queues.len(), 2);
        // The FUSE loop is not blocked: other ioctls still work.
        assert_eq!(s.kfd.version().0, 1);
        assert_eq!(
            queue_op(&s, me(), KFD_IOC_DBG_TRAP_RESUME_QUEUES, &[q.id]).0,
            Ok(1)
        );
        assert!(wait_until(WAIT_LIMIT, || h.is_finished()));
        assert_eq!(h.join().unwrap(), Ok(0));
    });
    assert_eq!(t.stats().queues.len(), 1);
    // DISABLE also releases a blocked destroyer.
    std::thread::scope(|sc| {
        let h = sc.spawn(|| s.kfd.destroy_queue(q2.id));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_destroys
            == 1));
        assert!(!h.is_finished());
        let mut none = 0u64;
        s.kfd
            .dbg_trap(me(), KFD_IOC_DBG_TRAP_DISABLE, &mut none)
            .unwrap();
        assert!(wait_until(WAIT_LIMIT, || h.is_finished()));
        assert_eq!(h.join().unwrap(), Ok(0));
    });
    assert!(t.stats().queues.is_empty());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn debug_rules_for_self() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let mut none = [0u8; 24];
    assert_eq!(
        s.kfd.dbg_trap(0, KFD_IOC_DBG_TRAP_ENABLE, &mut none),
        Err(libc::ESRCH)
    );
    assert_eq!(
        s.kfd
            .dbg_trap(me(), KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &mut none),
        Err(libc::EINVAL),
        "not debug enabled"
    );
    // dbg_fd must be open in the caller.
    let mut e = kfd_ioctl_dbg_trap_enable_args {
        dbg_fd: 999_999,
        ..Default::default()
    };
    assert_eq!(
        s.kfd.dbg_trap(me(), KFD_IOC_DBG_TRAP_ENABLE, &mut e),
        Err(libc::EBADF)
    );
    // Debug enabled without RUNTIME_ENABLE: suspend/resume are EPERM.
    let (_r, w) = pipe();
    let info = enable_self(&s, &w, 0);
    assert_eq!(info.runtime_state, DEBUG_RUNTIME_STATE_DISABLED);
    assert_eq!(
        queue_op(&s, me(), KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &[0]).0,
        Err(libc::EPERM)
    );
    assert_eq!(
        s.kfd.dbg_trap(me(), 99, &mut none),
        Err(libc::EINVAL),
        "unknown op"
    );
    // RUNTIME_ENABLE after a queue exists: EEXIST.
    let (_q, _b) = s.queue(0, 7);
    assert_eq!(s.kfd.runtime_enable(), Err(libc::EEXIST));
    // QUERY_DEBUG_EVENT: nothing subscribed -> EAGAIN.
    let mut qe = kfd_ioctl_dbg_trap_query_debug_event_args::default();
    assert_eq!(
        s.kfd
            .dbg_trap(me(), KFD_IOC_DBG_TRAP_QUERY_DEBUG_EVENT, &mut qe),
        Err(libc::EAGAIN)
    );
    let mut se = kfd_ioctl_dbg_trap_set_exceptions_enabled_args {
        exception_mask: kfd_ec_mask(EC_QUEUE_NEW),
    };
    s.kfd
        .dbg_trap(me(), KFD_IOC_DBG_TRAP_SET_EXCEPTIONS_ENABLED, &mut se)
        .unwrap();
    qe.exception_mask = kfd_ec_mask(EC_QUEUE_NEW);
    s.kfd
        .dbg_trap(me(), KFD_IOC_DBG_TRAP_QUERY_DEBUG_EVENT, &mut qe)
        .unwrap();
    assert_eq!(qe.gpu_id, s.node.gpu_id);
    assert_eq!(qe.exception_mask, kfd_ec_mask(EC_QUEUE_NEW));
}

/// A child that opens `dev/kfd` (so it has KFD state) and sleeps.
fn kfd_child(t: &TestEmu) -> Child {
    Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3<>{} && exec sleep 30",
            t.path("dev/kfd").display()
        ))
        .spawn()
        .expect("spawn sh")
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn other_processes_need_the_ptrace_tracer() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (_r, w) = pipe();
    let mut child = kfd_child(&t);
    let pid = child.id();
    assert!(wait_until(WAIT_LIMIT, || t
        .path(&format!("sys/class/kfd/kfd/proc/{pid}"))
        .exists()));
    let mut e = kfd_ioctl_dbg_trap_enable_args {
        dbg_fd: w.as_raw_fd() as u32,
        ..Default::default()
    };
    assert_eq!(
        s.kfd.dbg_trap(pid, KFD_IOC_DBG_TRAP_ENABLE, &mut e),
        Err(libc::EPERM),
        "root without ptrace is not enough"
    );
    let mut none = 0u64;
    assert_eq!(
        s.kfd.dbg_trap(pid, KFD_IOC_DBG_TRAP_DISABLE, &mut none),
        Err(libc::EINVAL),
        "DISABLE skips the tracer check but needs debug enabled"
    );
    // Become the tracer from a dedicated thread: ptrace is per thread.
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let npid = nix::unistd::Pid::from_raw(pid as i32);
            nix::sys::ptrace::seize(npid, nix::sys::ptrace::Options::empty())
                .expect("PTRACE_SEIZE");
            let mut info = kfd_runtime_info::default();
            let mut e = kfd_ioctl_dbg_trap_enable_args {
                rinfo_ptr: &raw mut info as u64,
                rinfo_size: 16,
                dbg_fd: w.as_raw_fd() as u32,
                ..Default::default()
            };
            s.kfd
                .dbg_trap(pid, KFD_IOC_DBG_TRAP_ENABLE, &mut e)
                .expect("ENABLE as tracer");
            let stats = t.stats();
            let p = stats.processes.iter().find(|p| p.pid == pid).unwrap();
            assert_eq!(p.debugger_pid, Some(me()));
            // Another thread of the same process is not the tracer.
            sc.spawn(|| {
                let mut se = kfd_ioctl_dbg_trap_set_exceptions_enabled_args::default();
                assert_eq!(
                    s.kfd
                        .dbg_trap(pid, KFD_IOC_DBG_TRAP_SET_EXCEPTIONS_ENABLED, &mut se),
                    Err(libc::EPERM)
                );
            })
            .join()
            .unwrap();
            // The target is not runtime-enabled: SUSPEND is EPERM even for the tracer.
            assert_eq!(
                queue_op(&s, pid, KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &[0]).0,
                Err(libc::EPERM)
            );
            let mut none = 0u64;
            s.kfd
                .dbg_trap(pid, KFD_IOC_DBG_TRAP_DISABLE, &mut none)
                .unwrap();
            let _ = nix::sys::ptrace::detach(npid, None);
        });
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(wait_until(WAIT_LIMIT, || !t
        .path(&format!("sys/class/kfd/kfd/proc/{pid}"))
        .exists()));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tracer_creates_state_for_a_target_without_kfd_and_reaper_removes_it() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (_r, w) = pipe();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = child.id();
    let mut e = kfd_ioctl_dbg_trap_enable_args {
        dbg_fd: w.as_raw_fd() as u32,
        ..Default::default()
    };
    assert_eq!(
        s.kfd.dbg_trap(pid, KFD_IOC_DBG_TRAP_ENABLE, &mut e),
        Err(libc::ESRCH),
        "no KFD state and not traced"
    );
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let npid = nix::unistd::Pid::from_raw(pid as i32);
            nix::sys::ptrace::seize(npid, nix::sys::ptrace::Options::empty()).unwrap();
            let mut e = kfd_ioctl_dbg_trap_enable_args {
                dbg_fd: w.as_raw_fd() as u32,
                ..Default::default()
            };
            s.kfd
                .dbg_trap(pid, KFD_IOC_DBG_TRAP_ENABLE, &mut e)
                .unwrap();
        });
    });
    assert!(t.path(&format!("sys/class/kfd/kfd/proc/{pid}")).exists());
    // The target never opened dev/kfd: only the reaper can notice it is gone.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(wait_until(WAIT_LIMIT, || !t
        .path(&format!("sys/class/kfd/kfd/proc/{pid}"))
        .exists()));
}
