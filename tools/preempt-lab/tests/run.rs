//! `preempt-lab run` as a user runs it: kfdq demo's real processes (the shim, kfdqd, fakehip
//! workloads) on a private kfd-emu, few requests; the report has sim's shape; a user's HP
//! command in the line format is measured; bad input is refused with the rule and the fix.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use test_support::bins::{shim_path, workspace_bin};

fn preempt_lab(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_preempt-lab"));
    cmd.args(args).env_remove("KFDQ_ROOT");
    cmd
}

fn lab(args: &[&str]) -> Output {
    preempt_lab(args).output().expect("run preempt-lab")
}

/// With this build's shim for the demo's workloads.
fn lab_shim(args: &[&str]) -> Output {
    preempt_lab(args)
        .env("KFDQ_SHIM", shim_path())
        .output()
        .expect("run preempt-lab")
}

fn ok(o: &Output) -> String {
    test_support::output::success_stdout(o)
}

fn refused(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// kfdq demo's two workloads compiled against fakehip, by the names the demo looks for.
fn workloads(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shim/tests/programs");
    for (name, program) in [("kfdq-latency", "latency"), ("kfdq-flood", "flood")] {
        fakehip::compile_program(
            &src.join(format!("{program}.c")),
            &dir.join(name),
            &[&format!("-I{}", src.display())],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    dir.to_owned()
}

fn kfdq() -> String {
    workspace_bin("kfdq").display().to_string()
}

/// The keys of every object in `v`, by path (arrays: their first element), so that two
/// reports compare by shape, not by numbers.
fn shape(v: &Value, path: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = format!("{path}.{k}");
                out.insert(p.clone());
                shape(x, &p, out);
            }
        }
        Value::Array(a) => {
            if let Some(x) = a.first() {
                shape(x, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    shape(v, "", &mut out);
    out
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn run_on_the_emulator_reports_every_configuration_in_sims_shape() {
    test_support::require_root();
    let dir = tempfile::tempdir().unwrap();
    let w = workloads(dir.path()).display().to_string();
    let k = kfdq();
    let o = lab_shim(&[
        "run",
        "--kfdq",
        &k,
        "--repeat",
        "2",
        "--requests",
        "8",
        "--controls",
        "native,l2",
        "--json",
        "--",
        "--workloads",
        &w,
    ]);
    let run: Value = serde_json::from_str(&ok(&o)).expect("JSON on stdout");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("[8/8]"), "the demo's progress: {stderr}");
    let rows = run["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["control"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["native", "level 2"]);
    for r in rows {
        assert_eq!(r["hp_p99_us_per_seed"].as_array().unwrap().len(), 2, "{r}");
        for key in ["hp_p50_rel", "hp_p99_rel", "hp_max_rel", "lp_rel"] {
            assert!(r[key].as_f64().unwrap() > 0.0, "{key}: {r}");
        }
        let (lo, mid, hi) = (
            r["hp_p99_rel_min"].as_f64().unwrap(),
            r["hp_p99_rel"].as_f64().unwrap(),
            r["hp_p99_rel_max"].as_f64().unwrap(),
        );
        assert!(lo <= mid && mid <= hi, "spread around the median: {r}");
    }
    // Level 2 preempts through kfdqd (commands acknowledged, runlist updates counted); the
    // uncontrolled phase has no agent to command anything.
    let (native, l2) = (&rows[0], &rows[1]);
    assert!(l2["preempts_per_s"].as_f64().unwrap() > 0.0, "{l2}");
    assert!(l2["preempt_latency_p50_us"].as_f64().unwrap() > 0.0, "{l2}");
    assert_eq!(native["preempt_latency_p50_us"], 0.0, "{native}");
    assert!(run["alone"]["hp_p99_us"].as_f64().unwrap() > 0.0);
    assert!(run["alone"]["lp_kernels_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(run["scenario"]["seeds"], serde_json::json!([1, 2]));
    assert_eq!(run["scenario"]["hp"]["shape"], "demo-request");
    assert_eq!(run["run"]["emulator_preset"], "mi308x");
    assert_eq!(run["run"]["kfdq"], k.as_str());

    // sim's report of the same scenario has the same shape, `run` aside.
    let sim: Value = serde_json::from_str(&ok(&lab(&[
        "sim",
        "--scenario",
        "demo",
        "--seeds",
        "1",
        "--requests",
        "4",
        "--controls",
        "native,l2",
        "--json",
    ])))
    .unwrap();
    let run_keys: BTreeSet<String> = keys(&run)
        .into_iter()
        .filter(|k| !k.starts_with(".run"))
        .collect();
    // The HP busy fraction alone is the model's (`run` cannot measure it from outside).
    let sim_keys: BTreeSet<String> = keys(&sim)
        .into_iter()
        .filter(|k| k != ".alone.hp_busy_fraction")
        .collect();
    assert_eq!(run_keys, sim_keys);
    assert!(run.get("run").is_some() && sim.get("run").is_none());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_users_hp_command_in_the_line_format_is_measured() {
    test_support::require_root();
    let dir = tempfile::tempdir().unwrap();
    let w = workloads(dir.path()).display().to_string();
    // The line format from a shell: ready, wait for the go file, one line per request (the
    // same latencies in every phase, so every ratio is exactly 1), a window.
    let hp = r#"sh -c 'echo ready; while [ ! -e "$KFDQ_DEMO_GO" ]; do sleep 0.01; done; i=0; while [ $i -lt $KFDQ_DEMO_REQUESTS ]; do echo "request $i $((1000 + i))"; i=$((i + 1)); done'"#;
    let k = kfdq();
    let o = lab_shim(&[
        "run",
        "--kfdq",
        &k,
        "--repeat",
        "1",
        "--requests",
        "5",
        "--controls",
        "native",
        "--hp-command",
        hp,
        "--json",
        "--",
        "--workloads",
        &w,
    ]);
    let v: Value = serde_json::from_str(&ok(&o)).expect("JSON on stdout");
    assert_eq!(v["alone"]["hp_p50_us"], 1002.0, "{v}");
    assert_eq!(v["alone"]["hp_max_us"], 1004.0, "{v}");
    let native = &v["rows"][0];
    for key in ["hp_p50_rel", "hp_p99_rel", "hp_max_rel"] {
        assert_eq!(native[key], 1.0, "{key}: {native}");
    }
    assert_eq!(v["scenario"]["hp"]["shape"], "external");
    assert_eq!(v["run"]["hp_command"][0], "sh");
    assert_eq!(v["run"]["hp_command"][1], "-c");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_hp_command_without_request_lines_is_refused_with_the_format() {
    test_support::require_root();
    let dir = tempfile::tempdir().unwrap();
    let w = workloads(dir.path()).display().to_string();
    let k = kfdq();
    let e = refused(&lab_shim(&[
        "run",
        "--kfdq",
        &k,
        "--repeat",
        "1",
        "--requests",
        "3",
        "--controls",
        "native",
        "--hp-command",
        "sh -c 'echo ready; echo hello'",
        "--",
        "--workloads",
        &w,
    ]));
    assert!(e.contains("kfdq demo failed"), "{e}");
    assert!(
        e.contains("printed no `request <i> <latency_us>` line")
            && e.contains("docs/demo.md, \"Your own workloads\""),
        "{e}"
    );
}

#[test]
fn bad_configurations_and_a_missing_kfdq_are_refused_before_anything_runs() {
    let e = refused(&lab(&["run", "--controls", "native,level9"]));
    assert!(
        e.contains("use native, priority, l1, l2, l3 (sampled, fixed hysteresis)"),
        "{e}"
    );
    let e = refused(&lab(&["run", "--kfdq", "/nonexistent/kfdq"]));
    assert!(
        e.contains("kfdq not found (no file /nonexistent/kfdq)") && e.contains("--kfdq PATH"),
        "{e}"
    );
    let e = refused(&lab(&["run", "--repeat", "0"]));
    assert!(e.contains("at least 1 repetition"), "{e}");
}
