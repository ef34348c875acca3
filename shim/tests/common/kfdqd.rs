//! A real `kfdqd` for tests: started on a kfd-emu mount with a configuration text, asked over
//! its socket, signalled, killed; and the real `kfdq` CLI run against it.
#![allow(dead_code)]

use std::io::{BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use kfdq::Pid;
use kfdq::proto::control::{NodeStatus, ProcessStatus};
use kfdq::proto::{LineReader, Reply, Request, encode};

use super::{App, Emu, Launch, WAIT_LIMIT, programs, workspace_bin};

/// `batch` (rank 0, level 3) takes processes without the shim through the tracer; `latency`
/// (rank 2) does not. Scans every 100 ms.
pub const TRACER_CONFIG: &str = "[agent]\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\n\n[tracer]\nscan_ms = 100\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"suspend\"\ncontrol = \"tracer\"\nmatch = { env = true }\n";

/// Two classes: `latency` (rank 2, never preempted) above `batch` (rank 0) preempted at
/// `level`; both selectable with KFDQ_CLASS; 20 ms hysteresis.
pub fn two_classes(level: &str) -> String {
    two_classes_with_hysteresis(level, 20)
}

/// [`two_classes`] with direct edges off: the batch job is preempted by the agent's commands
/// alone (the path of a class at level 1, and of `[agent] direct_edges = false`).
pub fn agents_path(level: &str) -> String {
    two_classes(level).replacen("[agent]\n", "[agent]\ndirect_edges = false\n", 1)
}

/// [`two_classes`] with a hysteresis of `ms` (how long the latency class must stay idle before
/// the batch class is released).
pub fn two_classes_with_hysteresis(level: &str, ms: u32) -> String {
    classes(level, ms, None)
}

/// [`two_classes`] with the batch class's in-flight `window` (`None`: unbounded).
pub fn two_classes_with_window(level: &str, window: Option<u32>) -> String {
    classes(level, 20, window)
}

fn classes(level: &str, hysteresis_ms: u32, window: Option<u32>) -> String {
    let w = window.map_or(String::new(), |w| format!("window = {w}\n"));
    format!(
        "[agent]\nhysteresis_ms = {hysteresis_ms}\nmin_preempt_interval_ms = 1\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = {{ env = true }}\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"{level}\"\n{w}match = {{ env = true }}\n"
    )
}

/// The batch job of the window test and bench, shaped like a PyTorch training loop that runs far
/// ahead of the GPU: 64 dispatches in flight of 640 work-groups x 8 ms (one round of the
/// partition: 8 ms each, about a request's length, as the field's 1.7 ms GEMMs were next to its
/// 2.65 ms requests), in class `batch`, connected to `agent` if given; returned once flooding.
pub fn batch_far_ahead(emu: &Emu, agent: Option<&Agent>) -> App {
    let mut l = Launch::new(programs().get("flood"))
        .args(["8000", "640", "64"])
        .env("KFDQ_CLASS", "batch");
    if let Some(a) = agent {
        l = l.env("KFDQ_SOCKET", a.sock.display().to_string());
    }
    let mut app = l.start(emu);
    app.wait_line("flooding");
    app
}

/// A batch flood (one stream of 2560 work-groups x 20 ms, two in flight) in `class`, connected
/// to `agent`; returned once the agent has it, with its queue id.
pub fn batch_flood(emu: &Emu, agent: &Agent, class: &str) -> (App, u32) {
    let mut app = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2", "1"])
        .env("KFDQ_CLASS", class)
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(emu);
    app.wait_line("flooding");
    agent.wait_connected(app.pid, 1);
    let q = app.queues().values().next().unwrap().queue_id;
    (app, q)
}

/// A running kfdqd.
pub struct Agent {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub sock: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
    root: PathBuf,
    env: Vec<(String, String)>,
}

impl Agent {
    /// Starts kfdqd on `emu` with `config` (its `[agent] socket` is set to a directory of
    /// its own, mode 0755, so other users can reach it) and waits until it answers.
    pub fn start(emu: &Emu, config: &str) -> Agent {
        Agent::start_with_env(emu, config, &[])
    }

    /// [`Agent::start`] with extra environment variables for kfdqd.
    pub fn start_with_env(emu: &Emu, config: &str, env: &[(&str, String)]) -> Agent {
        let dir = tempfile::Builder::new()
            .prefix("kfdqd-test-")
            .tempdir()
            .expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let sock = dir.path().join("kfdq.sock");
        let cfg = dir.path().join("kfdq.toml");
        let text = config.replacen(
            "[agent]\n",
            &format!("[agent]\nsocket = \"{}\"\n", sock.display()),
            1,
        );
        assert!(
            text.contains("socket ="),
            "the config needs an [agent] table"
        );
        std::fs::write(&cfg, text).unwrap();
        let log = dir.path().join("kfdqd.log");
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect();
        let mut a = Agent {
            child: spawn(&cfg, emu.root(), &log, &env),
            env,
            dir,
            sock,
            config: cfg,
            log,
            root: emu.root().to_owned(),
        };
        a.wait_ready();
        a
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + WAIT_LIMIT;
        while self.try_request(&Request::Status).is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("kfdqd exited ({st}): {}", self.log_text());
            }
            assert!(
                Instant::now() < deadline,
                "kfdqd did not answer: {}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts it again on the same socket and configuration (after a kill).
    pub fn restart(&mut self) {
        let _ = self.child.wait();
        self.child = spawn(&self.config, &self.root, &self.log, &self.env);
        self.wait_ready();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn try_request(&self, req: &Request) -> Option<Reply> {
        let mut s = UnixStream::connect(&self.sock).ok()?;
        s.set_read_timeout(Some(WAIT_LIMIT)).ok()?;
        s.write_all(&encode(req)).ok()?;
        LineReader::new(BufReader::new(s)).next::<Reply>().ok()
    }

    pub fn request(&self, req: &Request) -> Reply {
        self.try_request(req)
            .unwrap_or_else(|| panic!("no reply to {req:?}: {}", self.log_text()))
    }

    pub fn status(&self) -> NodeStatus {
        match self.request(&Request::Status) {
            Reply::Status(s) => *s,
            other => panic!("status: {other:?}"),
        }
    }

    pub fn process(&self, pid: u32) -> Option<ProcessStatus> {
        self.status()
            .processes
            .into_iter()
            .find(|p| p.pid == Pid(pid))
    }

    /// Waits (up to [`WAIT_LIMIT`]) until the status satisfies `cond`.
    pub fn wait(&self, what: &str, cond: impl Fn(&NodeStatus) -> bool) -> NodeStatus {
        test_support::wait::wait_state(what, WAIT_LIMIT, || self.status(), cond)
    }

    /// Waits until `pid` is connected with `queues` queues.
    pub fn wait_connected(&self, pid: u32, queues: usize) -> ProcessStatus {
        let s = self.wait(
            &format!("pid {pid} connected with {queues} queue(s)"),
            |s| {
                s.processes
                    .iter()
                    .any(|p| p.pid == Pid(pid) && p.queues.len() >= queues)
            },
        );
        s.processes.into_iter().find(|p| p.pid == Pid(pid)).unwrap()
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig)
            .expect("signal kfdqd");
    }

    /// Runs the `kfdq` CLI against this agent, as `uid` if given.
    pub fn kfdq(&self, args: &[&str], uid: Option<u32>) -> Output {
        let mut cmd = Command::new(workspace_bin("kfdq"));
        cmd.arg("--agent").arg(&self.sock).args(args);
        cmd.env("KFDQ_ROOT", &self.root).env_remove("KFDQ_SOCKET");
        if let Some(u) = uid {
            cmd.uid(u).gid(u);
        }
        cmd.output().expect("run kfdq")
    }
}

fn spawn(cfg: &Path, root: &Path, log: &Path, env: &[(String, String)]) -> Child {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(workspace_bin("kfdqd"))
        .arg("--config")
        .arg(cfg)
        .arg("--root")
        .arg(root)
        .env("KFDQ_LOG", "kfdq=debug")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err))
        .spawn()
        .expect("spawn kfdqd")
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The output's stdout and stderr as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
