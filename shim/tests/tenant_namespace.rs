//! Tenants who do not cooperate, at the pid namespace (issue 50 item 10; docs/agent.md "The
//! pid namespace"): KFD names processes by their pids in the initial pid namespace, so a
//! kfdqd in another one (a container without `hostPID: true`) would classify, read and trace
//! whatever process has the number there. It refuses to start, and `kfdqd --check` says why;
//! a real kfdqd in a real new pid namespace (`unshare --pid --fork`).

mod common;

use std::process::{Command, Output, Stdio};

use common::kfdqd::{text, two_classes};
use common::*;

/// kfdqd with `args`, in a new pid namespace (with its own /proc when `own_proc`, else the
/// host's), as a container without `hostPID: true` runs it; `Err` with what it said when it
/// started serving `sock` instead of exiting (it is killed then).
fn in_new_pid_namespace(
    args: &[&std::ffi::OsStr],
    own_proc: bool,
    sock: &std::path::Path,
) -> Result<Output, String> {
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--kill-child"]);
    if own_proc {
        cmd.arg("--mount-proc");
    }
    let mut child = cmd
        .arg(workspace_bin("kfdqd"))
        .args(args)
        .env_remove("KFDQ_SOCKET")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run unshare(1)");
    // Until it exits or serves; one still running at the limit counts as started.
    let deadline = std::time::Instant::now() + WAIT_LIMIT;
    let started = loop {
        if child.try_wait().unwrap().is_some() {
            break false;
        }
        if sock.exists() || std::time::Instant::now() > deadline {
            break true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    if started {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    if started {
        return Err(text(&out));
    }
    Ok(out)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_kfdqd_in_another_pid_namespace_refuses_to_start() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kfdq.sock");
    let cfg = dir.path().join("kfdq.toml");
    std::fs::write(
        &cfg,
        two_classes("suspend").replacen(
            "[agent]\n",
            &format!("[agent]\nsocket = \"{}\"\n", sock.display()),
            1,
        ),
    )
    .unwrap();
    let args = |check: bool| {
        let mut a: Vec<&std::ffi::OsStr> = vec![
            "--config".as_ref(),
            cfg.as_os_str(),
            "--root".as_ref(),
            emu.root().as_os_str(),
        ];
        if check {
            a.push("--check".as_ref());
        }
        a
    };
    // The same configuration is accepted in the initial namespace.
    let ok = Command::new(workspace_bin("kfdqd"))
        .args(args(true))
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", text(&ok));
    for own_proc in [true, false] {
        let run = in_new_pid_namespace(&args(false), own_proc, &sock)
            .unwrap_or_else(|t| panic!("it started in another pid namespace: {t}"));
        let t = text(&run);
        assert!(!run.status.success(), "it started: {t}");
        assert!(
            t.contains("not the host's") && t.contains("hostPID: true"),
            "own /proc {own_proc}: {t}"
        );
        assert!(!sock.exists(), "a refused start left its socket");
        let check = in_new_pid_namespace(&args(true), own_proc, &sock).unwrap();
        let t = text(&check);
        assert_eq!(check.status.code(), Some(2), "{t}");
        assert!(
            t.contains("startup would refuse") && t.contains("hostPID: true"),
            "own /proc {own_proc}: {t}"
        );
    }
}
