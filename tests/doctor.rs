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
