//! kfdqd controls GPU processes that run without the shim, as their ptrace tracer through the
//! debugger API (classes with `control = "tracer"`): real fakehip programs without LD_PRELOAD,
//! a real kfdqd on kfd-emu. Every wait is on a condition: the emulator's queue counters, the
//! agent's status, `/proc`, or the program's output.

mod common;

use std::process::Command;

use common::kfdqd::{Agent, text};
use common::*;
use kfdq::kfd::ptrace::tracer_of;
use kfdq::proto::control::Control;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use common::traced::{CONFIG, all_suspended, shimless_ahead};

/// A flood without the shim: 2 ms work-groups, 64 per dispatch, 2 in flight.
fn shimless(emu: &Emu, class: &str) -> App {
    shimless_ahead(emu, class, 2)
}

fn packets(emu: &Emu, pid: u32) -> u64 {
    emu.queues_of(pid).iter().map(|q| q.packets_done).sum()
}

/// Waits until the agent traces `pid` with at least one queue; returns the tracer thread's tid.
fn wait_traced(agent: &Agent, pid: u32) -> u32 {
    agent.wait(&format!("pid {pid} traced"), |s| {
        s.processes.iter().any(|p| {
            p.pid == kfdq::Pid(pid) && p.control == Control::Tracer && !p.queues.is_empty()
        })
    });
    let tracer = tracer_of(pid).expect("the tracee's status");
    assert_ne!(tracer, 0, "traced, but TracerPid is 0");
    let task = format!("/proc/{}/task/{tracer}", agent.child.id());
    assert!(
        std::path::Path::new(&task).exists(),
        "the tracer {tracer} is not a thread of kfdqd"
    );
    tracer
}

/// Lets `clock` (a process the agent leaves alone) complete `n` more dispatches: the time in
/// which a running queue would have completed some.
fn let_time_pass(emu: &Emu, clock: u32, n: u64) {
    let start = packets(emu, clock);
    wait_for(&format!("{n} dispatches of the clock process"), || {
        packets(emu, clock) >= start + n
    });
}

fn suspend(agent: &Agent, pid: u32, level: &str) -> std::process::Output {
    agent.kfdq(&["suspend", &pid.to_string(), "--level", level], None)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_process_without_the_shim_is_suspended_resumed_and_left_untraced() {
    let emu = mount();
    let mut agent = Agent::start(&emu, CONFIG);
    let lp = shimless(&emu, "batch");
    let clock = shimless(&emu, "latency");
    wait_traced(&agent, lp.pid);
    // The latency-class process is not the tracer's: left alone, untraced.
    let_time_pass(&emu, clock.pid, 5);
    assert_eq!(tracer_of(clock.pid), Some(0));
    assert!(agent.process(clock.pid).is_none());

    // Levels 1 and 2 need the process's own cooperation: refused with the rule.
    let o = suspend(&agent, lp.pid, "hold");
    assert!(!o.status.success());
    assert!(
        text(&o).contains("only suspend its queues (level 3)"),
        "{}",
        text(&o)
    );
    assert!(all_suspended(&emu, lp.pid, false));

    let o = suspend(&agent, lp.pid, "suspend");
    assert!(o.status.success(), "{}", text(&o));
    // The level in words, not the enum's Debug name ("preempted at Suspend").
    assert!(
        text(&o).contains("suspended (level 3) by hand") && !text(&o).contains("Suspend"),
        "{}",
        text(&o)
    );
    wait_for("lp's queues suspended", || {
        all_suspended(&emu, lp.pid, true)
    });
    let frozen = packets(&emu, lp.pid);
    let_time_pass(&emu, clock.pid, 20);
    assert_eq!(
        packets(&emu, lp.pid),
        frozen,
        "a suspended queue completed packets"
    );
    let ps = text(&agent.kfdq(&["ps"], None));
    let row = ps
        .lines()
        .find(|l| l.trim_start().starts_with(&lp.pid.to_string()))
        .unwrap_or_else(|| panic!("no ps row for {}: {ps}", lp.pid));
    assert!(row.contains("tracer") && row.contains("suspended"), "{ps}");

    let o = agent.kfdq(&["resume", &lp.pid.to_string()], None);
    assert!(o.status.success(), "{}", text(&o));
    wait_for("lp's queues resumed", || all_suspended(&emu, lp.pid, false));
    wait_for("lp completes packets again", || {
        packets(&emu, lp.pid) >= frozen + 5
    });

    // SIGTERM: the agent resumes and detaches before it exits; the process runs on untraced.
    agent.signal(Signal::SIGTERM);
    let st = agent.child.wait().expect("kfdqd exit");
    assert!(st.success(), "kfdqd: {st}: {}", agent.log_text());
    assert_eq!(
        tracer_of(lp.pid),
        Some(0),
        "still traced after kfdqd exited"
    );
    let after = packets(&emu, lp.pid);
    wait_for("lp runs after the agent left", || {
        packets(&emu, lp.pid) > after + 3
    });
    finish_flood(lp);
    clock.stop();
    clock.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_policy_suspends_a_traced_batch_job_while_a_traced_service_is_busy() {
    let emu = mount();
    // Both classes traced: the service's activity comes from sampling its queues. The batch
    // class asks for level 2, which the tracer does not have: its processes are suspended.
    // The service stays busy only while its thread keeps work queued: 64 dispatches (128 ms)
    // ahead and a 1 s hysteresis, so that a loaded machine's scheduling gaps in the service
    // neither idle its queue nor release the batch job meanwhile.
    let config = CONFIG
        .replace("priority = 13\n", "priority = 13\ncontrol = \"tracer\"\n")
        .replace("level = \"suspend\"", "level = \"deactivate\"")
        .replace("hysteresis_ms = 20", "hysteresis_ms = 1000");
    let agent = Agent::start(&emu, &config);
    let lp = shimless(&emu, "batch");
    wait_traced(&agent, lp.pid);
    let hp = shimless_ahead(&emu, "latency", 64);
    wait_traced(&agent, hp.pid);
    wait_for("the batch job suspended by the policy", || {
        all_suspended(&emu, lp.pid, true)
    });
    let p = agent.process(lp.pid).expect("traced");
    assert_eq!(p.level, Some(kfdq::proto::Level::Suspend), "{p:?}");
    assert!(
        p.reason.contains("class latency is busy") && p.reason.contains("the tracer's only level"),
        "{p:?}"
    );
    let frozen = packets(&emu, lp.pid);
    let_time_pass(&emu, hp.pid, 20);
    assert_eq!(packets(&emu, lp.pid), frozen);
    // The service ends: the batch job runs again.
    hp.stop();
    hp.finish();
    wait_for("the batch job resumed", || {
        all_suspended(&emu, lp.pid, false)
    });
    wait_for("its work completes", || packets(&emu, lp.pid) >= frozen + 5);
    lp.stop();
    lp.finish();
}

/// The idle time between consecutive requests as the latency client printed them (`request
/// <i> <latency_us> <start_us>`): a request's start minus its predecessor's end, µs.
fn idle_gaps_us(lines: &[String]) -> Vec<f64> {
    let reqs: Vec<(f64, f64)> = lines
        .iter()
        .filter_map(|l| {
            let f: Vec<f64> = l
                .strip_prefix("request ")?
                .split_whitespace()
                .map(|x| x.parse().ok())
                .collect::<Option<_>>()?;
            (f.len() == 3).then(|| (f[1], f[2]))
        })
        .collect();
    reqs.windows(2)
        .map(|w| w[1].1 - (w[0].1 + w[0].0))
        .collect()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_traced_latency_process_is_sampled_finely_while_busy() {
    let emu = mount();
    // The latency class traced and sampled every 100 ms, the longest period there is; its
    // class preempts the batch class, so while one of its queues is busy the tracer samples
    // it every 250 µs (kfdq::agent::tracer::BUSY_SAMPLE).
    let config = CONFIG
        .replace("priority = 13\n", "priority = 13\ncontrol = \"tracer\"\n")
        .replace("scan_ms = 100", "scan_ms = 100\nactivity_us = 100000");
    let agent = Agent::start(&emu, &config);
    // Six requests of one dispatch of 150 ms, one every 180 ms: 30 ms idle between two. The
    // 100 ms samples see each request busy but fall into at most three of the gaps (their
    // phase in the 180 ms cycle moves by 100 ms a sample: nine phases 20 ms apart, one or two
    // inside a gap); the fine samples see every gap, so every request is a busy period. The
    // client is open-loop: on a loaded machine a late request can leave its predecessor no gap,
    // so the gaps are read from what the client printed, and each of 10 ms or more (forty fine
    // samples) must end a busy period.
    let mut hp = Launch::new(programs().get("latency"))
        .args(["6", "180", "1", "150000", "80"])
        .env("KFDQ_CLASS", "latency");
    hp.preload = false;
    let mut hp = hp.start(&emu);
    hp.wait_line("CHECKPOINT ready");
    wait_traced(&agent, hp.pid);
    let before = agent.status();
    let periods = |s: &kfdq::proto::control::NodeStatus| {
        s.classes
            .iter()
            .find(|c| c.name == "latency")
            .map_or(0, |c| c.busy_periods)
    };
    let p0 = periods(&before);
    hp.release("ready");
    hp.wait_line("latency ");
    let gaps = idle_gaps_us(&hp.seen);
    let real = gaps.iter().filter(|g| **g >= 10_000.0).count() as u64;
    assert!(
        real >= 3,
        "the client left fewer than three idle gaps of 10 ms (µs: {gaps:?}): the machine was too busy for the run to show fine sampling"
    );
    let st = agent.wait("a busy period per request with a gap after it", |s| {
        periods(s) >= p0 + 1 + real
    });
    assert!(
        st.counters.busy_edges > before.counters.busy_edges + real,
        "gaps {gaps:?}: {:?}",
        st.counters
    );
    hp.release("done");
    hp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_traced_process_gets_its_signals() {
    let emu = mount();
    let agent = Agent::start(&emu, CONFIG);
    let mut lp = shimless(&emu, "batch");
    let tracer = wait_traced(&agent, lp.pid);
    let pid = Pid::from_raw(lp.pid as i32);

    // A handled signal runs the handler.
    kill(pid, Signal::SIGUSR1).unwrap();
    lp.wait_line("signal USR1");

    // SIGSTOP stops it as job control would, and the parent (here: the test) is told.
    kill(pid, Signal::SIGSTOP).unwrap();
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    wait_for("the parent sees the stop", || {
        matches!(
            waitid(Id::Pid(pid), flags),
            Ok(WaitStatus::Stopped(_, Signal::SIGSTOP))
        )
    });
    let stopped_at = packets(&emu, lp.pid);
    // It stays stopped: the clock of another process runs while it does not submit.
    let clock = shimless(&emu, "latency");
    let_time_pass(&emu, clock.pid, 10);
    let in_flight = 2;
    assert!(
        packets(&emu, lp.pid) <= stopped_at + in_flight,
        "a stopped process kept submitting"
    );
    assert_eq!(tracer_of(lp.pid), Some(tracer), "the stop lost the tracer");

    // SIGCONT continues it; the parent sees that too.
    kill(pid, Signal::SIGCONT).unwrap();
    let flags = WaitPidFlag::WCONTINUED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    wait_for("the parent sees the continue", || {
        matches!(waitid(Id::Pid(pid), flags), Ok(WaitStatus::Continued(_)))
    });
    let resumed = packets(&emu, lp.pid);
    wait_for("it submits again", || packets(&emu, lp.pid) >= resumed + 5);
    assert_eq!(tracer_of(lp.pid), Some(tracer));
    finish_flood(lp);
    clock.stop();
    clock.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn killing_the_agent_resumes_what_it_suspended() {
    let emu = mount();
    let mut agent = Agent::start(&emu, CONFIG);
    let lp = shimless(&emu, "batch");
    wait_traced(&agent, lp.pid);
    let o = suspend(&agent, lp.pid, "suspend");
    assert!(o.status.success(), "{}", text(&o));
    wait_for("suspended", || all_suspended(&emu, lp.pid, true));

    agent.child.kill().unwrap();
    agent.child.wait().unwrap();
    // The kernel drops the ptrace link, and releasing the agent's KFD context disables
    // debugging of its debuggees, which resumes their queues.
    wait_for("resumed by the kernel", || {
        all_suspended(&emu, lp.pid, false)
    });
    let at = packets(&emu, lp.pid);
    wait_for("its work completes", || packets(&emu, lp.pid) >= at + 5);
    assert_eq!(tracer_of(lp.pid), Some(0));
    finish_flood(lp);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_process_under_strace_is_left_alone_with_its_tracer_named() {
    let emu = mount();
    let strace = which("strace");
    let agent = Agent::start(&emu, CONFIG);
    let flood = programs().get("flood");
    let mut l = Launch::new(strace)
        .args(["-f", "-qq", "-o", "/dev/null", "--"])
        .arg(flood.display().to_string())
        .args(["2000", "64", "2"])
        .env("KFDQ_CLASS", "batch");
    l.preload = false;
    let mut st = l.start(&emu);
    st.wait_line("flooding");
    let s = agent.wait("the strace'd flood left alone", |s| {
        !s.left_alone.is_empty()
    });
    let l = &s.left_alone[0];
    assert!(
        l.reason.contains("already traced by pid") && l.reason.contains("(strace)"),
        "{l:?}"
    );
    assert_eq!(l.class, "batch");
    assert_eq!(tracer_of(l.pid.0), Some(st.pid), "strace is its tracer");
    assert!(s.processes.iter().all(|p| p.pid != l.pid));
    let status = agent.kfdq(&["status"], None);
    assert!(
        text(&status).contains(&format!("not controlled: pid {}", l.pid)),
        "{}",
        text(&status)
    );
    finish_flood(st);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_shim_wins_over_the_tracer() {
    let emu = mount();
    let agent = Agent::start(&emu, CONFIG);
    let mut app = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(&emu);
    app.wait_line("flooding");
    agent.wait_connected(app.pid, 1);
    // Three looks for processes without the shim after it had queues: none takes it.
    let scans = agent.status().counters.tracer_scans;
    agent.wait("three scans", |s| s.counters.tracer_scans >= scans + 3);
    let p = agent.process(app.pid).expect("connected");
    assert_eq!(p.control, Control::Shim);
    assert_eq!(tracer_of(app.pid), Some(0));
    app.stop();
    app.finish();
}

/// Stops a flood and checks it ended well (every dispatch it waited for completed).
fn finish_flood(app: App) {
    app.stop();
    let (lines, err) = app.finish();
    assert!(
        lines.iter().any(|l| l.starts_with("flood dispatches")),
        "{lines:?} {err}"
    );
}

fn which(name: &str) -> std::path::PathBuf {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {name}"))
        .output()
        .expect("sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "{name} is not installed: scripts/setup.sh --tests installs it"
    );
    path.into()
}

/// `kfdq ps` names the agent itself (it opens the GPU to trace) instead of calling it a
/// process without the shim, and every output shows a GPU id the same way: the decimal that
/// the JSON, the metrics and sysfs's `gpu_id` show.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn ps_names_the_agent_and_gpu_ids_read_alike_in_tables_and_json() {
    let emu = mount();
    let agent = Agent::start(&emu, CONFIG);
    let lp = shimless(&emu, "batch");
    wait_traced(&agent, lp.pid);
    let me = agent.child.id();

    let o = agent.kfdq(&["--json", "ps"], None);
    assert!(o.status.success(), "{}", text(&o));
    let ps: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let procs = ps.as_array().expect("an array");
    let find = |pid: u32| {
        procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("no pid {pid} in {ps}"))
    };
    assert_eq!(find(me)["is_agent"], true, "{ps}");
    assert_eq!(find(lp.pid)["is_agent"], false, "{ps}");
    let gpu = find(lp.pid)["queues"][0]["gpu_id"]
        .as_u64()
        .unwrap_or_else(|| panic!("no gpu_id: {ps}"))
        .to_string();

    let table = text(&agent.kfdq(&["ps"], None));
    let row = |pid: u32| {
        table
            .lines()
            .find(|l| l.split_whitespace().next() == Some(pid.to_string().as_str()))
            .unwrap_or_else(|| panic!("no ps row for {pid}: {table}"))
            .to_string()
    };
    assert!(row(me).contains("(the agent)"), "{table}");
    assert!(
        row(lp.pid).split_whitespace().any(|w| w == gpu),
        "ps shows gpu {gpu} as the JSON does: {table}"
    );
    for args in [&["status"][..], &["topology"][..], &["doctor"][..]] {
        let out = text(&agent.kfdq(args, None));
        assert!(
            out.split(|c: char| !c.is_ascii_alphanumeric())
                .any(|w| w == gpu),
            "kfdq {args:?} shows gpu {gpu} in decimal: {out}"
        );
        assert!(
            !out.contains(&format!("{:#x}", gpu.parse::<u32>().unwrap())),
            "kfdq {args:?} shows a hex gpu id: {out}"
        );
    }
}
