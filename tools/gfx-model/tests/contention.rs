//! The contention terms: work-groups that share a CU or the DRAM take longer, by the rules of
//! `gfx_model::contention`; without them (the default) nothing changes.

use gfx_model::{Arbitration, Contention, Dispatch, Edit, Footprint, Params, Partition, Shape};

fn shape(cus: u32) -> Shape {
    Shape {
        num_xcc: 1,
        cus_per_xcc: cus,
        waves_per_cu: 32,
        resident_queues: 8,
    }
}

fn params() -> Params {
    Params {
        arbitration: Arbitration::Equal,
        ..Params::default()
    }
}

const BW: Contention = Contention {
    dram_bytes_per_us: 1_000_000,
    latency_cap_permille: 3000,
};

fn with_queues(p: &mut Partition, n: u64) {
    let edits: Vec<Edit> = (0..n)
        .map(|q| Edit::Add {
            queue: q,
            priority: 7,
            active: true,
        })
        .collect();
    p.update_runlist(&edits, None);
}

fn d(tag: u64, workgroups: u64, waves: u32, wg_ns: u64) -> Dispatch {
    Dispatch {
        tag,
        workgroups,
        waves_per_wg: waves,
        wg_ns,
        barrier: true,
    }
}

fn run_out(p: &mut Partition) -> Vec<(u64, u64)> {
    while let Some(t) = p.next_event() {
        p.advance_to(t);
    }
    p.take_completions()
        .iter()
        .map(|c| (c.tag, c.end_ns - c.start_ns))
        .collect()
}

#[test]
fn work_groups_that_share_a_cu_share_its_issue_rate() {
    // 4 work-groups of a kernel that uses half a CU each: on 4 CUs they run alone (1 us); on
    // 1 CU they ask for 2 CUs' worth and take twice as long.
    let fp = Footprint {
        cu_util_permille: 500,
        dram_bytes: 0,
    };
    for (cus, want) in [(4, 1000), (1, 2000)] {
        let mut p = Partition::new(shape(cus), params());
        p.set_contention(Some(BW));
        with_queues(&mut p, 1);
        p.submit_with(0, d(1, 4, 4, 1000), fp);
        assert_eq!(run_out(&mut p), [(1, want)], "{cus} CUs");
    }
}

#[test]
fn a_latency_bound_kernel_next_to_a_streaming_one_feels_the_loaded_memory() {
    // Queue 0 streams: its 8 work-groups ask 8 x 125 B/ns = the whole bandwidth. Queue 1 is a
    // small latency-bound kernel on other CUs.
    let stream = Footprint {
        cu_util_permille: 100,
        dram_bytes: 125_000,
    };
    let small = Footprint {
        cu_util_permille: 100,
        dram_bytes: 100,
    };
    let alone = {
        let mut p = Partition::new(shape(16), params());
        p.set_contention(Some(BW));
        with_queues(&mut p, 2);
        p.submit_with(1, d(2, 8, 4, 1000), small);
        run_out(&mut p)
    };
    assert_eq!(alone, [(2, 1000)]);
    let mut p = Partition::new(shape(16), params());
    p.set_contention(Some(BW));
    with_queues(&mut p, 2);
    p.submit_with(0, d(1, 8, 4, 1000), stream);
    p.submit_with(1, d(2, 8, 4, 1000), small);
    let got = run_out(&mut p);
    // The small kernel: the cap (3x), weighted by how little it streams (almost not at all).
    // The streaming one started alone: its time stays.
    assert_eq!(got, [(1, 1000), (2, 3000)]);
    // Without contention, the same submissions take their packets' times.
    let mut p = Partition::new(shape(16), params());
    with_queues(&mut p, 2);
    p.submit_with(0, d(1, 8, 4, 1000), stream);
    p.submit_with(1, d(2, 8, 4, 1000), small);
    assert_eq!(run_out(&mut p), [(1, 1000), (2, 1000)]);
}

#[test]
fn two_streaming_kernels_share_the_bandwidth() {
    let stream = Footprint {
        cu_util_permille: 100,
        dram_bytes: 125_000,
    };
    let mut p = Partition::new(shape(16), params());
    p.set_contention(Some(BW));
    with_queues(&mut p, 2);
    // Both start in one pass (the runlist update maps them together).
    p.update_runlist(
        &[Edit::SetActive(0, false), Edit::SetActive(1, false)],
        None,
    );
    p.submit_with(0, d(1, 8, 4, 1000), stream);
    p.submit_with(1, d(2, 8, 4, 1000), stream);
    p.update_runlist(&[Edit::SetActive(0, true), Edit::SetActive(1, true)], None);
    let got = run_out(&mut p);
    assert_eq!(got, [(1, 2000), (2, 2000)]);
}

#[test]
fn a_saved_work_group_keeps_its_unscaled_time_left() {
    // 4 work-groups at half a CU each on 1 CU: 2 CUs' worth, 2x: 2000 scaled ns.
    let fp = Footprint {
        cu_util_permille: 500,
        dram_bytes: 0,
    };
    let mut p = Partition::new(shape(1), params());
    p.set_contention(Some(BW));
    with_queues(&mut p, 1);
    p.submit_with(0, d(1, 4, 4, 1000), fp);
    // Halfway, deactivate: 500 unscaled ns are left, 1000 once restored at 2x again.
    p.advance_to(1000);
    let cost = p.update_runlist(&[Edit::SetActive(0, false)], None);
    assert_eq!(p.queue_load(0), Some((0, 4)));
    p.update_runlist(&[Edit::SetActive(0, true)], None);
    while let Some(t) = p.next_event() {
        p.advance_to(t);
    }
    let c = p.take_completions();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].end_ns, cost.resume_ns + 1000);
    let stats = p.queue_stats(0).unwrap();
    assert_eq!((stats.wgs_saved, stats.wgs_restored), (4, 4));
}
