//! ROCm 7.2.4 (Debian experimental: ROCr 7.2.4, HIP 7.2.4, rocminfo 7.2.4, hipcc 7.2.4 with
//! clang 22) on kfd-emu, in the root `scripts/sid-root.sh --rocm72` builds: rocminfo lists the
//! emulated GPU; a program built by hipcc 7.2.4 creates priority streams, copies every size
//! (the 64 MiB one on SDMA), launches and synchronizes on ROCr 7.2; under `kfdq run` every
//! stream is on a queue at the class's priority (issue 52, items 1 and 4).

mod common;

use common::kfdqd::{Agent, two_classes};
use common::sid::{self, Running, Shimmed, ps_entry};
use common::sid7;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_rocminfo_7_2_lists_the_emulated_mi308x() {
    let root = sid7::root();
    let emu = common::mount();
    let out = sid::command(&emu, &root, &[], std::path::Path::new("/"), &["rocminfo"])
        .output()
        .expect("run rocminfo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rocminfo 7.2.4: {}\n{text}\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        sid7::packages()
    );
    for want in [
        "ROCk module is loaded",
        "Name:                    gfx942",
        "Marketing Name:          AMD Instinct MI308X",
        "Compute Unit:            80",
        "amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-",
    ] {
        assert!(
            text.contains(want),
            "rocminfo 7.2.4 lacks {want:?}:\n{text}\n{}",
            sid7::packages()
        );
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_a_hipcc_7_2_program_runs_on_rocr_7_2() {
    let (emu, root, built) = sid7::setup();
    let mut p = Running::start(sid::in_work(&emu, &root, built, &["./hip_check", "--hold"]));
    p.wait_line("hip_check: holding");
    sid::assert_hip_check_steps(&p.seen, sid7::packages());
    let qs = emu.queues_of(p.pid);
    assert!(
        qs.iter()
            .any(|q| q.queue_type == "sdma" && q.packets_done > 0),
        "the 64 MiB copy ran on SDMA: {qs:#?}"
    );
    // HIP 7.2 honours stream priorities by default (DEBUG_HIP_IGNORE_STREAM_PRIORITY is off,
    // docs/shim.md "HIP 7.2"): the high and low streams get queues of their own at ROCr's high
    // and low priorities, beside the null stream's normal one.
    let mut prios: Vec<u32> = qs
        .iter()
        .filter(|q| q.queue_type == "compute_aql")
        .map(|q| q.priority)
        .collect();
    prios.sort_unstable();
    prios.dedup();
    assert!(
        prios.len() >= 3,
        "queues at three priorities (low, normal, high): {qs:#?}"
    );
    let st = emu.stats();
    let by = &st
        .processes
        .iter()
        .find(|x| x.pid == p.pid)
        .expect("the process in the emulator")
        .dispatches_by_kernel;
    assert_eq!(
        by.get("_Z7add_onePim"),
        Some(&24),
        "8 launches on each of 3 streams: {by:?}"
    );
    let lines = p.finish();
    assert_eq!(lines.last().map(String::as_str), Some("hip_check: done"));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_under_kfdq_run_every_stream_of_hip_7_2_is_on_a_queue_at_the_class_priority() {
    let (emu, root, built) = sid7::setup();
    let agent = Agent::start(&emu, &two_classes("suspend"));
    let Shimmed { mut p, state } = sid::under_kfdq(
        &emu,
        &root,
        built.dir.path(),
        &agent,
        "latency",
        &[],
        &["./hip_check", "--hold"],
    );
    p.wait_line("hip_check: holding");
    agent.wait_connected(p.pid, 3);
    let entry = ps_entry(&emu, &agent, state.path(), p.pid);
    let queues = entry["queues"].as_array().expect("queues");
    let null = queues
        .iter()
        .filter(|q| {
            q["streams"]
                .as_array()
                .is_some_and(|s| s.iter().any(|x| x["kind"] == "null"))
        })
        .collect::<Vec<_>>();
    assert_eq!(null.len(), 1, "the null stream on one queue: {entry:#}");
    assert_eq!(
        null[0]["managed"]["effective_priority"], 13,
        "the null stream at the latency class's priority: {entry:#}"
    );
    let lines = p.finish();
    assert_eq!(lines.last().map(String::as_str), Some("hip_check: done"));
}
