//! `kfdq doctor` on the emulator in three configurations: a current kernel (every level works),
//! a KFD without the debugger API (level 3 and the tracer path do not), and a kernel before 6.12
//! (no queue-buffer rules, queue priority still programmed).

mod common;

use std::process::Command;

use common::*;

fn doctor(emu: &Emu) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(emu.root())
        .args([
            "--json",
            "doctor",
            "--socket",
            "/nonexistent-kfdq-test/kfdq.sock",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn status<'a>(v: &'a serde_json::Value, check: &str) -> (&'a str, &'a str) {
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
        .unwrap_or_else(|| panic!("no {check} finding in {v:#}"));
    (f["status"].as_str().unwrap(), f["found"].as_str().unwrap())
}

fn works(v: &serde_json::Value, level: &str) -> bool {
    v["partitions"][0]["levels"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["level"] == level)
        .unwrap()["works"]
        .as_bool()
        .unwrap()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn doctor_gives_three_verdicts_for_three_kernels() {
    let configs = [
        ("current", EmuConfig::default()),
        (
            "no-debugger-api",
            EmuConfig {
                kfd_minor: 11,
                ..EmuConfig::default()
            },
        ),
        (
            "legacy",
            EmuConfig {
                buffer_checks: false,
                ..EmuConfig::default()
            },
        ),
    ];
    let mut verdicts = Vec::new();
    for (name, config) in configs {
        let emu = mount(config);
        let (code, v, err) = doctor(&emu);
        verdicts.push((name, code, v, err));
    }
    let [current, nodbg, legacy] = &verdicts[..] else {
        unreachable!()
    };

    // A current kernel: every level and the tracer path; pipe priority only.
    assert_eq!(current.1, 0, "{}", current.3);
    assert_eq!(status(&current.2, "debugger-api").0, "ok");
    assert_eq!(status(&current.2, "sched-policy").0, "ok");
    assert!(
        status(&current.2, "queue-priority")
            .1
            .contains("only the pipe priority")
    );
    for level in ["0", "1", "2", "3", "tracer"] {
        assert!(works(&current.2, level), "current kernel: level {level}");
    }
    assert_eq!(current.2["partitions"][0]["resident_slots"], 24);

    // No debugger API: level 3 and the tracer path fail, with the fix; exit status 1.
    assert_eq!(nodbg.1, 1, "a FAIL finding exits 1");
    let (st, found) = status(&nodbg.2, "debugger-api");
    assert_eq!(st, "fail");
    assert!(found.contains("1.11"), "{found}");
    assert!(works(&nodbg.2, "2") && !works(&nodbg.2, "3") && !works(&nodbg.2, "tracer"));
    assert!(
        nodbg.3.contains("FAIL"),
        "stderr names the failure: {}",
        nodbg.3
    );

    // Before 6.12: no buffer rules, queue priority still programmed; every level works.
    assert_eq!(legacy.1, 0, "{}", legacy.3);
    assert_eq!(status(&legacy.2, "queue-buffers").0, "info");
    assert!(
        status(&legacy.2, "queue-priority")
            .1
            .contains("programs the queue priority")
    );
    assert!(works(&legacy.2, "3"));

    // Three different verdicts.
    let summary = |v: &serde_json::Value| v["findings"].to_string();
    assert_ne!(summary(&current.2), summary(&nodbg.2));
    assert_ne!(summary(&current.2), summary(&legacy.2));
    assert_ne!(summary(&nodbg.2), summary(&legacy.2));
}

/// A socket in a shared directory (mode 1777, as /tmp): `kfdq doctor` and `kfdqd --check` give
/// one verdict and one fix (another directory, never a chmod of the shared one), and `--check`
/// prints no "configuration ok" for a configuration that startup refuses.
#[test]
fn doctor_and_check_refuse_a_shared_socket_directory_alike() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let sock = shared.join("x.sock");

    let o = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(dir.path())
        .arg("--agent")
        .arg(&sock)
        .args(["--json", "doctor"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == "socket-dir")
        .unwrap_or_else(|| panic!("no socket-dir finding in {v:#}"));
    assert_eq!(f["status"], "fail", "{f:#}");
    let fix = f["fix"].as_str().unwrap_or_default();
    assert!(!fix.contains("chmod"), "{fix}");
    assert!(
        fix.contains("directory of its own") && fix.contains("/run/kfdq/kfdq.sock"),
        "{fix}"
    );

    let conf = dir.path().join("kfdq.toml");
    std::fs::write(&conf, format!("[agent]\nsocket = \"{}\"\n", sock.display())).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kfdqd"))
        .arg("--root")
        .arg(dir.path())
        .arg("--config")
        .arg(&conf)
        .arg("--check")
        .output()
        .unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(2), "{out}{err}");
    assert!(!out.contains("configuration ok"), "{out}");
    assert!(err.contains("directory of its own"), "{err}");
}
