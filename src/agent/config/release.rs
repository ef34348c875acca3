//! The release rule of `[agent]`: `release`, `hysteresis_ms` and the cost rule's parameters.

use super::agent::FileAgent;
use super::ms;
use crate::agent::setting::SettingError;
use crate::policy::{CostRelease, Release};

/// The release rule of `[agent]`: `release = "cost"` (the default) with its parameters, or
/// `"hysteresis"`, which `hysteresis_ms` alone also selects (the old fixed rule).
pub(super) fn release(a: &FileAgent) -> Result<Release, SettingError> {
    let cost_keys = [
        ("preempt_round_trip_us", a.preempt_round_trip_us.is_some()),
        ("release_k", a.release_k.is_some()),
        ("release_epsilon", a.release_epsilon.is_some()),
        ("release_max_hold_ms", a.release_max_hold_ms.is_some()),
        ("release_history", a.release_history.is_some()),
        ("release_min_history", a.release_min_history.is_some()),
    ];
    let named: Option<&str> = a.release.as_deref().map(str::trim);
    let hysteresis = match named {
        None => a.hysteresis_ms.is_some(),
        Some(r) if r.eq_ignore_ascii_case("hysteresis") => true,
        Some(r) if r.eq_ignore_ascii_case("cost") => {
            if a.hysteresis_ms.is_some() {
                return Err(SettingError::CostAndHysteresis);
            }
            false
        }
        Some(r) => {
            return Err(SettingError::UnknownRelease(r.into()));
        }
    };
    if hysteresis {
        if let Some((key, _)) = cost_keys.iter().find(|(_, set)| *set) {
            return Err(SettingError::CostKeyUnderHysteresis(key));
        }
        return Ok(Release::Hysteresis);
    }
    let mut c = CostRelease::default();
    if let Some(v) = a.preempt_round_trip_us {
        if !(v.is_finite() && (0.0..=1e6).contains(&v)) {
            return Err(SettingError::RoundTrip(v));
        }
        c.round_trip_ns = (v * 1e3) as u64;
    }
    if let Some(v) = a.release_k {
        c.k = v;
    }
    if let Some(v) = a.release_epsilon {
        c.epsilon = v;
    }
    if let Some(v) = a.release_max_hold_ms {
        c.max_hold_ns = ms(v, "release_max_hold_ms")?;
    }
    if let Some(v) = a.release_history {
        c.history = v;
        c.min_history = c.min_history.min(v);
    }
    if let Some(v) = a.release_min_history {
        c.min_history = v;
    }
    c.validate()?;
    Ok(Release::Cost(c))
}
