//! fakehip's queues against kfd-emu: one per stream with ROCr's priorities, CWSR sizes,
//! queue pools, priority clamping, event timing, completion modes and bounded waits.
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
    field, mi308x, node_properties, num, packets_done, qids, queues_of, sorted_priorities,
};

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn basic_program_creates_one_queue_per_stream_with_rocr_priorities() {
    let emu = common::mount(mi308x());
    let gpu = emu.gpu_ids()[0];
    let r = emu.run("basic", &[], &[("FAKEHIP_DEBUG", "1")]);
    r.assert_ok();

    // the program's view: stream -> (queue id, KFD priority)
    let mut seen = BTreeMap::new();
    for line in r.stdout().lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (w.len(), w[0], w[2], w[4]),
            (6, "stream", "queue", "prio"),
            "{line}"
        );
        seen.insert(w[1].to_string(), (num::<u32>(w[3]), num::<u32>(w[5])));
    }
    let prios: BTreeMap<&str, u32> = seen.iter().map(|(k, v)| (k.as_str(), v.1)).collect();
    assert_eq!(
        prios,
        BTreeMap::from([
            ("high", 11),
            ("low", 0),
            ("normal", 7),
            ("null", 7),
            ("per-thread", 7)
        ])
    );
    let program_queues: BTreeMap<u32, u32> = seen.values().copied().collect();
    assert_eq!(program_queues.len(), 5, "five distinct queues: {seen:?}");

    // one debug line per queue creation, naming the emulator's GPU
    let debug: Vec<&str> = r
        .stderr()
        .lines()
        .filter(|l| l.starts_with("fakehip: stream 0x"))
        .collect();
    assert_eq!(debug.len(), 5, "{}", r.stderr());
    for l in &debug {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(
            (w[3], w[4], w[6], w[7], w[8]),
            ("->", "queue", "gpu", gpu.to_string().as_str(), "prio"),
            "{l}"
        );
    }

    // the emulator's view: exactly those queues, with those priorities, each having run
    // its one launch
    let qs = r.queues_at("queues");
    let emu_queues: BTreeMap<u32, u32> = qs.iter().map(|q| (q.queue_id, q.priority)).collect();
    assert_eq!(emu_queues, program_queues);
    for q in &qs {
        assert_eq!(q.gpu_id, gpu, "{q:?}");
        assert_eq!(q.queue_type, "compute_aql", "{q:?}");
        assert_eq!(q.percentage, 100, "{q:?}");
        assert!(q.active && !q.suspended, "{q:?}");
        assert_eq!(q.ring_size, 65536, "{q:?}");
        assert_eq!(
            (q.packets_done, q.read_index, q.write_index),
            (1, 1, 1),
            "{q:?}"
        );
    }
    // RUNTIME_ENABLE came before the first queue (the emulator refuses it afterwards)
    let proc = r
        .at("queues")
        .processes
        .iter()
        .find(|p| p.pid == r.pid)
        .expect("the program's KFD process");
    assert!(proc.runtime_enabled, "{proc:?}");
    assert_eq!(proc.queues, 5);

    // hipStreamDestroy of the three user streams destroyed their queues
    assert_eq!(
        qids(&r.queues_at("destroyed")),
        BTreeSet::from([seen["null"].0, seen["per-thread"].0])
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn cwsr_sizes_come_from_sysfs_and_pass_the_6_12_checks() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["cwsr"], &[]);
    r.assert_ok();
    // MI308X node: cwsr_size / ctl_stack_size from sysfs; CWSR area =
    // ALIGN((cwsr + debug 25,600) * 4 XCC, 4096) (docs/kernel-interface.md §3)
    assert_eq!(
        field(r.stdout(), "cwsr "),
        [
            "ctx_save_restore_size",
            "12214272",
            "ctl_stack_size",
            "8192",
            "bytes",
            "48959488"
        ]
    );
    // ... which are node 1's sysfs properties
    let props = node_properties(emu.root(), 1);
    assert_eq!(
        (props["cwsr_size"], props["ctl_stack_size"]),
        (12_214_272, 8_192),
        "{props:?}"
    );
    // the emulator validates exactly these sizes at CREATE_QUEUE (6.12 rules)
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(qs[0].packets_done, 1);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn pools_cap_queues_and_share_the_least_used() {
    let emu = common::mount(mi308x());
    let r = emu.run_with(
        "scenarios",
        &["pools"],
        &[("GPU_MAX_HW_QUEUES", "2")],
        |cp| {
            if cp.name == "launched" {
                cp.emu.wait_stats("the five launches consumed", |s| {
                    packets_done(&queues_of(s, cp.pid)) == 5
                });
            }
        },
    );
    r.assert_ok();
    // "stream <i> queue <qid> users <n>"
    let streams: Vec<(u32, u32)> = r
        .stdout()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!((w[0], w[2], w[4]), ("stream", "queue", "users"), "{l}");
            (num(w[3]), num(w[5]))
        })
        .collect();
    assert_eq!(streams.len(), 5, "{}", r.stdout());
    let users: BTreeMap<u32, u32> = streams.iter().copied().collect();
    let mut counts: Vec<u32> = users.values().copied().collect();
    counts.sort_unstable();
    assert_eq!(counts, [2, 3], "5 streams over 2 queues: {}", r.stdout());

    // the emulator: two normal-priority queues, each ran one launch per stream on it
    let qs = r.queues_at("launched");
    assert_eq!(qids(&qs), users.keys().copied().collect());
    for q in &qs {
        assert_eq!(q.priority, 7, "{q:?}");
        assert_eq!(q.packets_done, u64::from(users[&q.queue_id]), "{q:?}");
    }
    // a queue goes only when the last stream on it is destroyed
    for i in 0..5 {
        let remaining: BTreeSet<u32> = streams[i + 1..].iter().map(|s| s.0).collect();
        assert_eq!(
            qids(&r.queues_at(&format!("destroyed{i}"))),
            remaining,
            "after destroying stream {i}"
        );
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn priorities_are_clamped_like_hip() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["clamp"], &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "range "), ["1", "-1"]);
    assert_eq!(field(s, "low hip "), ["1", "kfd", "0"]);
    assert_eq!(field(s, "high hip "), ["-1", "kfd", "11"]);
    assert_eq!(field(s, "high flags "), ["1"]);
    assert_eq!(sorted_priorities(&r.queues_at("streams")), [0, 11]);
}

/// elapsed <= the host time bracketing the records and the synchronisation, and > 0.
fn assert_event_times(stdout: &str) {
    for (elapsed, wall) in [("elapsed ", "wall "), ("ext_elapsed ", "ext_wall ")] {
        let ms: f64 = num(&field(stdout, elapsed)[0]);
        let wall_ms: f64 = num(&field(stdout, wall)[0]);
        assert!(
            ms > 0.0 && ms <= wall_ms + 0.01,
            "{elapsed}{ms} ms, host {wall}{wall_ms} ms:\n{stdout}"
        );
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn events_measure_the_emulated_kernel_time() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["elapsed"], &[]);
    r.assert_ok();
    assert_event_times(r.stdout());
    // two launches (event records add no packet)
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!((qs[0].packets_done, qs[0].write_index), (2, 2));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn strict_completion_mode_works() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["elapsed"], &[("FAKEHIP_SYNC", "signal")]);
    r.assert_ok();
    assert_event_times(r.stdout());
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(qs[0].packets_done, 2);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn waits_are_bounded() {
    let emu = common::mount(mi308x());
    let r = emu.run_with(
        "scenarios",
        &["timeout"],
        &[("FAKEHIP_TIMEOUT_MS", "300"), ("FAKEHIP_RING_SIZE", "4096")],
        |cp| {
            cp.emu
                .wait_stats("the CP saw the 64 published packets", |s| {
                    queues_of(s, cp.pid).iter().any(|q| q.write_index == 64)
                });
        },
    );
    r.assert_ok();
    let s = r.stdout();
    // the wait gave up, and not before FAKEHIP_TIMEOUT_MS
    let sync_ms: f64 = num(&field(s, "sync_ms ")[0]);
    assert!(sync_ms >= 300.0, "{s}");
    // a 4 KiB ring holds 64 packets; the 65th waits for the timeout, then fails with 719
    let full = field(s, "ring_full_after ");
    assert_eq!(full[..3], ["65", "code", "719"], "{s}");
    assert!(num::<f64>(&full[4]) >= 300.0, "{s}");
    // the emulator: the hour-long first kernel holds the queue; nothing completed
    let qs = r.queues_at("stalled");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    let q = &qs[0];
    assert_eq!(q.ring_size, 4096, "{q:?}");
    assert!(q.active, "{q:?}");
    assert_eq!(
        (q.packets_done, q.read_index, q.write_index),
        (0, 0, 64),
        "{q:?}"
    );
}
