//! The registry's unit tests.

use super::warnings::{SHARED_WARNING, UNCLAIMED_WARNING};
use super::*;
use kfdq::Pid;

fn queue(id: u32) -> Queue {
    Queue::for_tests(id)
}

/// The compile-time half of the module's guarantee: `Queue` and `State` are not `Clone`,
/// `State` is not `Default`. `check` below is ambiguous, and the test does not compile, for
/// a type that has either trait.
#[test]
fn queues_and_the_registry_cannot_be_copied_or_made() {
    trait Lacks<Which> {
        fn check() {}
    }
    struct Neither;
    struct HasClone;
    struct HasDefault;
    impl<T> Lacks<Neither> for T {}
    impl<T: Clone> Lacks<HasClone> for T {}
    impl<T: Default> Lacks<HasDefault> for T {}
    <Queue as Lacks<_>>::check();
    <State as Lacks<_>>::check();
}

#[test]
fn indices_are_read_from_registered_live_queues_only() {
    let idx = Box::new([5u64, 2]);
    let base = idx.as_ptr() as u64;
    let mut st = State::new();
    let mut q = queue(1);
    // SAFETY: `idx` outlives the registry's reads (it is dropped at the end).
    unsafe { q.set_indices_for_tests(base, base + 8) };
    st.queues.push_for_tests(q);
    assert_eq!(st.indices(1), (5, 2));
    assert_eq!(st.indices(2), (0, 0), "not registered");
    st.queue_mut(1).unwrap().dying = true;
    assert_eq!(st.indices(1), (0, 0), "DESTROY_QUEUE in flight");
    st.remove_queue(1);
    assert_eq!(st.indices(1), (0, 0), "destroyed");
    drop(idx);
}

#[test]
fn work_no_stream_claims_is_reported_once_after_the_grace() {
    // The queues' indices: 3 packets written on each.
    let idx = Box::new([3u64, 0, 3, 0]);
    let base = idx.as_ptr() as u64;
    let mut st = State::new();
    for (id, off) in [(1u32, 0u64), (2, 16)] {
        let mut q = queue(id);
        // SAFETY: `idx` outlives the registry's reads (it is dropped at the end).
        unsafe { q.set_indices_for_tests(base + off, base + off + 8) };
        st.queues.push_for_tests(q);
    }
    st.register_stream(7, StreamKind::Created, 0x70, None, None);
    st.attribute(7, 2);
    let t0 = std::time::Instant::now();
    assert!(st.check_unclaimed(t0), "queue 1 is watched");
    assert!(st.warnings.is_empty(), "not before the grace");
    let later = t0 + UNCLAIMED_GRACE;
    st.check_unclaimed(later);
    assert_eq!(st.warnings.len(), 1, "{:?}", st.warnings);
    assert!(
        st.warnings[0].starts_with(UNCLAIMED_WARNING) && st.warnings[0].contains("queue 1)"),
        "{}",
        st.warnings[0]
    );
    st.check_unclaimed(later + UNCLAIMED_GRACE);
    assert_eq!(st.warnings.len(), 1, "once per process");
    drop(idx);
}

#[test]
fn inflight_attribution_lands_on_registration() {
    let mut st = State::new();
    st.queues.push_for_tests(queue(3));
    let sid = st.reserve_stream_id();
    st.attribute(sid, 3);
    assert_eq!(st.inflight, vec![(sid, 3)]);
    st.register_stream(sid, StreamKind::Created, 0x1000, Some(-1), None);
    assert!(st.inflight.is_empty());
    assert_eq!(st.stream(sid).unwrap().queue, Some(3));
    assert_eq!(st.queue(3).unwrap().streams, vec![sid]);
    assert!(st.warnings.is_empty());
}

#[test]
fn sharing_is_reported() {
    let mut st = State::new();
    st.queues.push_for_tests(queue(5));
    st.register_stream(1, StreamKind::Created, 0x10, None, None);
    st.register_stream(2, StreamKind::Created, 0x20, None, None);
    st.register_stream(3, StreamKind::Created, 0x30, None, None);
    st.attribute(1, 5);
    st.attribute(2, 5);
    st.attribute(3, 5);
    assert_eq!(st.queue(5).unwrap().streams, vec![1, 2, 3]);
    assert_eq!(st.warnings.len(), 1, "once per process: {:?}", st.warnings);
    assert!(
        st.warnings[0].starts_with(SHARED_WARNING)
            && st.warnings[0].contains("stream 2 on queue 5 with [1]"),
        "{}",
        st.warnings[0]
    );
    let r = st.to_proto(Pid(42));
    assert_eq!(r.pid, Pid(42));
    assert_eq!(r.streams.len(), 3);
    assert_eq!(r.queues[0].streams, vec![1, 2, 3]);
}

#[test]
fn removal_forgets_mappings() {
    let mut st = State::new();
    st.queues.push_for_tests(queue(1));
    st.register_stream(NULL_STREAM_ID, StreamKind::Null, 0, None, None);
    st.attribute(NULL_STREAM_ID, 1);
    st.remove_queue(1);
    assert_eq!(st.stream(NULL_STREAM_ID).unwrap().queue, None);
    st.remove_stream(NULL_STREAM_ID);
    assert!(st.streams.is_empty());
}

#[test]
fn the_first_queue_created_during_a_call_is_the_streams() {
    let mut st = State::new();
    st.queues.push_for_tests(queue(1));
    st.queues.push_for_tests(queue(2));
    st.register_stream(NULL_STREAM_ID, StreamKind::Null, 0, None, None);
    assert!(st.attribute_created(NULL_STREAM_ID, 1));
    // e.g. ROCr's blit queue, created right after during the same first copy
    assert!(!st.attribute_created(NULL_STREAM_ID, 2));
    assert_eq!(st.stream(NULL_STREAM_ID).unwrap().queue, Some(1));
    assert!(st.queue(2).unwrap().streams.is_empty());
    // The same for a stream still being created (in flight).
    let sid = st.reserve_stream_id();
    st.queues.push_for_tests(queue(3));
    st.queues.push_for_tests(queue(4));
    assert!(st.attribute_created(sid, 3));
    assert!(!st.attribute_created(sid, 4));
    assert_eq!(st.inflight, vec![(sid, 3)]);
    // Once its queue is gone, a new one is taken.
    st.remove_queue(1);
    assert!(st.attribute_created(NULL_STREAM_ID, 2));
    assert_eq!(st.stream(NULL_STREAM_ID).unwrap().queue, Some(2));
}

#[test]
fn a_queue_created_during_a_sync_registers_its_stream() {
    let mut st = State::new();
    st.queues.push_for_tests(queue(7));
    // Nothing created: nothing registered.
    assert!(!st.adopt_inflight(NULL_STREAM_ID, StreamKind::Null));
    assert!(st.streams.is_empty());
    assert!(st.attribute_created(NULL_STREAM_ID, 7));
    assert!(st.adopt_inflight(NULL_STREAM_ID, StreamKind::Null));
    let s = st.stream(NULL_STREAM_ID).unwrap();
    assert_eq!((s.kind, s.queue), (StreamKind::Null, Some(7)));
    assert!(st.inflight.is_empty());
    assert!(!st.adopt_inflight(NULL_STREAM_ID, StreamKind::Null));
}

#[test]
fn new_streams_start_held_when_asked() {
    let mut st = State::new();
    st.hold_new = true;
    st.register_stream(4, StreamKind::Created, 0x40, None, None);
    assert!(st.stream(4).unwrap().held);
    assert_eq!(st.held_count(), 1);
}

/// HIP 7.2.4 with dynamic queues and `GPU_MAX_HW_QUEUES=1` gives the null stream and a created
/// stream a queue each, then moves the created stream onto the null stream's queue without a
/// CREATE_QUEUE: two queues of one priority on one GPU, more than the cap, is the condition
/// under which launches must re-attribute (before any sharing shows in the registry).
#[test]
fn streams_may_move_once_a_priority_has_more_queues_than_the_runtimes_cap() {
    let mut st = State::new();
    st.queues.push_for_tests(queue(1));
    st.register_stream(NULL_STREAM_ID, StreamKind::Null, 0, None, None);
    st.attribute(NULL_STREAM_ID, 1);
    assert!(!st.streams_may_move(1), "one queue at the cap");
    st.queues.push_for_tests(queue(2));
    assert!(
        !st.streams_may_move(1),
        "a queue no stream ran on (the runtime's own) is no pool queue"
    );
    st.register_stream(5, StreamKind::Created, 0x50, None, None);
    st.attribute(5, 2);
    assert!(st.streams_may_move(1), "two normal queues, cap 1");
    assert!(!st.streams_may_move(2), "two normal queues, cap 2");
    // Another priority is another pool; another GPU another device.
    st.queue_mut(2).unwrap().requested = 11;
    assert!(!st.streams_may_move(1), "one queue per priority");
    st.queue_mut(2).unwrap().requested = 7;
    st.queue_mut(2).unwrap().gpu_id = 2;
    assert!(!st.streams_may_move(1), "one queue per GPU");
    st.queue_mut(2).unwrap().gpu_id = 1;
    // Copy engines and queues being destroyed are no pool queues.
    st.queue_mut(2).unwrap().compute = false;
    assert!(!st.streams_may_move(1), "an SDMA queue");
    st.queue_mut(2).unwrap().compute = true;
    st.queue_mut(2).unwrap().dying = true;
    assert!(!st.streams_may_move(1), "a dying queue");
    st.queue_mut(2).unwrap().dying = false;
    assert!(st.streams_may_move(1));
    // The moved stream, seen by a launch's write index: now sharing, whatever the cap.
    st.attribute(5, 1);
    assert_eq!(st.queue(1).unwrap().streams, vec![NULL_STREAM_ID, 5]);
    assert!(
        st.queue(2).unwrap().streams.is_empty(),
        "the old queue lost it"
    );
    st.remove_queue(2);
    assert!(st.streams_may_move(8), "two streams share queue 1");
}

#[test]
fn dynamic_queues_is_read_as_clr_reads_a_boolean_flag() {
    for on in ["1", "2", "true", " 3", "+1", "-1", "10x"] {
        assert!(super::dynamic::clr_bool(on), "{on:?} is on");
    }
    for off in ["0", "", "false", "TRUE", "x1", "-0", " 00"] {
        assert!(!super::dynamic::clr_bool(off), "{off:?} is off");
    }
    for (v, n) in [("4", 4), (" 12q", 12), ("-3", -3), ("q4", 0), ("", 0)] {
        assert_eq!(super::dynamic::atoi(v), n, "atoi({v:?})");
    }
}

/// While streams may move, a stream whose queue is known compares write indices at its first
/// launch, after every chance the runtime had to move it, at the follow-up of a comparison that
/// found its own queue idle, and otherwise every `every`th launch: never more than `every`
/// launches apart, whatever the pattern.
#[test]
fn a_stream_compares_when_it_may_have_moved_and_at_least_every_nth_launch() {
    let every = 4;
    let mut s = Sampling::default();
    let launch = |s: &mut Sampling, chances: u64| s.due_at(chances, every);
    assert!(launch(&mut s, 7), "the first launch compares");
    s.compared(true, false);
    // Nothing happened: launches 2..4 skip, the 4th after the comparison compares.
    assert_eq!(
        (0..every).map(|_| launch(&mut s, 7)).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    s.compared(true, false);
    // A synchronising call (a chance to move): the next launch compares, once.
    assert!(!launch(&mut s, 7));
    assert!(launch(&mut s, 8), "after a chance to move");
    s.compared(true, false);
    assert!(!launch(&mut s, 8));
    // Its own queue did not move: the next launch follows up (comparing all queues) ...
    for _ in 0..2 {
        assert!(!launch(&mut s, 8));
    }
    assert!(launch(&mut s, 8));
    s.compared(true, true);
    assert!(
        launch(&mut s, 8),
        "the follow-up of a comparison that found the queue idle"
    );
    // ... and a full comparison that stayed ambiguous waits for the next due launch.
    s.compared(false, true);
    assert_eq!(
        (0..every).map(|_| launch(&mut s, 8)).collect::<Vec<_>>(),
        [false, false, false, true]
    );
    // Every 1: every launch, as before sampling.
    let mut one = Sampling::default();
    for _ in 0..5 {
        assert!(one.due_at(0, 1));
        one.compared(true, false);
    }
    // Never more than `every` launches without a comparison, for any chances pattern.
    let mut s = Sampling::default();
    let mut gap = 0;
    for i in 0u64..200 {
        if s.due_at(i / 7, every) {
            s.compared(i % 3 == 0, i % 5 == 0);
            gap = 0;
        } else {
            gap += 1;
            assert!(
                gap < every,
                "launch {i}: {gap} launches without a comparison"
            );
        }
    }
}

#[test]
fn reprobe_every_takes_whole_numbers_from_1_and_else_the_default() {
    use crate::config::{Config, DEFAULT_REPROBE_EVERY, REPROBE_ENV};
    let parse_every = |v: &str| {
        Config::from_lookup(0, |k| (k == REPROBE_ENV).then(|| v.to_string())).reprobe_every
    };
    assert_eq!(parse_every("1"), 1);
    assert_eq!(parse_every(" 64 "), 64);
    assert_eq!(parse_every("65536"), 65536);
    for bad in ["0", "-3", "", "x", "16k", "65537", "99999999999"] {
        assert_eq!(parse_every(bad), DEFAULT_REPROBE_EVERY, "{bad:?}");
    }
    assert_eq!(
        Config::from_lookup(0, |_| None).reprobe_every,
        DEFAULT_REPROBE_EVERY
    );
}
