//! RUNTIME_ENABLE and DBG_TRAP through the emulator: self-debugging, EC_QUEUE_NEW, suspend /
//! resume, destroy blocking while suspended, and the ptrace permission model across processes.

mod common;

use std::sync::mpsc;

use common::*;
use kfdq::kfd::{
    EXCEPTION_QUEUE_NEW, Kfd, QueueId, QueueSpec, QueueStatus, debug::GRACE_IMMEDIATE,
};
use nix::errno::Errno;
use nix::unistd::Pid;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn runtime_enable_must_precede_queues() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let _q = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    let e = kfd.runtime_enable(0, false).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EEXIST), "{e}");
    assert!(
        e.to_string()
            .contains("before the process creates its first queue"),
        "{e}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn runtime_enable_twice_is_busy_and_disable_works() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    kfd.runtime_enable(0x1000, false).unwrap();
    assert_eq!(
        kfd.runtime_enable(0, false).unwrap_err().errno(),
        Some(Errno::EBUSY)
    );
    let pid = std::process::id();
    assert!(
        emu.stats()
            .processes
            .iter()
            .any(|p| p.pid == pid && p.runtime_enabled)
    );
    kfd.runtime_disable().unwrap();
    assert!(
        emu.stats()
            .processes
            .iter()
            .any(|p| p.pid == pid && !p.runtime_enabled)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn self_debug_suspend_resume() {
    let emu = mount_preset(Preset::Mi308x);
    let pid = std::process::id();
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    kfd.runtime_enable(0x4242, false).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let a = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    let b = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    // Operations other than ENABLE need debugging enabled.
    assert_eq!(
        kfd.queue_snapshot(pid, 0).unwrap_err().errno(),
        Some(Errno::EINVAL)
    );
    let att = kfd.dbg_enable(pid, EXCEPTION_QUEUE_NEW).unwrap();
    assert_eq!(att.runtime.r_debug, 0x4242);
    assert!(att.runtime.runtime_enabled());
    assert_eq!(
        kfd.dbg_enable(pid, 0).unwrap_err().errno(),
        Some(Errno::EALREADY)
    );

    // New queues carry EC_QUEUE_NEW and cannot be suspended yet.
    let (n, st) = kfd
        .suspend_queues(pid, &[a.id(), b.id()], GRACE_IMMEDIATE)
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(st, vec![QueueStatus::Invalid, QueueStatus::Invalid]);
    assert!(!emu.queue(pid, a.id().0).suspended);

    // The snapshot reports the bit and clears it.
    let snap = kfd.queue_snapshot(pid, EXCEPTION_QUEUE_NEW).unwrap();
    assert_eq!(snap.len(), 2);
    let sa = snap.iter().find(|s| s.queue_id == a.id()).unwrap();
    assert_ne!(sa.exception_status & EXCEPTION_QUEUE_NEW, 0);
    assert_eq!(sa.ring_base_address, a.ring_address());
    assert_eq!(sa.read_pointer_address, a.read_pointer_address());
    assert_eq!(sa.gpu_id, gpu);
    assert_eq!(
        emu.queue(pid, a.id().0).exception_status & EXCEPTION_QUEUE_NEW,
        0
    );

    // Now suspend a (and an unknown id), batch of one preempt.
    let before = emu.partition(gpu.0).preempts;
    let (n, st) = kfd
        .suspend_queues(pid, &[a.id(), QueueId(999)], GRACE_IMMEDIATE)
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(st, vec![QueueStatus::Ok, QueueStatus::Invalid]);
    assert_eq!(emu.partition(gpu.0).preempts, before + 1);
    let s = emu.queue(pid, a.id().0);
    assert!(s.suspended && !s.active);
    assert!(emu.queue(pid, b.id().0).active);
    // Suspending again changes nothing.
    assert_eq!(
        kfd.suspend_queues(pid, &[a.id()], GRACE_IMMEDIATE)
            .unwrap()
            .0,
        0
    );

    let (n, st) = kfd.resume_queues(pid, &[a.id()]).unwrap();
    assert_eq!((n, st), (1, vec![QueueStatus::Ok]));
    let s = emu.queue(pid, a.id().0);
    assert!(!s.suspended && s.active);
    kfd.dbg_disable(pid).unwrap();
    assert!(
        emu.stats()
            .processes
            .iter()
            .any(|p| p.pid == pid && !p.debug_enabled)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn destroy_blocks_while_debugger_suspended() {
    let emu = mount_preset(Preset::Mi308x);
    let pid = std::process::id();
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    kfd.runtime_enable(0, false).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let q = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    let id = q.id();
    let _att = kfd.dbg_enable(pid, 0).unwrap();
    kfd.queue_snapshot(pid, EXCEPTION_QUEUE_NEW).unwrap();
    assert_eq!(
        kfd.suspend_queues(pid, &[id], GRACE_IMMEDIATE).unwrap().0,
        1
    );
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            let r = q.destroy();
            tx.send(r.is_ok()).unwrap();
        });
        // The destroy must not return while the queue is suspended: the emulator counts it
        // blocked, and it has not returned.
        emu.wait_stats("DESTROY_QUEUE blocked on the suspended queue", |st| {
            st.processes
                .iter()
                .any(|p| p.pid == pid && p.blocked_destroys == 1)
        });
        assert!(
            rx.try_recv().is_err(),
            "DESTROY_QUEUE returned while suspended"
        );
        assert!(
            emu.stats()
                .queues
                .iter()
                .any(|x| x.pid == pid && x.queue_id == id.0)
        );
        kfd.resume_queues(pid, &[id]).unwrap();
        assert!(
            rx.recv_timeout(test_support::wait::WAIT_LIMIT)
                .expect("destroy finished after resume")
        );
    });
    assert!(
        !emu.stats()
            .queues
            .iter()
            .any(|x| x.pid == pid && x.queue_id == id.0)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn dbg_trap_on_another_pid_needs_ptrace() {
    let emu = mount_preset(Preset::Mi308x);
    let holder = Holder::spawn(
        emu.root(),
        &[
            "--queues",
            "2",
            "--runtime-enable",
            "--packets",
            "50",
            "--packet-us",
            "2000",
        ],
    );
    let kfd = Kfd::open(&emu.kfd_root()).unwrap(); // the debugger needs its own KFD context
    // Without being its tracer: EPERM, with the rule in words.
    let e = kfd.dbg_enable(holder.pid, 0).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EPERM), "{e}");
    assert!(e.to_string().contains("ptrace tracer"), "{e}");
    let e = kfd
        .suspend_queues(holder.pid, &[QueueId(holder.queues[0])], GRACE_IMMEDIATE)
        .unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EPERM), "{e}");

    // As its tracer (PTRACE_SEIZE does not stop it), from this same thread: allowed.
    nix::sys::ptrace::seize(
        Pid::from_raw(holder.pid as i32),
        nix::sys::ptrace::Options::empty(),
    )
    .expect("PTRACE_SEIZE");
    let att = kfd.dbg_enable(holder.pid, 0).unwrap();
    assert!(att.runtime.runtime_enabled());
    let ids: Vec<QueueId> = holder.queues.iter().map(|q| QueueId(*q)).collect();
    let snap = kfd.queue_snapshot(holder.pid, EXCEPTION_QUEUE_NEW).unwrap();
    assert_eq!(snap.len(), 2);
    let (n, st) = kfd
        .suspend_queues(holder.pid, &ids, GRACE_IMMEDIATE)
        .unwrap();
    assert_eq!(n, 2);
    assert!(st.iter().all(|s| *s == QueueStatus::Ok));
    let done = emu.queue(holder.pid, ids[0].0).packets_done;
    // The window: a third process's queue runs 10 packets of 2 ms meanwhile.
    test_support::hold::cp_witness(&emu, 10, 2000);
    assert!(
        emu.queue(holder.pid, ids[0].0).packets_done <= done + 1,
        "suspended queue kept running"
    );
    assert!(
        emu.stats()
            .processes
            .iter()
            .any(|p| p.pid == holder.pid && p.debugger_pid == Some(std::process::id()))
    );

    // When the debugger's KFD context goes away, the target's queues are resumed (docs/kernel-interface.md §4).
    drop(att);
    drop(kfd);
    wait_for("resume after the debugger left", || {
        ids.iter().all(|q| !emu.queue(holder.pid, q.0).suspended)
    });
    assert!(holder.finish().success());
}
