//! What the tracer path costs: the suspend / resume round trip of a control request (sent ->
//! the agent's reply, which comes once the command took effect) through the tracer next to the
//! same round trip through a shim, and the tracer thread's CPU and wakeups per activity period
//! and number of tracees (`/proc/<kfdqd>/task/<tracer>/schedstat` and `status` over a fixed
//! window). Prints the tables recorded in docs/performance.md ("Tracer path"); nothing here
//! asserts a number (a loaded machine delays wakeups and round trips).
//!
//! `cargo build --release -p kfdq --bins && cargo bench -p kfdq-shim --bench tracer_path` (as
//! root: it mounts kfd-emu and runs kfdqd). `cargo test --benches` runs nothing here.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::kfdqd::Agent;
use common::*;
use kfdq::Pid;
use kfdq::proto::control::Control;
use kfdq::proto::{Level, Reply, Request};

/// The measurement window per sampling row.
const WINDOW: Duration = Duration::from_secs(2);
/// Suspend/resume pairs per path.
const PAIRS: usize = 20;

fn config(activity_us: u64) -> String {
    format!(
        "[agent]\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\ncontrol_requests_per_s = 10000\n\n[tracer]\nactivity_us = {activity_us}\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"suspend\"\ncontrol = \"tracer\"\nmatch = {{ env = true }}\n"
    )
}

/// [`config`] with a traced `latency` class above the batch class: its busy tracees are
/// sampled every 250 µs (`kfdq::agent::tracer::BUSY_SAMPLE`).
fn config_latency(activity_us: u64) -> String {
    config(activity_us)
        + "\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\ncontrol = \"tracer\"\nmatch = { env = true }\n"
}

fn flood(emu: &Emu, agent: &Agent, shim: bool) -> App {
    flood_in(emu, agent, shim, "batch")
}

fn flood_in(emu: &Emu, agent: &Agent, shim: bool, class: &str) -> App {
    let mut l = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2"])
        .env("KFDQ_CLASS", class);
    if shim {
        l = l.env("KFDQ_SOCKET", agent.sock.display().to_string());
    } else {
        l.preload = false;
    }
    let mut app = l.start(emu);
    app.wait_line("flooding");
    let want = if shim { Control::Shim } else { Control::Tracer };
    agent.wait("the flood under control", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(app.pid) && p.control == want && !p.queues.is_empty())
    });
    app
}

fn done(r: Reply) {
    assert!(matches!(r, Reply::Done { .. }), "{r:?}");
}

/// (suspend µs, resume µs) per pair.
fn round_trips(agent: &Agent, pid: u32) -> (Vec<f64>, Vec<f64>) {
    let mut s = Vec::new();
    let mut r = Vec::new();
    for _ in 0..PAIRS {
        let t = Instant::now();
        done(agent.request(&Request::Suspend {
            pid: Pid(pid),
            level: Level::Suspend,
        }));
        s.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        done(agent.request(&Request::Resume { pid: Pid(pid) }));
        r.push(t.elapsed().as_secs_f64() * 1e6);
    }
    (s, r)
}

fn median(v: &[f64]) -> f64 {
    kfdq::stats::nearest_rank(v, 0.5)
}

/// The tracer thread's rates over [`WINDOW`] at `activity_us` with `tracees` traced floods.
/// With `class` "latency", the tracees belong to a class that preempts others, and a flood is
/// busy all the time: the fine sampling's cost while a latency process is busy.
fn sample_row(emu: &Emu, activity_us: u64, tracees: usize, class: &str) -> ThreadRates {
    let agent = Agent::start(emu, &config_latency(activity_us));
    let apps: Vec<App> = (0..tracees)
        .map(|_| flood_in(emu, &agent, false, class))
        .collect();
    let task = thread_named(agent.child.id(), "kfdqd-tracer").expect("the tracer thread");
    let rates = ThreadRates::over(&task, WINDOW);
    for a in apps {
        a.stop();
        a.finish();
    }
    rates
}

fn main() {
    if !bench_requested("tracer_path") {
        return;
    }
    let emu = mount();
    // Round trips: one traced and one shim process of the same class, same agent.
    let agent = Agent::start(&emu, &config(2000));
    let traced = flood(&emu, &agent, false);
    let shimmed = flood(&emu, &agent, true);
    let (ts, tr) = round_trips(&agent, traced.pid);
    let (ss, sr) = round_trips(&agent, shimmed.pid);
    println!(
        "suspend / resume round trip (control request sent -> reply after the ack), median (nearest rank) of {PAIRS}"
    );
    println!("{:<10} {:>14} {:>14}", "path", "suspend us", "resume us");
    let (a, b, c, d) = (median(&ts), median(&tr), median(&ss), median(&sr));
    println!("{:<10} {a:>14.0} {b:>14.0}", "tracer");
    println!("{:<10} {c:>14.0} {d:>14.0}", "shim");
    println!(
        "tracer/shim ratio: suspend {:.2}, resume {:.2}",
        a / c,
        b / d
    );
    traced.stop();
    traced.finish();
    shimmed.stop();
    shimmed.finish();
    drop(agent);

    let mut rows = Vec::new();
    for (us, n, class) in [
        (500, 1, "batch"),
        (2000, 1, "batch"),
        (2000, 4, "batch"),
        (10000, 1, "batch"),
        (2000, 1, "latency"),
    ] {
        let busy = if class == "latency" {
            ", busy latency"
        } else {
            ""
        };
        let label = format!("{} ms, {n} tracee(s){busy}", us as f64 / 1000.0);
        rows.push((label, sample_row(&emu, us, n, class)));
    }
    println!("tracer thread over {} s per row", WINDOW.as_secs());
    println!(
        "{:<32} {:>12} {:>16} {:>14}",
        "activity period", "wakeups/s", "CPU us per s", "% of a core"
    );
    for (label, r) in &rows {
        println!("{}", r.row(label, 32));
    }
}
