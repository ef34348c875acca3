//! `kfdq demo --runtime hip` on the ROCm 7.2 root (`scripts/sid-root.sh --rocm72`): the same
//! `kfdq-hipwork` loads `libamdhip64.so.7` there, and every phase says so.

mod common;

use common::sid7;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_the_demo_runs_on_hip_7_2() {
    let root = sid7::root();
    let (out, stderr) = common::demo::run_hip(
        &root,
        &[
            "--requests",
            "10",
            "--phases",
            "alone,lp-alone,level2-direct",
        ],
    );
    assert!(
        out.status.success(),
        "kfdq demo on ROCm 7.2 failed:\n{stderr}\n{}",
        sid7::packages()
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    for p in v["phases"].as_array().expect("phases") {
        let rt = p["runtime"].as_str().unwrap_or_default();
        assert!(
            rt.starts_with("HIP 7.2.") && rt.contains("libamdhip64.so.7"),
            "{}: runtime {rt:?}",
            p["phase"]
        );
    }
    let l2 = v["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == "level2-direct")
        .expect("level2-direct");
    assert_eq!(l2["hp"]["n"], 10, "{l2}");
    assert!(
        l2["lp_dispatches_per_s"].as_f64().unwrap_or(0.0) > 0.0,
        "{l2}"
    );
}
