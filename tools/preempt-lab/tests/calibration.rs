//! `sim --calibration FILE`: the round trip `kfdq bench --write` -> file -> the lab, and the
//! refusal of a file from another GPU kind or a malformed one.

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use kfdq_calibration::{
    Calibration, Measured, MeasuredArbitration, NodeIdentity, PartitionCalibration,
};
use serde_json::Value;
use test_support::bins::workspace_bin;
use test_support::emu::{EmuConfig, Preset, mount};

/// `kfdq bench --write FILE` on an emulator with these costs.
fn bench_write(fixed_us: u64, wave_ns: u64, file: &Path) {
    let emu = mount(EmuConfig {
        preset: Preset::Mi308x,
        preempt_cost_us: fixed_us,
        save_wave_ns: wave_ns,
        restore_wave_ns: wave_ns,
        ..EmuConfig::default()
    });
    let o = Command::new(workspace_bin("kfdq"))
        .arg("--root")
        .arg(emu.root())
        .args(["bench", "--repeat", "2", "--write"])
        .arg(file)
        .output()
        .expect("run kfdq bench");
    ok(&o);
}

/// The synthetic field scenario's level-2 row (edges, the cost release rule) with `file`.
fn level2(file: &Path) -> Value {
    let o = lab(&[
        "sim",
        "--scenario",
        "field-synthetic",
        "--seeds",
        "1",
        "--requests",
        "40",
        "--controls",
        "l2e",
        "--json",
        "--calibration",
        file.to_str().unwrap(),
    ]);
    serde_json::from_str(&ok(&o)).unwrap()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_slower_measured_preempt_costs_the_lab_more_lp_throughput() {
    test_support::require_root();
    let dir = tempfile::tempdir().unwrap();
    let (fast, slow) = (dir.path().join("fast.toml"), dir.path().join("slow.toml"));
    bench_write(50, 20, &fast);
    bench_write(3000, 600, &slow);
    let (f, s) = (level2(&fast), level2(&slow));
    // The lab runs with what the bench measured.
    let fixed = |v: &Value| {
        v["scenario"]["params"]["preempt_fixed_ns"]
            .as_f64()
            .unwrap()
    };
    assert!(
        (fixed(&s) - 3e6).abs() < 0.2 * 3e6,
        "{}",
        s["scenario"]["params"]
    );
    assert!(
        (fixed(&f) - 5e4).abs() < 0.2 * 5e4,
        "{}",
        f["scenario"]["params"]
    );
    let lp = |v: &Value| v["rows"][0]["lp_rel"].as_f64().unwrap();
    assert!(
        lp(&s) < lp(&f) - 0.01,
        "LP throughput with a 3 ms preempt {} is not below the 50 µs one's {}",
        lp(&s),
        lp(&f)
    );
}

fn file_for(gfx_target: &str, version: u32) -> String {
    Calibration {
        format: kfdq_calibration::FORMAT,
        partitions: vec![PartitionCalibration {
            node: NodeIdentity {
                gpu_name: "test".into(),
                gpu_id: 0xb1a0,
                gfx_target: gfx_target.into(),
                gfx_target_version: version,
                cus: 104,
                wave_slots: 3328,
                kernel: "6.12".into(),
                mec_firmware: 78,
                sdma_firmware: 1,
                kfd_version: "1.17".into(),
                measured_with: "test".into(),
            },
            model: Measured {
                preempt_fixed_ns: 100_000,
                save_wave_ns: 30,
                restore_wave_ns: 30,
                arbitration: MeasuredArbitration::None,
                preempt_round_trip_ns: kfdq_calibration::round_trip_ns(100_000, 30, 30, 3328),
                preempt_fixed_error_ns: 0,
                per_wave_error_ns: 0,
            },
        }],
    }
    .to_toml()
}

/// A short `sim` run with `extra` options and `--calibration file`.
fn short_sim(file: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["sim", "--seeds", "1", "--requests", "5"];
    args.extend_from_slice(extra);
    args.extend(["--calibration", file.to_str().unwrap()]);
    lab(&args)
}

#[test]
fn a_calibration_from_another_gpu_or_a_malformed_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("mi210.toml");
    let text = file_for("gfx90a", 90010);
    std::fs::write(&other, &text).unwrap();
    let line = text
        .lines()
        .position(|l| l.starts_with("gfx_target_version"))
        .unwrap()
        + 1;
    let o = short_sim(&other, &[]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("gfx90a") && e.contains(&format!("line {line}")),
        "{e}"
    );
    // A fix that can work: the lab models gfx942 only, so measuring again cannot help.
    assert!(
        e.contains("gfx942 partitions only") && e.contains("kfd-emu --preset mi210"),
        "{e}"
    );
    assert!(!e.contains("on a node of this kind"), "{e}");

    let bad = dir.path().join("bad.toml");
    let text = file_for("gfx942", 90402).replace("save_wave_ns = 30", "save_wave_ns = -3");
    let line = text.lines().position(|l| l.contains("= -3")).unwrap() + 1;
    std::fs::write(&bad, &text).unwrap();
    let o = short_sim(&bad, &[]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains(&format!("line {line}")), "{e}");

    // A good one is taken: the report carries its costs.
    let good = dir.path().join("good.toml");
    std::fs::write(&good, file_for("gfx942", 90402)).unwrap();
    let o = short_sim(&good, &["--controls", "l2", "--json"]);
    let v: Value = serde_json::from_str(&ok(&o)).unwrap();
    assert_eq!(v["scenario"]["params"]["preempt_fixed_ns"], 100_000);
    // It says it used the file, and its round trip agrees with its fit: no warning.
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("--calibration") && e.contains("preempt_fixed_ns 100000"),
        "{e}"
    );
    assert!(!e.contains("warning"), "{e}");
    // A round trip edited away from the fit is warned of, naming both numbers.
    let edited = dir.path().join("edited.toml");
    let fit = kfdq_calibration::round_trip_ns(100_000, 30, 30, 3328);
    std::fs::write(
        &edited,
        file_for("gfx942", 90402).replace(
            &format!("preempt_round_trip_ns = {fit}"),
            "preempt_round_trip_ns = 9000",
        ),
    )
    .unwrap();
    let o = short_sim(&edited, &["--controls", "l2", "--json"]);
    ok(&o);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("warning") && e.contains("9000") && e.contains(&format!("{fit} ns")),
        "{e}"
    );
    assert_eq!(v["scenario"]["params"]["save_wave_ns"], 30);
}
