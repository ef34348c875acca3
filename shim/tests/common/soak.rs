//! The soak's processes and probes (`soak.rs`): the kinds of process it starts and how, what a
//! program's good output is, its tally, and what it reads of the agent and the emulator.

use std::process::ExitStatus;
use std::time::{Duration, Instant};

use kfdq::proto::control::NodeStatus;
use nix::sys::signal::Signal;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::kfdqd::Agent;
use super::{App, Emu, Launch, programs};

/// The kinds of process the soak starts, highest class first: `traced` is a `batch` process
/// without the shim.
pub const KINDS: [&str; 4] = ["latency", "normal", "batch", "traced"];

/// A kind's class rank in the soak's configuration (`CONFIG` in `soak.rs`).
pub fn rank(kind: &str) -> usize {
    match kind {
        "latency" => 2,
        "normal" => 1,
        _ => 0,
    }
}

pub struct Proc {
    pub app: App,
    pub class: &'static str,
    pub started: Instant,
    /// Stopped (SIGSTOP) by the soak, until.
    pub stopped_until: Option<Instant>,
    /// Continued at (its shim gets a lease to catch up).
    pub continued: Option<Instant>,
    pub asked_to_stop: bool,
}

#[derive(Default)]
pub struct Tally {
    pub started: u64,
    pub exited_well: u64,
    pub failed_by_fault: u64,
    pub killed: u64,
    pub stopped: u64,
    pub faults: u64,
    pub agent_kills: u64,
    pub agent_stops: u64,
    pub worst_starvation: Duration,
    pub worst_detail: String,
    pub disagreement_detail: String,
    /// What happened, with the soak's clock (printed when a check fails).
    pub events: Vec<String>,
    pub worst_disagreement: Duration,
    pub checks: u64,
    /// Samples that came later than `SAMPLE_GAP` in `soak.rs` (the running measurements
    /// restart).
    pub gaps: u64,
    pub violations: Vec<String>,
}

pub fn spawn(emu: &Emu, agent: &Agent, rng: &mut ChaCha8Rng) -> Proc {
    let class = KINDS[rng.random_range(0..KINDS.len())];
    let mut l = if class == "latency" {
        let n = rng.random_range(10..40).to_string();
        Launch::new(programs().get("latency")).args([n.as_str(), "50", "2", "1000", "32"])
    } else {
        Launch::new(programs().get("flood")).args(["2000", "64", "2"])
    };
    l = l.env(
        "KFDQ_CLASS",
        if class == "traced" { "batch" } else { class },
    );
    // A batch flood stays suspended for as long as a normal flood works (strict ranks, checked by
    // the starvation invariant below), and normal floods run until they are stopped: overlapping
    // ones can keep a batch flood's wait going past fakehip's 60 s test default, most of all on a
    // loaded machine where the wind-down takes long (seen: a batch flood ended by
    // hipErrorLaunchTimeOut after 60 s of a renewed, legitimate suspension). A real runtime waits
    // forever; the soak's programs wait 10 minutes.
    l = l.env("FAKEHIP_TIMEOUT_MS", "600000");
    // The traced class runs without the shim (and without a socket to find the agent at).
    if class != "traced" {
        l = l.env("KFDQ_SOCKET", agent.sock.display().to_string());
    }
    l.preload = class != "traced";
    let app = l.start(emu);
    app.go();
    Proc {
        app,
        class,
        started: Instant::now(),
        stopped_until: None,
        continued: None,
        asked_to_stop: false,
    }
}

impl Tally {
    /// Counts a program's exit (`status`, stdout lines, stderr): well with its output, failed
    /// by an injected fault, or a violation, `what` followed by the exit.
    pub fn exit(
        &mut self,
        class: &str,
        (status, lines, stderr): (ExitStatus, &[String], &str),
        last_fault_activity: Instant,
        what: String,
    ) {
        if status.success() && output_ok(class, lines) {
            self.exited_well += 1;
        } else if by_fault(stderr, last_fault_activity) {
            self.failed_by_fault += 1;
        } else {
            self.violations
                .push(format!("{what} {status}: {lines:?} {stderr}"));
        }
    }
}

/// Whether `app`'s output is what it promises: a flood's dispatch count, a latency client's
/// requests and summary.
pub fn output_ok(class: &str, lines: &[String]) -> bool {
    if class == "latency" {
        lines.iter().any(|l| l.starts_with("latency n "))
    } else {
        lines.iter().any(|l| {
            l.strip_prefix("flood dispatches ")
                .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
                .is_some()
        })
    }
}

pub fn event(t: &mut Tally, start: Instant, what: String) {
    t.events
        .push(format!("{:>8.3} s {what}", start.elapsed().as_secs_f64()));
}

/// Whether a program's failure is an injected fault's doing: a HIP call of its own failed
/// (`CHECK` in the test programs prints `... failed: hipError...`) within 30 s of a failure the
/// emulator injected (the soak's loop may be held up for seconds on a loaded machine).
pub fn by_fault(stderr: &str, last_fault_activity: Instant) -> bool {
    stderr.contains(" failed: hipError") && last_fault_activity.elapsed() < Duration::from_secs(30)
}

pub fn signal(pid: u32, sig: Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

pub fn injected_failures(emu: &Emu) -> u64 {
    serde_json::from_str::<test_support::emu::FaultsFile>(&emu.read("kfd-emu/faults"))
        .map(|f| f.faults.iter().map(|f| f.failed).sum())
        .unwrap_or(0)
}

/// `kfdq status --json`, the CLI a script would use.
pub fn cli_status(agent: &Agent) -> Option<NodeStatus> {
    let o = agent.kfdq(&["status", "--json"], None);
    serde_json::from_slice(&o.stdout).ok()
}

/// The agent's RSS (KiB) and open fds.
pub fn agent_resources(agent: &Agent) -> (u64, usize) {
    let pid = agent.child.id();
    let rss = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count());
    (rss, fds)
}
