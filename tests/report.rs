//! `kfdq report` on the emulator: the archive holds the node's versions, doctor, topology, the
//! bench and its calibration, the demo's output and the agent's configuration, and a planted allocation token and an
//! environment value are nowhere in it (nor in what it prints).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

/// An allocation token (32 lowercase hex digits, as the device plugin hands them out).
const TOKEN: &str = "5f0c2a9e77b14d03a1c6e8f2b9d4c017";
/// A value only this test's environment holds.
const PLANTED: &str = "planted-env-value-7c1e";

/// Extracts `archive` into `dir` with the system's tar (what the recipient will use).
fn untar(archive: &Path, dir: &Path) {
    let st = Command::new("tar")
        .arg("xzf")
        .arg(archive)
        .arg("-C")
        .arg(dir)
        .status()
        .unwrap();
    assert!(st.success(), "tar xzf {}", archive.display());
}

/// Every file under `dir`, with its text.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            out.push((name, std::fs::read_to_string(&p).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_report_holds_the_nodes_state_and_nothing_secret() {
    let emu = mount_preset(Preset::Mi308x);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let alloc = d.join("allocations.json");
    std::fs::write(
        &alloc,
        format!(
            r#"{{"version":1,"allocations":[{{"token":"{TOKEN}","class":"latency","gpu":1,"devices":[]}}]}}"#
        ),
    )
    .unwrap();
    // The token in a comment and under a secret-named key; the environment's value under a
    // key that names nothing secret (only the environment scrub can catch it).
    let conf = d.join("kfdq.toml");
    std::fs::write(
        &conf,
        format!(
            "# pod a's allocation: {TOKEN}\n[agent]\nsocket = \"/run/{PLANTED}/kfdq.sock\"\n\n[kubernetes]\nallocations = \"{}\"\nbearer_token = \"{TOKEN}\"\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\n",
            alloc.display()
        ),
    )
    .unwrap();
    let demo = d.join("demo.json");
    std::fs::write(
        &demo,
        r#"{"requests": 200, "phases": [{"label": "HP alone"}]}"#,
    )
    .unwrap();
    let archive = d.join("report.tar.gz");
    let out = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(emu.root())
        .arg("--agent")
        .arg(d.join("no-agent.sock"))
        .arg("report")
        .arg("--output")
        .arg(&archive)
        .arg("--agent-config")
        .arg(&conf)
        .arg("--demo-json")
        .arg(&demo)
        .arg("--bench")
        .env_remove("KFDQ_SOCKET")
        .env("KFDQ_ALLOCATION", TOKEN)
        .env("KFDQ_REPORT_PLANTED", PLANTED)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for name in [
        "versions.json",
        "doctor.json",
        "topology.json",
        "demo.json",
        "agent.toml",
        "MANIFEST.txt",
    ] {
        assert!(
            stdout.contains(name),
            "the printed manifest names {name}: {stdout}"
        );
    }
    assert!(
        stderr.contains("takes minutes") && stderr.contains("bench done"),
        "{stderr}"
    );

    let x = d.join("x");
    std::fs::create_dir(&x).unwrap();
    untar(&archive, &x);
    let got = files(&x);
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "MANIFEST.txt",
            "agent.toml",
            "bench.json",
            "calibration.toml",
            "demo.json",
            "doctor.json",
            "topology.json",
            "versions.json"
        ]
    );
    let text = |n: &str| got.iter().find(|(m, _)| m == n).unwrap().1.clone();
    let json = |n: &str| -> serde_json::Value { serde_json::from_str(&text(n)).unwrap() };

    let osrelease = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(json("versions.json")["kernel"]["release"], osrelease.trim());
    let doctor = json("doctor.json");
    assert_eq!(doctor["root"], emu.root().display().to_string());
    assert!(!doctor["findings"].as_array().unwrap().is_empty());
    let topo = json("topology.json");
    assert!(
        topo["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["gfx_target"] == "gfx942"),
        "{topo}"
    );
    let bench = json("bench.json");
    assert_eq!(bench[0]["gfx_target"], "gfx942", "{bench}");
    assert_eq!(bench[0]["gpu_id"], topo["nodes"][1]["gpu_id"], "{bench}");
    assert!(text("calibration.toml").contains("[[partition]]"));
    assert_eq!(json("demo.json")["phases"][0]["label"], "HP alone");
    let agent = text("agent.toml");
    assert!(
        agent.contains("latency") && agent.contains("bearer_token = \"<redacted>\""),
        "{agent}"
    );
    assert!(agent.contains("<$KFDQ_REPORT_PLANTED>"), "{agent}");
    assert!(!agent.contains('#'), "comments are dropped: {agent}");
    assert!(text("MANIFEST.txt").contains("KFDQ_REPORT_PLANTED"));

    // Nowhere: not in any file, not in the archive's bytes, not on the terminal.
    let raw = Command::new("gzip")
        .arg("-dc")
        .arg(&archive)
        .output()
        .unwrap()
        .stdout;
    let raw = String::from_utf8_lossy(&raw);
    for secret in [TOKEN, PLANTED] {
        assert!(!raw.contains(secret), "{secret} is in the archive");
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} printed"
        );
    }
}

/// An existing --output is refused before anything runs, and left as it was; so is a
/// --demo-json that cannot be read.
#[test]
fn the_report_refuses_to_overwrite_and_names_a_missing_demo_file() {
    let dir = tempfile::tempdir().unwrap();
    let existing = dir.path().join("r.tar.gz");
    std::fs::write(&existing, b"keep me").unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kfdq"))
            .arg("--root")
            .arg(dir.path().join("no-root"))
            .arg("report")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = run(&["--output", existing.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("exists") && err.contains("never overwrites"),
        "{err}"
    );
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");

    let out = run(&["--output", "new.tar.gz", "--demo-json", "missing.json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("--demo-json missing.json") && err.contains("kfdq --json demo"),
        "{err}"
    );
    assert!(!dir.path().join("new.tar.gz").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "nothing written: {left:?}");
}
