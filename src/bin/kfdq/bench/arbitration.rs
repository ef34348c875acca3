//! The arbitration between priority bands: two busy queues race for the slots a full-partition
//! gate dispatch frees all at once.
//!
//! A gate dispatch holds every wave slot but one; a low and a high queue each queue two partitions' worth
//! of work-groups behind it (the low one first). When the gate ends, a dispatcher that prefers
//! the higher queue runs it first (it ends after 2 rounds, the low one after 4: ratio 0.5); one
//! that shares slots equally ends both after about 4 (ratio 1). Two races: different pipe bands
//! (priority 2 vs 13: CS_LOW vs CS_HIGH) and one band (8 vs 10, CS_MEDIUM). The model's
//! vocabulary (docs/gfx-model.md): `pipe` prefers only across bands, `strict` also inside one,
//! `equal` neither.

use serde::Serialize;

use super::R;
use super::plan::Plan;
use super::probe::Lane;
use super::stats::Summary;

/// Gate time, in windows: long enough for the host to submit both racers and the packet
/// processor to see them before it ends, on a loaded host too.
const GATE_FACTOR: u64 = 4;
/// Attempts per pair, in multiples of `--repeat`, before the races that were discarded (a late
/// host) leave the verdict open.
const ATTEMPTS: u32 = 3;
/// Work-group time of the racers, relative to the window.
const ROUND_DIVISOR: u64 = 20;

/// What the races showed.
#[derive(Debug, Clone, Serialize)]
pub struct ArbitrationResult {
    /// `equal`, `pipe`, `strict` or `none` (none of the model's hypotheses).
    pub verdict: &'static str,
    /// (high end - gate end) / (low end - gate end), across bands (priority 2 vs 13).
    pub across_bands: Summary,
    /// The same inside one band (priority 8 vs 10).
    pub inside_band: Summary,
    /// Races discarded: the host submitted the racers too late, or the high queue did not
    /// start when the gate ended.
    pub discarded: u32,
}

/// A ratio below this prefers the higher queue; between `SHARED` and its inverse shares.
const PREFERS: f64 = 0.75;
const SHARED: f64 = 0.85;

enum Seen {
    Prefers,
    Shares,
    Unclear,
}

fn classify(ratio: f64) -> Seen {
    if ratio < PREFERS {
        Seen::Prefers
    } else if ratio > SHARED && ratio < 1.0 / SHARED {
        Seen::Shares
    } else {
        Seen::Unclear
    }
}

/// Runs the races on `plan`'s partition.
pub fn run(plan: &Plan<'_>) -> R<Option<ArbitrationResult>> {
    let kfd = plan.kfd;
    let mut gate = Lane::new(kfd, plan.gpu, plan.priority, plan.spin)?;
    let mut discarded = 0;
    let mut ratios = [Vec::new(), Vec::new()];
    for (k, (lo, hi)) in [(2u32, 13u32), (8, 10)].into_iter().enumerate() {
        let mut low = Lane::new(kfd, plan.gpu, lo, plan.spin)?;
        let mut high = Lane::new(kfd, plan.gpu, hi, plan.spin)?;
        for _ in 0..plan.repeat * ATTEMPTS {
            if ratios[k].len() >= plan.repeat as usize {
                break;
            }
            plan.progress(&format!(
                "arbitration, priority {lo} vs {hi}: race {}/{}",
                ratios[k].len() + 1,
                plan.repeat
            ));
            let round = (plan.window_ns / ROUND_DIVISOR).max(1);
            // One slot stays free for the gate's marker (probe.rs); a racer's first work-group may
            // take it early, one of 2 x slots.
            gate.start(plan.slots - 1, plan.window_ns * GATE_FACTOR)?;
            low.submit(2 * plan.slots, round, false)?;
            high.submit(2 * plan.slots, round, false)?;
            let late = gate.started_at.elapsed().as_nanos() as f64
                > (plan.window_ns * GATE_FACTOR) as f64 * 0.8;
            let (_, gate_end) = gate.finish()?;
            let (_, low_end) = low.finish()?;
            let (high_start, high_end) = high.finish()?;
            if late || high_start > gate_end + round / 4 || low_end <= gate_end {
                discarded += 1;
                continue;
            }
            ratios[k].push((high_end - gate_end) as f64 / (low_end - gate_end) as f64);
        }
    }
    let (Some(across), Some(inside)) = (Summary::of(&ratios[0]), Summary::of(&ratios[1])) else {
        return Ok(None);
    };
    let verdict = match (classify(across.p50), classify(inside.p50)) {
        (Seen::Shares, Seen::Shares) => "equal",
        (Seen::Prefers, Seen::Shares) => "pipe",
        (Seen::Prefers, Seen::Prefers) => "strict",
        _ => "none",
    };
    Ok(Some(ArbitrationResult {
        verdict,
        across_bands: across,
        inside_band: inside,
        discarded,
    }))
}
