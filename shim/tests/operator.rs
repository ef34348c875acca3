//! What a new operator hits (issue 32), each through the real binaries: kfdqd on kfd-emu, the
//! `kfdq` CLI as a process, programs under the shim. Classes the configuration defines work
//! through `kfdq run --class`, `KFDQ_CLASS` and `kfdq class`; the configured priority is what
//! the queues get, also after a move and back; `kfdq run` says which class a command gets or
//! why not before it runs it; a reload that moves a process says so; one socket option; two
//! agents never run on one node; `kfdqd --check` checks what startup checks; configuration
//! errors name the rule; scripts get quiet pipes and one JSON shape.

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::kfdqd::{Agent, text};
use common::*;
use nix::sys::signal::Signal;

/// Two classes only the configuration knows, both selectable with KFDQ_CLASS.
const CUSTOM: &str = "[agent]\nhysteresis_ms = 20\n\n[[class]]\nname = \"inference\"\nrank = 2\npriority = 12\nmatch = { env = true }\n\n[[class]]\nname = \"train\"\nrank = 0\npriority = 2\nlevel = \"deactivate\"\nmatch = { env = true }\n";

/// The built-in names with a configured priority that is not the shim's band middle
/// (latency 15, not 13), and two that are (normal 8, batch 3).
const BUILTIN_NAMES: &str = "[agent]\nhysteresis_ms = 20\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 15\nmatch = { env = true }\n\n[[class]]\nname = \"normal\"\nrank = 1\npriority = 8\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nmatch = { env = true }\n";

/// The KFD priorities of `pid`'s compute queues in the emulator (the kernel's view), sorted.
fn priorities(emu: &Emu, pid: u32) -> Vec<u32> {
    let mut v: Vec<u32> = emu
        .stats()
        .queues
        .into_iter()
        .filter(|q| q.pid == pid && q.queue_type.starts_with("compute"))
        .map(|q| q.priority)
        .collect();
    v.sort();
    v
}

fn wait_priorities(emu: &Emu, pid: u32, want: &[u32]) {
    test_support::wait::wait_state(
        &format!("pid {pid}'s queues at priorities {want:?}"),
        WAIT_LIMIT,
        || priorities(emu, pid),
        |p| p == want,
    );
}

/// The worker (three streams: hi, lo, null) under the shim, with `env`, connected to `agent`.
fn worker(emu: &Emu, agent: &Agent, env: &[(&'static str, &str)]) -> App {
    let mut l = Launch::new(programs().get("worker"))
        .arg("300")
        .env("KFDQ_SOCKET", agent.sock.display().to_string());
    for (k, v) in env {
        l = l.env(k, *v);
    }
    let mut app = l.start(emu);
    app.wait_line("READY");
    app
}

/// `kfdq ARGS` as a process, as `uid` if given, with no inherited socket.
fn kfdq(emu: &Emu, args: &[&str], uid: Option<u32>) -> Output {
    let mut cmd = Command::new(workspace_bin("kfdq"));
    cmd.args(args)
        .env("KFDQ_ROOT", emu.root())
        .env_remove("KFDQ_SOCKET")
        .stdin(Stdio::null());
    if let Some(u) = uid {
        cmd.uid(u).gid(u);
    }
    cmd.output().expect("run kfdq")
}

fn ok(o: &Output) -> bool {
    o.status.success()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn configured_classes_work_through_kfdq_run_the_environment_and_kfdq_class() {
    let emu = mount();
    let agent = Agent::start(&emu, CUSTOM);
    let sock = agent.sock.display().to_string();

    // KFDQ_CLASS with a name only the configuration has: the shim passes it on.
    let env = worker(&emu, &agent, &[("KFDQ_CLASS", "inference")]);
    let p = agent.wait_connected(env.pid, 3);
    assert_eq!(p.class, "inference", "{p:?}");
    wait_priorities(&emu, env.pid, &[12, 12, 12]);

    // kfdq run --class: asked first, printed, then run under the shim.
    let shim = shim_path().display().to_string();
    let w = programs().get("worker").display().to_string();
    let mut run = Launch::new(workspace_bin("kfdq")).args([
        "--agent",
        &sock,
        "run",
        "--class",
        "inference",
        "--shim",
        &shim,
        "--",
        &w,
        "300",
    ]);
    run.preload = false;
    let mut run = run.start(&emu);
    run.wait_line("READY");
    let p = agent.wait_connected(run.pid, 3);
    assert_eq!(p.class, "inference", "{p:?}");

    // kfdq class moves it into the other configured class and back; the kernel's queues
    // follow each time.
    let o = agent.kfdq(&["class", &run.pid.to_string(), "train"], None);
    assert!(ok(&o), "{}", text(&o));
    wait_priorities(&emu, run.pid, &[2, 2, 2]);
    let o = agent.kfdq(&["class", &run.pid.to_string(), "inference"], None);
    assert!(ok(&o), "{}", text(&o));
    wait_priorities(&emu, run.pid, &[12, 12, 12]);

    run.stop();
    let (_, stderr) = run.finish();
    assert!(
        stderr.contains("kfdq run: class inference (KFDQ_CLASS=inference): KFD priority 12"),
        "kfdq run says what the process gets: {stderr}"
    );
    env.stop();
    env.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn configured_priorities_hold_for_built_in_names_and_after_a_move_and_back() {
    let emu = mount();
    let mut agent = Agent::start(&emu, BUILTIN_NAMES);
    // latency is configured at 15: every queue gets 15, not the shim's band middle 13.
    let hp = worker(&emu, &agent, &[("KFDQ_CLASS", "latency")]);
    wait_priorities(&emu, hp.pid, &[15, 15, 15]);
    let ps = hp.kfdq_ps(&emu);
    assert!(
        !ps.contains(" 13 "),
        "kfdq ps shows the configured priority: {ps}"
    );

    // batch is configured at its band's middle: the shim's band stands (lo 0, null 3, hi 6).
    let lp = worker(&emu, &agent, &[("KFDQ_CLASS", "batch")]);
    agent.wait_connected(lp.pid, 3);
    wait_priorities(&emu, lp.pid, &[0, 3, 6]);
    let pid = lp.pid.to_string();
    let o = agent.kfdq(&["class", &pid, "normal"], None);
    assert!(ok(&o), "{}", text(&o));
    wait_priorities(&emu, lp.pid, &[8, 8, 8]);
    // Back in batch: compared with what the shim reports (8), not assumed (the band).
    let o = agent.kfdq(&["class", &pid, "batch"], None);
    assert!(ok(&o), "{}", text(&o));
    assert!(!text(&o).contains("nothing to send"), "{}", text(&o));
    wait_priorities(&emu, lp.pid, &[3, 3, 3]);

    // A restarted agent compares too: a queue left at another priority gets its class's.
    let o = agent.kfdq(&["set-priority", &pid, "9"], None);
    assert!(ok(&o), "{}", text(&o));
    wait_priorities(&emu, lp.pid, &[9, 9, 9]);
    agent.signal(Signal::SIGKILL);
    agent.restart();
    agent.wait_connected(lp.pid, 3);
    wait_priorities(&emu, lp.pid, &[3, 3, 3]);
    wait_priorities(&emu, hp.pid, &[15, 15, 15]);
    for app in [hp, lp] {
        app.stop();
        app.finish();
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn kfdq_run_says_the_class_or_why_not_before_it_runs_the_command() {
    let emu = mount();
    // latency only for uid 4242; batch for anyone; the default class is batch.
    let agent = Agent::start(
        &emu,
        "[agent]\nhysteresis_ms = 20\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { uids = [4242] }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"deactivate\"\nmatch = { env = true }\n",
    );
    let sock = agent.sock.display().to_string();
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        scratch.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let shim = shim_path().display().to_string();
    let run = |class: &str, socket: &str, marker: &Path, uid: Option<u32>| {
        let m = marker.display().to_string();
        kfdq(
            &emu,
            &[
                "--agent", socket, "run", "--class", class, "--shim", &shim, "--", "touch", &m,
            ],
            uid,
        )
    };

    let m = scratch.path().join("unknown");
    let o = run("gold", &sock, &m, None);
    assert!(
        !ok(&o) && !m.exists(),
        "an unknown class runs nothing: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("KFDQ_CLASS=gold is not a configured class (classes: latency, batch)"),
        "{}",
        text(&o)
    );

    let m = scratch.path().join("user");
    let o = run("latency", &sock, &m, Some(65534));
    assert!(
        !ok(&o) && !m.exists(),
        "a refused class runs nothing: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("above this process's class batch")
            && text(&o).contains("ask the node's admin"),
        "{}",
        text(&o)
    );
    let m = scratch.path().join("root");
    let o = run("latency", &sock, &m, None);
    assert!(!ok(&o) && !m.exists(), "{}", text(&o));
    assert!(
        !text(&o).contains("ask the node's admin") && text(&o).contains("kfdq class"),
        "root is told what root can do: {}",
        text(&o)
    );

    let m = scratch.path().join("granted");
    let o = run("batch", &sock, &m, None);
    assert!(ok(&o) && m.exists(), "{}", text(&o));
    assert!(
        text(&o).contains("class batch (KFDQ_CLASS=batch): KFD priority 3, deactivated (level 2)"),
        "{}",
        text(&o)
    );

    let m = scratch.path().join("no-agent");
    let missing = scratch.path().join("none.sock").display().to_string();
    let o = run("batch", &missing, &m, None);
    assert!(
        ok(&o) && m.exists(),
        "no agent: a warning, and the command runs: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("warning") && text(&o).contains("uncontrolled"),
        "{}",
        text(&o)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_process_moved_by_a_reload_says_so_in_kfdq_status() {
    let emu = mount();
    let first = BUILTIN_NAMES.replace("[agent]\n", "[agent]\ndefault_class = \"batch\"\n");
    let agent = Agent::start(&emu, &first);
    let app = worker(&emu, &agent, &[]);
    let p = agent.wait_connected(app.pid, 3);
    assert_eq!(p.class, "batch");
    let cfg = std::fs::read_to_string(&agent.config).unwrap();
    std::fs::write(
        &agent.config,
        cfg.replace("default_class = \"batch\"", "default_class = \"normal\""),
    )
    .unwrap();
    agent.signal(Signal::SIGHUP);
    let st = agent.wait("the process moved to normal", |s| {
        s.processes
            .iter()
            .any(|p| p.pid.0 == app.pid && p.class == "normal")
    });
    let p = st.processes.iter().find(|p| p.pid.0 == app.pid).unwrap();
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("class batch -> normal by the reloaded configuration")),
        "{p:?}"
    );
    let o = agent.kfdq(&["status"], None);
    assert!(
        text(&o).contains("by the reloaded configuration"),
        "{}",
        text(&o)
    );
    app.stop();
    app.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn one_socket_option_is_honoured_by_every_command() {
    let emu = mount();
    let agent = Agent::start(&emu, CUSTOM);
    let sock = agent.sock.display().to_string();
    // doctor checks the socket it is given, by either spelling or the environment.
    for args in [
        vec!["--agent", &sock, "doctor"],
        vec!["doctor", "--socket", &sock],
    ] {
        let o = kfdq(&emu, &args, None);
        assert!(
            text(&o).contains(&sock) && !text(&o).contains("/run/kfdq/kfdq.sock"),
            "{args:?}: {}",
            text(&o)
        );
    }
    let o = Command::new(workspace_bin("kfdq"))
        .arg("doctor")
        .env("KFDQ_ROOT", emu.root())
        .env("KFDQ_SOCKET", &sock)
        .output()
        .unwrap();
    assert!(text(&o).contains(&sock), "{}", text(&o));
    // kfdq run connects its command with either spelling.
    let shim = shim_path().display().to_string();
    let w = programs().get("worker").display().to_string();
    for opt in ["--agent", "--socket"] {
        let mut l = Launch::new(workspace_bin("kfdq")).args([
            "run", opt, &sock, "--class", "train", "--shim", &shim, "--", &w, "300",
        ]);
        l.preload = false;
        let mut app = l.start(&emu);
        app.wait_line("READY");
        let p = agent.wait_connected(app.pid, 3);
        assert_eq!(p.class, "train", "{opt}");
        app.stop();
        app.finish();
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_second_agent_on_the_same_gpus_refuses_to_start_and_names_the_lock() {
    let emu = mount();
    let agent = Agent::start(&emu, CUSTOM);
    let app = worker(&emu, &agent, &[("KFDQ_CLASS", "train")]);
    agent.wait_connected(app.pid, 3);
    let dir = tempfile::tempdir().unwrap();
    let second = dir.path().join("second.sock");
    let mut child = Command::new(workspace_bin("kfdqd"))
        .args(["--config"])
        .arg(&agent.config)
        .arg("--socket")
        .arg(&second)
        .arg("--root")
        .arg(emu.root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let exited = test_support::wait_until(WAIT_LIMIT, || !matches!(child.try_wait(), Ok(None)));
    if !exited {
        let _ = child.kill();
    }
    let o = child.wait_with_output().unwrap();
    let t = text(&o);
    assert!(exited, "the second agent kept running: {t}");
    assert!(!ok(&o), "{t}");
    assert!(
        t.contains(&format!("another kfdqd (pid {})", agent.child.id()))
            && t.contains(".lock")
            && t.contains(&agent.sock.display().to_string()),
        "{t}"
    );
    assert!(!t.contains("kfdqd ready"), "{t}");
    assert!(!second.exists(), "no socket left behind");
    // The first agent still controls its process, alone.
    let p = agent.process(app.pid).expect("still connected");
    assert_eq!(p.class, "train");
    app.stop();
    app.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn check_checks_what_startup_checks_and_a_busy_metrics_port_leaves_nothing_behind() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    // A shared directory like /tmp: refused by --check as by startup, with no chmod advice.
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(
        &shared,
        std::os::unix::fs::PermissionsExt::from_mode(0o1777),
    )
    .unwrap();
    let cfg = dir.path().join("kfdq.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsocket = \"{}\"\n",
            shared.join("kfdq.sock").display()
        ),
    )
    .unwrap();
    let kfdqd = |args: &[&str]| {
        Command::new(workspace_bin("kfdqd"))
            .arg("--config")
            .arg(&cfg)
            .arg("--root")
            .arg(emu.root())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for args in [&["--check"][..], &[]] {
        let o = kfdqd(args);
        let t = text(&o);
        assert!(!ok(&o), "{args:?}: {t}");
        assert!(
            t.contains("world-writable") && t.contains("directory of its own"),
            "{args:?}: {t}"
        );
        assert!(!t.contains("chmod o-w"), "{args:?}: {t}");
        // The mode as chmod and ls write it (/tmp: 1777), not a bare "777".
        assert!(t.contains("(mode 1777"), "{args:?}: {t}");
    }
    // A busy metrics port: --check says so; startup fails before "ready" and leaves no socket.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap();
    let sock = dir.path().join("private").join("kfdq.sock");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsocket = \"{}\"\n\n[metrics]\nlisten = \"{addr}\"\n",
            sock.display()
        ),
    )
    .unwrap();
    let o = kfdqd(&["--check"]);
    assert!(
        !ok(&o) && text(&o).contains("[metrics] listen"),
        "{}",
        text(&o)
    );
    let o = kfdqd(&[]);
    let t = text(&o);
    assert!(!ok(&o) && t.contains("[metrics] listen"), "{t}");
    assert!(!t.contains("kfdqd ready"), "{t}");
    assert!(!sock.exists(), "no socket left behind: {t}");
}

#[test]
fn configuration_errors_name_the_rule_broken() {
    let dir = tempfile::tempdir().unwrap();
    for (body, want) in [
        (
            "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\n\n[class]\nname = \"b\"\nrank = 2\npriority = 4\n",
            ":6: [class]: each class is an array-of-tables entry, written [[class]]",
        ),
        (
            "[agent]\nsocket_mode = 0666\n",
            ":2: [agent] socket_mode: takes an octal mode in quotes, e.g. socket_mode = \"0660\"",
        ),
        (
            "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nmatch = { env = \"yes\" }\n",
            ":5: [[class]] env: takes true or false, without quotes",
        ),
        (
            "[[class]]\nname = \"a\"\nrank = 1\npriority = 16\n",
            "class \"a\": priority = 16 is out of range 0..=15",
        ),
    ] {
        let cfg = dir.path().join("kfdq.toml");
        std::fs::write(&cfg, body).unwrap();
        let o = Command::new(workspace_bin("kfdqd"))
            .arg("--check")
            .arg("--config")
            .arg(&cfg)
            .output()
            .unwrap();
        assert!(!ok(&o), "{body}");
        assert!(text(&o).contains(want), "{body}\n{}", text(&o));
    }
    // `level = 2` is level 2, as `kfdq suspend --level 2` takes it.
    let cfg = dir.path().join("kfdq.toml");
    std::fs::write(
        &cfg,
        "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nlevel = 2\n",
    )
    .unwrap();
    let o = Command::new(workspace_bin("kfdqd"))
        .arg("--check")
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(
        text(&o).contains("preempted at level 2 (deactivate)"),
        "{}",
        text(&o)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn scripts_get_a_quiet_closed_pipe_and_one_json_shape_without_an_agent() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("none.sock").display().to_string();
    // stdout closed before kfdq writes: no panic, a quiet exit.
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let o = Command::new(workspace_bin("kfdq"))
        .args(["--agent", &missing, "topology"])
        .env("KFDQ_ROOT", emu.root())
        .stdout(Stdio::from(write))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{:?}: {err}", o.status);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );

    // No agent: status fails, and --json prints one error object, not the ps array.
    let o = kfdq(&emu, &["--agent", &missing, "status"], None);
    assert!(!ok(&o), "{}", text(&o));
    let o = kfdq(&emu, &["--agent", &missing, "--json", "status"], None);
    assert!(!ok(&o), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    assert_eq!(v["type"], "error", "{v}");
    assert_eq!(v["socket"], missing.as_str(), "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("no kfdq agent"),
        "{v}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn kfdq_watch_waits_for_a_restarted_agent() {
    let emu = mount();
    let mut agent = Agent::start(&emu, CUSTOM);
    let sock = agent.sock.display().to_string();
    let mut l = Launch::new(workspace_bin("kfdq")).args([
        "--agent",
        &sock,
        "--json",
        "watch",
        "--interval",
        "0.05",
    ]);
    l.preload = false;
    let mut watch = l.start(&emu);
    watch.wait_line(&format!("{{\"agent_pid\":{}", agent.child.id()));
    agent.signal(Signal::SIGKILL);
    let gone = watch.wait_line("{\"type\":\"error\"");
    assert!(gone.contains(&sock), "{gone}");
    agent.restart();
    watch.wait_line(&format!("{{\"agent_pid\":{}", agent.child.id()));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_registry_file_of_a_killed_process_goes_at_the_next_process_s_first_publish() {
    let emu = mount();
    let shared = tempfile::tempdir().unwrap();
    let dir = shared.path().display().to_string();
    let start = || {
        let mut app = Launch::new(programs().get("worker"))
            .arg("300")
            .env("KFDQ_STATE_DIR", dir.clone())
            .start(&emu);
        app.wait_line("READY");
        let file = shared.path().join(format!("shim-{}.json", app.pid));
        wait_for("its registry file", || file.exists());
        (app, file)
    };
    let (mut killed, stale) = start();
    killed.child.kill().unwrap();
    killed.child.wait().unwrap();
    assert!(stale.exists(), "SIGKILL runs no exit handler");
    let (next, own) = start();
    wait_for("the killed process's registry file removed", || {
        !stale.exists()
    });
    assert!(own.exists());
    next.stop();
    next.finish();
}

/// `kfdq watch` redraws in place, so a frame line wider than the terminal would wrap and push
/// the frame down: every line fits the width (`$COLUMNS` when stdout is not a terminal).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn kfdq_watch_fits_an_80_column_terminal() {
    let emu = mount();
    let agent = Agent::start(&emu, CUSTOM);
    let _w = worker(&emu, &agent, &[("KFDQ_CLASS", "inference")]);
    agent.wait_connected(_w.pid, 1);
    let o = Command::new(workspace_bin("kfdq"))
        .args(["--agent", &agent.sock.display().to_string()])
        .args(["watch", "--count", "1"])
        .env("KFDQ_ROOT", emu.root())
        .env("COLUMNS", "80")
        .env_remove("KFDQ_SOCKET")
        .output()
        .unwrap();
    assert!(ok(&o), "{}", text(&o));
    let frame = String::from_utf8_lossy(&o.stdout);
    // Drop the terminal controls (ESC [ ... letter) to measure what is printed.
    let mut plain = String::new();
    let mut chars = frame.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    assert!(
        plain.contains("inference"),
        "the frame shows the process: {plain}"
    );
    for line in plain.lines() {
        assert!(
            line.chars().count() <= 80,
            "a line of {} columns: {line:?}\n{plain}",
            line.chars().count()
        );
    }
    // Without a width (a pipe, no $COLUMNS) status prints whole lines for scripts.
    let o = agent.kfdq(&["status"], None);
    assert!(
        text(&o).lines().any(|l| l.chars().count() > 80),
        "status is not cut: {}",
        text(&o)
    );
}
