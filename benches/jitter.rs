//! The host's own jitter on a short piece of work after a sleep: what a decision's p99 can be on
//! this machine whatever the agent does.
//!
//! `cargo bench --bench jitter`. The agent's decision runs after `poll` wakes it, on a CPU that
//! others used meanwhile. This bench does the same with work that touches no memory: it sleeps
//! 20 ms (the decision bench's pause between toggles), then times a fixed arithmetic loop
//! (calibrated to about 3, 10 and 30 µs hot), 400 times per size, and prints p50, p99 and the
//! maximum. A p99 well above the p50 here is the host's (interrupts, the hypervisor, frequency),
//! not the code's: no decision of that p50 can have a lower p99 on this machine. Results go to
//! docs/performance.md.

use std::hint::black_box;
use std::time::{Duration, Instant};

const REPS: usize = 400;

/// A loop of `n` multiply-adds on a register.
fn work(n: u64) -> u64 {
    let mut s = 0u64;
    for i in 0..n {
        s = s.wrapping_add(black_box(i).wrapping_mul(i));
    }
    s
}

/// Iterations that take about `us` microseconds hot (the median of 50 timed runs).
fn calibrate(us: f64) -> u64 {
    let probe = 100_000u64;
    let mut t: Vec<f64> = (0..50)
        .map(|_| {
            let s = Instant::now();
            black_box(work(probe));
            s.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    t.sort_by(f64::total_cmp);
    ((probe as f64) * us / t[t.len() / 2]).max(1.0) as u64
}

fn q(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    println!("fixed work after a 20 ms sleep, {REPS} times each (µs)");
    println!(
        "{:<14} {:>8} {:>8} {:>8} {:>10}",
        "work (hot)", "p50", "p99", "max", "p99 / p50"
    );
    for us in [3.0, 10.0, 30.0] {
        let n = calibrate(us);
        let mut v: Vec<f64> = (0..REPS)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(20));
                let s = Instant::now();
                black_box(work(n));
                s.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        v.sort_by(f64::total_cmp);
        let (p50, p99) = (q(&v, 0.5), q(&v, 0.99));
        println!(
            "{:<14} {:>8.1} {:>8.1} {:>8.1} {:>10.1}",
            format!("{us} µs"),
            p50,
            p99,
            v[REPS - 1],
            p99 / p50
        );
    }
}
