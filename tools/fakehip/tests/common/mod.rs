//! Harness of fakehip's tests: the C test programs (compiled once per test binary), running
//! them with a deadline, the privileged-test check, and a private kfd-emu mount per test.
//!
//! Against the emulator a program runs with `KFDQ_ROOT=<mount>` and
//! `FAKEHIP_TEST_CHECKPOINTS=1`: at every `checkpoint(name)` (tests/programs/checkpoint.h) it
//! prints `checkpoint <name>` and parks until the harness answers on stdin, so the test reads
//! the emulator's stats at well-defined points of the program. Everything goes through real
//! open/ioctl/mmap/read syscalls on the FUSE mount; there is no in-process stand-in for the
//! kernel interface.
#![allow(dead_code, unused_imports)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

pub use kfd_emu::MountedEmu;
pub use test_support::emu::{EmuConfig, Preset, QueueStats, Stats};

/// How long a program may run before the test kills it and fails.
pub const PROGRAM_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------
// programs
// ---------------------------------------------------------------------------------------

/// The compiled test programs (`tests/programs/*.c`).
pub struct Programs {
    dir: PathBuf,
}

impl Programs {
    /// Path of program `name`.
    pub fn get(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Compiles the test programs once per test binary.
pub fn programs() -> &'static Programs {
    static P: OnceLock<Programs> = OnceLock::new();
    P.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fakehip-tests");
        std::fs::create_dir_all(&dir).expect("create the test build dir");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
        for name in ["basic", "nodevice", "scenarios"] {
            fakehip::compile_program(
                &src.join(format!("{name}.c")),
                &dir.join(name),
                &["-Wextra", "-Werror", "-pthread"],
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
        Programs { dir }
    })
}

/// A finished program.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    /// Standard output without `checkpoint ...` lines.
    pub stdout: String,
    pub stderr: String,
}

/// Kills the program if the test gives up on it (deadline, failed assertion).
struct Running {
    child: Child,
    what: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Environment the programs must not inherit from the test process.
fn clean_env(cmd: &mut Command) {
    for var in ["KFDQ_ROOT", "GPU_MAX_HW_QUEUES", "LD_PRELOAD"] {
        cmd.env_remove(var);
    }
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("FAKEHIP_") {
            cmd.env_remove(k);
        }
    }
}

/// One stop of a program at `checkpoint(name)`, while it is parked.
pub struct Checkpoint<'a> {
    pub name: &'a str,
    /// The program's pid.
    pub pid: u32,
    /// Its output so far (without checkpoint lines).
    pub stdout: &'a str,
    pub emu: &'a Emu,
}

/// Runs `program` with stdin piped for the checkpoint protocol. At each checkpoint calls
/// `on_checkpoint`, records the emulator's stats (when `emu` is given) and lets the program
/// continue. Kills the program and fails the test after [`PROGRAM_LIMIT`].
fn drive(
    mut cmd: Command,
    what: String,
    emu: Option<&Emu>,
    mut on_checkpoint: impl FnMut(&Checkpoint),
) -> (u32, Finished, Vec<(String, Stats)>) {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    let mut running = Running { child, what };
    let pid = running.child.id();
    let mut stdin = running.child.stdin.take().expect("piped stdin");
    let (rx, stderr) = test_support::output::read_output(&mut running.child);
    let deadline = Instant::now() + PROGRAM_LIMIT;
    let mut stdout = String::new();
    let mut checkpoints = Vec::new();
    loop {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => match line.strip_prefix("checkpoint ") {
                Some(name) => {
                    if let Some(emu) = emu {
                        on_checkpoint(&Checkpoint {
                            name,
                            pid,
                            stdout: &stdout,
                            emu,
                        });
                        checkpoints.push((name.to_string(), emu.stats()));
                    }
                    // The program may have died meanwhile; its exit status tells.
                    let _ = stdin.write_all(b"\n").and_then(|()| stdin.flush());
                }
                None => {
                    stdout.push_str(&line);
                    stdout.push('\n');
                }
            },
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!(
                "{} did not finish within {PROGRAM_LIMIT:?}; its output so far:\n{stdout}",
                running.what
            ),
        }
    }
    drop(stdin);
    let status = loop {
        if let Some(status) = running.child.try_wait().expect("wait for the program") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "{} closed its stdout but did not exit within {PROGRAM_LIMIT:?}",
            running.what
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = stderr.join().expect("stderr reader");
    (
        pid,
        Finished {
            status,
            stdout,
            stderr,
        },
        checkpoints,
    )
}

/// Runs a program without an emulator (checkpoints are off), e.g. with `KFDQ_ROOT` at an
/// empty directory.
pub fn run(program: &Path, args: &[&str], envs: &[(&str, &str)]) -> Finished {
    let mut cmd = Command::new(program);
    cmd.args(args);
    clean_env(&mut cmd);
    cmd.envs(envs.iter().copied());
    let what = format!("{} {args:?}", program.display());
    drive(cmd, what, None, |_| {}).1
}

// ---------------------------------------------------------------------------------------
// the emulator
// ---------------------------------------------------------------------------------------

/// A kfd-emu mount (tools/test-support) that runs fakehip's programs.
pub struct Emu(pub test_support::Emu);

impl std::ops::Deref for Emu {
    type Target = test_support::Emu;
    fn deref(&self) -> &test_support::Emu {
        &self.0
    }
}

/// MI308X (4 XCCs x 20 CUs, 24 HQDs per XCC), one GPU, Linux 6.12 buffer checks.
pub fn mi308x() -> EmuConfig {
    EmuConfig {
        preset: Preset::Mi308x,
        ..EmuConfig::default()
    }
}

/// Mounts an emulator for the running (privileged) test.
pub fn mount(config: EmuConfig) -> Emu {
    Emu(test_support::mount(config))
}

impl Emu {
    /// Runs a program against this emulator (`KFDQ_ROOT` = the mount, checkpoints on,
    /// `FAKEHIP_TIMEOUT_MS=60000` and `FAKEHIP_DEBUG=1` unless `envs` says otherwise),
    /// recording the stats at every checkpoint after `on_checkpoint` returned.
    pub fn run_with(
        &self,
        program: &str,
        args: &[&str],
        envs: &[(&str, &str)],
        on_checkpoint: impl FnMut(&Checkpoint),
    ) -> EmuRun {
        let path = programs().get(program);
        let mut cmd = Command::new(&path);
        cmd.args(args);
        clean_env(&mut cmd);
        cmd.env("KFDQ_ROOT", self.root())
            .env("FAKEHIP_TEST_CHECKPOINTS", "1")
            .env("FAKEHIP_TIMEOUT_MS", "60000")
            .env("FAKEHIP_DEBUG", "1");
        cmd.envs(envs.iter().copied());
        let what = format!("{program} {args:?} {envs:?}");
        let (pid, out, checkpoints) = drive(cmd, what.clone(), Some(self), on_checkpoint);
        EmuRun {
            what,
            pid,
            out,
            checkpoints,
        }
    }

    /// [`Emu::run_with`] without a checkpoint callback.
    pub fn run(&self, program: &str, args: &[&str], envs: &[(&str, &str)]) -> EmuRun {
        self.run_with(program, args, envs, |_| {})
    }
}

/// `stats.queues` of process `pid`, by queue id.
pub fn queues_of(stats: &Stats, pid: u32) -> Vec<QueueStats> {
    let mut q: Vec<QueueStats> = stats
        .queues
        .iter()
        .filter(|q| q.pid == pid)
        .cloned()
        .collect();
    q.sort_by_key(|q| q.queue_id);
    q
}

/// A program run against the emulator.
pub struct EmuRun {
    what: String,
    pub pid: u32,
    pub out: Finished,
    /// (checkpoint name, the emulator's stats there), in order.
    pub checkpoints: Vec<(String, Stats)>,
}

impl EmuRun {
    pub fn stdout(&self) -> &str {
        &self.out.stdout
    }

    pub fn stderr(&self) -> &str {
        &self.out.stderr
    }

    /// The program exited 0, and fakehip reported no failed call (with `FAKEHIP_DEBUG` >= 1
    /// it logs every KFD call the emulator refused, including those of teardown paths whose
    /// errors do not reach the HIP caller).
    pub fn assert_ok(&self) {
        assert!(
            self.out.status.success(),
            "{} failed ({}):\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.out.status,
            self.out.stdout,
            self.out.stderr
        );
        let refused: Vec<&str> = self
            .out
            .stderr
            .lines()
            .filter(|l| {
                l.starts_with("fakehip: ") && (l.contains("failed") || l.contains("cannot"))
            })
            .collect();
        assert!(
            refused.is_empty(),
            "{}: fakehip reported failures:\n{}",
            self.what,
            refused.join("\n")
        );
    }

    /// The stats recorded at checkpoint `name`.
    pub fn at(&self, name: &str) -> &Stats {
        self.checkpoints
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s)
            .unwrap_or_else(|| {
                let names: Vec<&str> = self.checkpoints.iter().map(|(n, _)| n.as_str()).collect();
                panic!(
                    "{} never reached checkpoint {name:?} (reached {names:?}); stdout:\n{}\nstderr:\n{}",
                    self.what, self.out.stdout, self.out.stderr
                )
            })
    }

    /// The program's own queues at checkpoint `name`, by queue id.
    pub fn queues_at(&self, name: &str) -> Vec<QueueStats> {
        queues_of(self.at(name), self.pid)
    }
}

/// The words after `prefix` on the first stdout line starting with it.
pub fn field(stdout: &str, prefix: &str) -> Vec<String> {
    stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix(prefix)
                .map(|rest| rest.split_whitespace().map(String::from).collect())
        })
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{stdout}"))
}

// ---------------------------------------------------------------------------------------
// the emulator's stats and the programs' output
// ---------------------------------------------------------------------------------------

/// The queue with id `qid` among `qs`.
pub fn queue(qs: &[QueueStats], qid: u32) -> &QueueStats {
    qs.iter()
        .find(|q| q.queue_id == qid)
        .unwrap_or_else(|| panic!("the emulator has no queue {qid}: {qs:#?}"))
}

pub fn qids(qs: &[QueueStats]) -> BTreeSet<u32> {
    qs.iter().map(|q| q.queue_id).collect()
}

pub fn sorted_priorities(qs: &[QueueStats]) -> Vec<u32> {
    let mut p: Vec<u32> = qs.iter().map(|q| q.priority).collect();
    p.sort_unstable();
    p
}

pub fn packets_done(qs: &[QueueStats]) -> u64 {
    qs.iter().map(|q| q.packets_done).sum()
}

pub fn num<T: std::str::FromStr>(s: &str) -> T {
    s.parse()
        .unwrap_or_else(|_| panic!("{s:?} is not a number of the expected kind"))
}

pub const TOPOLOGY: &str = "sys/class/kfd/kfd/topology";

/// The `properties` of topology node `node` under `root`, as (key, value) pairs.
pub fn node_properties(root: &Path, node: u32) -> BTreeMap<String, u64> {
    let path = root.join(TOPOLOGY).join(format!("nodes/{node}/properties"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}
