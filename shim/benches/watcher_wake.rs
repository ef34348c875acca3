//! What the watcher's short slice (`src/slice.rs`) buys: the time from a wake-up (`unpark`,
//! a `FUTEX_WAKE`) to the woken thread running, with the kernel's default slice and with the
//! watcher's 100 µs one, on an idle machine and beside one spinning thread per CPU (a batch
//! job's own host threads, all runnable). 400 wake-ups per cell, 3 ms apart; the two slices
//! alternate in rounds so that both see the same machine. Prints p50 / p90 / p99 / max in µs
//! (docs/performance.md, "The watcher's slice"). Nothing here asserts a number.
//!
//! `cargo bench -p kfdq-shim --bench watcher_wake`. `cargo test --benches` runs nothing here.

// The shim's own module (the rlib is not linked: see Cargo.toml); its unit tests are not
// run here, so what only they use is unused.
#[path = "../src/slice.rs"]
#[allow(dead_code, unused_imports)]
mod slice;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Wake-ups per cell and round.
const WAKES: usize = 200;
/// Rounds (each runs both slices).
const ROUNDS: usize = 2;
/// Pause between wake-ups.
const PAUSE: Duration = Duration::from_millis(3);

/// Wake-up latencies (µs) of a thread that asked for `slice` (None: the kernel's default).
fn wakes(slice: Option<Duration>) -> Vec<f64> {
    let start = Instant::now();
    let woke_ns = Arc::new(AtomicU64::new(0));
    let go = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let (w, g, s) = (woke_ns.clone(), go.clone(), stop.clone());
    let waiter = std::thread::spawn(move || {
        if let Some(d) = slice
            && !slice::request_slice(d)
        {
            eprintln!(
                "watcher_wake: the slice was not taken (Linux before 6.12, or not SCHED_OTHER)"
            );
        }
        loop {
            std::thread::park();
            if s.load(Ordering::SeqCst) {
                return;
            }
            if g.swap(false, Ordering::SeqCst) {
                w.store(start.elapsed().as_nanos() as u64, Ordering::SeqCst);
            }
        }
    });
    let mut out = Vec::with_capacity(WAKES);
    for _ in 0..WAKES {
        std::thread::sleep(PAUSE);
        woke_ns.store(0, Ordering::SeqCst);
        let sent = start.elapsed().as_nanos() as u64;
        go.store(true, Ordering::SeqCst);
        waiter.thread().unpark();
        while woke_ns.load(Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_micros(50));
        }
        out.push((woke_ns.load(Ordering::SeqCst).saturating_sub(sent)) as f64 / 1e3);
    }
    stop.store(true, Ordering::SeqCst);
    waiter.thread().unpark();
    waiter.join().expect("waiter");
    out
}

fn q(v: &[f64], p: f64) -> f64 {
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    // Only under `cargo bench` (not `--list`, not `cargo test --benches`).
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    println!(
        "wake-up -> running, µs ({WAKES} x {ROUNDS} per cell, {} ms apart, {cpus} CPUs)",
        PAUSE.as_millis()
    );
    println!(
        "{:<28} {:>8} {:>8} {:>8} {:>8}",
        "cell", "p50", "p90", "p99", "max"
    );
    for spinners in [0, cpus] {
        let spin = Arc::new(AtomicBool::new(true));
        let hogs: Vec<_> = (0..spinners)
            .map(|_| {
                let s = spin.clone();
                std::thread::spawn(move || {
                    while s.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let mut cells: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..ROUNDS {
            cells[0].extend(wakes(None));
            cells[1].extend(wakes(Some(slice::WATCHER_SLICE)));
        }
        spin.store(false, Ordering::Relaxed);
        for h in hogs {
            h.join().expect("spinner");
        }
        for (name, mut v) in ["default slice", "100 µs slice"].into_iter().zip(cells) {
            v.sort_by(f64::total_cmp);
            println!(
                "{:<28} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
                format!("{name}, {spinners} spinning"),
                q(&v, 0.5),
                q(&v, 0.9),
                q(&v, 0.99),
                v[v.len() - 1]
            );
        }
    }
}
