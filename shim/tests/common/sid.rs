//! The Debian sid root with the real ROCm 6.4 user space (built by `scripts/sid-root.sh`), and
//! programs run inside it through `kfd-emu run`: a private mount namespace in which a test's
//! emulator sits at `/dev/kfd`, `/dev/dri`, `/sys/devices/virtual/kfd`, `/sys/class/kfd`.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::kfdqd::Agent;
use super::{Emu, workspace_bin};

/// Where `scripts/sid-root.sh` keeps the root (`$KFDQ_CACHE`, default `/var/cache/kfdq`).
pub fn cache_dir() -> PathBuf {
    PathBuf::from(std::env::var("KFDQ_CACHE").unwrap_or_else(|_| "/var/cache/kfdq".into()))
}

/// The sid root. Missing: the test fails and says how to build it (building needs root, like
/// every test that runs in it).
pub fn root() -> PathBuf {
    test_support::require_root();
    let root = cache_dir().join("sid-root");
    assert!(
        root.join("usr/bin/rocminfo").is_file(),
        "{}: the Debian sid root with the real ROCm user space is missing at {}: build it with \
         `scripts/sid-root.sh` as root (scripts/test.sh does), or set KFDQ_SKIP_PRIVILEGED=1 to skip",
        test_support::privileged::current_test(),
        root.display()
    );
    root
}

/// The package versions the root holds and what moved since the suite was checked
/// (`scripts/sid-root.sh --versions`): appended to failure messages so that a failure after a
/// sid upload names the package that changed.
pub fn packages() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| versions_text("sid root", &["--versions"]))
}

/// `scripts/sid-root.sh ARGS` (a `--versions` form) as text headed by `what`, for failure
/// messages.
pub fn versions_text(what: &str, args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/sid-root.sh");
    match Command::new("bash").arg(script).args(args).output() {
        Ok(o) => format!(
            "{what} packages:\n{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => format!("{what} packages: unknown ({e})"),
    }
}

/// `kfdq ps --json` on the host over `emu`, reading the registries in `state`: this process's
/// entry.
pub fn ps_entry(emu: &Emu, agent: &Agent, state: &Path, pid: u32) -> serde_json::Value {
    let out = Command::new(workspace_bin("kfdq"))
        .args(["ps", "--json", "--agent"])
        .arg(&agent.sock)
        .env("KFDQ_ROOT", emu.root())
        .env("KFDQ_STATE_DIR", state)
        .output()
        .expect("run kfdq ps");
    let text = super::kfdqd::text(&out);
    assert!(out.status.success(), "kfdq ps: {text}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("kfdq ps --json");
    doc.as_array()
        .and_then(|a| a.iter().find(|x| x["pid"] == pid))
        .cloned()
        .unwrap_or_else(|| panic!("pid {pid} not in kfdq ps: {text}"))
}

/// `kfd-emu run` for `argv` inside the sid root against `emu`, with `binds` (host path, path
/// inside), working directory `cwd` inside, and `HOME=/tmp` (the run's private tmpfs).
pub fn command(
    emu: &Emu,
    root: &Path,
    binds: &[(&Path, &Path)],
    cwd: &Path,
    argv: &[&str],
) -> Command {
    let mut cmd = Command::new(workspace_bin("kfd-emu"));
    cmd.arg("run")
        .arg("--emu")
        .arg(emu.root())
        .arg("--root")
        .arg(root);
    for (src, dst) in binds {
        cmd.arg("--bind")
            .arg(format!("{}:{}", src.display(), dst.display()));
    }
    cmd.arg("--cwd").arg(cwd).arg("--").args(argv);
    // The root is shared by every run (scripts/sid-root.sh's cache): caches that follow $HOME
    // (comgr's, python's, hipcc's) go to the run's private /tmp instead of the root's /root.
    cmd.env("HOME", "/tmp");
    for k in [
        "LD_PRELOAD",
        "KFDQ_CLASS",
        "KFDQ_PRIORITY",
        "KFDQ_SOCKET",
        "KFDQ_ROOT",
        "GPU_MAX_HW_QUEUES",
    ] {
        cmd.env_remove(k);
    }
    cmd
}

/// `argv` run in `root` with the built programs' directory as `/work`, the working directory.
pub fn in_work(emu: &Emu, root: &Path, built: &Built, argv: &[&str]) -> Command {
    let work = built.dir.path();
    command(
        emu,
        root,
        &[(work, Path::new("/work"))],
        Path::new("/work"),
        argv,
    )
}

/// Fails unless `hip_check` printed each of its steps (device, streams, copies, launches);
/// `packages` names the root's versions.
pub fn assert_hip_check_steps(seen: &[String], packages: &str) {
    for step in [
        "ok device",
        "ok streams",
        "ok memcpy null-stream 4096",
        "ok memcpy low-stream 67108864",
        "ok launches",
    ] {
        assert!(
            seen.iter().any(|l| l.starts_with(step)),
            "no {step:?}: {seen:?}\n{packages}"
        );
    }
}

/// After the latency job of a level test: `latency` finishes with `done`, the agent releases
/// `batch`, whose queues run again, and `batch` finishes with `done`; no agent command failed.
pub fn release_and_finish(emu: &Emu, agent: &Agent, latency: Running, batch: Running, done: &str) {
    let lines = latency.finish();
    assert_eq!(lines.last().map(String::as_str), Some(done));
    let pid = batch.pid;
    agent.wait("the batch job running again", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == kfdq::Pid(pid) && p.level.is_none())
    });
    super::wait_for("the batch queues active and not suspended", || {
        emu.queues_of(pid).iter().all(|q| q.active && !q.suspended)
    });
    let lines = batch.finish();
    assert_eq!(lines.last().map(String::as_str), Some(done), "{lines:?}");
    assert_eq!(agent.status().counters.command_failures, 0);
}

/// Test programs compiled in a root with its hipcc (once per test binary), in a directory bound
/// at `/work`: here `hip_check` and the Python extension `hipext`; the libraries' root's in
/// `sid_libs`.
pub struct Built {
    pub dir: tempfile::TempDir,
}

const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/sid");

/// Compiles the programs (needs an emulator: `kfd-emu run` sets up the root's mounts).
pub fn built(emu: &Emu, root: &Path) -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let script = "set -e; \
            hipcc --offload-arch=gfx942 -O2 -o hip_check hip_check.hip; \
            hipcc --offload-arch=gfx942 -O2 -shared -fPIC $(python3-config --includes) \
              -o hipext$(python3-config --extension-suffix) hipext.hip";
        Built {
            dir: compile_in_root(
                emu,
                root,
                &["hip_check.hip", "hipext.hip", "hipext_check.py"],
                script,
                packages(),
            ),
        }
    })
}

/// Copies `sources` (from tests/sid) into a new directory, runs `script` there inside `root`
/// (bound at `/work`) and returns the directory; a failing build fails the test with its output
/// and `packages` (the root's package versions).
pub fn compile_in_root(
    emu: &Emu,
    root: &Path,
    sources: &[&str],
    script: &str,
    packages: &str,
) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("kfdq-sid-")
        .tempdir()
        .expect("tempdir");
    for f in sources {
        std::fs::copy(Path::new(SOURCES).join(f), dir.path().join(f)).expect("copy a sid source");
    }
    let out = command(
        emu,
        root,
        &[(dir.path(), Path::new("/work"))],
        Path::new("/work"),
        &["sh", "-c", script],
    )
    .output()
    .expect("run hipcc in the root");
    assert!(
        out.status.success(),
        "hipcc in {} failed: {}\n{}\n{packages}",
        root.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    dir
}

/// A program started by `kfdq run` inside the root, and the directory its shim publishes its
/// registry in.
pub struct Shimmed {
    pub p: Running,
    pub state: tempfile::TempDir,
}

/// `kfdq run --class CLASS` of `argv` inside `root` with `env`, reaching `agent`: the work
/// directory `work` is bound at `/work` (the working directory); the agent's socket directory,
/// the binaries and the registry directory are visible at the same paths inside.
#[allow(clippy::too_many_arguments)]
pub fn under_kfdq(
    emu: &Emu,
    root: &Path,
    work: &Path,
    agent: &Agent,
    class: &str,
    env: &[(&str, &str)],
    argv: &[&str],
) -> Shimmed {
    let bin = workspace_bin("kfdq");
    let bindir = bin.parent().expect("target/<profile>");
    let shim = super::shim_path();
    let deps = shim.parent().expect("target/<profile>/deps");
    let sock = agent.sock.display().to_string();
    let (bin_s, shim_s) = (bin.display().to_string(), shim.display().to_string());
    let mut v = vec![
        bin_s.as_str(),
        "run",
        "--class",
        class,
        "--socket",
        &sock,
        "--shim",
        &shim_s,
        "--",
    ];
    v.extend_from_slice(argv);
    let agent_dir = agent.dir.path();
    let state = tempfile::Builder::new()
        .prefix("kfdq-sid-state-")
        .tempdir()
        .expect("tempdir");
    let s = state.path();
    let mut cmd = command(
        emu,
        root,
        &[
            (work, Path::new("/work")),
            (bindir, bindir),
            (deps, deps),
            (agent_dir, agent_dir),
            (s, s),
        ],
        Path::new("/work"),
        &v,
    );
    cmd.envs(env.iter().copied());
    cmd.env("KFDQ_STATE_DIR", s);
    Shimmed {
        p: Running::start(cmd),
        state,
    }
}

/// The outcome of a program that ran to its end: (stdout, stderr); panics with both (and the
/// packages) when it failed.
pub fn finished(what: &str, out: Output) -> (String, String) {
    finished_in(what, out, packages())
}

/// [`finished`] for a program of a root whose package versions `packages` lists.
pub fn finished_in(what: &str, out: Output, packages: &str) -> (String, String) {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n{packages}",
        out.status,
    );
    (stdout, stderr)
}

/// A program running in the root whose stdout lines the test reads and whose stdin it writes.
pub struct Running {
    pub child: Child,
    pub pid: u32,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    pub seen: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Running {
    pub fn start(mut cmd: Command) -> Running {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn kfd-emu run");
        let pid = child.id();
        let (rx, stderr) = super::read_output(&mut child);
        Running {
            stdin: child.stdin.take(),
            child,
            pid,
            lines: rx,
            seen: Vec::new(),
            stderr: Some(stderr),
        }
    }

    /// Waits (60 s) for a line starting with `prefix`; a "FAIL" line or the end of the output
    /// fails the test with everything printed.
    pub fn wait_line(&mut self, prefix: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.starts_with(prefix)) {
            return l.clone();
        }
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with("FAIL") {
                        self.fail(&format!("the program failed before {prefix:?}"));
                    }
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.fail(&format!("no line {prefix:?} within 60 s"))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("the program ended before {prefix:?}"))
                }
            }
        }
    }

    /// The lines printed since the last call, without waiting; a "FAIL" line fails the test.
    pub fn lines_so_far(&mut self) -> Vec<String> {
        let mut got = Vec::new();
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l.clone());
            if l.starts_with("FAIL") {
                self.fail("the program failed");
            }
            got.push(l);
        }
        got
    }

    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let err = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        panic!(
            "{why}\n--- stdout\n{}\n--- stderr\n{err}\n{}",
            self.seen.join("\n"),
            packages()
        );
    }

    /// Writes a line to its stdin (what `--hold` and `--busy` wait for).
    pub fn release(&mut self) {
        if let Some(s) = self.stdin.as_mut() {
            let _ = s.write_all(b"go\n");
            let _ = s.flush();
        }
    }

    /// After the program ended: takes the rest of its output (until its stdout closes).
    pub fn drain(&mut self) {
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(60)) {
            self.seen.push(l);
        }
    }

    /// Releases it and waits for its end; returns every stdout line. Panics when it failed.
    pub fn finish(mut self) -> Vec<String> {
        self.release();
        drop(self.stdin.take());
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(60)) {
            self.seen.push(l);
        }
        let status = self.child.wait().expect("wait");
        if !status.success() {
            self.fail(&format!("exit status {status}"));
        }
        self.seen
    }
}
