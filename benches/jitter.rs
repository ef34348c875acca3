//! The host's own jitter on a short piece of work after a sleep: what a decision's p99 can be on
//! this machine whatever the agent does.
//!
//! `cargo bench --bench jitter`. The agent's decision runs after `poll` wakes it, on a CPU that
//! others used meanwhile. This bench does the same with work that touches no memory: it sleeps
//! 20 ms (the decision bench's pause between toggles), then times a fixed arithmetic loop
//! (calibrated to about 3, 10 and 30 µs hot), 400 times per size, and prints p50, p99 and the
//! maximum. A p99 well above the p50 here is the host's (interrupts, the hypervisor, frequency),
//! not the code's: no decision of that p50 can have a lower p99 on this machine.
//!
//! A second table: what touching memory costs after a pause. A 2 MiB buffer, written once, is
//! read one byte per 4 KiB page (512 pages) or per 64-byte line of its first 32 KiB (512 lines
//! in 8 pages) after a pause of 0, 1, 5 and 20 ms spent spinning on the clock (the CPU never
//! idles and this process touches nothing else meanwhile), 200 times each: how fast the
//! machine forgets a working set (its caches and TLB) while the process keeps its CPU, i.e.
//! what an agent's decision pays for the memory it touches after a quiet 20 ms.
//!
//! A third table: the floor of an edge that preempts 63 processes — 63 records of 32 bytes
//! written into a kept buffer, after no pause and after 20 ms spinning. Results go to
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
    memory_table();
    records_table();
}

/// Reads one byte every `stride` bytes of `buf[..len]`.
fn touch(buf: &[u8], len: usize, stride: usize) -> u64 {
    buf[..len]
        .iter()
        .step_by(stride)
        .fold(0u64, |s, b| s.wrapping_add(u64::from(black_box(*b))))
}

/// Spins on the clock for `d` (no memory of this process touched but the stack).
fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

fn memory_table() {
    const N: usize = 512;
    const REPS: usize = 200;
    let buf = vec![1u8; N * 4096];
    println!();
    println!("reading {N} pages or {N} lines after a pause spent spinning, {REPS} times each");
    println!(
        "{:<10} {:>16} {:>16} {:>12} {:>12}",
        "pause", "pages p50/p99 µs", "lines p50/p99 µs", "ns / page", "ns / line"
    );
    for pause_us in [0u64, 1_000, 5_000, 20_000] {
        let mut row = Vec::new();
        for stride in [4096usize, 64] {
            let len = N * stride;
            let mut v: Vec<f64> = (0..REPS)
                .map(|_| {
                    spin(Duration::from_micros(pause_us));
                    let s = Instant::now();
                    black_box(touch(&buf, len, stride));
                    s.elapsed().as_secs_f64() * 1e6
                })
                .collect();
            v.sort_by(f64::total_cmp);
            row.push((q(&v, 0.5), q(&v, 0.99)));
        }
        println!(
            "{:<10} {:>16} {:>16} {:>12.0} {:>12.0}",
            format!("{} ms", pause_us as f64 / 1e3),
            format!("{:.1} / {:.1}", row[0].0, row[0].1),
            format!("{:.1} / {:.1}", row[1].0, row[1].1),
            row[0].0 * 1e3 / N as f64,
            row[1].0 * 1e3 / N as f64
        );
    }
}

/// A command as small as one can be: a connection, a sequence number, a kind and an argument.
type Rec = [u64; 4];

/// The least any agent must do for an edge that preempts 63 processes: write 63 such records
/// into a buffer it keeps, after a pause spent spinning (no policy, no lookups: a floor, not a
/// design).
fn records_table() {
    const N: usize = 63;
    const REPS: usize = 200;
    let conns: Vec<u64> = (0..N as u64).map(|i| i * 7 + 3).collect();
    let mut buf: Vec<Rec> = vec![[0; 4]; N];
    let mut seq = 0u64;
    println!();
    println!(
        "writing {N} records of 32 bytes after a pause spent spinning, {REPS} times each (µs)"
    );
    println!("{:<10} {:>8} {:>8} {:>8}", "pause", "p50", "p99", "max");
    for pause_us in [0u64, 20_000] {
        let mut v: Vec<f64> = (0..REPS as u64)
            .map(|k| {
                spin(Duration::from_micros(pause_us));
                let s = Instant::now();
                for (r, c) in buf.iter_mut().zip(&conns) {
                    seq += 1;
                    *r = [*c, seq, k & 1, 20];
                }
                black_box(&buf);
                s.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        v.sort_by(f64::total_cmp);
        println!(
            "{:<10} {:>8.2} {:>8.2} {:>8.2}",
            format!("{} ms", pause_us as f64 / 1e3),
            q(&v, 0.5),
            q(&v, 0.99),
            v[REPS - 1]
        );
    }
}
