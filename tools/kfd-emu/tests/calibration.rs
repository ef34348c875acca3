//! `kfd-emu --calibration FILE`: a node's measured parameters drive the model; a file from
//! another GPU kind is refused before anything is mounted.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use gfx_model::calibration::{self, Calibration, Measured, MeasuredArbitration, NodeIdentity};

fn file_for(gfx_target: &str, version: u32) -> String {
    Calibration {
        format: calibration::FORMAT,
        node: NodeIdentity {
            gpu_name: "test".into(),
            gfx_target: gfx_target.into(),
            gfx_target_version: version,
            cus: 80,
            wave_slots: 2560,
            kernel: "7.0".into(),
            mec_firmware: 177,
            sdma_firmware: 1,
            kfd_version: "1.17".into(),
            measured_with: "test".into(),
        },
        model: Measured {
            preempt_fixed_ns: 420_000,
            save_wave_ns: 70,
            restore_wave_ns: 90,
            arbitration: MeasuredArbitration::Equal,
            preempt_round_trip_ns: calibration::round_trip_ns(420_000, 70, 90, 2560),
            preempt_fixed_error_ns: 0,
            per_wave_error_ns: 0,
        },
    }
    .to_toml()
}

#[test]
fn a_calibration_from_another_gpu_kind_is_refused_before_mounting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mi308x.toml");
    std::fs::write(&file, file_for("gfx942", 90402)).unwrap();
    let mnt = dir.path().join("mnt");
    let o = Command::new(env!("CARGO_BIN_EXE_kfd-emu"))
        .arg("--mount")
        .arg(&mnt)
        .args(["--preset", "mi210", "--calibration"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("gfx942") && e.contains("90010"), "{e}");
    assert!(!mnt.join("dev/kfd").exists());
    // The flags it replaces cannot be given with it.
    let o = Command::new(env!("CARGO_BIN_EXE_kfd-emu"))
        .arg("--mount")
        .arg(&mnt)
        .args(["--preempt-cost-us", "10", "--calibration"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_calibration_sets_the_models_costs_and_arbitration() {
    test_support::require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mi308x.toml");
    std::fs::write(&file, file_for("gfx942", 90402)).unwrap();
    let mnt = dir.path().join("mnt");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kfd-emu"))
        .arg("--mount")
        .arg(&mnt)
        .args(["--preset", "mi308x", "--calibration"])
        .arg(&file)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("serving"), "{line}");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(mnt.join("kfd-emu/config.json")).unwrap())
            .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
    let c = &config["config"];
    assert_eq!(c["preempt_cost_us"], 420, "{c}");
    assert_eq!(c["save_wave_ns"], 70);
    assert_eq!(c["restore_wave_ns"], 90);
    assert_eq!(c["arbitration"], "equal");
}
