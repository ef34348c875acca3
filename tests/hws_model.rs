//! Through the emulator's HWS model: a deactivated queue stops consuming packets while an
//! active one continues, and the device-wide preempt counter moves as docs/kernel-interface.md §2 says.

mod common;

use std::time::Duration;

use common::*;
use kfdq::kfd::{DispatchPacket, Kfd, QueueSpec, Signal};

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn deactivated_queue_stops_while_active_one_continues() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let mut a = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    let mut b = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    let sig_a = Signal::new(&kfd, gpu, 40).unwrap();
    let sig_b = Signal::new(&kfd, gpu, 40).unwrap();
    b.deactivate().unwrap();
    for _ in 0..40 {
        a.submit(
            &DispatchPacket::new(1, 64, 64)
                .with_duration_ns(200_000)
                .with_signal(&sig_a),
        )
        .unwrap();
        b.submit(
            &DispatchPacket::new(1, 64, 64)
                .with_duration_ns(200_000)
                .with_signal(&sig_b),
        )
        .unwrap();
    }
    // A runs to completion (its completion signal counts down to 0) ...
    a.wait_idle(WAIT_LIMIT).unwrap();
    assert_eq!(a.read_index().unwrap(), 40);
    assert_eq!(sig_a.value().unwrap(), 0);
    // ... while B, inactive the whole time, consumed nothing.
    assert_eq!(b.read_index().unwrap(), 0);
    assert_eq!(sig_b.value().unwrap(), 40);
    assert_eq!(emu.queue(std::process::id(), b.id().0).packets_done, 0);
    // Reactivated, B drains.
    b.activate().unwrap();
    b.wait_idle(WAIT_LIMIT).unwrap();
    assert_eq!(sig_b.value().unwrap(), 0);
    assert_eq!(emu.queue(std::process::id(), b.id().0).packets_done, 40);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn deactivation_mid_stream_freezes_progress() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let mut q = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    // 200 packets of 20 ms: 4 s of work, so a test thread starved for a while between the first
    // completions and the deactivation (a loaded machine) still deactivates mid-stream.
    for _ in 0..200 {
        q.submit(&DispatchPacket::new(1, 64, 64).with_duration_ns(20_000_000))
            .unwrap();
    }
    wait_for("some progress", || q.read_index().unwrap() >= 3);
    q.deactivate().unwrap();
    let pid = std::process::id();
    // The CP's own count at the deactivation. The read index in memory follows it a little
    // later (the CP writes it after releasing its lock: several packets later on a loaded
    // machine), so each check below first waits for memory to catch up with the CP.
    let frozen = emu.queue(pid, q.id().0).read_index;
    let settled = || {
        wait_for("the read index in memory to catch up with the CP", || {
            q.read_index().unwrap() == emu.queue(pid, q.id().0).read_index
        });
        q.read_index().unwrap()
    };
    // The window: another process's queue runs 20 ms of packets on the same partition, so the
    // CP had every chance to (wrongly) run the inactive queue meanwhile.
    test_support::hold::cp_witness(&emu, 20, 1000);
    // At most the packet in flight at the preempt may have been recorded meanwhile.
    let later = settled();
    assert!(
        later <= frozen + 1,
        "inactive queue advanced from {frozen} to {later}"
    );
    test_support::hold::cp_witness(&emu, 20, 1000);
    assert_eq!(settled(), later, "no progress while inactive");
    assert!(later < 200);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn preempt_counter_follows_the_runlist_rule() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let p = |e: &Emu| e.partition(gpu.0).preempts;
    // Inactive queues only: no runlist is mapped, so updates are not preempts.
    let mut a = kfd.create_queue(QueueSpec::aql(gpu).inactive()).unwrap();
    let mut b = kfd.create_queue(QueueSpec::aql(gpu).inactive()).unwrap();
    assert_eq!(p(&emu), 0);
    a.set_priority(kfdq::kfd::Priority::HIGH).unwrap();
    assert_eq!(p(&emu), 0, "update with no runlist mapped");
    // The first activation maps a runlist (no preempt); from then on every update preempts.
    a.activate().unwrap();
    assert_eq!(p(&emu), 0);
    assert_eq!(emu.partition(gpu.0).active_queues, 1);
    b.set_priority(kfdq::kfd::Priority::LOW).unwrap(); // b inactive, but a's runlist is unmapped
    assert_eq!(p(&emu), 1);
    b.activate().unwrap();
    assert_eq!(p(&emu), 2);
    a.deactivate().unwrap();
    assert_eq!(p(&emu), 3);
    a.set_cu_mask(kfdq::kfd::CuMask::first(8).unwrap()).unwrap();
    assert_eq!(p(&emu), 4, "CU-mask change preempts");
    let c = kfd.create_queue(QueueSpec::aql(gpu)).unwrap(); // active create: runlist rebuilt
    assert_eq!(p(&emu), 5);
    c.destroy().unwrap();
    assert_eq!(p(&emu), 6, "destroying an active queue preempts");
    let part = emu.partition(gpu.0);
    assert_eq!(part.active_queues, 1);
    assert!(part.runlist_updates >= part.preempts);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn oversubscription_is_reported() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let node = kfd.topology().gpus().next().unwrap();
    let gpu = node.gpu_id.unwrap();
    let limit = node.resident_queue_limit();
    let mut qs = Vec::new();
    for _ in 0..limit {
        qs.push(
            kfd.create_queue(QueueSpec::aql(gpu).ring_size(4096))
                .unwrap(),
        );
    }
    let part = emu.partition(gpu.0);
    assert_eq!(
        (
            part.active_queues,
            part.resident_queues,
            part.oversubscribed
        ),
        (limit, limit, false)
    );
    qs.push(
        kfd.create_queue(QueueSpec::aql(gpu).ring_size(4096))
            .unwrap(),
    );
    let part = emu.partition(gpu.0);
    assert_eq!(part.active_queues, limit + 1);
    assert_eq!(part.resident_queues, limit);
    assert!(part.oversubscribed);
}

/// A packet submitted to a queue that sat idle is not credited with the idle time: its
/// modelled duration is a lower bound on submit-to-completion (an ordering property, so it
/// cannot flake on a slow machine).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn idle_time_is_not_credited_to_later_packets() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let mut q = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    q.submit(&DispatchPacket::new(1, 64, 64).with_duration_ns(1_000))
        .unwrap();
    q.wait_idle(WAIT_LIMIT).unwrap();
    // An idle gap before the next packet (setup, not an assertion window): the next packet
    // must not be credited with it.
    test_support::hold::cp_witness(&emu, 30, 2000);
    let t0 = std::time::Instant::now();
    q.submit(&DispatchPacket::new(1, 64, 64).with_duration_ns(40_000_000))
        .unwrap();
    q.wait_idle(WAIT_LIMIT).unwrap();
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(40),
        "a 40 ms packet completed {took:?} after submission"
    );
}
