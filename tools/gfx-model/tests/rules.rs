//! One test per modelling rule (docs/gfx-model.md).

use gfx_model::{Arbitration, Completion, Dispatch, Edit, Params, Partition, Shape};

/// 1 XCC x 2 CUs x 4 wave slots: 8 slots for 1-wave work-groups.
fn small(resident_queues: u32) -> Shape {
    Shape {
        num_xcc: 1,
        cus_per_xcc: 2,
        waves_per_cu: 4,
        resident_queues,
    }
}

fn params(arbitration: Arbitration) -> Params {
    Params {
        arbitration,
        preempt_fixed_ns: 500,
        save_wave_ns: 10,
        restore_wave_ns: 10,
        ..Params::default()
    }
}

fn wgs(tag: u64, n: u64, ns: u64) -> Dispatch {
    Dispatch {
        tag,
        workgroups: n,
        waves_per_wg: 1,
        wg_ns: ns,
        barrier: true,
    }
}

fn add(p: &mut Partition, queue: u64, priority: u8) {
    p.update_runlist(
        &[Edit::Add {
            queue,
            priority,
            active: true,
        }],
        None,
    );
}

/// Creates the queues in one runlist update before anything runs: no preempt.
fn queues(p: &mut Partition, list: &[(u64, u8)]) {
    let edits: Vec<Edit> = list
        .iter()
        .map(|&(queue, priority)| Edit::Add {
            queue,
            priority,
            active: true,
        })
        .collect();
    assert!(!p.update_runlist(&edits, None).preempt);
}

fn run(p: &mut Partition) -> Vec<Completion> {
    while let Some(t) = p.next_event() {
        p.advance_to(t);
    }
    p.take_completions()
}

fn end_of(c: &[Completion], queue: u64, tag: u64) -> u64 {
    c.iter()
        .find(|c| c.queue == queue && c.tag == tag)
        .unwrap_or_else(|| panic!("no completion of queue {queue} tag {tag} in {c:?}"))
        .end_ns
}

#[test]
fn a_dispatch_alone_takes_its_waves_over_the_slots_times_the_wg_time() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    add(&mut p, 1, 7);
    p.submit(1, wgs(0, 20, 1000));
    let c = run(&mut p);
    // 20 work-groups on 8 slots: 3 rounds.
    assert_eq!(end_of(&c, 1, 0), 3000);
    // A 2-wave group takes 2 slots: 8 groups need 4 rounds... of 4 at a time.
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    add(&mut p, 1, 7);
    p.submit(
        1,
        Dispatch {
            waves_per_wg: 2,
            ..wgs(0, 8, 1000)
        },
    );
    assert_eq!(end_of(&run(&mut p), 1, 0), 2000);
}

#[test]
fn two_equal_queues_share_the_partition() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    queues(&mut p, &[(1, 7), (2, 7)]);
    p.submit(1, wgs(0, 16, 1000));
    p.submit(2, wgs(0, 16, 1000));
    let c = run(&mut p);
    // Alone each would take 2000. Queue 1, first, fills the slots; from then on each freed
    // round is shared: it ends at 3000 and queue 2 at 4000, both later than alone.
    assert_eq!(end_of(&c, 1, 0), 3000);
    assert_eq!(end_of(&c, 2, 0), 4000);
}

/// A long many-work-group dispatch fills the partition; 8 short work-groups arrive later.
fn long_then_short(arbitration: Arbitration) -> u64 {
    let mut p = Partition::new(small(8), params(arbitration));
    queues(&mut p, &[(1, 0), (2, 15)]);
    p.submit(1, wgs(0, 80, 10_000));
    p.advance_to(500);
    p.submit(2, wgs(0, 8, 1000));
    let c = run(&mut p);
    end_of(&c, 2, 0) - 500
}

#[test]
fn a_short_dispatch_waits_for_slots_and_under_equal_arbitration_for_queued_lp_work() {
    let equal = long_then_short(Arbitration::Equal);
    let strict = long_then_short(Arbitration::StrictPriority);
    let pipe = long_then_short(Arbitration::PipePriority);
    // Alone it would take 1000 ns. Every mode waits for the first slots to free at 10 µs...
    assert!(strict >= 10_000 - 500 + 1000, "strict {strict}");
    // ...strict priority then takes every freed slot (done one work-group time later); equal
    // arbitration gives the queued LP work-groups half of every slot that frees (4 + 2 + 1 + 1
    // of its groups start at 10, 11, 12 and 13 µs).
    assert_eq!(strict, 11_000 - 500);
    assert_eq!(pipe, strict, "priority 15 vs 0 are different pipe bands");
    assert_eq!(equal, 14_000 - 500);
}

#[test]
fn pipe_priority_shares_within_a_band_and_strict_priority_does_not() {
    let finish = |arb, hp: u8| {
        let mut p = Partition::new(small(8), params(arb));
        queues(&mut p, &[(1, 12), (2, hp)]);
        p.submit(1, wgs(0, 16, 1000));
        p.advance_to(1);
        p.submit(2, wgs(0, 16, 1000));
        let c = run(&mut p);
        end_of(&c, 2, 0)
    };
    // Queue 1 (priority 12) holds all slots first. 12 and 13 are both CS_HIGH: pipe priority
    // shares every freed round (queue 2 ends at 4000)...
    assert_eq!(finish(Arbitration::PipePriority, 13), 4000);
    // ...strict queue priority gives queue 2 (13) every freed slot.
    assert_eq!(finish(Arbitration::StrictPriority, 13), 3000);
}

#[test]
fn deactivating_the_long_dispatch_frees_its_slots_after_the_save_cost() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    queues(&mut p, &[(1, 0), (2, 15)]);
    p.submit(1, wgs(0, 16, 10_000)); // alone: 20 µs
    p.advance_to(1000);
    let cost = p.update_runlist(&[Edit::SetActive(1, false)], None);
    assert!(cost.preempt);
    assert_eq!(cost.waves_saved, 8);
    // Fixed 500 + 8 waves saved x 10; nothing to restore (queue 1 is inactive).
    assert_eq!(cost.resume_ns, 1000 + 500 + 80);
    p.submit(2, wgs(0, 8, 1000));
    p.advance_to(5000);
    let c = p.take_completions();
    assert_eq!(end_of(&c, 2, 0), cost.resume_ns + 1000);
    let stats = p.queue_stats(1).unwrap();
    assert_eq!(stats.wgs_saved, 8);
    // Back at 5 µs: its saved work-groups are restored first and it finishes late.
    let back = p.update_runlist(&[Edit::SetActive(1, true)], None);
    assert!(back.preempt, "queue 2 was still mapped");
    assert_eq!(back.resume_ns, 5000 + 500 + 8 * 10);
    let c = run(&mut p);
    // Saved groups had 9 µs left; then the second round of 10 µs.
    assert_eq!(end_of(&c, 1, 0), back.resume_ns + 9000 + 10_000);
    assert_eq!(p.queue_stats(1).unwrap().wgs_restored, 8);
}

#[test]
fn a_cu_mask_split_isolates() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    queues(&mut p, &[(1, 0), (2, 15)]);
    let t0 = p
        .update_runlist(
            &[
                Edit::SetCuMask(1, Some(vec![0b01])),
                Edit::SetCuMask(2, Some(vec![0b10])),
            ],
            None,
        )
        .resume_ns;
    p.advance_to(t0);
    p.submit(1, wgs(0, 400, 10_000));
    p.advance_to(t0 + 100);
    p.submit(2, wgs(0, 4, 1000));
    let c = run(&mut p);
    // Queue 2 owns CU 1 (4 slots): its 4 groups run at once, as alone on one CU.
    assert_eq!(end_of(&c, 2, 0), t0 + 100 + 1000);
    // Queue 1 is confined to CU 0: 400 groups, 4 at a time.
    assert_eq!(end_of(&c, 1, 0), t0 + 100 * 10_000);
}

#[test]
fn a_preempt_stalls_and_costs_every_queues_in_flight_waves() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    queues(&mut p, &[(1, 7), (2, 7)]);
    p.submit(1, wgs(0, 4, 10_000));
    p.submit(2, wgs(0, 4, 10_000));
    p.advance_to(2000);
    // A priority change of queue 1 alone: still a device-wide preempt of both.
    let cost = p.update_runlist(&[Edit::SetPriority(1, 9)], None);
    assert_eq!(cost.waves_saved, 8);
    assert_eq!(cost.resume_ns, 2000 + 500 + 80 + 80);
    let c = run(&mut p);
    // Each group had 8 µs left, resumed after the stall.
    assert_eq!(end_of(&c, 1, 0), cost.resume_ns + 8000);
    assert_eq!(end_of(&c, 2, 0), cost.resume_ns + 8000);
    let s = p.stats();
    assert_eq!(
        (s.device_preempts, s.waves_saved, s.waves_restored),
        (1, 8, 8)
    );
}

#[test]
fn a_runlist_update_with_nothing_mapped_is_not_a_preempt() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    let cost = p.update_runlist(
        &[Edit::Add {
            queue: 1,
            priority: 7,
            active: true,
        }],
        None,
    );
    assert!(!cost.preempt);
    add(&mut p, 2, 7);
    let s = p.stats();
    assert_eq!((s.runlist_updates, s.device_preempts), (2, 1));
}

#[test]
fn the_grace_period_lets_ending_waves_finish() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    add(&mut p, 1, 0);
    p.submit(1, wgs(0, 4, 1000));
    p.submit(
        1,
        Dispatch {
            barrier: false,
            ..wgs(1, 4, 5000)
        },
    );
    p.advance_to(500);
    // Packet 0's groups end at 1000 (within a 700 ns grace), packet 1's at 5000 (not).
    let c = p.update_runlist(&[Edit::SetActive(1, false)], Some(700));
    assert_eq!(c.waves_saved, 4);
    assert_eq!(end_of(&p.take_completions(), 1, 0), 1000);
    assert_eq!(p.queue_stats(1).unwrap().wgs_completed, 4);
}

#[test]
fn oversubscription_rotates_residency() {
    let mut p = Partition::new(small(1), params(Arbitration::Equal));
    queues(&mut p, &[(1, 7), (2, 7)]);
    assert!(p.is_resident(1) && !p.is_resident(2));
    p.submit(1, wgs(0, 8, 30_000_000));
    p.submit(2, wgs(0, 8, 1000));
    let quantum = p.params().quantum_ns;
    p.advance_to(quantum - 1);
    assert_eq!(
        p.queue_stats(2).unwrap().wgs_launched,
        0,
        "queue 2 not resident yet"
    );
    p.advance_to(quantum + 10_000);
    assert!(p.is_resident(2) && !p.is_resident(1));
    assert_eq!(
        p.queue_stats(1).unwrap().wgs_saved,
        8,
        "queue 1's groups were saved"
    );
    assert_eq!(
        end_of(&p.take_completions(), 2, 0),
        quantum + 500 + 80 + 1000
    );
    assert!(p.stats().rotations >= 1);
}

#[test]
fn the_barrier_bit_orders_packets_and_its_absence_lets_them_overlap() {
    let second_start = |barrier| {
        let mut p = Partition::new(small(8), params(Arbitration::Equal));
        add(&mut p, 1, 7);
        p.submit(1, wgs(0, 4, 1000));
        p.submit(
            1,
            Dispatch {
                barrier,
                ..wgs(1, 4, 1000)
            },
        );
        let c = run(&mut p);
        c.iter().find(|c| c.tag == 1).unwrap().start_ns
    };
    assert_eq!(second_start(true), 1000);
    assert_eq!(second_start(false), 0);
}

#[test]
fn idle_time_is_not_credited_to_later_work() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    add(&mut p, 1, 7);
    p.advance_to(10_000);
    p.submit(1, wgs(0, 1, 1000));
    assert_eq!(end_of(&run(&mut p), 1, 0), 11_000);
}

#[test]
fn a_packet_without_work_groups_completes_when_it_may_start() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    add(&mut p, 1, 7);
    p.submit(1, wgs(0, 2, 1000));
    p.submit(1, Dispatch::empty(1, true));
    assert_eq!(end_of(&run(&mut p), 1, 1), 1000);
}

#[test]
fn the_same_inputs_give_the_same_outputs_event_for_event() {
    let once = || {
        let mut p = Partition::new(Shape::mi308x(), Params::default());
        let list: Vec<(u64, u8)> = (0..6u64).map(|q| (q, (q * 3) as u8)).collect();
        queues(&mut p, &list);
        let mut t = 0;
        let mut all = Vec::new();
        for i in 0..300u64 {
            t += 7_919 * (i % 13 + 1);
            p.advance_to(t);
            p.submit(i % 6, wgs(i, 1 + i % 97, 1000 + 37 * (i % 11)));
            if i % 50 == 0 {
                p.update_runlist(&[Edit::SetActive(i % 6, i % 100 != 0)], Some(i));
            }
            all.extend(p.take_completions());
        }
        all.extend(run(&mut p));
        (all, p.stats())
    };
    let (a, sa) = once();
    let (b, sb) = once();
    assert!(a.len() > 250, "{} completions", a.len());
    assert_eq!(a, b);
    assert_eq!(sa, sb);
}

#[test]
fn occupancy_is_reported_over_time() {
    let mut p = Partition::new(small(8), params(Arbitration::Equal));
    p.record_occupancy(true);
    add(&mut p, 1, 7);
    p.submit(1, wgs(0, 12, 1000));
    run(&mut p);
    // 8 slots busy from 0, 4 from 1000 (the second round), none from 2000.
    assert_eq!(p.take_occupancy(), vec![(0, 8), (1000, 4), (2000, 0)]);
    let s = p.stats();
    assert_eq!(s.peak_occupied_slots, 8);
    assert_eq!(s.occupied_slot_ns, 8 * 1000 + 4 * 1000);
}
