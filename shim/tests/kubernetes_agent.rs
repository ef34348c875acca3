//! kfdqd's side of Kubernetes sharing, through the real binaries on kfd-emu: the device
//! plugin's allocations file (written here with `AllocationFile::write`, as the plugin writes
//! it) caps the class of the processes that carry its tokens, whatever they ask; the node's
//! feature file for node-feature-discovery says what `kfdq doctor` finds. (Their metrics and
//! the Grafana dashboard: `kubernetes_metrics.rs`.)

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::kfdqd::{Agent, text};
use common::kubernetes::{config, grant, pod, worker, write_allocations};
use common::*;
use kfdq::Pid;
use kfdq::allocation::{TOKEN_ENV, Token};
use nix::sys::signal::Signal;

/// The KFD priorities of `pid`'s compute queues in the emulator (the kernel's view).
fn priorities(emu: &Emu, pid: u32) -> Vec<u32> {
    emu.stats()
        .queues
        .into_iter()
        .filter(|q| q.pid == pid && q.queue_type.starts_with("compute"))
        .map(|q| q.priority)
        .collect()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_allocation_caps_the_class_whatever_the_process_asks() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (batch, latency) = (Token::from_bytes([0x11; 16]), Token::from_bytes([0x22; 16]));
    write_allocations(
        dir.path(),
        vec![
            grant(&batch, "batch", pod("ml", "train", "trainer")),
            grant(&latency, "latency", pod("serving", "llm", "server")),
        ],
    );
    let agent = Agent::start(&emu, &config(dir.path(), "", ""));

    // A batch allocation asking for latency: batch, and status says why.
    let capped = worker(
        &emu,
        &agent,
        &[
            (TOKEN_ENV, batch.to_string()),
            ("KFDQ_CLASS", "latency".into()),
        ],
    );
    let p = agent.wait_connected(capped.pid, 3);
    assert_eq!(p.class, "batch", "{p:?}");
    assert_eq!(
        p.class_reason,
        "capped by kubernetes allocation ml/train/trainer"
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("KFDQ_CLASS=latency is above class batch")),
        "{p:?}"
    );
    assert_eq!(p.pod, pod("ml", "train", "trainer"));
    let status = text(&agent.kfdq(&["status"], None));
    assert!(
        status.contains("capped by kubernetes allocation ml/train/trainer"),
        "{status}"
    );
    // The kernel's queues follow the class: none above the low pipe band (0-6).
    test_support::wait::wait_state(
        "the capped process's queues in the low band",
        WAIT_LIMIT,
        || priorities(&emu, capped.pid),
        |p| p.len() == 3 && p.iter().all(|&x| x <= 6),
    );

    // A latency allocation: latency.
    let served = worker(&emu, &agent, &[(TOKEN_ENV, latency.to_string())]);
    let p = agent.wait_connected(served.pid, 3);
    assert_eq!(p.class, "latency", "{p:?}");
    assert_eq!(p.class_reason, "kubernetes allocation serving/llm/server");

    // A forged token: the fallback class (the lowest), whatever it asks.
    let forged = worker(
        &emu,
        &agent,
        &[
            (TOKEN_ENV, Token::from_bytes([0x33; 16]).to_string()),
            ("KFDQ_CLASS", "latency".into()),
        ],
    );
    let p = agent.wait_connected(forged.pid, 3);
    assert_eq!(p.class, "batch", "{p:?}");
    assert!(p.class_reason.contains("pod_fallback_class"), "{p:?}");

    // kfdq class cannot raise the batch allocation, not even as root.
    let pid = capped.pid.to_string();
    let o = agent.kfdq(&["class", &pid, "latency"], None);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("capped by kubernetes allocation ml/train/trainer"),
        "{}",
        text(&o)
    );
    assert_eq!(agent.process(capped.pid).unwrap().class, "batch");

    // A child started without the token (`env -u`) stays in its container's allocation: the
    // agent takes the nearest ancestor's token in the same cgroup.
    let w = programs().get("worker").display().to_string();
    let mut shell = Launch::new("/bin/sh".into())
        .arg("-c")
        .arg(format!(
            "env -u {TOKEN_ENV} KFDQ_CLASS=latency {w} 300; exit $?"
        ))
        .env(TOKEN_ENV, batch.to_string())
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(&emu);
    let ready = shell.wait_line("READY");
    let child: u32 = ready.split_whitespace().nth(1).unwrap().parse().unwrap();
    let environ = std::fs::read(format!("/proc/{child}/environ")).unwrap();
    assert!(
        !String::from_utf8_lossy(&environ).contains(TOKEN_ENV),
        "the child carries no token itself"
    );
    let p = agent.wait_connected(child, 3);
    assert_eq!(p.class, "batch", "{p:?}");
    assert_eq!(
        p.class_reason,
        "capped by kubernetes allocation ml/train/trainer"
    );
    shell.stop();
    shell.finish();

    // A broken allocations file: no allocations, so every token falls back; the agent serves
    // on, and the whole file puts the latency process back.
    std::fs::write(dir.path().join("allocations.json"), "{ half a file").unwrap();
    let p = agent.wait(&format!("pid {} to fall back", served.pid), |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(served.pid) && p.class == "batch")
    });
    let w = &p
        .processes
        .iter()
        .find(|p| p.pid == Pid(served.pid))
        .unwrap()
        .warnings;
    assert!(
        w.iter()
            .any(|w| w.contains("class latency -> batch by the device plugin's allocations")),
        "{w:?}"
    );
    assert!(
        agent.log_text().contains("not an allocations file"),
        "{}",
        agent.log_text()
    );
    write_allocations(
        dir.path(),
        vec![
            grant(&batch, "batch", pod("ml", "train", "trainer")),
            grant(&latency, "latency", pod("serving", "llm", "server")),
        ],
    );
    agent.wait(&format!("pid {} back in latency", served.pid), |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(served.pid) && p.class == "latency")
    });

    for app in [capped, served, forged] {
        app.stop();
        app.finish();
    }
}

/// `key=value` lines of a feature file (comments skipped).
fn labels(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or((l, "true"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// `kfdq --json doctor` on the emulator: per partition, the highest level that works with
/// every level below it, and whether the tracer path works.
fn doctor_levels(emu: &Emu) -> Vec<(u64, u32, bool)> {
    let out = std::process::Command::new(workspace_bin("kfdq"))
        .arg("--root")
        .arg(emu.root())
        .args([
            "--json",
            "doctor",
            "--socket",
            "/nonexistent-kfdq/kfdq.sock",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let works = |l: &str| {
                p["levels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["level"] == l && x["works"] == true)
            };
            let max = (0..=3)
                .take_while(|n| works(&n.to_string()))
                .last()
                .unwrap();
            (p["gpu_id"].as_u64().unwrap(), max, works("tracer"))
        })
        .collect()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_node_feature_file_says_what_kfdq_doctor_finds_and_goes_when_the_agent_stops() {
    // Two partitions with every level; then a KFD without the debugger API (no level 3).
    for (config_emu, level) in [
        (
            EmuConfig {
                gpus: 2,
                ..EmuConfig::default()
            },
            3,
        ),
        (
            EmuConfig {
                kfd_minor: 11,
                ..EmuConfig::default()
            },
            2,
        ),
    ] {
        let emu = mount_with(config_emu);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("features.d/kfdq");
        let mut agent = Agent::start(&emu, &config(dir.path(), &file.display().to_string(), ""));
        wait_for("the feature file", || file.exists());
        let l = labels(&file);
        let doctor = doctor_levels(&emu);
        assert!(!doctor.is_empty());
        assert_eq!(l["kfdq.io/version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(
            l["kfdq.io/priority-mode"], "pipe",
            "a current kernel programs the pipe priority only"
        );
        assert_eq!(l["kfdq.io/partitions"], doctor.len().to_string());
        assert_eq!(l["kfdq.io/preemption-level"], level.to_string(), "{l:?}");
        for (gpu, max, tracer) in &doctor {
            assert_eq!(
                l[&format!("kfdq.io/gpu-{gpu}.preemption-level")],
                max.to_string(),
                "{l:?}"
            );
            assert_eq!(l[&format!("kfdq.io/gpu-{gpu}.tracer")], tracer.to_string());
        }
        assert!(
            l.keys().all(|k| k.starts_with("kfdq.io/")),
            "NFD wants a namespace: {l:?}"
        );
        let names: Vec<_> = std::fs::read_dir(file.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["kfdq"], "no temporary file left");

        if level == 3 {
            // A clean stop removes it (a stopped agent enforces nothing).
            agent.signal(Signal::SIGTERM);
            let st = agent.child.wait().unwrap();
            assert!(st.success(), "{st}: {}", agent.log_text());
            assert!(!file.exists(), "removed at the stop");
        } else {
            // A reload that turns the labels off removes the file.
            std::fs::write(
                &agent.config,
                std::fs::read_to_string(&agent.config).unwrap().replace(
                    &format!("features = \"{}\"", file.display()),
                    "features = \"\"",
                ),
            )
            .unwrap();
            agent.signal(Signal::SIGHUP);
            wait_for("the feature file to go at the reload", || !file.exists());
            assert_eq!(agent.status().counters.reloads, 1, "{}", agent.log_text());
        }
    }
}
