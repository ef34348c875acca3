//! What a new operator hits (issue 32), the agent's and the CLI's side, each through the real
//! binaries: one socket option; two agents never run on one node; `kfdqd --check` checks what
//! startup checks; configuration errors name the rule; scripts get quiet pipes and one JSON
//! shape; `kfdq watch` waits for a restarted agent and fits 80 columns; a killed process's
//! registry file goes. Classes and priorities are in `operator.rs`.

mod common;

use std::process::{Command, Stdio};

use common::kfdqd::{Agent, text};
use common::operator::{CUSTOM, kfdq, ok, worker};
use common::*;
use nix::sys::signal::Signal;

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
