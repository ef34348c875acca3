//! `[agent]`: the socket, the admin group, the release rule and its parameters (with
//! `release.rs` and `calibration.rs`), edges, the lease and the connection limits; and
//! `default_class`, checked once the classes are known.

use std::path::PathBuf;

use serde::Deserialize;

use super::lookup::group_id;
use super::{AgentConfig, ConfigError, Doc, LEASE_RANGE_MS, ms};
use crate::policy::Release;

/// The section as written.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAgent {
    socket: Option<PathBuf>,
    socket_group: Option<String>,
    socket_mode: Option<String>,
    admin_group: Option<String>,
    default_class: Option<toml::Spanned<String>>,
    pub(super) release: Option<String>,
    pub(super) hysteresis_ms: Option<f64>,
    pub(super) preempt_round_trip_us: Option<f64>,
    calibration: Option<toml::Spanned<PathBuf>>,
    pub(super) release_k: Option<f64>,
    pub(super) release_epsilon: Option<f64>,
    pub(super) release_max_hold_ms: Option<f64>,
    pub(super) release_history: Option<u32>,
    pub(super) release_min_history: Option<u32>,
    min_preempt_interval_ms: Option<f64>,
    grace_period: Option<u32>,
    edges: Option<bool>,
    direct_edges: Option<bool>,
    prepared_edges: Option<bool>,
    lease_ms: Option<u32>,
    max_connections: Option<usize>,
    control_requests_per_s: Option<f64>,
}

/// Applies the section (`line`: its header's, for the errors of keys without a position of
/// their own) to `cfg`.
pub(super) fn apply(
    a: &FileAgent,
    line: usize,
    doc: &Doc<'_>,
    cfg: &mut AgentConfig,
) -> Result<(), ConfigError> {
    let at_agent = |m: String| doc.invalid(line, format!("[agent]: {m}"));
    if let Some(p) = &a.socket {
        if !p.is_absolute() {
            return Err(at_agent(format!(
                "socket = {:?} must be an absolute path",
                p.display()
            )));
        }
        cfg.socket.path = p.clone();
    }
    if let Some(g) = &a.socket_group {
        cfg.socket.group = Some((g.clone(), group_id(g).map_err(|e| at_agent(e.to_string()))?));
    }
    if let Some(m) = &a.socket_mode {
        let v = u32::from_str_radix(m.trim_start_matches("0o"), 8)
            .ok()
            .filter(|v| *v <= 0o777)
            .ok_or_else(|| {
                at_agent(format!(
                    "socket_mode = {m:?} is not an octal mode such as \"0660\""
                ))
            })?;
        cfg.socket.mode = v;
    }
    if let Some(g) = &a.admin_group {
        cfg.admin_group = Some((g.clone(), group_id(g).map_err(|e| at_agent(e.to_string()))?));
    }
    cfg.policy.release = super::release::release(a).map_err(|e| at_agent(e.to_string()))?;
    if let Some(file) = &a.calibration {
        let (round_trip_ns, target) = super::calibration::read(a, file.get_ref(), doc.path)
            .map_err(|e| doc.invalid(doc.line(file.span()), format!("[agent]: {e}")))?;
        if let Release::Cost(c) = &mut cfg.policy.release {
            c.round_trip_ns = round_trip_ns;
        }
        cfg.calibration = Some((file.get_ref().clone(), target));
    }
    if let Some(v) = a.hysteresis_ms {
        cfg.policy.hysteresis_ns = ms(v, "hysteresis_ms").map_err(|e| at_agent(e.to_string()))?;
    }
    if let Some(v) = a.min_preempt_interval_ms {
        cfg.policy.min_preempt_interval_ns =
            ms(v, "min_preempt_interval_ms").map_err(|e| at_agent(e.to_string()))?;
    }
    if let Some(v) = a.grace_period {
        cfg.grace_period = v;
    }
    if let Some(v) = a.edges {
        cfg.edges = v;
    }
    // Unset, direct edges follow `edges` (the board carries the edges the launches report).
    cfg.direct_edges = cfg.edges;
    if let Some(v) = a.direct_edges {
        if v && !cfg.edges {
            return Err(at_agent(
                "direct_edges = true needs edges = true: the board carries the busy edges the launches report (set edges = true, or direct_edges = false)".into(),
            ));
        }
        cfg.direct_edges = v;
    }
    if let Some(v) = a.prepared_edges {
        cfg.prepared_edges = v;
    }
    if let Some(v) = a.lease_ms {
        if !LEASE_RANGE_MS.contains(&v) {
            return Err(at_agent(format!(
                "lease_ms = {v} is outside {}..={}: a shorter lease makes a loaded agent's preemptions flap, a longer one lets a hung agent starve preempted jobs (default {})",
                LEASE_RANGE_MS.start(),
                LEASE_RANGE_MS.end(),
                crate::proto::DEFAULT_LEASE.as_millis()
            )));
        }
        cfg.lease = std::time::Duration::from_millis(v.into());
    }
    if let Some(v) = a.max_connections {
        if v == 0 {
            return Err(at_agent("max_connections must be at least 1".into()));
        }
        cfg.max_connections = v;
    }
    if let Some(v) = a.control_requests_per_s {
        if !(v.is_finite() && v > 0.0) {
            return Err(at_agent(format!(
                "control_requests_per_s = {v} must be above 0"
            )));
        }
        cfg.control_rate = v;
    }
    Ok(())
}

/// `default_class`, once the classes are parsed: a configured class; unset, `normal` if
/// configured, else the lowest-ranked class.
pub(super) fn default_class(
    a: &FileAgent,
    doc: &Doc<'_>,
    cfg: &mut AgentConfig,
) -> Result<(), ConfigError> {
    match &a.default_class {
        Some(d) => {
            if !cfg.classes.iter().any(|c| &c.name == d.get_ref()) {
                return Err(doc.invalid(
                    doc.line(d.span()),
                    format!(
                        "default_class {:?} is not a configured class (classes: {})",
                        d.get_ref(),
                        cfg.class_names().join(", ")
                    ),
                ));
            }
            cfg.default_class = d.get_ref().clone();
        }
        None => {
            if !cfg.classes.iter().any(|c| c.name == cfg.default_class) {
                // Without a `normal` class, the lowest-ranked one.
                if let Some(low) = cfg.policy.classes.iter().min_by_key(|c| c.rank) {
                    cfg.default_class = low.name.clone();
                }
            }
        }
    }
    Ok(())
}
