//! The reaction chain, from timestamps taken where things happen: a latency request's start
//! (the client's CLOCK_MONOTONIC before its first launch) -> the moment the last of the batch
//! job's queues stopped being runnable (the emulator's time of the UPDATE_QUEUE or DBG_TRAP
//! SUSPEND_QUEUES that stopped it, `stopped_at_us` in its stats.json).

use serde::Serialize;

/// One batch queue's times, µs on CLOCK_MONOTONIC.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueTimes {
    /// When it stopped being runnable.
    pub stopped_us: Vec<f64>,
    /// When it became runnable again.
    pub runnable_us: Vec<f64>,
    /// Runnable when the times were read.
    pub runnable_now: bool,
}

/// What the pairing found over one phase's requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Reactions {
    /// Request start -> the last batch queue stopped, µs, for each request that found the
    /// batch job runnable at its start and saw it stop before the next request started.
    pub reaction_us: Vec<f64>,
    /// Requests that found the batch job already stopped at their start (a preemption still
    /// held from an earlier request).
    pub found_stopped: usize,
    /// Requests that found it runnable and saw it keep running until the next request.
    pub not_stopped: usize,
    /// The paired requests' times, in `reaction_us`'s order (for the stages, `stages.rs`).
    #[serde(skip)]
    pub pairs: Vec<Paired>,
}

/// One paired request: its start, the batch job's stop (the emulator's), and the next
/// request's start (infinite for the last one), µs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Paired {
    /// The request's start.
    pub start_us: f64,
    /// The last batch queue stopped.
    pub stopped_us: f64,
    /// The next request's start.
    pub next_us: f64,
}

/// Whether the whole batch job (every queue) is stopped, from each time that changes it on.
fn all_stopped_timeline(queues: &[QueueTimes]) -> (bool, Vec<(f64, bool)>) {
    // (time, queue, runnable after): a queue's state before its first time is the opposite.
    let mut events: Vec<(f64, usize, bool)> = Vec::new();
    let mut runnable: Vec<bool> = Vec::with_capacity(queues.len());
    for (i, q) in queues.iter().enumerate() {
        let first = q.stopped_us.iter().map(|t| (*t, i, false));
        let mut mine: Vec<(f64, usize, bool)> = first
            .chain(q.runnable_us.iter().map(|t| (*t, i, true)))
            .collect();
        mine.sort_by(|a, b| a.0.total_cmp(&b.0));
        runnable.push(mine.first().map_or(q.runnable_now, |e| !e.2));
        events.extend(mine);
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let stopped = |r: &[bool]| !r.is_empty() && r.iter().all(|x| !x);
    let initial = stopped(&runnable);
    let mut now = initial;
    let mut changes = Vec::new();
    for (t, i, r) in events {
        runnable[i] = r;
        let s = stopped(&runnable);
        if s != now {
            changes.push((t, s));
            now = s;
        }
    }
    (initial, changes)
}

/// Pairs each request start (in the order issued) with the batch queues' stop times: the
/// reaction is the time the LAST batch queue stopped being runnable, at or after the start and
/// before the next request's start, minus the start; counted only for requests that found the
/// batch job runnable at their start.
pub fn pair(starts_us: &[f64], queues: &[QueueTimes]) -> Reactions {
    let (initial, changes) = all_stopped_timeline(queues);
    let mut out = Reactions::default();
    if queues.is_empty() {
        return out;
    }
    for (i, &s) in starts_us.iter().enumerate() {
        let next = starts_us.get(i + 1).copied().unwrap_or(f64::INFINITY);
        // The state just before `s`: a stop at exactly `s` is a reaction to this request.
        let before = changes.partition_point(|c| c.0 < s);
        let stopped_at_start = before.checked_sub(1).map_or(initial, |j| changes[j].1);
        if stopped_at_start {
            out.found_stopped += 1;
            continue;
        }
        match changes[before..].iter().find(|c| c.1) {
            Some(&(t, _)) if t < next => {
                out.reaction_us.push(t - s);
                out.pairs.push(Paired {
                    start_us: s,
                    stopped_us: t,
                    next_us: next,
                });
            }
            _ => out.not_stopped += 1,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(stopped: &[f64], runnable: &[f64]) -> QueueTimes {
        QueueTimes {
            stopped_us: stopped.to_vec(),
            runnable_us: runnable.to_vec(),
            runnable_now: true,
        }
    }

    #[test]
    fn the_reaction_ends_when_the_last_queue_stops() {
        // Two queues: request 0 at 100 stops them at 150 and 180 (reaction 80), released at
        // 300; request 1 at 1000 stops them at 1000 (an exact tie counts) and 1040.
        let qs = [
            q(&[150.0, 1000.0], &[300.0, 1200.0]),
            q(&[180.0, 1040.0], &[300.0, 1200.0]),
        ];
        let r = pair(&[100.0, 1000.0], &qs);
        assert_eq!(r.reaction_us, [80.0, 40.0]);
        assert_eq!(
            (
                r.pairs[0].stopped_us,
                r.pairs[0].next_us,
                r.pairs[1].next_us
            ),
            (180.0, 1000.0, f64::INFINITY)
        );
        assert_eq!((r.found_stopped, r.not_stopped), (0, 0));
    }

    #[test]
    fn requests_that_find_the_job_stopped_or_see_no_stop_are_counted_apart() {
        // Stopped at 150 for request 0 and still stopped at request 1 (200); released at 500;
        // request 2 (600) sees no stop before request 3 (900), which sees one at 950.
        let qs = [q(&[150.0, 950.0], &[500.0])];
        let r = pair(&[100.0, 200.0, 600.0, 900.0], &qs);
        assert_eq!(r.reaction_us, [50.0, 50.0]);
        assert_eq!((r.found_stopped, r.not_stopped), (1, 1));
    }

    #[test]
    fn a_queue_that_never_changed_keeps_the_job_runnable() {
        // One queue stops, the other never does: the job never stopped as a whole.
        let qs = [q(&[150.0], &[300.0]), q(&[], &[])];
        let r = pair(&[100.0], &qs);
        assert!(r.reaction_us.is_empty());
        assert_eq!(r.not_stopped, 1);
        // Without queues there is nothing to pair.
        assert_eq!(pair(&[100.0], &[]), Reactions::default());
    }
}
