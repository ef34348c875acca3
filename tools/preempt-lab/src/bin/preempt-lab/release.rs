//! `sim --release` and the cost rule's parameters.

use kfdq::policy::{CostRelease, Release};
use preempt_lab::scenario::Scenario;
use preempt_lab::sweep;

/// The release rule options of `sim`: `--release`, `--hysteresis-ms` and the cost rule's
/// parameters (C µs, k, epsilon, max hold ms), each checked as the agent checks its file.
pub fn apply_release(
    sc: &mut Scenario,
    rule: Option<&str>,
    hysteresis_ms: Option<f64>,
    [round_trip_us, k, epsilon, max_hold_ms]: [Option<f64>; 4],
) -> Result<(), String> {
    match rule.map(str::trim) {
        None => {}
        Some("cost") => sc.policy.release = Release::Cost(CostRelease::default()),
        Some("hysteresis") => sc.policy.release = Release::Hysteresis,
        Some(other) => {
            return Err(format!(
                "--release {other:?}: use cost (the higher class's idle gaps against a preempt's cost) or hysteresis (a fixed hold)"
            ));
        }
    }
    if let Some(ms) = hysteresis_ms {
        if !(ms.is_finite() && ms >= 0.0) {
            return Err(format!("--hysteresis-ms {ms} must be 0 or more"));
        }
        sc.policy.hysteresis_ns = (ms * 1e6) as u64;
    }
    if [round_trip_us, k, epsilon, max_hold_ms]
        .iter()
        .all(Option::is_none)
    {
        return Ok(());
    }
    let c = sweep::cost_rule(sc).map_err(|e| format!("--round-trip-us/--release-*: {e}"))?;
    if let Some(v) = round_trip_us {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("--round-trip-us {v} must be 0 or more"));
        }
        c.round_trip_ns = (v * 1e3) as u64;
    }
    if let Some(v) = k {
        c.k = v;
    }
    if let Some(v) = epsilon {
        c.epsilon = v;
    }
    if let Some(v) = max_hold_ms {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("--release-max-hold-ms {v} must be 0 or more"));
        }
        c.max_hold_ns = (v * 1e6) as u64;
    }
    c.validate().map_err(|e| e.to_string())
}
