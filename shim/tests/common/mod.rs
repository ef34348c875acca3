//! Harness of the shim's tests: the built `libkfdq_shim.so`, the C test programs (compiled once
//! per test binary against fakehip), a private kfd-emu mount, and a running program under the
//! shim whose stdout lines, registry file and emulator queues the tests inspect.
#![allow(dead_code, unused_imports)]

pub mod agent;
pub mod controlled;
pub mod demo;
pub mod elf;
pub mod forger;
pub mod kfdqd;
pub mod kubernetes;
pub mod libs_suite;
pub mod operator;
pub mod pod;
pub mod prom;
pub mod sid;
pub mod sid7;
pub mod sid_libs;
pub mod soak;
pub mod streams;
pub mod traced;

use kfdq::QueueId;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use kfdq::proto::{Registry, StreamInfo, StreamKind};

pub use test_support::bins::{shim_path, workspace_bin};
pub use test_support::emu::{Emu, EmuConfig, Preset, QueueStats, Stats};
pub use test_support::output::read_output;
pub use test_support::wait::WAIT_LIMIT;
pub use test_support::{mount as mount_with, mount_with_slots, wait_for};

const PROGRAMS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/programs");

/// The compiled test programs.
pub struct Programs {
    dir: PathBuf,
}

impl Programs {
    /// Path of program `name`.
    pub fn get(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The library standing in for a math library.
    pub fn lib(&self) -> PathBuf {
        self.dir.join("libkfdqtest_streams.so")
    }
}

/// Compiles every C test program once per test binary.
pub fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    P.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kfdq-shim-programs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create program dir");
        let src = Path::new(PROGRAMS);
        for name in [
            "streams", "uselib", "forkexec", "worker", "ordered", "latency", "flood", "deps",
            "window", "deepbind", "unmapped", "parked", "hold", "reuse",
        ] {
            fakehip::compile_program(
                &src.join(format!("{name}.c")),
                &dir.join(name),
                &["-Wextra", "-Werror", "-pthread"],
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
        let kfd_include = format!("-I{}/../kfd-sys/include", env!("CARGO_MANIFEST_DIR"));
        for name in ["rocr_update", "kpipe"] {
            fakehip::compile_program(
                &src.join(format!("{name}.c")),
                &dir.join(name),
                &["-Wextra", "-Werror", &kfd_include],
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
        fakehip::compile_program(
            &src.join("libstreams.c"),
            &dir.join("libkfdqtest_streams.so"),
            &["-shared", "-fPIC", "-Wextra", "-Werror"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        Programs { dir }
    })
}

/// Mounts kfd-emu (MI308X preset) for the running (privileged) test.
pub fn mount() -> Emu {
    test_support::mount_preset(Preset::Mi308x)
}

/// What the latency client (`programs/latency.c`) printed: each request's latency and its
/// summary line, in µs.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

impl Latency {
    /// Parses the client's stdout; `requests` lines of `request <i> <us>` must be there.
    pub fn parse(lines: &[String], requests: usize) -> Latency {
        let each: Vec<f64> = lines
            .iter()
            .filter(|l| l.starts_with("request "))
            .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
            .collect();
        assert_eq!(each.len(), requests, "{lines:?}");
        let summary = lines
            .iter()
            .find(|l| l.starts_with("latency "))
            .unwrap_or_else(|| panic!("no summary in {lines:?}"));
        let f: Vec<&str> = summary.split_whitespace().collect();
        let num = |key: &str| -> f64 {
            let i = f
                .iter()
                .position(|w| *w == key)
                .unwrap_or_else(|| panic!("no {key} in {summary}"));
            f[i + 1].parse().expect("number")
        };
        Latency {
            mean: each.iter().sum::<f64>() / each.len() as f64,
            p50: num("p50"),
            p99: num("p99"),
            max: num("max"),
        }
    }
}

/// The latency client (`programs/latency.c`) run to its end on `emu` under the shim: `shape` is
/// its arguments (requests, gap ms, dispatches per request, µs per work-group, work-groups), in
/// class `latency`, connected to the agent at `socket` if given. What it measured.
pub fn latency_client(emu: &Emu, shape: [&str; 5], socket: Option<&Path>) -> Latency {
    let mut l = Launch::new(programs().get("latency"))
        .args(shape)
        .env("KFDQ_CLASS", "latency");
    if let Some(s) = socket {
        l = l.env("KFDQ_SOCKET", s.display().to_string());
    }
    let app = l.start(emu);
    app.go();
    let (lines, _) = app.finish();
    Latency::parse(&lines, shape[0].parse().expect("a request count"))
}

/// `queue <name> <qid> <gpu> <handle>` as printed by a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgQueue {
    pub queue_id: u32,
    pub gpu_id: u32,
    pub handle: u64,
}

/// A test program running under the shim.
pub struct App {
    pub child: Child,
    pub pid: u32,
    lines: Receiver<String>,
    pub seen: Vec<String>,
    pub state_dir: tempfile::TempDir,
    go: PathBuf,
    pub stop: PathBuf,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// How to start a program.
pub struct Launch<'a> {
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(&'a str, String)>,
    pub preload: bool,
    /// Run as this uid (and gid) instead of the test's.
    pub uid: Option<u32>,
}

impl<'a> Launch<'a> {
    pub fn new(program: PathBuf) -> Self {
        Launch {
            program,
            args: Vec::new(),
            env: Vec::new(),
            preload: true,
            uid: None,
        }
    }

    /// Runs the program as `uid` (gid the same); its state directory is made writable for it.
    pub fn uid(mut self, uid: u32) -> Self {
        self.uid = Some(uid);
        self
    }

    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn args<const N: usize>(mut self, a: [&str; N]) -> Self {
        self.args.extend(a.iter().map(|s| s.to_string()));
        self
    }

    pub fn env(mut self, k: &'a str, v: impl Into<String>) -> Self {
        self.env.push((k, v.into()));
        self
    }

    /// Starts it against `emu`.
    pub fn start(self, emu: &Emu) -> App {
        let state_dir = tempfile::Builder::new()
            .prefix("kfdq-shim-state-")
            .tempdir()
            .expect("tempdir");
        let go = state_dir.path().join("go");
        let stop = state_dir.path().join("stop");
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for k in [
            "LD_PRELOAD",
            "KFDQ_CLASS",
            "KFDQ_PRIORITY",
            "KFDQ_SOCKET",
            "KFDQ_PASSTHROUGH",
            "GPU_MAX_HW_QUEUES",
            "FAKEHIP_NOOP_LAUNCH",
        ] {
            cmd.env_remove(k);
        }
        if self.preload {
            cmd.env("LD_PRELOAD", shim_path());
        }
        cmd.env("KFDQ_ROOT", emu.root())
            .env("KFDQ_STATE_DIR", state_dir.path())
            .env("KFDQ_TEST_GO", &go)
            .env("KFDQ_TEST_STOP", &stop)
            .env("FAKEHIP_TIMEOUT_MS", "60000")
            .env("KFDQ_LOG", "1");
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(uid) = self.uid {
            std::fs::set_permissions(
                state_dir.path(),
                std::os::unix::fs::PermissionsExt::from_mode(0o777),
            )
            .expect("chmod state dir");
            std::os::unix::process::CommandExt::uid(&mut cmd, uid);
            std::os::unix::process::CommandExt::gid(&mut cmd, uid);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", self.program.display()));
        let pid = child.id();
        let (rx, stderr) = read_output(&mut child);
        App {
            child,
            pid,
            lines: rx,
            seen: Vec::new(),
            state_dir,
            go,
            stop,
            stderr: Some(stderr),
        }
    }
}

impl App {
    /// Waits (up to [`WAIT_LIMIT`]) for a stdout line starting with `prefix`; returns it. Every
    /// line read is kept in `seen`.
    pub fn wait_line(&mut self, prefix: &str) -> String {
        if let Some(l) = self.seen.iter().find(|l| l.starts_with(prefix)) {
            return l.clone();
        }
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.starts_with(prefix) {
                        return l;
                    }
                }
                Err(RecvTimeoutError::Timeout) => self.fail(&format!(
                    "timed out waiting for a line starting with {prefix:?}"
                )),
                Err(RecvTimeoutError::Disconnected) => {
                    self.fail(&format!("program ended before printing {prefix:?}"))
                }
            }
        }
    }

    /// Reads the lines the program has printed so far, without waiting.
    pub fn collect_pending(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
    }

    /// True when a line starting with `prefix` has been read.
    pub fn has_line(&self, prefix: &str) -> bool {
        self.seen.iter().any(|l| l.starts_with(prefix))
    }

    fn fail(&mut self, why: &str) -> ! {
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("{why}\nstdout so far:\n{}", self.seen.join("\n"));
    }

    /// `queue` lines printed so far, by name.
    pub fn queues(&self) -> HashMap<String, ProgQueue> {
        self.seen
            .iter()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() != 5 || f[0] != "queue" {
                    return None;
                }
                Some((
                    f[1].to_string(),
                    ProgQueue {
                        queue_id: f[2].parse().ok()?,
                        gpu_id: f[3].parse().ok()?,
                        handle: f[4].parse().ok()?,
                    },
                ))
            })
            .collect()
    }

    /// `kfdq ps` (no agent) over the emulator `emu`, reading this app's registry directory.
    pub fn kfdq_ps(&self, emu: &Emu) -> String {
        let out = Command::new(workspace_bin("kfdq"))
            .args(["ps", "--agent", "/nonexistent/kfdq.sock"])
            .env("KFDQ_ROOT", emu.root())
            .env("KFDQ_STATE_DIR", self.state_dir.path())
            .output()
            .expect("kfdq ps");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The registry the shim published for `pid`, if any.
    pub fn registry_of(&self, pid: u32) -> Option<Registry> {
        let text =
            std::fs::read_to_string(self.state_dir.path().join(format!("shim-{pid}.json"))).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Waits (up to [`WAIT_LIMIT`]) until the registry of `pid` satisfies `cond`; returns it.
    pub fn wait_registry(
        &mut self,
        pid: u32,
        what: &str,
        cond: impl Fn(&Registry) -> bool,
    ) -> Registry {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            if let Some(r) = self.registry_of(pid)
                && cond(&r)
            {
                return r;
            }
            if Instant::now() > deadline {
                let last = self.registry_of(pid);
                self.fail(&format!(
                    "registry of {pid}: timed out waiting for {what}; last registry: {last:#?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Lets the program continue past its checkpoint(s).
    pub fn go(&self) {
        std::fs::write(&self.go, b"go").expect("create go file");
    }

    /// Lets the program continue past its checkpoint `tag` only.
    pub fn release(&self, tag: &str) {
        let mut name = self.go.clone().into_os_string();
        name.push(format!("-{tag}"));
        std::fs::write(name, b"go").expect("create go file");
    }

    /// Asks a worker to stop.
    pub fn stop(&self) {
        std::fs::write(&self.stop, b"stop").expect("create stop file");
    }

    /// The program's exit status, stdout lines and stderr, if it has exited (`None`: still
    /// running); no check of the status. Once it gave them, it gives nothing more.
    pub fn try_finish(&mut self) -> Option<(std::process::ExitStatus, Vec<String>, String)> {
        let status = self.child.try_wait().expect("wait")?;
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        Some((status, std::mem::take(&mut self.seen), stderr))
    }

    /// Waits (60 s) for the program to exit successfully; returns (stdout lines, stderr).
    pub fn finish(mut self) -> (Vec<String>, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s;
            }
            if Instant::now() > deadline {
                self.fail("program did not exit within 60 s");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(l);
        }
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        assert!(
            status.success(),
            "program failed ({status})\nstdout:\n{}\nstderr:\n{stderr}",
            self.seen.join("\n")
        );
        (std::mem::take(&mut self.seen), stderr)
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.go, b"go");
        let _ = std::fs::write(&self.stop, b"stop");
        // A program told to stop gets a moment to exit on its own; then it is killed.
        let exited = test_support::wait_until(Duration::from_secs(2), || {
            !matches!(self.child.try_wait(), Ok(None))
        });
        if !exited {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The stream of `reg` with handle `h`.
pub fn stream_by_handle(reg: &Registry, h: u64) -> &StreamInfo {
    reg.streams
        .iter()
        .find(|s| s.handle == h)
        .unwrap_or_else(|| panic!("registry has no stream with handle {h:#x}: {reg:#?}"))
}

/// The (first) stream of `kind` in `reg`.
pub fn stream_of_kind(reg: &Registry, kind: StreamKind) -> &StreamInfo {
    reg.streams
        .iter()
        .find(|s| s.kind == kind)
        .unwrap_or_else(|| panic!("registry has no {kind:?} stream: {reg:#?}"))
}

/// Asserts that the stream of `kind` in `reg` maps to queue `queue_id`.
pub fn assert_kind_maps(reg: &Registry, kind: StreamKind, queue_id: u32) {
    let s = stream_of_kind(reg, kind);
    assert_eq!(s.queue_id, Some(QueueId(queue_id)), "the {kind:?} stream");
}

/// How many streams of `reg` are mapped to a queue.
pub fn mapped(reg: &Registry) -> usize {
    reg.streams.iter().filter(|s| s.queue_id.is_some()).count()
}

/// Effective KFD priority of queue `qid` in `reg`.
pub fn effective(reg: &Registry, qid: u32) -> u32 {
    reg.queues
        .iter()
        .find(|q| q.queue_id == QueueId(qid))
        .unwrap_or_else(|| panic!("registry has no queue {qid}: {reg:#?}"))
        .effective_priority
}

/// The thread of `pid` named `comm` (`/proc/<pid>/task/<tid>`), if it runs.
pub fn thread_named(pid: u32, comm: &str) -> Option<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|t| std::fs::read_to_string(t.join("comm")).is_ok_and(|c| c.trim() == comm))
}

/// (ns on CPU, context switches) of a thread (`schedstat`'s first field; `status`'s voluntary
/// and involuntary switches, one per wakeup or preemption).
pub fn thread_usage(task: &Path) -> (u64, u64) {
    let sched = std::fs::read_to_string(task.join("schedstat")).expect("schedstat");
    let ns = sched
        .split_whitespace()
        .next()
        .and_then(|v| v.parse().ok())
        .expect("schedstat's first field");
    let status = std::fs::read_to_string(task.join("status")).expect("status");
    let switches = status
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    (ns, switches)
}

/// A thread's wakeups (context switches) and time on CPU per second, measured over a window.
#[derive(Debug, Clone, Copy)]
pub struct ThreadRates {
    pub wakeups_per_s: f64,
    pub cpu_us_per_s: f64,
}

impl ThreadRates {
    /// The rates of thread `task` (`/proc/<pid>/task/<tid>`) over `window` from now.
    pub fn over(task: &Path, window: Duration) -> ThreadRates {
        let (ns0, sw0) = thread_usage(task);
        let t0 = Instant::now();
        std::thread::sleep(window);
        let (ns1, sw1) = thread_usage(task);
        let s = t0.elapsed().as_secs_f64();
        ThreadRates {
            wakeups_per_s: (sw1 - sw0) as f64 / s,
            cpu_us_per_s: (ns1 - ns0) as f64 / 1e3 / s,
        }
    }

    /// `label`, wakeups/s, CPU µs per s and % of a core, as a table row (`width`: the label's).
    pub fn row(&self, label: &str, width: usize) -> String {
        format!(
            "{label:<width$} {:>12.0} {:>16.0} {:>14.2}",
            self.wakeups_per_s,
            self.cpu_us_per_s,
            self.cpu_us_per_s / 1e4
        )
    }
}

/// For the shim's bench binaries (`harness = false`, run against kfd-emu): whether to measure.
/// `cargo bench` passes `--bench`; `cargo test --benches` runs them without it, and they do
/// nothing. Without root (the emulator's FUSE mount) the bench exits 1 saying so.
pub fn bench_requested(name: &str) -> bool {
    if !std::env::args().any(|a| a == "--bench") {
        return false;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("{name} needs root (it mounts kfd-emu and runs kfdqd); not run");
        std::process::exit(1);
    }
    true
}
