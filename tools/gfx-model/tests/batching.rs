//! Batched stepping gives the per-work-group model's results, event for event: random runlists,
//! packets (with and without footprints, under contention or not), CU masks, preempts and time
//! steps, run on `Partition::new` and on
//! `Partition::per_workgroup`, must report the same completions, counters, occupancy traces and
//! next events. Only `batch_events` (the simulation's own work) may differ.

use gfx_model::{
    Arbitration, Contention, Dispatch, Edit, Footprint, Params, Partition, PartitionStats, Shape,
};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Submit {
        queue: u64,
        d: Dispatch,
        fp: Footprint,
    },
    Advance(u64),
    Update(Vec<Edit>, Option<u64>),
    RunToNextEvent,
}

fn dispatch() -> impl Strategy<Value = Dispatch> {
    (0u64..1000, 0u64..400, 1u32..9, 0u64..3000, any::<bool>()).prop_map(
        |(tag, workgroups, waves_per_wg, wg_ns, barrier)| Dispatch {
            tag,
            workgroups,
            waves_per_wg,
            wg_ns,
            barrier,
        },
    )
}

/// What a dispatch's work-groups use: mostly nothing, else a CU share and DRAM bytes.
fn footprint() -> impl Strategy<Value = Footprint> {
    prop_oneof![
        1 => Just(Footprint::default()),
        2 => (0u16..1500, 0u64..200_000).prop_map(|(cu_util_permille, dram_bytes)| Footprint {
            cu_util_permille,
            dram_bytes,
        }),
    ]
}

fn edit(queues: u64) -> impl Strategy<Value = Edit> {
    prop_oneof![
        (0..queues, 0u8..16, any::<bool>()).prop_map(|(queue, priority, active)| Edit::Add {
            queue,
            priority,
            active
        }),
        (0..queues).prop_map(Edit::Remove),
        (0..queues, any::<bool>()).prop_map(|(q, a)| Edit::SetActive(q, a)),
        (0..queues, 0u8..16).prop_map(|(q, p)| Edit::SetPriority(q, p)),
        (0..queues, proptest::option::of(1u32..u32::MAX))
            .prop_map(|(q, m)| Edit::SetCuMask(q, m.map(|w| vec![w]))),
    ]
}

fn op(queues: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..queues, dispatch(), footprint()).prop_map(|(queue, d, fp)| Op::Submit { queue, d, fp }),
        3 => (0u64..5000).prop_map(Op::Advance),
        2 => (
            proptest::collection::vec(edit(queues), 1..4),
            proptest::option::of(0u64..2000)
        )
            .prop_map(|(e, g)| Op::Update(e, g)),
        2 => Just(Op::RunToNextEvent),
    ]
}

fn setup() -> impl Strategy<Value = (Shape, Params, Option<Contention>)> {
    let contention = proptest::option::of((1u64..400_000, 1000u32..5000).prop_map(
        |(dram_bytes_per_us, latency_cap_permille)| Contention {
            dram_bytes_per_us,
            latency_cap_permille,
        },
    ));
    (
        1u32..3,
        1u32..9,
        4u32..33,
        1u32..5,
        prop_oneof![
            Just(Arbitration::Equal),
            Just(Arbitration::PipePriority),
            Just(Arbitration::StrictPriority)
        ],
        proptest::option::of(1u32..33),
        0u64..500,
        0u64..200_000,
        contention,
    )
        .prop_map(
            |(
                num_xcc,
                cus_per_xcc,
                waves_per_cu,
                resident_queues,
                arbitration,
                limit,
                grace,
                quantum,
                contention,
            )| {
                (
                    Shape {
                        num_xcc,
                        cus_per_xcc,
                        waves_per_cu,
                        resident_queues,
                    },
                    Params {
                        arbitration,
                        default_wg_ns: 700,
                        preempt_fixed_ns: 300,
                        save_wave_ns: 3,
                        restore_wave_ns: 2,
                        default_grace_ns: grace,
                        quantum_ns: 1 + quantum,
                        waves_per_cu_limit: limit,
                    },
                    contention,
                )
            },
        )
}

/// A queue as an observer sees it: counters, (running, saved) work-groups, resident, pending
/// packets.
type QueueView = (gfx_model::QueueStats, (u64, u64), bool, usize);

/// What an observer of the model sees after each call.
#[derive(Debug, PartialEq)]
struct View {
    now: u64,
    next: Option<u64>,
    completions: Vec<gfx_model::Completion>,
    occupancy: Vec<(u64, u32)>,
    stats: PartitionStats,
    queues: Vec<Option<QueueView>>,
}

fn view(p: &mut Partition, queues: u64) -> View {
    let mut stats = p.stats();
    stats.batch_events = 0;
    View {
        now: p.now(),
        next: p.next_event(),
        completions: p.take_completions(),
        occupancy: p.take_occupancy(),
        stats,
        queues: (0..queues)
            .map(|q| {
                Some((
                    p.queue_stats(q)?,
                    p.queue_load(q)?,
                    p.is_resident(q),
                    p.pending_packets(q),
                ))
            })
            .collect(),
    }
}

fn apply(p: &mut Partition, op: &Op) {
    match op {
        Op::Submit { queue, d, fp } => p.submit_with(*queue, *d, *fp),
        Op::Advance(dt) => p.advance_to(p.now() + dt),
        Op::Update(edits, grace) => {
            p.update_runlist(edits, *grace);
        }
        Op::RunToNextEvent => {
            if let Some(t) = p.next_event() {
                p.advance_to(t);
            }
        }
    }
}

const QUEUES: u64 = 5;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn batches_give_the_per_workgroup_results(
        (shape, params, contention) in setup(),
        ops in proptest::collection::vec(op(QUEUES), 1..60),
    ) {
        let mut batched = Partition::new(shape, params);
        let mut single = Partition::per_workgroup(shape, params);
        batched.set_contention(contention);
        single.set_contention(contention);
        batched.record_occupancy(true);
        single.record_occupancy(true);
        for (k, op) in ops.iter().enumerate() {
            apply(&mut batched, op);
            apply(&mut single, op);
            prop_assert_eq!(view(&mut batched, QUEUES), view(&mut single, QUEUES), "after op {} {:?}", k, op);
        }
        // Then run everything out (bounded: an oversubscribed runlist rotates forever).
        for _ in 0..10_000 {
            let Some(t) = single.next_event() else { break };
            batched.advance_to(t);
            single.advance_to(t);
            prop_assert_eq!(view(&mut batched, QUEUES), view(&mut single, QUEUES));
        }
    }
}

/// The batches are real: a long dispatch alone costs a few batch events per round of
/// work-groups, not one per work-group, and the per-work-group model costs one per event.
#[test]
fn a_lone_long_dispatch_costs_one_batch_per_round() {
    let shape = Shape::mi308x();
    let run = |mut p: Partition| {
        p.update_runlist(
            &[Edit::Add {
                queue: 1,
                priority: 7,
                active: true,
            }],
            None,
        );
        // 20480 work-groups of 4 waves: 640 fit at once, 32 rounds.
        p.submit(
            1,
            Dispatch {
                tag: 0,
                workgroups: 20_480,
                waves_per_wg: 4,
                wg_ns: 1_000_000,
                barrier: true,
            },
        );
        while let Some(t) = p.next_event() {
            p.advance_to(t);
        }
        let c = p.take_completions();
        (c, p.stats())
    };
    let (cb, sb) = run(Partition::new(shape, Params::default()));
    let (cs, ss) = run(Partition::per_workgroup(shape, Params::default()));
    assert_eq!(cb, cs);
    assert_eq!(cb[0].end_ns, 32 * 1_000_000);
    assert_eq!((sb.wg_events, ss.wg_events), (40_960, 40_960));
    assert_eq!(ss.batch_events, 40_960);
    assert_eq!(sb.batch_events, 64, "32 rounds, each a start and an end");
}
