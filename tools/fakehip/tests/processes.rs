//! fakehip's processes and devices against kfd-emu: fork, device order, graphs, memory
//! operations, per-thread streams, device reset, misc API behaviour and full rings.
//!
//! The test programs (`tests/programs/*.c`) run against a private kfd-emu mount per test
//! (`KFDQ_ROOT=<mount>`), through real open/ioctl/mmap syscalls on the FUSE tree. Each test
//! checks both sides: what the program prints, and the emulator's stats read while the
//! program is parked at its checkpoints (queues and their KFD priorities, packets consumed,
//! queues destroyed, CU masks, GPUs, processes). The emulator enforces the kernel's rules
//! (ACQUIRE_VM before queues, RUNTIME_ENABLE before the first queue, the 6.12 exact-size
//! queue buffers, EBADF on a KFD fd used after fork), so a fakehip that broke them would
//! fail there. These tests mount FUSE and need root (see `test_support::require_root`).

use std::collections::{BTreeMap, BTreeSet};

#[macro_use]
mod common;

use common::{
    EmuConfig, QueueStats, field, mi308x, num, packets_done, qids, queue, queues_of,
    sorted_priorities,
};

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn forked_child_reopens_kfd() {
    let emu = common::mount(mi308x());
    let r = emu.run_with("scenarios", &["fork"], &[], |cp| {
        // (a child that failed printed no pid: the exit status below tells)
        let child = cp.stdout.lines().find_map(|l| l.strip_prefix("child pid "));
        if let (Some(line), "parent") = (child, cp.name) {
            let child: u32 = num(line.split_whitespace().next().unwrap_or_default());
            cp.emu
                .wait_stats("the exited child's KFD process is gone", |s| {
                    !s.processes.iter().any(|p| p.pid == child)
                });
        }
    });
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "child exit "), ["0"]);
    let parent_q: u32 = num(&field(s, "parent queue ")[0]);
    let child_line = field(s, "child pid ");
    assert_eq!(child_line[1], "queue", "{s}");
    let (child, child_q): (u32, u32) = (num(&child_line[0]), num(&child_line[2]));
    assert_ne!(child, r.pid);

    // The child is a KFD process of its own (an ioctl on the inherited fd would have been
    // EBADF): runtime-enabled, with its queue that ran its launch; the parent's queue is
    // untouched.
    let at_child = r.at("child");
    let child_proc = at_child
        .processes
        .iter()
        .find(|p| p.pid == child)
        .unwrap_or_else(|| panic!("no KFD process for the child {child}: {at_child:#?}"));
    assert!(child_proc.runtime_enabled, "{child_proc:?}");
    let cq = queues_of(at_child, child);
    assert_eq!(qids(&cq), BTreeSet::from([child_q]));
    assert_eq!(cq[0].packets_done, 1);
    let pq = queues_of(at_child, r.pid);
    assert_eq!(qids(&pq), BTreeSet::from([parent_q]));
    assert_eq!(pq[0].packets_done, 1);

    // after the child exited the parent still works with its own queue
    let at_parent = r.at("parent");
    assert!(!at_parent.processes.iter().any(|p| p.pid == child));
    assert_eq!(
        queue(&queues_of(at_parent, r.pid), parent_q).packets_done,
        2
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn cu_masked_streams_get_their_own_queue() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["cumask"], &[]);
    r.assert_ok();
    let w = field(r.stdout(), "cumask queue ");
    assert_eq!(w[1..3], ["plain", "queue"], "{}", r.stdout());
    let (masked, plain): (u32, u32) = (num(&w[0]), num(&w[3]));
    assert_ne!(masked, plain, "CU-masked stream shares a pool queue");
    let qs = r.queues_at("masked");
    assert_eq!(qids(&qs), BTreeSet::from([masked, plain]));
    // SET_CU_MASK with 64 bits: words {0x0000ffff, 0}
    let m = queue(&qs, masked);
    assert_eq!(m.cu_mask.as_deref(), Some(&[0x0000_ffff, 0][..]), "{m:?}");
    assert_eq!((m.priority, m.packets_done), (7, 1), "{m:?}");
    let p = queue(&qs, plain);
    assert_eq!(p.cu_mask, None, "{p:?}");
    assert_eq!(p.priority, 7, "{p:?}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn devices_map_to_gpu_nodes_in_order() {
    let emu = common::mount(EmuConfig {
        gpus: 2,
        ..mi308x()
    });
    let gpus = emu.gpu_ids();
    assert_eq!(gpus.len(), 2);
    let r = emu.run("scenarios", &["multigpu"], &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "devices "), ["2"]);
    assert_eq!(
        field(s, "device "),
        [
            "1".to_string(),
            "stream_device".into(),
            "1".into(),
            "gpu0".into(),
            gpus[0].to_string(),
            "gpu1".into(),
            gpus[1].to_string()
        ]
    );
    // one queue on each GPU, each ran its launch
    let at = r.at("synced");
    let qs = queues_of(at, r.pid);
    let per_gpu: BTreeMap<u32, u64> = qs.iter().map(|q| (q.gpu_id, q.packets_done)).collect();
    assert_eq!(qs.len(), 2, "{qs:#?}");
    assert_eq!(per_gpu, BTreeMap::from([(gpus[0], 1), (gpus[1], 1)]));
    for p in &at.partitions {
        assert_eq!(p.active_queues, 1, "{p:?}");
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn graphs_and_capture_replay_kernels() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["graph"], &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "after_graph write_index "), ["3"]);
    assert_eq!(field(s, "capturing "), ["1"]);
    assert_eq!(
        field(s, "after_capture write_index "),
        ["3"],
        "capture must not submit"
    );
    assert_eq!(
        field(s, "after_replay write_index "),
        ["7", "read_index", "7"]
    );
    // three graph kernels + two replays of the two captured ones
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(
        (qs[0].packets_done, qs[0].read_index, qs[0].write_index),
        (7, 7, 7)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn memory_operations_enqueue_barriers_and_create_the_null_queue_lazily() {
    let emu = common::mount(mi308x());
    let r = emu.run_with("scenarios", &["memops"], &[], |cp| {
        cp.emu.wait_stats("the four barrier packets consumed", |s| {
            packets_done(&queues_of(s, cp.pid)) == 4
        });
    });
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "b0 "), ["7", "a0", "1", "a40", "7"]);
    assert_eq!(field(s, "stream write_index "), ["2"]);
    let null_q: u32 = num(&field(s, "null queue after memset ")[0]);
    let pts_q: u32 = num(&field(s, "per-thread queue ")[0]);
    // null (hipMemset), user stream (memcpy + memset async), per-thread (hipMemcpy_spt)
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 3, "{qs:#?}");
    assert_eq!(queue(&qs, null_q).packets_done, 1);
    assert_eq!(queue(&qs, pts_q).packets_done, 1);
    let user: Vec<&QueueStats> = qs
        .iter()
        .filter(|q| q.queue_id != null_q && q.queue_id != pts_q)
        .collect();
    assert_eq!(user.len(), 1, "{qs:#?}");
    assert_eq!(user[0].packets_done, 2);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn per_thread_streams_are_per_thread_and_released_at_exit() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["perthread"], &[("GPU_MAX_HW_QUEUES", "8")]);
    r.assert_ok();
    let s = r.stdout();
    let t0 = field(s, "thread 0 pts ");
    let t1 = field(s, "thread 1 pts ");
    assert_ne!(t0[0], t1[0], "each thread has its own default stream: {s}");
    assert_eq!(t0[2], t1[2], "the legacy null stream is shared: {s}");
    assert_eq!(
        t0[2], t0[4],
        "NULL means the legacy stream outside _spt: {s}"
    );
    assert_eq!(field(s, "main legacy "), [t0[2].clone()]);
    let (pts0, pts1, legacy): (u32, u32, u32) = (num(&t0[0]), num(&t1[0]), num(&t0[2]));
    // while the threads live: their two per-thread queues (two launches each) and the
    // legacy queue (one launch per thread)
    let qs = r.queues_at("running");
    assert_eq!(qids(&qs), BTreeSet::from([pts0, pts1, legacy]));
    for q in &qs {
        assert_eq!((q.priority, q.packets_done), (7, 2), "{q:?}");
    }
    // thread exit destroyed the per-thread queues
    assert_eq!(qids(&r.queues_at("joined")), BTreeSet::from([legacy]));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn device_reset_destroys_every_queue() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["reset"], &[]);
    r.assert_ok();
    // three streams at HIP priorities -1/0/1 and the null stream
    assert_eq!(
        sorted_priorities(&r.queues_at("before_reset")),
        [0, 7, 7, 11]
    );
    assert!(r.queues_at("after_reset").is_empty());
    // the KFD process (fd, VM) survives the reset
    assert!(r.at("after_reset").processes.iter().any(|p| p.pid == r.pid));
    let again: u32 = num(&field(r.stdout(), "after reset queue ")[0]);
    let qs = r.queues_at("recreated");
    assert_eq!(qids(&qs), BTreeSet::from([again]));
    assert_eq!(qs[0].packets_done, 1);
}

/// `host_cb` of the `misc` scenario (tests/programs/scenarios.c), run by hipLaunchHostFunc,
/// adds 1 to the scenario's counter.
const MISC_HOST_FN_ADDS: u32 = 1;
/// `stream_cb`, run by hipStreamAddCallback (with hipSuccess), adds 10: the printed sum tells
/// that each ran exactly once.
const MISC_STREAM_CALLBACK_ADDS: u32 = 10;
/// `misc` pushes `__hipPushCallConfiguration(G1, B64, 16, s)`: grid {1,1,1}, block {64,1,1},
/// 16 bytes of dynamic shared memory, stream `s`; it prints "popped <grid.x> <block.x>
/// <shared memory> <1 if the popped stream is s>".
const MISC_PUSHED_GRID_X: u32 = 1;
const MISC_PUSHED_BLOCK_X: u32 = 64;
const MISC_PUSHED_SHARED_MEM: usize = 16;
/// The launches of `misc` that succeed, each one AQL kernel-dispatch packet on `s`'s queue. Its
/// four invalid launches (2048-thread block, NULL function, NULL module function, unknown
/// stream) submit nothing; event records, host functions and callbacks add no packet, and
/// waiting on an event from the null stream creates no queue.
const MISC_SUCCESSFUL_LAUNCHES: [&str; 8] = [
    "hipLaunchKernel(k_20ms)",
    "hipLaunchKernel(k_short)",
    "hipExtModuleLaunchKernel(k_short)",
    "hipModuleLaunchCooperativeKernel(k_short)",
    "hipLaunchCooperativeKernel(k_short)",
    "hipLaunchCooperativeKernel_spt(k_short)",
    "hipLaunchKernel(a plain function: FAKEHIP_KERNEL_NS)",
    "hipLaunchKernel(a wild pointer)",
];

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn misc_api_behaviour() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["misc"], &[]);
    r.assert_ok();
    let s = r.stdout();
    // the host function and the callback each ran once, before hipStreamQuery
    assert_eq!(
        field(s, "counter "),
        [(MISC_HOST_FN_ADDS + MISC_STREAM_CALLBACK_ADDS).to_string()]
    );
    // the call configuration pops as pushed
    assert_eq!(
        field(s, "popped "),
        [
            MISC_PUSHED_GRID_X.to_string(),
            MISC_PUSHED_BLOCK_X.to_string(),
            MISC_PUSHED_SHARED_MEM.to_string(),
            "1".to_string()
        ]
    );
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    let launches = MISC_SUCCESSFUL_LAUNCHES.len() as u64;
    assert_eq!(
        (qs[0].packets_done, qs[0].write_index),
        (launches, launches),
        "one packet per successful launch: {MISC_SUCCESSFUL_LAUNCHES:?}"
    );
}

fn full_ring(emu: &common::Emu, ring: Option<&str>, ring_size: u32) {
    let envs: Vec<(&str, &str)> = ring.map(|r| ("FAKEHIP_RING_SIZE", r)).into_iter().collect();
    let r = emu.run("scenarios", &["many"], &envs);
    r.assert_ok();
    assert_eq!(
        field(r.stdout(), "write_index "),
        ["3000", "read_index", "3000"]
    );
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(qs[0].ring_size, ring_size);
    assert_eq!((qs[0].packets_done, qs[0].read_index), (3000, 3000));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_full_ring_waits_for_the_gpu() {
    // 3000 launches through the default 1024-packet ring
    let emu = common::mount(mi308x());
    full_ring(&emu, None, 65536);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_small_ring_applies_back_pressure() {
    // FAKEHIP_RING_SIZE=4096: 64 packets, wrapped about 47 times
    let emu = common::mount(mi308x());
    full_ring(&emu, Some("4096"), 4096);
}
