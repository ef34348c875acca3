//! `kfdq --root <mount> topology|ps [--json]` print what the emulator serves; `kfdq run` puts a
//! program under the shim; `kfdq-selftest` exercises the safe layer end to end; `kfdq --json
//! status` beside a real kfdqd prints no negative zero.

mod common;

use std::process::Command;

use common::*;

/// `kfdq --root ROOT ARGS`, kept off the host's agent and registries: no agent socket (not the
/// default /run/kfdq/kfdq.sock, nor an inherited `KFDQ_SOCKET`), and an empty private state
/// directory first in the registry search.
fn kfdq(root: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let state = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(root)
        .arg("--agent")
        .arg(state.path().join("no-agent.sock"))
        .args(args)
        .env_remove("KFDQ_SOCKET")
        .env("KFDQ_STATE_DIR", state.path())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn topology_json_matches_the_emulator() {
    let emu = mount_preset(Preset::Mi300xCpx);
    let (ok, out, err) = kfdq(emu.root(), &["topology", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kfd_version"]["minor"], 17);
    let gpus: Vec<_> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "gpu")
        .collect();
    let stats = emu.stats();
    assert_eq!(gpus.len(), stats.partitions.len());
    for (g, p) in gpus.iter().zip(&stats.partitions) {
        assert_eq!(g["gpu_id"].as_u64().unwrap() as u32, p.gpu_id);
        assert_eq!(g["num_xcc"].as_u64().unwrap() as u32, p.num_xcc);
        assert_eq!(
            g["resident_queue_limit"].as_u64().unwrap() as u32,
            p.num_cp_queues
        );
        assert_eq!(g["compute_units"], 38);
        assert_eq!(g["gfx_target"], "gfx942");
        assert_eq!(g["cwsr"]["source"], "sysfs");
    }
    // The table says the same for people.
    let (ok, table, _) = kfdq(emu.root(), &["topology"]);
    assert!(ok);
    assert!(
        table.contains("gfx942") && table.contains("8 GPU partition(s)"),
        "{table}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn ps_json_lists_another_process_queues() {
    let emu = mount_preset(Preset::Mi308x);
    let holder = Holder::spawn(emu.root(), &["--queues", "3", "--priority", "11"]);
    let (ok, out, err) = kfdq(emu.root(), &["ps", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == holder.pid)
        .expect("holder listed");
    assert_eq!(p["command"], "kfdq-test-hold");
    let ids: Vec<u32> = p["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue_id"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids, holder.queues);
    for q in p["queues"].as_array().unwrap() {
        assert_eq!(q["gpu_id"].as_u64().unwrap() as u32, holder.gpu_id);
        assert_eq!(q["type_name"], "compute");
        assert_eq!(q["ring_size"], 65536);
    }
    let (ok, table, _) = kfdq(emu.root(), &["ps"]);
    assert!(ok);
    assert!(
        table.contains("kfdq-test-hold") && table.contains("65536"),
        "{table}"
    );
    // Its PRIO and STATE are `?` (no shim): a footnote says why, and --json the same.
    assert!(
        table.contains(&format!("?: pid {}: no shim", holder.pid)),
        "{table}"
    );
    assert!(
        p["unknown"]
            .as_str()
            .is_some_and(|w| w.starts_with("no shim")),
        "{p}"
    );
    let pid = holder.pid;
    assert!(holder.finish().success());
    // Its KFD state goes away with it.
    wait_for("process dir removal", || {
        let (_, out, _) = kfdq(emu.root(), &["ps", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_array().unwrap().iter().all(|p| p["pid"] != pid)
    });
}

#[test]
fn missing_root_gives_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["topology", "ps"] {
        let (ok, _, err) = kfdq(dir.path(), &[cmd]);
        assert!(!ok, "{cmd} succeeded without amdkfd");
        assert!(err.contains("kfd-emu --mount"), "{cmd}: {err}");
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn run_puts_a_program_under_the_shim_and_ps_shows_its_streams() {
    let emu = mount_preset(Preset::Mi308x);
    let dir = tempfile::tempdir().unwrap();
    let workload = dir.path().join("workload");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shim/examples/workload.c");
    fakehip::compile_program(&src, &workload, &[]).unwrap();
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(emu.root())
        .args(["run", "--class", "latency", "--shim"])
        .arg(test_support::bins::shim_path())
        .arg("--")
        .arg(&workload)
        .arg("2")
        .env("KFDQ_STATE_DIR", &state)
        .env_remove("KFDQ_SOCKET")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut seen = serde_json::Value::Null;
    wait_for("three streams mapped in kfdq ps", || {
        let out = Command::new(env!("CARGO_BIN_EXE_kfdq"))
            .arg("--root")
            .arg(emu.root())
            .args(["ps", "--json", "--agent"])
            .arg(dir.path().join("no-agent.sock"))
            .env("KFDQ_STATE_DIR", &state)
            .env_remove("KFDQ_SOCKET")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let Some(p) = v.as_array().unwrap().iter().find(|p| p["pid"] == pid) else {
            return false;
        };
        let mapped = p["queues"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| !q["streams"].as_array().unwrap().is_empty())
            .count();
        seen = p.clone();
        mapped == 3
    });
    assert_eq!(seen["shim"], true);
    assert_eq!(seen["class"], "latency");
    let stats = emu.stats();
    let mut by_stream = std::collections::BTreeMap::new();
    for q in seen["queues"].as_array().unwrap() {
        let s = &q["streams"][0];
        let label = match s["kind"].as_str().unwrap() {
            "null" => "null".to_string(),
            _ => format!("hip {}", s["hip_priority"]),
        };
        let effective = q["managed"]["effective_priority"].as_u64().unwrap() as u32;
        // The emulator (the "kernel") holds the same priority the shim reports.
        let qid = q["queue_id"].as_u64().unwrap() as u32;
        let kernel = stats
            .queues
            .iter()
            .find(|k| k.pid == pid && k.queue_id == qid)
            .unwrap()
            .priority;
        assert_eq!(kernel, effective, "queue {qid}");
        by_stream.insert(label, effective);
    }
    // Class latency is the KFD band 11..=15: HIP greatest (-1) -> 15, default -> 13, least (1) -> 11.
    let want: std::collections::BTreeMap<String, u32> = [
        ("hip -1".to_string(), 15),
        ("null".to_string(), 13),
        ("hip 1".to_string(), 11),
    ]
    .into();
    assert_eq!(by_stream, want);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("launches per stream"));
}

#[test]
fn run_refuses_bad_class_and_priority() {
    for (args, want) in [
        (
            vec!["run", "--class", "realtime", "--", "true"],
            "without one only the built-in classes work: latency, normal, batch",
        ),
        (
            vec!["run", "--priority", "16", "--", "true"],
            "queue priority 16 is out of range 0..=15",
        ),
        (
            vec![
                "run",
                "--shim",
                "/nonexistent/libkfdq_shim.so",
                "--",
                "true",
            ],
            "libkfdq_shim.so not found",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kfdq"))
            .args(&args)
            .env_remove("KFDQ_SOCKET")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// `kfdq demo` run from a directory without the built-in workloads (a bare `cargo build
/// --release`) says how to get them, naming --workloads, and changes nothing.
#[test]
fn demo_without_its_workloads_names_the_option_that_gives_them() {
    let dir = tempfile::tempdir().unwrap();
    let kfdq = dir.path().join("kfdq");
    test_support::bins::copy_program(std::path::Path::new(env!("CARGO_BIN_EXE_kfdq")), &kfdq);
    let out = Command::new(&kfdq)
        .args(["demo", "--emulator"])
        .env("PATH", dir.path().join("nothing-here"))
        .env_remove("KFDQ_SOCKET")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("kfdq-latency not found"), "{err}");
    assert!(
        err.contains("--workloads DIR")
            && err.contains("scripts/run.sh")
            && err.contains("target/debug"),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "only the copied kfdq: {left:?}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn selftest_deactivates_one_queue_and_drains_it_after_reactivation() {
    let emu = mount_preset(Preset::Mi308x);
    let out = Command::new(env!("CARGO_BIN_EXE_kfdq-selftest"))
        .arg("--root")
        .arg(emu.root())
        .arg("queues")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "priority  0 (CS_LOW)",
        "priority 15 (CS_HIGH)",
        "0/20 packets done  (inactive: no progress)",
        "drained: 20/20 packets done",
        "destroyed all queues",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    // The emulator ran the packets, and the queues went with the process.
    let stats = emu.stats();
    assert!(stats.queues.is_empty(), "{:?}", stats.queues);
    assert!(
        stats
            .partitions
            .iter()
            .any(|p| p.workgroup_events > 0 && p.runlist_updates > 0),
        "{:?}",
        stats.partitions
    );
}

/// `kfdq --json status` beside an agent that preempted nothing prints rates of 0.0, never
/// -0.0 (a float sum of nothing is -0.0).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn status_json_prints_no_negative_zero() {
    let emu = mount_preset(Preset::Mi308x);
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kfdq.sock");
    let conf = dir.path().join("kfdq.toml");
    std::fs::write(&conf, format!("[agent]\nsocket = \"{}\"\n", sock.display())).unwrap();
    let log = dir.path().join("kfdqd.log");
    let mut agent = start_kfdqd(emu.root(), &conf, &sock, &log);
    let o = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(emu.root())
        .arg("--agent")
        .arg(&sock)
        .args(["--json", "status"])
        .output()
        .unwrap();
    signal(&agent, nix::sys::signal::Signal::SIGTERM);
    let _ = agent.wait();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let rate = v["counters"]["preempts_per_s"].as_f64().unwrap();
    assert!(rate == 0.0 && rate.is_sign_positive(), "{out}");
    assert!(!out.contains("-0.0"), "{out}");
}

/// `kfdq demo` on GPUs it did not mount (here a kfd-emu mount given as --root: the same
/// preflight as a node's /dev/kfd) with its own workloads, whose stderr is returned; `env` is
/// added to its environment, `exe` replaces this build's kfdq.
fn demo_on(
    root: &std::path::Path,
    phases: &str,
    exe: Option<&std::path::Path>,
    env: &[(&str, &std::ffi::OsStr)],
) -> (bool, String) {
    let out = Command::new(exe.unwrap_or(std::path::Path::new(env!("CARGO_BIN_EXE_kfdq"))))
        .arg("--root")
        .arg(root)
        .args(["demo", "--phases", phases, "--requests", "2"])
        .args(["--hp-command", "sleep 60", "--lp-command", "sleep 60"])
        .env_remove("KFDQ_SOCKET")
        .env_remove("KFDQ_SHIM")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Refused up front: the reason and the fix, and no phase started (no `[1/N]` line, no
/// process on the emulator).
fn refused_up_front(emu: &Emu, ok: bool, err: &str, what: &str, fix: &str) {
    assert!(!ok, "{err}");
    assert!(
        err.contains("demo refuses to start") && err.contains(what),
        "{err}"
    );
    assert!(err.contains(&format!("fix: {fix}")), "{err}");
    assert!(!err.contains("[1/"), "a phase started: {err}");
    let procs = std::fs::read_dir(emu.root().join("sys/class/kfd/kfd/proc"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(procs, 0, "no process opened the emulator's /dev/kfd");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn demo_refuses_a_partition_another_kfdqd_serves_up_front() {
    let emu = mount_preset(Preset::Mi308x);
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kfdq.sock");
    let conf = dir.path().join("kfdq.toml");
    std::fs::write(&conf, format!("[agent]\nsocket = \"{}\"\n", sock.display())).unwrap();
    let mut agent = start_kfdqd(emu.root(), &conf, &sock, &dir.path().join("kfdqd.log"));
    let (ok, err) = demo_on(emu.root(), "priority", None, &[]);
    signal(&agent, nix::sys::signal::Signal::SIGTERM);
    let _ = agent.wait();
    assert!(
        err.contains(&format!("another kfdqd (pid {})", agent.id()))
            && err.contains(&sock.display().to_string()),
        "{err}"
    );
    refused_up_front(&emu, ok, &err, "a partition in use", "stop it");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn demo_on_a_node_without_its_shim_says_where_it_looked_and_how_to_give_it() {
    let emu = mount_preset(Preset::Mi308x);
    let dir = tempfile::tempdir().unwrap();
    let kfdq = dir.path().join("kfdq");
    test_support::bins::copy_program(std::path::Path::new(env!("CARGO_BIN_EXE_kfdq")), &kfdq);
    let (ok, err) = demo_on(emu.root(), "priority", Some(&kfdq), &[]);
    assert!(err.contains(&dir.path().display().to_string()), "{err}");
    refused_up_front(&emu, ok, &err, "no shim path", "install kfdq's package");
    assert!(err.contains("KFDQ_SHIM="), "{err}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn demo_without_a_writable_socket_directory_names_tmpdir() {
    let emu = mount_preset(Preset::Mi308x);
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir");
    let (ok, err) = demo_on(
        emu.root(),
        "priority",
        None,
        &[("TMPDIR", missing.as_os_str())],
    );
    refused_up_front(&emu, ok, &err, "no agent rights", "set TMPDIR");
}

/// A KFD without the debugger API: the level-3 phases are refused with the doctor's reason,
/// and the fix names the phases that can run.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn demo_refuses_level_3_where_the_node_has_no_debugger_api() {
    let emu = mount(EmuConfig {
        kfd_minor: 11,
        ..EmuConfig::default()
    });
    let (ok, err) = demo_on(emu.root(), "alone,level2,level3,level3-direct", None, &[]);
    assert!(err.contains("no debugger API"), "{err}");
    refused_up_front(
        &emu,
        ok,
        &err,
        "level3 (gpu",
        "fix the node as `kfdq doctor` says, or leave them out: --phases alone,level2",
    );
    assert!(err.contains("level3-direct (gpu"), "{err}");
}

/// The processes `pid` started, and theirs (`/proc/PID/task/*/children`).
fn descendants_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
    for t in tasks.into_iter().flatten() {
        let p = t.unwrap().path().join("children");
        let text = std::fs::read_to_string(p).unwrap_or_default();
        for c in text
            .split_whitespace()
            .filter_map(|c| c.parse::<u32>().ok())
        {
            out.push(c);
            out.extend(descendants_of(c));
        }
    }
    out
}

/// SIGINT to kfdq alone (`kill -INT`, not the terminal's whole group) in the middle of a
/// controlled phase: it says so, and the kfdqd and the batch job it started — a shell and the
/// process it started, as a launcher's — are stopped before it exits: nothing of the demo stays
/// on the GPU, so nothing stays preempted. Without the handler kfdq died at once and left them
/// all running; without the process group, the shell's child stayed.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_interrupted_demo_stops_every_process_it_started() {
    let emu = mount_preset(Preset::Mi308x);
    let logs = tempfile::tempdir().unwrap();
    let mut demo = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(emu.root())
        .args(["demo", "--phases", "priority", "--requests", "2"])
        .args(["--hp-command", "sh -c 'echo ready; exec sleep 600'"])
        .args(["--lp-command", "sh -c 'sleep 601 & echo ready; wait'"])
        .arg("--log-dir")
        .arg(logs.path())
        .env_remove("KFDQ_SOCKET")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // kfdqd and the batch job, a shell with its own child (it never connects: the demo waits
    // for it).
    let kids = test_support::wait::wait_value("kfdqd and the batch job", WAIT_LIMIT, || {
        let k = descendants_of(demo.id());
        (k.len() == 3).then_some(k)
    });
    signal(&demo, nix::sys::signal::Signal::SIGINT);
    let exited =
        test_support::wait::wait_until(WAIT_LIMIT, || matches!(demo.try_wait(), Ok(Some(_))));
    if !exited {
        let _ = demo.kill();
    }
    let out = demo.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Stopped: gone, or dead and not yet reaped by init (a zombie runs nothing).
    let running = |p: &u32| {
        std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|st| {
            st.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("Z")
        })
    };
    test_support::wait::wait_until(WAIT_LIMIT, || !kids.iter().any(running));
    let alive: Vec<u32> = kids.into_iter().filter(running).collect();
    for p in &alive {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(*p as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert!(alive.is_empty(), "left running: {alive:?}; {err}");
    assert!(exited, "kfdq did not exit after SIGINT: {err}");
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("interrupted (SIGINT)"), "{err}");
}
