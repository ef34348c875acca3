//! How fast the model simulates: work-group events and dispatch completions per second of this
//! machine's time. `cargo bench -p gfx-model` prints a table (docs/performance.md).

use std::time::Instant;

use gfx_model::{Dispatch, Edit, Params, Partition, Shape};

/// One scenario: `queues` queues on an MI308X partition, each keeping `depth` packets of
/// `wgs` one-wave work-groups of `wg_ns` queued, until `packets` packets completed.
fn run(queues: u64, depth: u64, wgs: u64, wg_ns: u64, packets: u64) -> (u64, u64, f64) {
    let mut p = Partition::new(Shape::mi308x(), Params::default());
    let edits: Vec<Edit> = (0..queues)
        .map(|q| Edit::Add {
            queue: q,
            priority: (q % 16) as u8,
            active: true,
        })
        .collect();
    p.update_runlist(&edits, None);
    let d = |tag| Dispatch {
        tag,
        workgroups: wgs,
        waves_per_wg: 1,
        wg_ns,
        barrier: true,
    };
    let mut tag = 0;
    for q in 0..queues {
        for _ in 0..depth {
            p.submit(q, d(tag));
            tag += 1;
        }
    }
    let start = Instant::now();
    let mut done = 0u64;
    while done < packets {
        let Some(t) = p.next_event() else { break };
        p.advance_to(t);
        for c in p.take_completions() {
            done += 1;
            p.submit(c.queue, d(tag));
            tag += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    (p.stats().wg_events, done, secs)
}

fn main() {
    println!("gfx-model throughput (release build; MI308X partition: 80 CUs x 32 wave slots)");
    println!(
        "{:<44} {:>12} {:>12} {:>14} {:>16}",
        "scenario", "wg events", "packets", "wg events/s", "completions/s"
    );
    for (name, queues, depth, wgs, wg_ns, packets) in [
        ("4 queues, 1024-group dispatches", 4, 2, 1024, 50_000, 4_000),
        ("24 queues, 64-group dispatches", 24, 4, 64, 20_000, 40_000),
        (
            "8 queues, 1-group dispatches (launch bound)",
            8,
            8,
            1,
            5_000,
            1_000_000,
        ),
    ] {
        let (events, done, secs) = run(queues, depth, wgs, wg_ns, packets);
        println!(
            "{:<44} {:>12} {:>12} {:>14.3e} {:>16.3e}",
            name,
            events,
            done,
            events as f64 / secs,
            done as f64 / secs
        );
    }
}
