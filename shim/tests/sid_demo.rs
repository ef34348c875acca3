//! `kfdq demo --runtime hip`: the main job on the real ROCm runtime of the sid root
//! (`scripts/sid-root.sh`), on kfd-emu: the workloads are `kfdq-hipwork` inside the root
//! (`kfd-emu run`) under the shim, kfdqd on the host, and in the level-2 phase the batch job's
//! queues are stopped by the agent during the latency client's requests, as the emulator's
//! queue state records (`stopped_at_us`, the demo's REACT columns).

mod common;

use common::sid;
use common::workspace_bin;

/// `kfdq demo ARGS` with the workspace's shim and programs (the workloads' default shape).
fn demo(args: &[&str]) -> (std::process::Output, String) {
    common::demo::run(args, |cmd| {
        cmd.env_remove("KFDQ_DEMO_SHAPE");
    })
}

/// `kfdq demo --runtime hip ARGS` on `root`, which must succeed: its JSON and its stderr.
fn hip_demo(root: &std::path::Path, args: &[&str]) -> (serde_json::Value, String) {
    let (out, stderr) = common::demo::run_hip(root, args);
    assert!(
        out.status.success(),
        "kfdq demo --runtime hip failed:\n{stderr}\n{}",
        sid::packages()
    );
    let v = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    (v, stderr)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_the_demo_runs_on_the_real_hip_runtime_and_level_2_preempts_the_batch_job() {
    let root = sid::root();
    assert!(
        workspace_bin("kfdq-hipwork").is_file(),
        "kfdq-hipwork beside kfdq"
    );
    let (v, stderr) = hip_demo(
        &root,
        &[
            "--requests",
            "20",
            "--phases",
            "alone,lp-alone,uncontrolled,level2",
        ],
    );
    assert_eq!(v["emulator"], true);
    assert!(
        v["hp_command"][0]
            .as_str()
            .is_some_and(|c| c.ends_with("kfdq-hipwork")),
        "{}",
        v["hp_command"]
    );
    let phases = v["phases"].as_array().expect("phases");
    let phase = |name: &str| {
        phases
            .iter()
            .find(|p| p["phase"] == name)
            .unwrap_or_else(|| panic!("no phase {name} in {v}"))
            .clone()
    };
    for p in phases {
        // Every phase names the runtime its workloads loaded: the root's HIP 6.
        let rt = p["runtime"].as_str().unwrap_or_default();
        assert!(
            rt.starts_with("HIP 6.") && rt.contains("libamdhip64.so.6"),
            "{}: runtime {rt:?}",
            p["phase"]
        );
    }
    for name in ["alone", "uncontrolled", "level2"] {
        let p = phase(name);
        assert_eq!(p["hp"]["n"], 20, "{name}: every request timed: {p}");
        assert!(p["hp"]["p50_us"].as_f64().unwrap() > 0.0, "{p}");
    }
    for name in ["lp-alone", "uncontrolled", "level2"] {
        let p = phase(name);
        assert!(
            p["lp_dispatches_per_s"].as_f64().unwrap_or(0.0) > 0.0,
            "{name}: the batch job completed units: {p}"
        );
    }
    // The emulator timed the spin kernel from its argument: a request's 145 kernels hold about
    // 8.08 ms of work-group time (505 µs x 16), which no request alone can beat (with the
    // emulator's default 10 µs a work-group it would take about 2 ms).
    let alone = phase("alone")["hp"]["p50_us"].as_f64().unwrap();
    assert!(alone >= 7_500.0, "HP alone p50 {alone} µs: the spin model");
    // No agent, nothing stopped the batch job.
    assert!(phase("uncontrolled")["reaction"].is_null());
    // Level 2: the emulator saw the batch job's queues stop during requests (UPDATE_QUEUE from
    // the batch job's shim on the agent's command) and counted device-wide preempts.
    let l2 = phase("level2");
    let paired = l2["reaction"]["n"].as_u64().unwrap_or(0);
    assert!(
        paired >= 1,
        "level 2: no request found the batch job stopped by the emulator's queue state: {l2}\n{stderr}"
    );
    assert!(
        l2["preempts_per_s"].as_f64().unwrap_or(0.0) > 0.0,
        "level 2: the emulator counted no preempt: {l2}"
    );
}

/// `level2-hinted` on the real runtime: `kfdq-hipwork latency` hints each request
/// `--hint-lead-us` before its first launch, so the batch job's queues are already stopped
/// (the emulator's queue state) when the request starts. Before the client honoured
/// `$KFDQ_DEMO_HINT_LEAD_US` it hinted at its first launch: every request waited for the
/// reaction, as unhinted ones do, and none found the batch job stopped. The lead (30 ms) is
/// below the hint's bound (50 ms) and far above the reaction (a few ms on a loaded machine).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_a_hinted_request_finds_the_batch_job_stopped_at_its_first_launch() {
    let root = sid::root();
    let (v, stderr) = hip_demo(
        &root,
        &[
            "--requests",
            "12",
            "--request-shape",
            "resnet18",
            "--hint-lead-us",
            "30000",
            "--phases",
            "alone,lp-alone,level2-hinted",
        ],
    );
    assert_eq!(v["hint_lead_us"], 30000, "{v}");
    let hinted = v["phases"]
        .as_array()
        .expect("phases")
        .iter()
        .find(|p| p["phase"] == "level2-hinted")
        .unwrap_or_else(|| panic!("no level2-hinted in {v}"))
        .clone();
    assert_eq!(hinted["hp"]["n"], 12, "{hinted}");
    assert_eq!(hinted["hint_expiries"], 0, "{hinted}");
    let found = hinted["reaction_found_stopped"].as_u64().unwrap_or(0);
    let waited = hinted["reaction"]["n"].as_u64().unwrap_or(0);
    assert!(
        found > waited && found >= 6,
        "{found} requests found the batch job stopped at their first launch, {waited} waited for it: the hint did not come before the launches\n{hinted}\n{stderr}"
    );
}

#[test]
fn the_hip_runtime_without_its_root_is_refused_with_the_fix() {
    let (out, stderr) = demo(&[
        "--runtime",
        "hip",
        "--emulator",
        "--hip-root",
        "/nonexistent/kfdq-root",
    ]);
    assert!(!out.status.success());
    assert!(
        stderr.contains("/nonexistent/kfdq-root")
            && stderr.contains("scripts/sid-root.sh")
            && stderr.contains("--runtime fakehip"),
        "{stderr}"
    );
    assert!(!stderr.contains("mounting"), "nothing mounted: {stderr}");
    let (out, stderr) = demo(&["--runtime", "fakehip", "--emulator", "--hip-root", "/"]);
    assert!(!out.status.success());
    assert!(stderr.contains("goes with --runtime hip"), "{stderr}");
}
