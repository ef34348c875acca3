//! `kfd-emu --calibration FILE`: a node's measured parameters drive the model; a file from
//! another GPU kind is refused before anything is mounted.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use kfdq_calibration::{
    Calibration, Measured, MeasuredArbitration, NodeIdentity, PartitionCalibration,
};

fn file_for(gfx_target: &str, version: u32) -> String {
    file_of(&[(
        gfx_target,
        version,
        420_000,
        70,
        90,
        MeasuredArbitration::Equal,
    )])
}

/// A file of one partition per entry: (target, version, fixed ns, save, restore, arbitration).
fn file_of(parts: &[(&str, u32, u64, u64, u64, MeasuredArbitration)]) -> String {
    Calibration {
        format: kfdq_calibration::FORMAT,
        partitions: parts
            .iter()
            .map(
                |&(gfx_target, version, fixed, save, restore, arbitration)| PartitionCalibration {
                    node: NodeIdentity {
                        gpu_name: "test".into(),
                        gpu_id: 0xb1a0,
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
                        preempt_fixed_ns: fixed,
                        save_wave_ns: save,
                        restore_wave_ns: restore,
                        arbitration,
                        preempt_round_trip_ns: kfdq_calibration::round_trip_ns(
                            fixed, save, restore, 2560,
                        ),
                        preempt_fixed_error_ns: 0,
                        per_wave_error_ns: 0,
                    },
                },
            )
            .collect(),
    }
    .to_toml()
}

/// Starts kfd-emu on `mnt` with `args`, reads its config.json once it serves, and stops it.
fn served_config(mnt: &std::path::Path, args: &[&std::ffi::OsStr]) -> serde_json::Value {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kfd-emu"))
        .arg("--mount")
        .arg(mnt)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let config = line.contains("serving").then(|| {
        serde_json::from_str(&std::fs::read_to_string(mnt.join("kfd-emu/config.json")).unwrap())
            .unwrap()
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let config = config.unwrap_or_else(|| panic!("kfd-emu did not serve: {line:?}"));
    assert!(status.success());
    config
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

/// A gfx942 topology given by override on the gfx90a preset (mi210).
const GFX942_OVER_MI210: &str = "[[node]]\n[node.properties]\ngfx_target_version = 90402\n";

#[test]
fn the_target_check_uses_the_topology_the_emulator_presents() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("topology.toml");
    std::fs::write(&topo, GFX942_OVER_MI210).unwrap();
    let file = dir.path().join("mi210.toml");
    std::fs::write(&file, file_for("gfx90a", 90010)).unwrap();
    let mnt = dir.path().join("mnt");
    // The preset is gfx90a, but the emulator presents gfx942: a gfx90a file is refused.
    let o = Command::new(env!("CARGO_BIN_EXE_kfd-emu"))
        .arg("--mount")
        .arg(&mnt)
        .args(["--preset", "mi210", "--topology"])
        .arg(&topo)
        .arg("--calibration")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("gfx90a") && e.contains("90402"), "{e}");
    assert!(!mnt.join("dev/kfd").exists());
    // Two partitions in the file, one in the topology: refused with the rule.
    std::fs::write(
        &file,
        file_of(&[
            ("gfx942", 90402, 1000, 1, 1, MeasuredArbitration::Pipe),
            ("gfx942", 90402, 1000, 1, 1, MeasuredArbitration::Pipe),
        ]),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kfd-emu"))
        .arg("--mount")
        .arg(&mnt)
        .args(["--preset", "mi210", "--topology"])
        .arg(&topo)
        .arg("--calibration")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("2 partitions") && e.contains("has 1"), "{e}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_file_of_several_partitions_sets_each_partition_of_the_topology() {
    test_support::require_root();
    let dir = tempfile::tempdir().unwrap();
    // The matching kind on the overridden topology is taken.
    let topo = dir.path().join("topology.toml");
    std::fs::write(&topo, GFX942_OVER_MI210).unwrap();
    let file = dir.path().join("gfx942.toml");
    std::fs::write(&file, file_for("gfx942", 90402)).unwrap();
    let mnt = dir.path().join("mnt");
    let c = served_config(
        &mnt,
        &[
            OsStr::new("--preset"),
            OsStr::new("mi210"),
            OsStr::new("--topology"),
            topo.as_os_str(),
            OsStr::new("--calibration"),
            file.as_os_str(),
        ],
    );
    assert_eq!(c["config"]["preempt_cost_us"], 420, "{c}");
    // Two partitions, two files' partitions: each its own costs.
    let two = dir.path().join("two.toml");
    std::fs::write(&two, "preset = \"mi308x\"\n[[node]]\n[[node]]\n").unwrap();
    std::fs::write(
        &file,
        file_of(&[
            ("gfx942", 90402, 420_000, 70, 90, MeasuredArbitration::Equal),
            (
                "gfx942",
                90402,
                900_000,
                30,
                250,
                MeasuredArbitration::Strict,
            ),
        ]),
    )
    .unwrap();
    let c = served_config(
        &mnt,
        &[
            OsStr::new("--topology"),
            two.as_os_str(),
            OsStr::new("--calibration"),
            file.as_os_str(),
        ],
    );
    let costs = &c["config"]["partition_costs"];
    assert_eq!(costs.as_array().map(Vec::len), Some(2), "{c}");
    assert_eq!(costs[0]["preempt_fixed_ns"], 420_000);
    assert_eq!(costs[1]["preempt_fixed_ns"], 900_000);
    assert_eq!(costs[1]["restore_wave_ns"], 250);
    assert_eq!(costs[1]["arbitration"], "strict_priority");
    assert_eq!(c["config"]["arbitration"], "equal");
}
