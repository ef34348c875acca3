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
//!
//! Files: this one holds the configuration, the soak's state and its loop, one method per
//! phase of a tick (timing, reaping, continuing, churn, faults, agent disturbances);
//! `soak/checks.rs` the invariants; `soak/end.rs` the wind-down and the summary;
//! `common/soak.rs` the processes it starts, its tally and its probes of the agent.

// The soak's own modules, beside this file (a test crate's root looks for `tests/<name>.rs`,
// which cargo would take for tests of their own).
#[path = "soak/checks.rs"]
mod checks;
mod common;
#[path = "soak/end.rs"]
mod end;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::kfdqd::Agent;
use common::soak::{Proc, Tally, agent_resources, event, injected_failures, signal, spawn};
use common::*;
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

/// The soak's state across the loop's ticks: the processes, the agent, the fault in effect, and
/// the running measurements of the invariants.
struct Soak<'e> {
    emu: &'e Emu,
    agent: Agent,
    rng: ChaCha8Rng,
    seconds: u64,
    seed: u64,
    /// At most this many processes at once.
    cap: usize,
    bound: Duration,
    t: Tally,
    procs: Vec<Proc>,
    dying: Vec<App>,
    // Agent state: stopped until, and when it last came back (its view catches up within a
    // lease).
    agent_stopped_until: Option<Instant>,
    agent_back: Instant,
    last_fault_activity: Instant,
    // Failed calls of the fault in effect (at the last look), and of the ones replaced.
    faults_failed: u64,
    failed_before: u64,
    starve_since: BTreeMap<(u32, u32), Instant>,
    differ_since: BTreeMap<(u32, u32), Instant>,
    last_busy_ns: BTreeMap<(u32, u32), u64>,
    rss0: u64,
    fds0: usize,
    rss_max: u64,
    fds_max: usize,
    start: Instant,
    tick: u64,
    last_tick: Instant,
    last_check: Option<Instant>,
}

impl<'e> Soak<'e> {
    /// The agent started on `emu`, no process yet.
    fn new(emu: &'e Emu, seconds: u64, seed: u64) -> Soak<'e> {
        let agent = Agent::start(emu, CONFIG);
        let (rss0, fds0) = agent_resources(&agent);
        Soak {
            emu,
            agent,
            rng: ChaCha8Rng::seed_from_u64(seed),
            seconds,
            seed,
            cap: if seconds > 120 { 16 } else { 8 },
            bound: starvation_bound(),
            t: Tally::default(),
            procs: Vec::new(),
            dying: Vec::new(),
            agent_stopped_until: None,
            agent_back: Instant::now(),
            last_fault_activity: Instant::now() - Duration::from_secs(60),
            faults_failed: 0,
            failed_before: 0,
            starve_since: BTreeMap::new(),
            differ_since: BTreeMap::new(),
            last_busy_ns: BTreeMap::new(),
            rss0,
            fds0,
            rss_max: rss0,
            fds_max: fds0,
            start: Instant::now(),
            tick: 0,
            last_tick: Instant::now(),
            last_check: None,
        }
    }

    /// The loop: churn, faults and agent disturbances, with the invariants checked every tick,
    /// for the soak's seconds.
    fn run(&mut self) {
        let end = self.start + Duration::from_secs(self.seconds);
        let mut next_progress = self.start + Duration::from_secs(60);
        while Instant::now() < end {
            self.tick += 1;
            let now = Instant::now();
            self.note_gap(now);
            self.reap(now);
            self.continue_stopped(now);
            self.churn(now);
            self.inject_fault(now);
            self.disturb_agent(now);
            self.check_starvation();
            self.check_agreement();
            if Instant::now() >= next_progress {
                self.progress();
                next_progress += Duration::from_secs(60);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A loop held up (a loaded machine) saw nothing in between: a preemption seen before and
    /// after the gap is not known to have lasted through it.
    fn note_gap(&mut self, now: Instant) {
        let (t, start) = (&mut self.t, self.start);
        if now - self.last_tick > Duration::from_secs(1) {
            event(
                t,
                start,
                format!("the soak's loop took {:?}", now - self.last_tick),
            );
        }
        if now - self.last_tick > SAMPLE_GAP {
            self.starve_since.clear();
            t.gaps += 1;
        }
        self.last_tick = now;
    }

    /// Faults first: a program they failed may be reaped below. Then the programs that exited.
    fn reap(&mut self, now: Instant) {
        let failed_now = injected_failures(self.emu);
        if failed_now != self.faults_failed {
            self.faults_failed = failed_now;
            self.last_fault_activity = now;
        }
        let (t, start) = (&mut self.t, self.start);
        let mut live = Vec::new();
        for mut p in self.procs.drain(..) {
            let class = p.class;
            let asked = p.asked_to_stop;
            let pid = p.app.pid;
            match p.app.try_finish() {
                None => live.push(p),
                Some((status, lines, stderr)) => {
                    event(t, start, format!("pid {pid} ({class}) exited {status}"));
                    t.exit(
                        class,
                        (status, &lines, &stderr),
                        self.last_fault_activity,
                        format!("pid {pid} ({class}, asked to stop: {asked}) exited"),
                    );
                }
            }
        }
        self.procs = live;
        self.dying.retain_mut(|app| app.try_finish().is_none());
    }

    /// Continue the processes (and the agent) whose stop is over.
    fn continue_stopped(&mut self, now: Instant) {
        let (t, start) = (&mut self.t, self.start);
        for p in self.procs.iter_mut() {
            if p.stopped_until.is_some_and(|u| now >= u) {
                signal(p.app.pid, Signal::SIGCONT);
                p.stopped_until = None;
                p.continued = Some(now);
                event(t, start, format!("pid {} continued", p.app.pid));
            }
        }
        if self.agent_stopped_until.is_some_and(|u| now >= u) {
            self.agent.signal(Signal::SIGCONT);
            self.agent_stopped_until = None;
            self.agent_back = now;
            event(t, start, "agent continued".into());
        }
    }

    /// Churn: a process started, and one killed, stopped or asked to stop.
    fn churn(&mut self, now: Instant) {
        let (t, start, rng, procs) = (&mut self.t, self.start, &mut self.rng, &mut self.procs);
        if procs.len() < self.cap && rng.random_bool(0.5) {
            procs.push(spawn(self.emu, &self.agent, rng));
            t.started += 1;
            let p = procs.last().unwrap();
            event(t, start, format!("pid {} ({}) started", p.app.pid, p.class));
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
                        event(t, start, format!("pid {pid} killed"));
                        // Reaped later, without waiting: a traced process's exit reaches its
                        // parent only after its tracer (the agent, maybe stopped) saw it.
                        self.dying.push(procs.swap_remove(i).app);
                    }
                    1 => {
                        signal(p.app.pid, Signal::SIGSTOP);
                        p.stopped_until =
                            Some(now + Duration::from_millis(rng.random_range(200..2500)));
                        t.stopped += 1;
                        let pid = p.app.pid;
                        event(t, start, format!("pid {pid} stopped"));
                    }
                    _ => {
                        p.app.stop();
                        p.asked_to_stop = true;
                        let pid = p.app.pid;
                        event(t, start, format!("pid {pid} asked to stop"));
                    }
                }
            }
        }
    }

    /// Every 30 ticks, another fault in place of the one in effect.
    fn inject_fault(&mut self, now: Instant) {
        if self.tick % 30 != 0 {
            return;
        }
        let spec =
            FAULTS[self.rng.random_range(0..FAULTS.len())].replace("SEED", &self.tick.to_string());
        // The failures of the fault being replaced count before `clear` forgets them.
        let failed_now = injected_failures(self.emu);
        if failed_now > self.faults_failed {
            self.last_fault_activity = now;
        }
        self.failed_before += failed_now;
        self.faults_failed = 0;
        if let Err(e) = std::fs::write(self.emu.path("kfd-emu/faults"), format!("clear\n{spec}\n"))
        {
            self.t.violations.push(format!("injecting {spec}: {e}"));
        }
        self.t.faults += 1;
        event(&mut self.t, self.start, format!("fault {spec}"));
    }

    /// Every 100 ticks (at 50), the agent killed and restarted, or stopped for longer than a
    /// lease.
    fn disturb_agent(&mut self, now: Instant) {
        if self.agent_stopped_until.is_some() || self.tick % 100 != 50 {
            return;
        }
        let (t, start) = (&mut self.t, self.start);
        if self.rng.random_bool(0.5) {
            self.agent.signal(Signal::SIGKILL);
            event(t, start, "agent killed".into());
            self.agent.restart();
            event(t, start, "agent restarted".into());
            t.agent_kills += 1;
            let (rss, fds) = agent_resources(&self.agent);
            (self.rss_max, self.fds_max) = (self.rss_max.max(rss), self.fds_max.max(fds));
            self.agent_back = Instant::now();
        } else {
            self.agent.signal(Signal::SIGSTOP);
            // Longer than a lease: every preempted shim releases on its own meanwhile.
            self.agent_stopped_until = Some(now + kfdq::proto::DEFAULT_LEASE * 2);
            t.agent_stops += 1;
            event(t, start, "agent stopped".into());
        }
    }

    /// A progress line (every minute of a long soak).
    fn progress(&self) {
        let t = &self.t;
        eprintln!(
            "soak: {} s of {}: {} processes started, {} live, {} faults, {} agent kills, {} agent stops, worst starvation {:?}",
            self.start.elapsed().as_secs(),
            self.seconds,
            t.started,
            self.procs.len(),
            t.faults,
            t.agent_kills,
            t.agent_stops,
            t.worst_starvation
        );
    }
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
    let emu = mount();
    let mut s = Soak::new(&emu, seconds, seed);
    s.run();
    s.wind_down();
    // The agent closes an exited process's descriptors when it reads the hang-up, which on a
    // busy machine may come after the statuses above agree: wait (bounded) for them to close;
    // a leak stays above the bound and fails the check below.
    let fds0 = s.fds0;
    test_support::wait_until(Duration::from_secs(30), || {
        agent_resources(&s.agent).1 <= fds0 + 8
    });
    let (rss_end, fds_end) = agent_resources(&s.agent);
    s.report(rss_end, fds_end);
    let (t, bound) = (&s.t, s.bound);
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
