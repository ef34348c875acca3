//! kfdqd's `[agent] calibration = FILE`: the cost release rule's C is the node's measured round
//! trip; a malformed file, a conflicting key or a file from another GPU kind is refused.

mod common;

use std::process::Command;

use common::*;
use kfdq::agent::AgentConfig;
use kfdq::policy::Release;
use kfdq_calibration::{
    Calibration, Measured, MeasuredArbitration, NodeIdentity, PartitionCalibration,
};

fn file_for(version: u32, round_trip_ns: u64) -> String {
    Calibration {
        format: kfdq_calibration::FORMAT,
        partitions: vec![PartitionCalibration {
            node: NodeIdentity {
                gpu_name: "test".into(),
                gpu_id: 0xb1a0,
                gfx_target: "gfx942".into(),
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
                preempt_fixed_ns: 300_000,
                save_wave_ns: 100,
                restore_wave_ns: 100,
                arbitration: MeasuredArbitration::Pipe,
                preempt_round_trip_ns: round_trip_ns,
                preempt_fixed_error_ns: 0,
                per_wave_error_ns: 0,
            },
        }],
    }
    .to_toml()
}

/// `kfdqd --check` on `root` with configuration `conf`.
fn kfdqd_check(root: &std::path::Path, conf: &std::path::Path) -> std::process::Output {
    Command::new(workspace_bin("kfdqd"))
        .arg("--root")
        .arg(root)
        .arg("--config")
        .arg(conf)
        .arg("--check")
        .output()
        .unwrap()
}

#[test]
fn the_cost_rule_takes_c_from_the_calibration() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("node.toml"), file_for(90402, 1_112_000)).unwrap();
    let conf = dir.path().join("kfdq.toml");
    std::fs::write(&conf, "[agent]\ncalibration = \"node.toml\"\n").unwrap();
    let c = AgentConfig::load(&conf).unwrap();
    match c.policy.release {
        Release::Cost(r) => assert_eq!(r.round_trip_ns, 1_112_000),
        Release::Hysteresis => panic!("the cost rule is the default"),
    }
    let cal = c.calibration.as_ref().unwrap();
    assert_eq!(
        (
            &cal.file,
            cal.line,
            cal.gfx_target_version,
            cal.round_trip_ns
        ),
        (&"node.toml".into(), 2, 90402, 1_112_000)
    );
    // Its round trip is its fit's (2 x 300 µs + 200 ns x 2560): nothing to say.
    assert_eq!(cal.warning, None);
    // One other than the fit's is said, with its line and both numbers; the file's is used.
    std::fs::write(dir.path().join("node.toml"), file_for(90402, 500_000)).unwrap();
    let c = AgentConfig::load(&conf).unwrap();
    let w = c.calibration.as_ref().and_then(|c| c.warning.clone());
    assert!(
        w.as_deref()
            .is_some_and(|w| w.contains("preempt_round_trip_ns = 500000")
                && w.contains("= 1112000 ns")
                && w.contains("line ")),
        "{w:?}"
    );
    std::fs::write(dir.path().join("node.toml"), file_for(90402, 1_112_000)).unwrap();

    std::fs::write(
        &conf,
        "[agent]\ncalibration = \"node.toml\"\npreempt_round_trip_us = 300\n",
    )
    .unwrap();
    let e = AgentConfig::load(&conf).unwrap_err().to_string();
    assert!(
        e.contains("preempt_round_trip_us") && e.contains("kfdq.toml:2:"),
        "{e}"
    );

    std::fs::write(dir.path().join("bad.toml"), "format = 1\n[node]\n").unwrap();
    std::fs::write(&conf, "[agent]\ncalibration = \"bad.toml\"\n").unwrap();
    let e = AgentConfig::load(&conf).unwrap_err().to_string();
    assert!(e.contains("bad.toml") && e.contains("line "), "{e}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn kfdqd_refuses_a_calibration_from_another_gpu_kind() {
    let emu = mount_preset(Preset::Mi210);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("node.toml"), file_for(90402, 500_000)).unwrap();
    let conf = dir.path().join("kfdq.toml");
    std::fs::write(&conf, "[agent]\ncalibration = \"node.toml\"\n").unwrap();
    let o = kfdqd_check(emu.root(), &conf);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("90402") && e.contains("90010") && e.contains("kfdq bench"),
        "{e}"
    );
    // The configuration's line, and the kinds by name.
    assert!(
        e.contains("kfdq.toml:2:") && e.contains("gfx942") && e.contains("gfx90a"),
        "{e}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_reload_refuses_a_calibration_that_startup_refuses() {
    let emu = mount_preset(Preset::Mi210);
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("node.toml");
    std::fs::write(&node, file_for(90010, 500_000)).unwrap();
    let conf = dir.path().join("kfdq.toml");
    let sock = dir.path().join("kfdq.sock");
    std::fs::write(
        &conf,
        format!(
            "[agent]\nsocket = \"{}\"\ncalibration = \"node.toml\"\n",
            sock.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("kfdqd.log");
    let mut agent = start_kfdqd(emu.root(), &conf, &sock, &log);
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let st = agent_status(&sock).expect("kfdqd answers");
    assert_eq!(st.counters.reload_failures, 0, "{}", log_text());
    // The calibration in effect is in the status (`kfdq status`, table and JSON), with the
    // warning its round trip earns (500 µs, its fit's 1112 µs), which the log says too.
    let cal = st
        .calibration
        .as_ref()
        .expect("the calibration in the status");
    assert_eq!(
        (cal.file.as_str(), cal.round_trip_ns),
        ("node.toml", 500_000)
    );
    assert!(
        cal.warning
            .as_deref()
            .is_some_and(|w| w.contains("disagrees")),
        "{cal:?}"
    );
    assert!(st.release.contains("C 500 µs"), "{}", st.release);
    assert!(log_text().contains("disagrees"), "{}", log_text());

    // The file rewritten by a bench on another GPU kind: startup and --check refuse it...
    std::fs::write(&node, file_for(90402, 500_000)).unwrap();
    let o = kfdqd_check(emu.root(), &conf);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    // ...and so does a reload: the configuration in effect stays.
    signal(&agent, nix::sys::signal::Signal::SIGHUP);
    let st = test_support::wait::wait_value("the reload's verdict", WAIT_LIMIT, || {
        agent_status(&sock).filter(|s| s.counters.reloads + s.counters.reload_failures > 0)
    });
    signal(&agent, nix::sys::signal::Signal::SIGTERM);
    let _ = agent.wait();
    let text = log_text();
    assert_eq!(
        (st.counters.reloads, st.counters.reload_failures),
        (0, 1),
        "{text}"
    );
    assert!(
        text.contains("90402") && text.contains("90010") && text.contains("stays"),
        "{text}"
    );
}
