//! The shim obeys only the real agent: an impostor listening on the shim's socket as another
//! uid is refused before a byte is exchanged and commands nothing; root's agent and an agent
//! the process chose to trust (`KFDQ_AGENT_UID`) are accepted; kfdqd refuses socket
//! directories that others can write. Real processes, real sockets, kfd-emu's queue states.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use common::kfdqd::{Agent, two_classes};
use common::*;
use kfdq::proto::{AgentMsg, Level, Target, encode};

/// The uid impostors and foreign jobs run as.
const NOBODY: u32 = 65534;

/// A server listening on `sock` as `uid`: on each connection it sends a welcome and, at once,
/// commands that would preempt and re-prioritise every queue, then reports how many bytes the
/// client sent before closing (`closed <n>`) and, if the client said hello, `hello`.
struct Impostor {
    child: Child,
    lines: Receiver<String>,
}

impl Impostor {
    fn start(sock: &Path, uid: u32) -> Impostor {
        let commands: Vec<u8> = [
            AgentMsg::Welcome {
                version: kfdq::proto::VERSION,
                lease_ms: None,
            },
            AgentMsg::Preempt {
                seq: 1,
                level: Level::Deactivate,
                target: Target::All,
                grace_period: 0,
            },
            AgentMsg::SetPriority {
                seq: 2,
                target: Target::All,
                priority: 15,
            },
            AgentMsg::Preempt {
                seq: 3,
                level: Level::Suspend,
                target: Target::All,
                grace_period: 0,
            },
        ]
        .iter()
        .flat_map(encode)
        .collect();
        let script = format!(
            r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind({sock:?})
os.chmod({sock:?}, 0o666)
s.listen(8)
print("listening", os.getuid(), flush=True)
cmds = bytes.fromhex({hex:?})
while True:
    c, _ = s.accept()
    print("accepted", flush=True)
    try:
        c.sendall(cmds)
    except OSError:
        pass
    got = b""
    while True:
        try:
            b = c.recv(65536)
        except OSError:
            break
        if not b:
            break
        got += b
        if b'"hello"' in got and b"\n" in got:
            print("hello", flush=True)
            break
    print("closed", len(got), flush=True)
    c.close()
"#,
            sock = sock.display().to_string(),
            hex = commands
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
        );
        let mut cmd = Command::new("python3");
        cmd.arg("-c")
            .arg(script)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .uid(uid)
            .gid(uid);
        let mut child = cmd.spawn().expect("python3 (scripts/setup.sh installs it)");
        let out = child.stdout.take().expect("stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let mut imp = Impostor { child, lines: rx };
        let first = imp.next_line();
        assert_eq!(first, format!("listening {uid}"), "impostor did not start");
        imp
    }

    fn next_line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(20))
            .expect("a line from the impostor within 20 s")
    }

    /// Every line it printed (it is killed first; its stdout read to the end).
    fn rest(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        test_support::output::lines_until_eof(&self.lines, Duration::from_secs(20))
    }
}

impl Drop for Impostor {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory anyone can create sockets in, as a shared `/tmp` is.
fn shared_dir() -> tempfile::TempDir {
    let d = tempfile::Builder::new()
        .prefix("kfdq-shared-")
        .tempdir()
        .expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
    d
}

fn deps(emu: &Emu, socket: Option<&Path>) -> (Vec<String>, String) {
    let mut l = Launch::new(programs().get("deps"))
        .args(["100", "500"])
        .env("KFDQ_CLASS", "batch");
    if let Some(s) = socket {
        l = l.env("KFDQ_SOCKET", s.display().to_string());
    }
    let mut app = l.start(emu);
    app.wait_line("deps done");
    app.finish()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_impostor_as_another_uid_is_refused_and_commands_nothing() {
    let emu = mount();
    let dir = shared_dir();
    let sock = dir.path().join("kfdq.sock");
    let mut imp = Impostor::start(&sock, NOBODY);

    // A batch flood whose queues the impostor would deactivate, re-prioritise and suspend.
    let mut app = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2", "2"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", sock.display().to_string())
        .start(&emu);
    app.wait_line("flooding");
    assert_eq!(imp.next_line(), "accepted");
    assert_eq!(
        imp.next_line(),
        "closed 0",
        "the shim must hang up before sending anything (not even its hello and executable)"
    );
    let before = emu.queues_of(app.pid);
    assert_eq!(before.len(), 2, "{before:?}");
    // Had the commands been executed, the queues would stop or change priority; instead every
    // queue keeps completing work at its own priority.
    for q in &before {
        wait_for("the queue completing more work", || {
            emu.queue(app.pid, q.queue_id).packets_done > q.packets_done + 4
        });
        let now = emu.queue(app.pid, q.queue_id);
        assert!(now.active && !now.suspended, "{now:?}");
        assert_eq!(now.priority, q.priority, "priority untouched");
        assert_ne!(now.priority, 15, "the impostor's priority was not applied");
    }
    app.stop();
    let (_, stderr) = app.finish();
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("refusing the agent at"))
        .collect();
    assert_eq!(warnings.len(), 1, "one clear warning: {stderr}");
    let w = warnings[0];
    assert!(
        w.contains(&format!("uid {NOBODY}")),
        "names who was found: {w}"
    );
    assert!(w.contains("expected uid 0"), "names who was expected: {w}");
    assert!(w.contains("KFDQ_AGENT_UID="), "names the fix: {w}");
    // It never came back to the impostor.
    let rest = imp.rest();
    assert!(
        !rest.iter().any(|l| l == "accepted"),
        "no reconnection: {rest:?}"
    );

    // And the program's results are those of a run without any agent.
    let alone = deps(&emu, None);
    let imp2 = Impostor::start(&dir.path().join("deps.sock"), NOBODY);
    let refused = deps(&emu, Some(&dir.path().join("deps.sock")));
    let done = |out: &(Vec<String>, String)| {
        out.0
            .iter()
            .filter(|l| l.starts_with("deps done"))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(done(&alone), vec!["deps done 100".to_string()]);
    assert_eq!(done(&refused), done(&alone));
    assert!(refused.1.contains("refusing the agent at"), "{}", refused.1);
    drop(imp2);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_agent_uid_the_process_chose_to_trust_is_accepted() {
    let emu = mount();
    let dir = shared_dir();
    let sock = dir.path().join("kfdq.sock");
    let mut imp = Impostor::start(&sock, NOBODY);
    let mut app = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2", "1"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", sock.display().to_string())
        .env("KFDQ_AGENT_UID", NOBODY.to_string())
        .start(&emu);
    app.wait_line("flooding");
    assert_eq!(imp.next_line(), "accepted");
    assert_eq!(imp.next_line(), "hello", "trusted: the shim says hello");
    app.stop();
    let (_, stderr) = app.finish();
    assert!(!stderr.contains("refusing the agent"), "{stderr}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn root_s_agent_is_accepted_by_another_user_s_process() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let mut app = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2", "1"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .uid(NOBODY)
        .start(&emu);
    app.wait_line("flooding");
    let p = agent.wait_connected(app.pid, 1);
    assert_eq!(p.uid, NOBODY);
    assert_eq!(p.class, "batch");
    // Accepted and obeyed: the agent's suspend deactivates its queue.
    let out = agent.kfdq(
        &["suspend", &app.pid.to_string(), "--level", "deactivate"],
        None,
    );
    assert!(out.status.success(), "{}", common::kfdqd::text(&out));
    let q = emu.queues_of(app.pid)[0].queue_id;
    wait_for("the queue deactivated by root's agent", || {
        !emu.queue(app.pid, q).active
    });
    let out = agent.kfdq(&["resume", &app.pid.to_string()], None);
    assert!(out.status.success(), "{}", common::kfdqd::text(&out));
    wait_for("the queue active again", || emu.queue(app.pid, q).active);
    app.stop();
    let (_, stderr) = app.finish();
    assert!(!stderr.contains("refusing the agent"), "{stderr}");
}

/// Starts kfdqd with its socket in `dir`; returns (exit success, stderr).
fn kfdqd_in(emu: &Emu, dir: &Path) -> (bool, String) {
    let out = Command::new(workspace_bin("kfdqd"))
        .arg("--socket")
        .arg(dir.join("kfdq.sock"))
        .arg("--root")
        .arg(emu.root())
        .stdin(Stdio::null())
        .output()
        .expect("spawn kfdqd");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn kfdqd_refuses_socket_directories_others_can_write() {
    let emu = mount();
    let base = tempfile::tempdir().expect("tempdir");
    for (name, mode, uid, gid, why) in [
        ("world", 0o777, 0, 0, "world-writable"),
        ("sticky", 0o1777, 0, 0, "world-writable"),
        ("group", 0o775, 0, NOBODY, "writable by group"),
        ("owned", 0o755, NOBODY, 0, "belongs to uid"),
    ] {
        let d = base.path().join(name);
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(mode)).unwrap();
        std::os::unix::fs::chown(&d, Some(uid), Some(gid)).unwrap();
        let (ok, stderr) = kfdqd_in(&emu, &d);
        assert!(!ok, "{name}: kfdqd must refuse to start");
        assert!(stderr.contains(why), "{name}: {stderr}");
        assert!(stderr.contains("replace the agent's socket"), "{stderr}");
        assert!(!d.join("kfdq.sock").exists(), "{name}: nothing bound");
    }
    // A directory it creates itself is fine, and is made 0755.
    let fresh = base.path().join("fresh");
    let mut child = Command::new(workspace_bin("kfdqd"))
        .arg("--socket")
        .arg(fresh.join("kfdq.sock"))
        .arg("--root")
        .arg(emu.root())
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn kfdqd");
    wait_for("kfdqd's socket", || fresh.join("kfdq.sock").exists());
    let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
}
