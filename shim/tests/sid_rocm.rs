//! The real ROCm 6.4 user space (Debian sid: rocminfo, ROCr with its KFD thunk, HIP 6.4.3,
//! hipcc for gfx942) on kfd-emu, in the sid root `scripts/sid-root.sh` builds: the runtime
//! starts, lists the MI308X, creates queues and dispatches; copies of every size return the
//! right bytes; under `kfdq run` every stream (the null stream too) lands on a queue at its
//! class's priority, and the real agent's levels 1-3 hold and release it; a CPython extension
//! on the null stream (PyTorch's path) computes the same under the shim as without it.

mod common;

use kfdq::Pid;
use std::path::Path;

use common::kfdqd::{Agent, two_classes};
use common::sid::{self, Running, Shimmed, ps_entry};
use common::{Emu, WAIT_LIMIT, mount};

/// What a test needs: an emulator and the sid root with the programs built.
fn setup() -> (Emu, std::path::PathBuf, &'static sid::Built) {
    let root = sid::root();
    let emu = mount();
    let built = sid::built(&emu, &root);
    (emu, root, built)
}

/// The HIP program run to its holding point (every check done, its queues still there).
fn held_hip_check(emu: &Emu, root: &Path, built: &sid::Built) -> Running {
    let mut p = Running::start(sid::in_work(emu, root, built, &["./hip_check", "--hold"]));
    p.wait_line("hip_check: holding");
    p
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_rocminfo_lists_the_emulated_mi308x() {
    let (emu, root, _) = setup();
    let out = sid::command(&emu, &root, &[], Path::new("/"), &["rocminfo"])
        .output()
        .expect("run rocminfo");
    let (text, _) = sid::finished("rocminfo", out);
    for want in [
        "ROCk module is loaded",
        "Name:                    gfx942",
        "Marketing Name:          AMD Instinct MI308X",
        "Compute Unit:            80",
        "Max Queue Number:        128",
        "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
    ] {
        assert!(
            text.contains(want),
            "rocminfo lacks {want:?}:\n{text}\n{}",
            sid::packages()
        );
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_a_hipcc_program_runs_on_the_real_runtime() {
    let (emu, root, built) = setup();
    let p = held_hip_check(&emu, &root, built);
    sid::assert_hip_check_steps(&p.seen, sid::packages());
    let st = emu.stats();
    let proc_ = st
        .processes
        .iter()
        .find(|x| x.pid == p.pid)
        .expect("the process in the emulator");
    let qs = emu.queues_of(p.pid);
    let compute = qs.iter().filter(|q| q.queue_type == "compute_aql").count();
    assert!(
        compute >= 3,
        "null, high and low streams on queues: {qs:#?}"
    );
    assert!(
        qs.iter()
            .any(|q| q.queue_type == "sdma" && q.packets_done > 0),
        "the 64 MiB copy ran on SDMA: {qs:#?}"
    );
    assert!(qs.iter().all(|q| !q.stopped), "{qs:#?}");
    let by = &proc_.dispatches_by_kernel;
    assert_eq!(
        by.get("_Z7add_onePim"),
        Some(&24),
        "8 launches on each of 3 streams: {by:?}"
    );
    assert!(
        by.get("__amd_rocclr_copyBuffer").is_some_and(|n| *n >= 2),
        "HIP's copy kernel: {by:?}"
    );
    let lines = p.finish();
    assert_eq!(lines.last().map(String::as_str), Some("hip_check: done"));
}

/// The (queue id, effective priority, stream kinds) of every queue in a `kfdq ps` entry.
fn ps_queues(entry: &serde_json::Value) -> Vec<(u64, u64, Vec<String>)> {
    entry["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| {
            let kinds = q["streams"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter_map(|x| x["kind"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            (
                q["queue_id"].as_u64().expect("queue_id"),
                q["managed"]["effective_priority"]
                    .as_u64()
                    .unwrap_or(u64::MAX),
                kinds,
            )
        })
        .collect()
}

fn under_kfdq(
    emu: &Emu,
    root: &Path,
    built: &sid::Built,
    agent: &Agent,
    class: &str,
    argv: &[&str],
) -> Shimmed {
    sid::under_kfdq(emu, root, built.dir.path(), agent, class, &[], argv)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_under_kfdq_run_every_stream_is_on_a_queue_at_the_class_priority() {
    let (emu, root, built) = setup();
    let agent = Agent::start(&emu, &two_classes("suspend"));
    for (class, prio) in [("latency", 13), ("batch", 3)] {
        let Shimmed { mut p, state } = under_kfdq(
            &emu,
            &root,
            built,
            &agent,
            class,
            &["./hip_check", "--hold"],
        );
        p.wait_line("hip_check: holding");
        let st = agent.wait_connected(p.pid, 3);
        assert_eq!(st.class, class, "{st:?}");
        // kfdq ps lists every stream on its queue: the null stream at the class's priority, the
        // high and low streams around it; the emulator holds the same priorities.
        let entry = ps_entry(&emu, &agent, state.path(), p.pid);
        assert_eq!(entry["class"], class, "{entry:#}");
        let queues = ps_queues(&entry);
        let on = |kind: &str| {
            queues
                .iter()
                .filter(|q| q.2.iter().any(|k| k == kind))
                .collect::<Vec<_>>()
        };
        let null = on("null");
        assert_eq!(null.len(), 1, "the null stream on one queue: {entry:#}");
        assert_eq!(
            null[0].1, prio,
            "the null stream at {class}'s priority: {entry:#}"
        );
        assert!(
            on("created").len() >= 2,
            "the created streams on queues: {entry:#}"
        );
        for (qid, eff, kinds) in &queues {
            if kinds.is_empty() {
                continue;
            }
            let q = emu.queue(p.pid, *qid as u32);
            assert_eq!(
                u64::from(q.priority),
                *eff,
                "queue {qid}: the emulator holds the shim's priority"
            );
        }
        let lines = p.finish();
        assert_eq!(lines.last().map(String::as_str), Some("hip_check: done"));
    }
}

/// A busy batch job and then a busy latency job under the real agent at `level`: while the
/// latency job runs the batch job is preempted at that level; after it ends the batch job runs
/// again and finishes cleanly.
fn agent_level(level: &str, check: impl Fn(&Emu, u32, &Path) -> bool, what: &str) {
    let (emu, root, built) = setup();
    let agent = Agent::start(&emu, &two_classes(level));
    let Shimmed {
        p: mut batch,
        state: bs,
    } = under_kfdq(
        &emu,
        &root,
        built,
        &agent,
        "batch",
        &["./hip_check", "--busy"],
    );
    batch.wait_line("hip_check: busy");
    agent.wait_connected(batch.pid, 3);
    let Shimmed {
        p: mut latency,
        state: _ls,
    } = under_kfdq(
        &emu,
        &root,
        built,
        &agent,
        "latency",
        &["./hip_check", "--busy"],
    );
    latency.wait_line("hip_check: busy");
    let preempted = agent.wait(&format!("the batch job preempted at {level}"), |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(batch.pid) && p.level.is_some())
    });
    let bp = preempted
        .processes
        .iter()
        .find(|p| p.pid == Pid(batch.pid))
        .unwrap();
    assert!(bp.reason.contains("latency"), "{bp:?}");
    let deadline = std::time::Instant::now() + WAIT_LIMIT;
    while !check(&emu, batch.pid, bs.path()) {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {:#?}\nagent: {:#?}\n{}",
            emu.queues_of(batch.pid),
            agent.process(batch.pid),
            sid::packages()
        );
        std::thread::sleep(test_support::wait::POLL);
    }
    sid::release_and_finish(&emu, &agent, latency, batch, "hip_check: done");
}

/// The registry the shim of `pid` published in `state`.
fn registry(state: &Path, pid: u32) -> Option<kfdq::proto::Registry> {
    let text = std::fs::read_to_string(state.join(format!("shim-{pid}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_agent_level_1_holds_and_releases_the_real_runtime() {
    agent_level(
        "hold",
        |_, pid, state| {
            registry(state, pid).is_some_and(|r| {
                let used: Vec<_> = r.streams.iter().filter(|s| s.queue_id.is_some()).collect();
                used.len() >= 3 && used.iter().all(|s| s.held)
            })
        },
        "every stream of the batch job held in its shim",
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_agent_level_2_deactivates_and_reactivates_the_real_runtime() {
    agent_level(
        "deactivate",
        |emu, pid, _| {
            emu.queues_of(pid)
                .iter()
                .filter(|q| q.queue_type == "compute_aql")
                .all(|q| !q.active)
        },
        "every batch compute queue inactive",
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_agent_level_3_suspends_and_resumes_the_real_runtime() {
    agent_level(
        "suspend",
        |emu, pid, _| {
            emu.queues_of(pid)
                .iter()
                .filter(|q| q.queue_type == "compute_aql")
                .all(|q| q.suspended)
        },
        "every batch compute queue suspended",
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_a_python_extension_on_the_null_stream_computes_the_same_under_the_shim() {
    let (emu, root, built) = setup();
    let out = sid::in_work(&emu, &root, built, &["python3", "hipext_check.py"])
        .output()
        .expect("run python3");
    let (plain, _) = sid::finished("python3 hipext_check.py", out);
    assert!(
        plain.contains("device AMD Instinct MI308X gfx942"),
        "{plain}"
    );
    let agent = Agent::start(&emu, &two_classes("suspend"));
    let Shimmed { mut p, state } = under_kfdq(
        &emu,
        &root,
        built,
        &agent,
        "latency",
        &["python3", "hipext_check.py", "--hold"],
    );
    p.wait_line("hipext: holding");
    let st = agent.wait_connected(p.pid, 1);
    assert_eq!(st.class, "latency");
    let entry = ps_entry(&emu, &agent, state.path(), p.pid);
    let queues = ps_queues(&entry);
    assert!(
        queues
            .iter()
            .any(|(_, prio, kinds)| *prio == 13 && kinds.iter().any(|k| k == "null")),
        "the null stream on a queue at the latency priority: {entry:#}"
    );
    let shimmed = p.finish();
    let expect: Vec<&str> = plain.lines().collect();
    let got: Vec<&str> = shimmed
        .iter()
        .map(String::as_str)
        .filter(|l| *l != "hipext: holding")
        .collect();
    assert_eq!(got, expect, "identical results with and without the shim");
}

/// Model time of the compute queues of the HIP program when `add_one` takes `wg_ns` per
/// work-group (`None`: the default per-work-group time).
fn busy_with_kernel_time(wg_ns: Option<u64>) -> (u64, u64) {
    let root = sid::root();
    let mut config = common::EmuConfig {
        preset: common::Preset::Mi308x,
        ..common::EmuConfig::default()
    };
    if let Some(ns) = wg_ns {
        config.kernel_wg_ns.insert("_Z7add_onePim".into(), ns);
    }
    let emu = common::mount_with(config);
    let built = sid::built(&emu, &root);
    let p = held_hip_check(&emu, &root, built);
    let busy: u64 = emu
        .queues_of(p.pid)
        .iter()
        .filter(|q| q.queue_type == "compute_aql")
        .map(|q| q.busy_ns)
        .sum();
    let st = emu.stats();
    let launches = st
        .processes
        .iter()
        .find(|x| x.pid == p.pid)
        .and_then(|x| x.dispatches_by_kernel.get("_Z7add_onePim").copied())
        .unwrap_or(0);
    p.finish();
    (busy, launches)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_kernel_times_set_the_model_time_of_named_kernels() {
    let (default, n) = busy_with_kernel_time(None);
    let (slow, m) = busy_with_kernel_time(Some(1_000_000));
    assert_eq!(
        (n, m),
        (24, 24),
        "the program's 24 launches, recognised by name"
    );
    // 1 ms instead of the default 10 us per work-group of add_one: the queues are busy far longer
    // in model time (the copies and the runtime's own kernels keep the default).
    assert!(
        slow > 20 * default,
        "busy {slow} ns with the named kernel at 1 ms per work-group vs {default} ns by default"
    );
}
