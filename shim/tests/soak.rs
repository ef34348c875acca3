//! The soak: a real kfdqd on kfd-emu with processes of every class (shim'd floods at levels 2
//! and 3, traced floods without the shim, latency clients) starting, working, exiting, killed
//! (-9), stopped and continued; the agent killed and restarted and stopped for longer than a
//! lease; kernel faults injected through `kfd-emu/faults`. Invariants are checked continuously
//! against the emulator's truth (`stats.json`):
//!
//! * no queue stays preempted (inactive or suspended) longer than [`starvation_bound`] while no
//!   process of a higher class works (nor is stopped by the soak);
//! * `kfdq status --json` agrees with the emulator on every queue within the same bound;
//! * every program that exits on its own or is asked to stop exits well with its output (a
//!   program whose own ioctl an injected fault refused may fail: counted apart);
//! * the agent's open fds stay bounded and its RSS drift is reported.
//!
//! `KFDQ_SOAK_SECONDS` (default 40: the CI run), `KFDQ_SOAK_SEED` (default 1),
//! `KFDQ_SOAK_JSON` (a file for the summary); `scripts/soak.sh --minutes N` sets them.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::kfdqd::Agent;
use common::*;
use kfdq::proto::Level;
use kfdq::proto::control::NodeStatus;
use nix::sys::signal::Signal;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Three classes (the names the shim knows: a shim passes only those to the agent): `latency`
/// above `normal` (level 2) above `batch` (level 3: through its shim, or through the agent's
/// tracer for a process without the shim). Level 1 (hold) is not in the soak: it leaves the
/// kernel's queues as they are, so the emulator cannot check it.
const CONFIG: &str = "[agent]\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\n\n[tracer]\nscan_ms = 100\n\n\
[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n\
[[class]]\nname = \"normal\"\nrank = 1\npriority = 7\nlevel = \"deactivate\"\nmatch = { env = true }\n\n\
[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"suspend\"\ncontrol = \"tracer\"\nmatch = { env = true }\n";

/// The kinds of process the soak starts, highest class first: `traced` is a `batch` process
/// without the shim.
const KINDS: [&str; 4] = ["latency", "normal", "batch", "traced"];

/// A kind's class rank in [`CONFIG`].
fn rank(kind: &str) -> usize {
    match kind {
        "latency" => 2,
        "normal" => 1,
        _ => 0,
    }
}

/// Faults the soak injects, each bounded (`times`) so that retries end. Not the preempt
/// timeout: it models a GPU reset, which loses every job on the partition
/// (shim/tests/faults.rs tests it alone).
const FAULTS: [&str; 7] = [
    "update_queue=EBUSY,times=3",
    "update_queue=EIO,every=2,times=4",
    "update_queue=EIO,p=0.2,seed=SEED,times=5",
    "dbg_trap/suspend_queues=EIO,times=2",
    "dbg_trap/resume_queues=EAGAIN,times=3",
    "destroy_queue=EBUSY,times=1",
    "create_queue=ENOMEM,times=1",
];

/// The longest a queue may stay preempted with no higher class busy, and the agent's view may
/// differ from the kernel's: the lease (a hung agent), the retry backoff's cap (a refused
/// release), and 2 s for a loaded machine's scheduling (the CI run shares 2 cores with builds).
fn starvation_bound() -> Duration {
    kfdq::proto::DEFAULT_LEASE + kfdq::policy::retry::RETRY_MAX + Duration::from_secs(2)
}

/// Samples further apart than this (the soak's loop held up by a loaded machine) restart the
/// starvation measurements; three times this, the agreement ones (sampled every 10 loops).
const SAMPLE_GAP: Duration = Duration::from_millis(1500);

struct Proc {
    app: App,
    class: &'static str,
    started: Instant,
    /// Stopped (SIGSTOP) by the soak, until.
    stopped_until: Option<Instant>,
    /// Continued at (its shim gets a lease to catch up).
    continued: Option<Instant>,
    asked_to_stop: bool,
}

#[derive(Default)]
struct Tally {
    started: u64,
    exited_well: u64,
    failed_by_fault: u64,
    killed: u64,
    stopped: u64,
    faults: u64,
    agent_kills: u64,
    agent_stops: u64,
    worst_starvation: Duration,
    worst_detail: String,
    disagreement_detail: String,
    /// What happened, with the soak's clock (printed when a check fails).
    events: Vec<String>,
    worst_disagreement: Duration,
    checks: u64,
    /// Samples that came later than [`SAMPLE_GAP`] (the running measurements restart).
    gaps: u64,
    violations: Vec<String>,
}

fn spawn(emu: &Emu, agent: &Agent, rng: &mut ChaCha8Rng) -> Proc {
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

/// Whether `app`'s output is what it promises: a flood's dispatch count, a latency client's
/// requests and summary.
fn output_ok(class: &str, lines: &[String]) -> bool {
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

fn event(t: &mut Tally, start: Instant, what: String) {
    t.events
        .push(format!("{:>8.3} s {what}", start.elapsed().as_secs_f64()));
}

/// Whether a program's failure is an injected fault's doing: a HIP call of its own failed
/// (`CHECK` in the test programs prints `... failed: hipError...`) within 30 s of a failure the
/// emulator injected (the soak's loop may be held up for seconds on a loaded machine).
fn by_fault(stderr: &str, last_fault_activity: Instant) -> bool {
    stderr.contains(" failed: hipError") && last_fault_activity.elapsed() < Duration::from_secs(30)
}

fn signal(pid: u32, sig: Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig);
}

fn injected_failures(emu: &Emu) -> u64 {
    serde_json::from_str::<test_support::emu::FaultsFile>(&emu.read("kfd-emu/faults"))
        .map(|f| f.faults.iter().map(|f| f.failed).sum())
        .unwrap_or(0)
}

/// `kfdq status --json`, the CLI a script would use.
fn cli_status(agent: &Agent) -> Option<NodeStatus> {
    let o = agent.kfdq(&["status", "--json"], None);
    serde_json::from_slice(&o.stdout).ok()
}

/// The agent's RSS (KiB) and open fds.
fn agent_resources(agent: &Agent) -> (u64, usize) {
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

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn soak() {
    let env_num = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let seconds = env_num("KFDQ_SOAK_SECONDS", 40);
    let seed = env_num("KFDQ_SOAK_SEED", 1);
    let cap = if seconds > 120 { 16 } else { 8 };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let emu = mount();
    let mut agent = Agent::start(&emu, CONFIG);
    let bound = starvation_bound();
    let mut t = Tally::default();
    let mut procs: Vec<Proc> = Vec::new();
    let mut dying: Vec<App> = Vec::new();
    // Agent state: stopped until, and when it last came back (its view catches up within a
    // lease).
    let mut agent_stopped_until: Option<Instant> = None;
    let mut agent_back = Instant::now();
    let mut last_fault_activity = Instant::now() - Duration::from_secs(60);
    // Failed calls of the fault in effect (at the last look), and of the ones replaced.
    let mut faults_failed = 0;
    let mut failed_before = 0;
    let mut starve_since: BTreeMap<(u32, u32), Instant> = BTreeMap::new();
    let mut differ_since: BTreeMap<(u32, u32), Instant> = BTreeMap::new();
    let mut last_busy_ns: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    let (rss0, fds0) = agent_resources(&agent);
    let (mut rss_max, mut fds_max) = (rss0, fds0);
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds);
    let mut next_progress = start + Duration::from_secs(60);
    let mut tick = 0u64;

    let mut last_tick = Instant::now();
    let mut last_check: Option<Instant> = None;
    while Instant::now() < end {
        tick += 1;
        let now = Instant::now();
        if now - last_tick > Duration::from_secs(1) {
            event(
                &mut t,
                start,
                format!("the soak's loop took {:?}", now - last_tick),
            );
        }
        // A loop held up (a loaded machine) saw nothing in between: a preemption seen before
        // and after the gap is not known to have lasted through it.
        if now - last_tick > SAMPLE_GAP {
            starve_since.clear();
            t.gaps += 1;
        }
        last_tick = now;
        // Faults first: a program they failed may be reaped below.
        let failed_now = injected_failures(&emu);
        if failed_now != faults_failed {
            faults_failed = failed_now;
            last_fault_activity = now;
        }
        // Reap programs that exited.
        let mut live = Vec::new();
        for mut p in procs.drain(..) {
            let class = p.class;
            let asked = p.asked_to_stop;
            let pid = p.app.pid;
            match p.app.try_finish() {
                None => live.push(p),
                Some((status, lines, stderr)) => {
                    event(
                        &mut t,
                        start,
                        format!("pid {pid} ({class}) exited {status}"),
                    );
                    if status.success() && output_ok(class, &lines) {
                        t.exited_well += 1;
                    } else if by_fault(&stderr, last_fault_activity) {
                        t.failed_by_fault += 1;
                    } else {
                        t.violations.push(format!(
                            "pid {pid} ({class}, asked to stop: {asked}) exited {status}: {lines:?} {stderr}"
                        ));
                    }
                }
            }
        }
        procs = live;
        dying.retain_mut(|app| app.try_finish().is_none());

        // Continue the processes whose stop is over.
        for p in procs.iter_mut() {
            if p.stopped_until.is_some_and(|u| now >= u) {
                signal(p.app.pid, Signal::SIGCONT);
                p.stopped_until = None;
                p.continued = Some(now);
                event(&mut t, start, format!("pid {} continued", p.app.pid));
            }
        }
        if agent_stopped_until.is_some_and(|u| now >= u) {
            agent.signal(Signal::SIGCONT);
            agent_stopped_until = None;
            agent_back = now;
            event(&mut t, start, "agent continued".into());
        }

        // Churn.
        if procs.len() < cap && rng.random_bool(0.5) {
            procs.push(spawn(&emu, &agent, &mut rng));
            t.started += 1;
            let p = procs.last().unwrap();
            event(
                &mut t,
                start,
                format!("pid {} ({}) started", p.app.pid, p.class),
            );
        }
        if !procs.is_empty() && rng.random_bool(0.12) {
            let i = rng.random_range(0..procs.len());
            let p = &mut procs[i];
            if p.stopped_until.is_none() && p.started.elapsed() > Duration::from_secs(1) {
                match rng.random_range(0..4) {
                    0 => {
                        signal(p.app.pid, Signal::SIGKILL);
                        t.killed += 1;
                        let pid = p.app.pid;
                        event(&mut t, start, format!("pid {pid} killed"));
                        // Reaped later, without waiting: a traced process's exit reaches its
                        // parent only after its tracer (the agent, maybe stopped) saw it.
                        dying.push(procs.swap_remove(i).app);
                    }
                    1 => {
                        signal(p.app.pid, Signal::SIGSTOP);
                        p.stopped_until =
                            Some(now + Duration::from_millis(rng.random_range(200..2500)));
                        t.stopped += 1;
                        let pid = p.app.pid;
                        event(&mut t, start, format!("pid {pid} stopped"));
                    }
                    _ => {
                        p.app.stop();
                        p.asked_to_stop = true;
                        let pid = p.app.pid;
                        event(&mut t, start, format!("pid {pid} asked to stop"));
                    }
                }
            }
        }
        if tick % 30 == 0 {
            let spec = FAULTS[rng.random_range(0..FAULTS.len())].replace("SEED", &tick.to_string());
            // The failures of the fault being replaced count before `clear` forgets them.
            let failed_now = injected_failures(&emu);
            if failed_now > faults_failed {
                last_fault_activity = now;
            }
            failed_before += failed_now;
            faults_failed = 0;
            if let Err(e) = std::fs::write(emu.path("kfd-emu/faults"), format!("clear\n{spec}\n")) {
                t.violations.push(format!("injecting {spec}: {e}"));
            }
            t.faults += 1;
            event(&mut t, start, format!("fault {spec}"));
        }
        if agent_stopped_until.is_none() && tick % 100 == 50 {
            if rng.random_bool(0.5) {
                agent.signal(Signal::SIGKILL);
                event(&mut t, start, "agent killed".into());
                agent.restart();
                event(&mut t, start, "agent restarted".into());
                t.agent_kills += 1;
                let (rss, fds) = agent_resources(&agent);
                (rss_max, fds_max) = (rss_max.max(rss), fds_max.max(fds));
                agent_back = Instant::now();
            } else {
                agent.signal(Signal::SIGSTOP);
                // Longer than a lease: every preempted shim releases on its own meanwhile.
                agent_stopped_until = Some(now + kfdq::proto::DEFAULT_LEASE * 2);
                t.agent_stops += 1;
                event(&mut t, start, "agent stopped".into());
            }
        }

        // Invariants against the emulator's truth.
        let stats = emu.stats();
        let now = Instant::now();
        let class_of = |pid: u32| procs.iter().find(|p| p.app.pid == pid);
        // The highest rank that worked during this tick (its queues' busy time grew, or work is
        // queued), or that the soak stopped (a stopped process's last report may count as busy
        // until it goes stale): every class below it may be preempted.
        let mut busy_rank: Option<usize> = None;
        for q in &stats.queues {
            if let Some(p) = class_of(q.pid) {
                let prev = last_busy_ns.insert((q.pid, q.queue_id), q.busy_ns);
                if prev != Some(q.busy_ns) || q.write_index > q.read_index {
                    busy_rank = busy_rank.max(Some(rank(p.class)));
                }
            }
        }
        for p in &procs {
            if p.stopped_until.is_some()
                || p.continued
                    .is_some_and(|c| c.elapsed() < Duration::from_secs(1))
            {
                busy_rank = busy_rank.max(Some(rank(p.class)));
            }
        }
        last_busy_ns.retain(|k, _| stats.queues.iter().any(|q| (q.pid, q.queue_id) == *k));
        let excused = |pid: u32| {
            class_of(pid).is_none_or(|p| {
                p.stopped_until.is_some() || p.continued.is_some_and(|c| c.elapsed() < bound)
            })
        };
        for q in &stats.queues {
            let key = (q.pid, q.queue_id);
            let higher_busy =
                class_of(q.pid).is_some_and(|p| busy_rank.is_some_and(|b| b > rank(p.class)));
            if (q.active && !q.suspended) || higher_busy || excused(q.pid) {
                starve_since.remove(&key);
                continue;
            }
            let since = *starve_since.entry(key).or_insert(now);
            if now - since > t.worst_starvation {
                t.worst_starvation = now - since;
                t.worst_detail = format!(
                    "queue {key:?} ({:?}) active {} suspended {}, busy rank {busy_rank:?}, agent stopped {:?}, at {:?}",
                    class_of(q.pid).map(|p| p.class),
                    q.active,
                    q.suspended,
                    agent_stopped_until.is_some(),
                    start.elapsed()
                );
            }
        }
        starve_since.retain(|k, _| stats.queues.iter().any(|q| (q.pid, q.queue_id) == *k));
        let (rss, fds) = agent_resources(&agent);
        (rss_max, fds_max) = (rss_max.max(rss), fds_max.max(fds));
        if agent_stopped_until.is_none()
            && agent_back.elapsed() > bound
            && tick % 10 == 0
            && let Some(s) = cli_status(&agent)
        {
            let stats = emu.stats();
            let now = Instant::now();
            t.checks += 1;
            if last_check.is_some_and(|c| now - c > SAMPLE_GAP * 3) {
                differ_since.clear();
                t.gaps += 1;
            }
            last_check = Some(now);
            for p in &s.processes {
                for q in &p.queues {
                    let (pid, queue_id) = (p.pid.0, q.queue_id.0);
                    let key = (pid, queue_id);
                    let kernel = stats
                        .queues
                        .iter()
                        .find(|k| k.pid == pid && k.queue_id == queue_id);
                    let agrees = match (kernel, q.preempted) {
                        // Gone from the kernel: the agent learns it from the exit.
                        (None, _) => true,
                        (Some(k), Some(Level::Deactivate)) => !k.active,
                        (Some(k), Some(Level::Suspend)) => k.suspended,
                        (Some(k), _) => k.active && !k.suspended,
                    };
                    if agrees || excused(pid) {
                        differ_since.remove(&key);
                    } else {
                        let since = *differ_since.entry(key).or_insert(now);
                        if now - since > t.worst_disagreement {
                            t.worst_disagreement = now - since;
                            t.disagreement_detail = format!(
                                "queue {key:?} ({:?}, control {:?}): agent {:?}, kernel active {:?} suspended {:?}, at {:?}",
                                class_of(pid).map(|p| p.class),
                                p.control,
                                q.preempted,
                                kernel.map(|k| k.active),
                                kernel.map(|k| k.suspended),
                                start.elapsed()
                            );
                        }
                    }
                }
            }
        }
        if Instant::now() >= next_progress {
            eprintln!(
                "soak: {} s of {seconds}: {} processes started, {} live, {} faults, {} agent kills, {} agent stops, worst starvation {:?}",
                start.elapsed().as_secs(),
                t.started,
                procs.len(),
                t.faults,
                t.agent_kills,
                t.agent_stops,
                t.worst_starvation
            );
            next_progress += Duration::from_secs(60);
        }
        std::thread::sleep(Duration::from_millis(100));
    }

    // Wind down: everything continued and stopped; the node ends consistent.
    if agent_stopped_until.is_some() {
        agent.signal(Signal::SIGCONT);
    }
    let _ = std::fs::write(emu.path("kfd-emu/faults"), "clear\n");
    for mut app in dying {
        let _ = app.child.wait();
    }
    for p in &procs {
        if p.stopped_until.is_some() {
            signal(p.app.pid, Signal::SIGCONT);
        }
        p.app.stop();
    }
    for p in procs {
        let (class, pid) = (p.class, p.app.pid);
        let mut app = p.app;
        let exited = test_support::wait_until(Duration::from_secs(60), || {
            matches!(app.child.try_wait(), Ok(Some(_)))
        });
        assert!(exited, "pid {pid} ({class}) did not stop");
        let Some((status, lines, stderr)) = app.try_finish() else {
            unreachable!("exited")
        };
        if status.success() && output_ok(class, &lines) {
            t.exited_well += 1;
        } else if by_fault(&stderr, last_fault_activity) {
            t.failed_by_fault += 1;
        } else {
            t.violations.push(format!(
                "pid {pid} ({class}) at the end: {status}: {lines:?} {stderr}"
            ));
        }
    }
    wait_for(
        "no queue preempted and the agent agreeing at the end",
        || {
            cli_status(&agent).is_some_and(|s| {
                s.processes
                    .iter()
                    .all(|p| p.queues.iter().all(|q| q.preempted.is_none()))
            }) && emu.stats().queues.iter().all(|q| q.active && !q.suspended)
        },
    );
    // The agent closes an exited process's descriptors when it reads the hang-up, which on a
    // busy machine may come after the statuses above agree: wait (bounded) for them to close;
    // a leak stays above the bound and fails the check below.
    test_support::wait_until(Duration::from_secs(30), || {
        agent_resources(&agent).1 <= fds0 + 8
    });
    let (rss_end, fds_end) = agent_resources(&agent);

    let summary = serde_json::json!({
        "seconds": seconds,
        "seed": seed,
        "processes": t.started,
        "exited_well": t.exited_well,
        "failed_by_injected_fault": t.failed_by_fault,
        "killed": t.killed,
        "stopped_and_continued": t.stopped,
        "faults_injected": t.faults,
        "calls_failed_by_faults": failed_before + faults_failed,
        "agent_kills": t.agent_kills,
        "agent_stops": t.agent_stops,
        "status_checks": t.checks,
        "sample_gaps": t.gaps,
        "worst_starvation_ms": t.worst_starvation.as_millis() as u64,
        "worst_disagreement_ms": t.worst_disagreement.as_millis() as u64,
        "bound_ms": bound.as_millis() as u64,
        "agent_rss_kib": { "start": rss0, "max": rss_max, "end": rss_end },
        "agent_fds": { "start": fds0, "max": fds_max, "end": fds_end },
        "violations": t.violations,
    });
    eprintln!(
        "soak summary: {} s, {} processes ({} exited well, {} failed by an injected fault, {} killed -9, {} stopped/continued), {} faults injected ({} calls failed), agent killed {} and stopped {} times; worst starvation {} ms, worst disagreement {} ms (bound {} ms); agent RSS {} -> max {} KiB, fds {} -> max {}",
        seconds,
        t.started,
        t.exited_well,
        t.failed_by_fault,
        t.killed,
        t.stopped,
        t.faults,
        failed_before + faults_failed,
        t.agent_kills,
        t.agent_stops,
        t.worst_starvation.as_millis(),
        t.worst_disagreement.as_millis(),
        bound.as_millis(),
        rss0,
        rss_max,
        fds0,
        fds_max
    );
    if let Ok(path) = std::env::var("KFDQ_SOAK_JSON") {
        std::fs::write(path, format!("{summary:#}\n")).expect("write the soak summary");
    }
    for detail in [
        (t.worst_starvation > bound).then_some(&t.worst_detail),
        (t.worst_disagreement > bound).then_some(&t.disagreement_detail),
    ]
    .into_iter()
    .flatten()
    {
        eprintln!("soak: {detail}");
        let pid = detail
            .split(['(', ','])
            .nth(1)
            .unwrap_or("")
            .trim()
            .to_string();
        for e in t
            .events
            .iter()
            .filter(|e| e.contains(&pid) || e.contains("agent") || e.contains("loop"))
        {
            eprintln!("event: {e}");
        }
        for l in agent.log_text().lines().filter(|l| l.contains(&pid)) {
            eprintln!("agent log: {l}");
        }
    }
    assert!(t.violations.is_empty(), "{:#?}", t.violations);
    assert!(
        t.worst_starvation <= bound,
        "a queue stayed preempted {:?} with no higher class busy (bound {bound:?}): {}",
        t.worst_starvation,
        t.worst_detail
    );
    assert!(
        t.worst_disagreement <= bound,
        "the agent's view differed from the kernel's for {:?} (bound {bound:?}): {}",
        t.worst_disagreement,
        t.disagreement_detail
    );
    // Bounded: the agent holds a few fds per connection; none may leak with the churn.
    assert!(
        fds_end <= fds0 + 8,
        "the agent's fds grew from {fds0} to {fds_end} with {} processes left",
        0
    );
    assert!(
        t.started >= 10,
        "too few processes for a soak: {}",
        t.started
    );
}
