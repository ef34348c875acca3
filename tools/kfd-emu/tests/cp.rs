//! The HWS model and the CP thread: packets execute, inactive queues stop, the
//! preempt counter follows the runlist rule, oversubscription rotates residency.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use kfd_emu::{EmuConfig, Preset};
use kfd_sys::*;

use common::*;

fn counters(t: &TestEmu) -> (u64, u64) {
    let p = &t.stats().partitions[0];
    (p.runlist_updates, p.preempts)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn packets_execute_and_stop_while_percentage_is_zero() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (q, bufs) = s.queue(100, 7);
    let signal = Mapping::new(4096);
    let value = signal.i64_at(8);
    let rptr = bufs.ptrs.u64_at(RPTR_OFF);
    value.store(4, Ordering::Release);
    let w = submit(&bufs, 0, &[dispatch_packet(2_000_000, signal.addr()); 4]);
    assert!(
        wait_until(WAIT_LIMIT, || rptr.load(Ordering::Acquire) == w),
        "read index reached {} of {w}",
        rptr.load(Ordering::Acquire)
    );
    assert_eq!(value.load(Ordering::Acquire), 0, "one decrement per packet");
    let qs = &t.stats().queues[0];
    assert_eq!((qs.packets_done, qs.read_index, qs.write_index), (4, 4, 4));

    // Deactivated: nothing runs.
    let t0 = monotonic_us();
    s.kfd.update_queue(&q, 0, 7).unwrap();
    let t1 = monotonic_us();
    value.store(2, Ordering::Release);
    let w = submit(&bufs, w, &[dispatch_packet(1_000_000, signal.addr()); 2]);
    // The window: another process's queue runs 20 packets of 1 ms meanwhile.
    test_support::hold::cp_witness(&t, 20, 1000);
    assert_eq!(rptr.load(Ordering::Acquire), 4);
    assert_eq!(value.load(Ordering::Acquire), 2);
    assert!(!t.stats().queues[0].active);

    // Reactivated: it continues.
    let t2 = monotonic_us();
    s.kfd.update_queue(&q, 100, 7).unwrap();
    let t3 = monotonic_us();
    let qs = &t.stats().queues[0];
    one_time_within(&qs.stopped_at_us, t0, t1, "deactivated at");
    one_time_within(&qs.runnable_at_us, t2, t3, "reactivated at");
    assert!(wait_until(WAIT_LIMIT, || rptr.load(Ordering::Acquire) == w));
    assert_eq!(value.load(Ordering::Acquire), 0);

    // A packet whose header is still INVALID is waited for, not consumed.
    let mut pkt = dispatch_packet(0, 0);
    pkt[0] = 1;
    let w2 = submit(&bufs, w, &[pkt]);
    test_support::hold::cp_witness(&t, 10, 1000);
    assert_eq!(rptr.load(Ordering::Acquire), w);
    pkt[0] = 2;
    submit(&bufs, w, &[pkt]);
    assert!(wait_until(WAIT_LIMIT, || rptr.load(Ordering::Acquire) == w2));
    // Barrier packets (type 3) complete immediately.
    let mut barrier = dispatch_packet(0, signal.addr());
    barrier[0] = 3;
    value.store(1, Ordering::Release);
    let w3 = submit(&bufs, w2, &[barrier]);
    assert!(wait_until(WAIT_LIMIT, || rptr.load(Ordering::Acquire) == w3));
    assert_eq!(value.load(Ordering::Acquire), 0);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn preempt_counter_follows_the_runlist_rule() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    assert_eq!(counters(&t), (0, 0));
    // Creating an inactive queue does not touch the runlist.
    let (a, _ba) = s.queue(0, 7);
    assert_eq!(counters(&t), (0, 0));
    // Activating it: runlist update, but nothing was mapped, so no preempt.
    s.kfd.update_queue(&a, 100, 7).unwrap();
    assert_eq!(counters(&t), (1, 0));
    // Creating an active queue while A runs: update + preempt.
    let (b, _bb) = s.queue(100, 7);
    assert_eq!(counters(&t), (2, 1));
    // Any UPDATE_QUEUE preempts while something is active.
    s.kfd.update_queue(&b, 0, 7).unwrap();
    assert_eq!(counters(&t), (3, 2));
    // Destroying an inactive queue does not.
    s.kfd.destroy_queue(b.id).unwrap();
    assert_eq!(counters(&t), (3, 2));
    // SET_CU_MASK does.
    let mask = [u32::MAX; 4];
    let mut m = kfd_ioctl_set_cu_mask_args {
        queue_id: a.id,
        num_cu_mask: 128,
        cu_mask_ptr: mask.as_ptr() as u64,
    };
    s.kfd.ioctl(AMDKFD_IOC_SET_CU_MASK, &mut m).unwrap();
    assert_eq!(counters(&t), (4, 3));
    // Deactivating the last active queue preempts; the next update has nothing mapped.
    s.kfd.update_queue(&a, 0, 7).unwrap();
    assert_eq!(counters(&t), (5, 4));
    s.kfd.update_queue(&a, 0, 3).unwrap();
    assert_eq!(counters(&t), (6, 4));
    // Destroying an active queue preempts.
    s.kfd.update_queue(&a, 100, 3).unwrap();
    assert_eq!(counters(&t), (7, 4));
    s.kfd.destroy_queue(a.id).unwrap();
    assert_eq!(counters(&t), (8, 5));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn oversubscribed_partition_rotates_residency() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("topo.toml");
    std::fs::write(
        &topo,
        "preset = \"mi308x\"\n[[node]]\n[node.properties]\nnum_cp_queues = 2\n",
    )
    .unwrap();
    // A quantum far longer than creating the queues and reading the statistics once, even on a
    // loaded machine (the statistics are a file of the emulator's mount, served by its process).
    let t = mount(EmuConfig {
        topology_file: Some(topo),
        quantum_us: 200_000,
        ..EmuConfig::default()
    });
    let s = Session::new(&t, 0);
    let queues: Vec<_> = (0..3).map(|_| s.queue(100, 7)).collect();
    let st = t.stats();
    let p = &st.partitions[0];
    assert_eq!(
        (p.active_queues, p.resident_queues, p.oversubscribed),
        (3, 2, true)
    );
    let resident = |st: &kfd_emu::Stats| -> BTreeSet<u32> {
        st.queues
            .iter()
            .filter(|q| q.resident)
            .map(|q| q.queue_id)
            .collect()
    };
    // The same snapshot: a second read could come after the first rotation.
    assert_eq!(
        resident(&st),
        BTreeSet::from([0, 1]),
        "first num_cp_queues of the runlist"
    );
    assert!(
        wait_until(WAIT_LIMIT, || resident(&t.stats()).contains(&2)),
        "residency never rotated"
    );
    // Deactivating one queue ends the oversubscription.
    s.kfd.update_queue(&queues[0].0, 0, 7).unwrap();
    let p = &t.stats().partitions[0];
    assert_eq!(
        (p.active_queues, p.resident_queues, p.oversubscribed),
        (2, 2, false)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn wave_state_reports_saved_work_of_inactive_queues() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (q, bufs) = s.queue(100, 7);
    let mut ws = kfd_ioctl_get_queue_wave_state_args {
        ctl_stack_address: bufs.cwsr.addr(),
        queue_id: q.id,
        ..Default::default()
    };
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_GET_QUEUE_WAVE_STATE, &mut ws),
        Err(libc::EINVAL),
        "active queue"
    );
    // A long dispatch in flight when the queue is deactivated leaves saved waves.
    submit(&bufs, 0, &[dispatch_packet(10_000_000_000, 0)]);
    assert!(wait_until(WAIT_LIMIT, || t.stats().queues[0].write_index == 1));
    s.kfd.update_queue(&q, 0, 7).unwrap();
    s.kfd
        .ioctl(AMDKFD_IOC_GET_QUEUE_WAVE_STATE, &mut ws)
        .unwrap();
    assert!(ws.ctl_stack_used_size > 0 && ws.save_area_used_size > 0);
    // An idle queue saves nothing.
    let (q2, _b2) = s.queue(0, 7);
    let mut ws2 = kfd_ioctl_get_queue_wave_state_args {
        queue_id: q2.id,
        ..Default::default()
    };
    s.kfd
        .ioctl(AMDKFD_IOC_GET_QUEUE_WAVE_STATE, &mut ws2)
        .unwrap();
    assert_eq!((ws2.ctl_stack_used_size, ws2.save_area_used_size), (0, 0));
    ws2.queue_id = 77;
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_GET_QUEUE_WAVE_STATE, &mut ws2),
        Err(libc::EFAULT)
    );
}

/// A queue whose `amd_queue_t.queue_properties` (52 bytes after the read index) has
/// `AMD_QUEUE_PROPERTIES_ENABLE_PROFILING` gets each packet's start and end GPU timestamps in
/// its completion signal (`amd_signal_t.start_ts` / `end_ts`, bytes 0x20 and 0x28), as the CP
/// writes them for the runtime's event timing; a queue without it gets none.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn profiling_queues_get_packet_timestamps() {
    require_root();
    let t = mount_preset(Preset::Mi210);
    let s = Session::new(&t, 0);
    // Both queues stay alive (their buffers' addresses are not reused).
    let queues = [s.queue(100, 7), s.queue(100, 7)];
    let signals = [Mapping::new(4096), Mapping::new(4096)];
    for (k, profiling) in [false, true].into_iter().enumerate() {
        let bufs = &queues[k].1;
        let signal = &signals[k];
        if profiling {
            // queue_properties is a u32 at byte 180 of amd_queue_t, read_dispatch_id at 128.
            let word = bufs.ptrs.u64_at(RPTR_OFF + 48);
            word.store(8 << 32, Ordering::Release);
        }
        signal.i64_at(8).store(1, Ordering::Release);
        let rptr = bufs.ptrs.u64_at(RPTR_OFF);
        let w = submit(bufs, 0, &[dispatch_packet(100_000, signal.addr())]);
        assert!(wait_until(WAIT_LIMIT, || rptr.load(Ordering::Acquire) == w));
        let start = signal.u64_at(0x20).load(Ordering::Acquire);
        let end = signal.u64_at(0x28).load(Ordering::Acquire);
        if profiling {
            assert!(start > 0 && end > start, "start {start} end {end}");
        } else {
            assert_eq!((start, end), (0, 0));
        }
    }
}

/// A consumed packet's header reads INVALID before the read index frees its slot, so a slot
/// the producer reserved on the ring's next lap (write index bumped, packet not yet written)
/// is waited for instead of its previous lap's packet being run again. Before, the previous
/// packet ran twice and the new one never: rocblas-bench's start-up (a 64-slot ring, more than
/// 128 packets) spun forever on the new packet's completion signal (docs/real-rocm.md).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn consumed_packets_read_invalid_and_a_reserved_slot_of_the_next_lap_is_waited_for() {
    require_root();
    let t = mount_preset(Preset::Mi210);
    let s = Session::new(&t, 0);
    let (_q, bufs) = s.queue(100, 7);
    let slots = (bufs.ring.len / 64) as u64;
    let signal = Mapping::new(4096);
    let value = signal.i64_at(8);
    let rptr = bufs.ptrs.u64_at(RPTR_OFF);
    value.store(slots as i64, Ordering::Release);
    let packets = vec![dispatch_packet(1000, signal.addr()); slots as usize];
    let w = submit(&bufs, 0, &packets);
    assert!(wait_until(WAIT_LIMIT, || rptr.load(Ordering::Acquire) == w));
    assert_eq!(value.load(Ordering::Acquire), 0, "one decrement per packet");
    let headers: Vec<u8> = (0..slots as usize)
        .map(|i| {
            // SAFETY: inside the ring mapping.
            unsafe { std::ptr::read_volatile(bufs.ring.ptr.add(i * 64)) }
        })
        .collect();
    assert!(
        headers.iter().all(|h| *h == 1),
        "headers of consumed packets (type byte): {headers:?}"
    );
    // The producer reserves the first slot of the next lap and has not written it yet.
    value.store(1, Ordering::Release);
    bufs.ptrs.u64_at(WPTR_OFF).store(w + 1, Ordering::Release);
    test_support::hold::cp_witness(&t, 10, 1000);
    assert_eq!(
        rptr.load(Ordering::Acquire),
        w,
        "a reserved, unwritten slot was consumed"
    );
    assert_eq!(value.load(Ordering::Acquire), 1);
    // Written: it runs.
    let w2 = submit(&bufs, w, &[dispatch_packet(1000, signal.addr())]);
    assert!(wait_until(WAIT_LIMIT, || rptr.load(Ordering::Acquire) == w2));
    assert_eq!(value.load(Ordering::Acquire), 0);
}
