//! HIP 7.2's launch paths under the shim and the real agent (issue 52): a program built by hipcc
//! 7.2.4 in the ROCm 7.2 root (`tests/sid/launch7.hip`) that launches only through one path —
//! `hipLaunchKernelEx` (`hipLaunchKernelExC`), `hipDrvLaunchKernelEx`, `hipModuleLaunchKernel`
//! of a committed code object, `hipGraphLaunch`, or a `hipModuleLaunchKernel` pointer from
//! `hipGetDriverEntryPoint` — runs as a busy batch job beside the same program as a busy latency
//! job. Level 1 must hold the batch job's launches in the shim (a call waiting there, which only
//! a wrapped path can do); levels 2 and 3 must deactivate / suspend its queues, which needs the
//! latency job's launches to be seen (its busy edge); released, both finish cleanly.

mod common;

use std::path::Path;

use kfdq::Pid;

use common::kfdqd::{Agent, two_classes, two_classes_with_hysteresis};
use common::sid::{self, Shimmed};
use common::{Emu, WAIT_LIMIT, sid7, wait_for};

/// The registry the shim of `pid` published in `state`.
fn registry(state: &Path, pid: u32) -> Option<kfdq::proto::Registry> {
    let text = std::fs::read_to_string(state.join(format!("shim-{pid}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// Whether the batch job is stopped at `level` ("hold", "deactivate", "suspend").
fn stopped(level: &str, emu: &Emu, pid: u32, state: &Path) -> bool {
    match level {
        // A launch of the created stream waits in the shim: only a wrapped path gets there.
        "hold" => registry(state, pid).is_some_and(|r| {
            r.streams
                .iter()
                .any(|s| s.held && s.held_calls > 0 && s.queue_id.is_some())
        }),
        "deactivate" => {
            let qs = emu.queues_of(pid);
            qs.iter().any(|q| q.queue_type == "compute_aql")
                && qs
                    .iter()
                    .filter(|q| q.queue_type == "compute_aql")
                    .all(|q| !q.active)
        }
        _ => {
            let qs = emu.queues_of(pid);
            qs.iter().any(|q| q.queue_type == "compute_aql")
                && qs
                    .iter()
                    .filter(|q| q.queue_type == "compute_aql")
                    .all(|q| q.suspended)
        }
    }
}

/// A busy batch job and then a busy latency job, both launching through `path` only, under the
/// real agent at `level`: the batch job is stopped at that level while the latency job runs, and
/// runs again and finishes cleanly after it ends.
fn held_at(path: &str, level: &str, env: &[(&str, &str)]) {
    let (emu, root, built) = sid7::setup();
    let agent = Agent::start(&emu, &two_classes(level));
    let work = built.dir.path();
    let start = |class: &str| {
        sid::under_kfdq(
            &emu,
            &root,
            work,
            &agent,
            class,
            env,
            &["./launch7", path, "--busy"],
        )
    };
    let Shimmed {
        p: mut batch,
        state: bs,
    } = start("batch");
    batch.wait_line("launch7: busy");
    agent.wait_connected(batch.pid, 1);
    let Shimmed {
        p: mut latency,
        state: _ls,
    } = start("latency");
    latency.wait_line("launch7: busy");
    agent.wait(
        &format!("{path}: the batch job preempted at {level}"),
        |s| {
            s.processes
                .iter()
                .any(|p| p.pid == Pid(batch.pid) && p.level.is_some())
        },
    );
    let deadline = std::time::Instant::now() + WAIT_LIMIT;
    while !stopped(level, &emu, batch.pid, bs.path()) {
        assert!(
            std::time::Instant::now() < deadline,
            "{path}: timed out waiting for the batch job stopped at {level}: {:#?}\nregistry: {:#?}\n\
             agent: {:#?}\n{}",
            emu.queues_of(batch.pid),
            registry(bs.path(), batch.pid),
            agent.process(batch.pid),
            sid7::packages()
        );
        std::thread::sleep(test_support::wait::POLL);
    }
    sid::release_and_finish(&emu, &agent, latency, batch, "launch7: done");
}

/// Levels 1, 2 and 3 for one launch path.
fn every_level(path: &str) {
    for level in ["hold", "deactivate", "suspend"] {
        held_at(path, level, &[]);
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_hip_launch_kernel_ex_is_held_and_preempted() {
    every_level("ex");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_hip_drv_launch_kernel_ex_is_held_and_preempted() {
    every_level("drv-ex");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_hip_module_launch_kernel_of_a_committed_code_object_is_held_and_preempted() {
    every_level("module");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_hip_graph_launch_is_held_and_preempted() {
    every_level("graph");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_a_pointer_from_hip_get_driver_entry_point_is_held_and_preempted() {
    every_level("entry-point");
}

/// HIP's dynamic queues (`DEBUG_HIP_DYNAMIC_QUEUES=1`, off by default in 7.2.4) with one
/// hardware queue per priority: every launch takes the shim's slow path, which compares write
/// indices (docs/shim.md, "HIP 7.2"); the levels work as without.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_with_dynamic_queues_hip_launch_kernel_ex_is_held_and_preempted() {
    for level in ["hold", "suspend"] {
        held_at(
            "ex",
            level,
            &[
                ("DEBUG_HIP_DYNAMIC_QUEUES", "1"),
                ("GPU_MAX_HW_QUEUES", "1"),
            ],
        );
    }
}

/// The registry's warnings of `launch7 PATH --hold` run as a batch job, once it holds and its
/// registry shows `ready` (the registry is published after the fact).
fn warnings_of(path: &str, ready: impl Fn(&kfdq::proto::Registry) -> bool) -> Vec<String> {
    let (emu, root, built) = sid7::setup();
    let agent = Agent::start(&emu, &two_classes("hold"));
    let Shimmed { mut p, state } = sid::under_kfdq(
        &emu,
        &root,
        built.dir.path(),
        &agent,
        "batch",
        &[],
        &["./launch7", path, "--hold"],
    );
    p.wait_line("launch7: holding");
    wait_for(&format!("{path}: the shim's registry"), || {
        registry(state.path(), p.pid).is_some_and(|r| ready(&r))
    });
    let r = registry(state.path(), p.pid).expect("the shim's registry");
    let lines = p.finish();
    assert_eq!(lines.last().map(String::as_str), Some("launch7: done"));
    r.warnings
}

const ESCAPE: &str = "work reached a managed queue that the shim did not see launched";

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_work_no_wrapper_saw_is_reported_once_and_wrapped_launches_are_not() {
    // hipMemcpyHtoD (synchronous, not wrapped) puts a blit kernel on the null stream's queue
    // between two synchronising calls.
    let escaped = warnings_of("escape", |r| {
        r.warnings.iter().any(|w| w.starts_with(ESCAPE))
    });
    let hits: Vec<_> = escaped.iter().filter(|w| w.starts_with(ESCAPE)).collect();
    assert_eq!(hits.len(), 1, "one escape warning: {escaped:#?}");
    for path in ["ex", "graph", "entry-point"] {
        // Published with the created stream on its queue.
        let w = warnings_of(path, |r| r.streams.iter().any(|s| s.queue_id.is_some()));
        assert!(
            !w.iter().any(|x| x.starts_with(ESCAPE)),
            "{path}: every launch wrapped, no escape warning: {w:#?}"
        );
    }
}

/// The packets `pid`'s compute queues completed, and their write indices (by queue id).
fn compute_progress(emu: &Emu, pid: u32) -> (u64, Vec<(u32, u64)>) {
    let qs = emu.queues_of(pid);
    let compute = qs.iter().filter(|q| q.queue_type == "compute_aql");
    let done = compute.clone().map(|q| q.packets_done).sum();
    (done, compute.map(|q| (q.queue_id, q.write_index)).collect())
}

/// HIP's dynamic queues with one hardware queue per priority.
const DYNAMIC: [(&str, &str); 2] = [
    ("DEBUG_HIP_DYNAMIC_QUEUES", "1"),
    ("GPU_MAX_HW_QUEUES", "1"),
];

/// `launch7 shared --busy` (launches on a created stream and on the null stream in turn, both
/// normal priority) as a busy batch job under HIP's dynamic queues, with `agent`; its registry
/// directory.
fn shared_batch(emu: &Emu, root: &Path, work: &Path, agent: &Agent) -> Shimmed {
    let mut b = sid::under_kfdq(
        emu,
        root,
        work,
        agent,
        "batch",
        &DYNAMIC,
        &["./launch7", "shared", "--busy"],
    );
    b.p.wait_line("launch7: busy");
    agent.wait_connected(b.p.pid, 1);
    b
}

/// Under HIP's dynamic queues a batch job launching on two normal-priority streams is held at
/// level 1 while a latency job (another process) is busy: the batch job puts nothing on its
/// queues while the latency job keeps completing packets — a hold never holds another process's
/// work, whichever queue the runtime gives a stream (KFD queues belong to one process; level 1
/// gates by stream handle).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_with_dynamic_queues_a_hold_stops_only_the_held_process() {
    let (emu, root, built) = sid7::setup();
    // A 1 s hysteresis keeps one hold over the window on a loaded machine; the window checks
    // that no command was sent during it.
    let agent = Agent::start(&emu, &two_classes_with_hysteresis("hold", 1000));
    let work = built.dir.path();
    let Shimmed {
        p: batch,
        state: bs,
    } = shared_batch(&emu, &root, work, &agent);
    let pid = batch.pid;
    let Shimmed {
        p: mut latency,
        state: _ls,
    } = sid::under_kfdq(
        &emu,
        &root,
        work,
        &agent,
        "latency",
        &[],
        &["./launch7", "ex", "--busy"],
    );
    latency.wait_line("launch7: busy");
    agent.wait("the batch job held", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(pid) && p.level.is_some())
    });
    wait_for("a launch of the batch job waiting in the shim", || {
        stopped("hold", &emu, pid, bs.path())
    });
    // What the batch job had submitted before the hold drains; then nothing new comes.
    wait_for("the batch job's queues drained", || {
        emu.queues_of(pid)
            .iter()
            .all(|q| q.read_index == q.write_index)
    });
    let (_, batch_writes) = compute_progress(&emu, pid);
    let commands = agent.status().counters.commands;
    let (latency_done, _) = compute_progress(&emu, latency.pid);
    wait_for(
        "the latency job completing packets while the batch job is held",
        || compute_progress(&emu, latency.pid).0 > latency_done + 8,
    );
    assert_eq!(
        agent.status().counters.commands,
        commands,
        "the agent changed its commands meanwhile: the window does not show one hold"
    );
    assert_eq!(
        compute_progress(&emu, pid).1,
        batch_writes,
        "the held batch job put packets on its queues"
    );
    sid::release_and_finish(&emu, &agent, latency, batch, "launch7: done");
}

/// Under HIP's dynamic queues HIP 7.2.4 first gives the created stream and the null stream a
/// queue each, then (more normal queues than `GPU_MAX_HW_QUEUES`) hands the created stream the
/// null stream's queue: the registry must show both streams on that queue with the shared-queue
/// warning, and the created stream on that queue alone, not on its first, now idle, one. Before
/// the fix the shim re-attributed launches only once it had seen two streams on one queue, so
/// the moved stream stayed on its first queue (docs/shim.md, "HIP 7.2").
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_with_dynamic_queues_a_shared_queue_is_reported_with_both_streams() {
    let (emu, root, built) = sid7::setup();
    let agent = Agent::start(&emu, &two_classes("hold"));
    let Shimmed {
        p: batch,
        state: bs,
    } = shared_batch(&emu, &root, built.dir.path(), &agent);
    let pid = batch.pid;
    let shared = |r: &kfdq::proto::Registry| r.queues.iter().any(|q| q.streams.len() >= 2);
    let deadline = std::time::Instant::now() + WAIT_LIMIT;
    while !registry(bs.path(), pid).is_some_and(|r| shared(&r)) {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for the batch job's two streams on one queue in its registry: \
             {:#?}\nqueues: {:#?}\n{}",
            registry(bs.path(), pid),
            emu.queues_of(pid),
            sid7::packages()
        );
        std::thread::sleep(test_support::wait::POLL);
    }
    let r = registry(bs.path(), pid).expect("the registry");
    assert!(
        r.warnings
            .iter()
            .any(|w| w.starts_with("streams share KFD queues")),
        "the shared queue is reported: {r:#?}"
    );
    let q = r.queues.iter().find(|q| q.streams.len() >= 2);
    let q = q.expect("the shared queue");
    let created = r
        .streams
        .iter()
        .find(|s| s.kind == kfdq::proto::StreamKind::Created)
        .expect("the created stream");
    assert!(
        q.streams.contains(&0) && q.streams.contains(&created.stream_id),
        "the null and the created stream share the queue: {r:#?}"
    );
    assert_eq!(created.queue_id, Some(q.queue_id), "{r:#?}");
    assert!(
        r.queues
            .iter()
            .filter(|o| o.queue_id != q.queue_id)
            .all(|o| !o.streams.contains(&created.stream_id)),
        "the created stream left its first queue: {r:#?}"
    );
    // The case under test: the runtime moved the stream (its first queue still exists), not
    // a pool at its cap that never gave it a queue of its own.
    let compute = emu
        .queues_of(pid)
        .iter()
        .filter(|q| q.queue_type == "compute_aql")
        .count();
    assert!(
        compute >= 2,
        "{compute} compute queue(s): the runtime gave the created stream none of its own: {r:#?}"
    );
    let lines = batch.finish();
    assert_eq!(lines.last().map(String::as_str), Some("launch7: done"));
}
