//! How fast the model simulates: work-group and batch events and dispatch completions per second
//! of this machine's time, batched (`Partition::new`) and one work-group at a time
//! (`Partition::per_workgroup`), and batched with the contention terms on. `cargo bench -p gfx-model` prints a table
//! (docs/performance.md).

use std::time::Instant;

use gfx_model::{Contention, Dispatch, Edit, Footprint, Params, Partition, PartitionStats, Shape};

/// One scenario: `queues` queues on an MI308X partition, each keeping `depth` packets of
/// `wgs` work-groups of `waves` waves and `wg_ns` queued, until `packets` packets completed.
/// With `contention`, every work-group uses a quarter of a CU and moves 64 KiB, on an MI300X
/// partition's 5.3 TB/s / 4 (docs/gfx-model.md). Returns the model's counters, the packets
/// completed and the seconds it took.
fn run(
    batched: bool,
    contention: bool,
    (queues, depth, wgs, waves, wg_ns, packets): (u64, u64, u64, u32, u64, u64),
) -> (PartitionStats, u64, f64) {
    let mut p = if batched {
        Partition::new(Shape::mi308x(), Params::default())
    } else {
        Partition::per_workgroup(Shape::mi308x(), Params::default())
    };
    let fp = if contention {
        p.set_contention(Some(Contention {
            dram_bytes_per_us: 1_325_000,
            latency_cap_permille: 3000,
        }));
        Footprint {
            cu_util_permille: 250,
            dram_bytes: 65_536,
        }
    } else {
        Footprint::default()
    };
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
        waves_per_wg: waves,
        wg_ns,
        barrier: true,
    };
    let mut tag = 0;
    for q in 0..queues {
        for _ in 0..depth {
            p.submit_with(q, d(tag), fp);
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
            p.submit_with(c.queue, d(tag), fp);
            tag += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    (p.stats(), done, secs)
}

fn main() {
    println!("gfx-model throughput (release build; MI308X partition: 80 CUs x 32 wave slots)");
    println!(
        "{:<46} {:<14} {:>11} {:>12} {:>9} {:>8} {:>15} {:>15}",
        "scenario",
        "stepping",
        "wg events",
        "batch events",
        "packets",
        "wall s",
        "batch events/s",
        "completions/s"
    );
    for (name, case) in [
        (
            "1 queue, 20480 4-wave groups of 1 ms",
            (1, 2, 20_480, 4, 1_000_000, 200),
        ),
        (
            "4 queues, 1024-group dispatches",
            (4, 2, 1024, 1, 50_000, 4_000),
        ),
        (
            "24 queues, 64-group dispatches",
            (24, 4, 64, 1, 20_000, 40_000),
        ),
        (
            "8 queues, 1-group dispatches (launch bound)",
            (8, 8, 1, 1, 5_000, 1_000_000),
        ),
    ] {
        for (batched, contention) in [(true, false), (false, false), (true, true)] {
            let (stats, done, secs) = run(batched, contention, case);
            println!(
                "{:<46} {:<14} {:>11} {:>12} {:>9} {:>8.3} {:>15.3e} {:>15.3e}",
                name,
                match (batched, contention) {
                    (true, false) => "batched",
                    (false, _) => "per work-group",
                    (true, true) => "batched+cont.",
                },
                stats.wg_events,
                stats.batch_events,
                done,
                secs,
                stats.batch_events as f64 / secs,
                done as f64 / secs
            );
        }
    }
}
