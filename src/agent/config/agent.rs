//! `[agent]`: the socket, the admin group, the release rule and its parameters (with
//! `release.rs` and `calibration.rs`), edges, the lease and the connection limits; and
//! `default_class`, checked once the classes are known.

use super::lookup::group_id;
use super::{AgentConfig, ConfigError, Doc, FileAgent, LEASE_RANGE_MS, ms};
use crate::policy::Release;

/// `edges = false`: the activity-samples-only mode is gone.
const EDGES_OFF: &str = "edges = false is no longer supported: processes of classes that preempt others always report their busy edges from the launch (the activity-samples-only mode was removed); remove the line (direct_edges = false keeps every preemption on the agent's commands)";
/// `edges = true`: what it asked for is how the agent runs; the line is ignored.
const EDGES_ON: &str = "edges = true is no longer a setting (busy edges are always on); the line is ignored: remove it";
/// `prepared_edges`: removed (they did not pay on the default path); either value leaves the
/// agent as it runs, so the line is ignored.
const PREPARED_GONE: &str = "prepared_edges is no longer a setting (prepared edges were removed; every edge is decided on its path); the line is ignored: remove it";

/// The removed settings (docs/agent.md, "One path per job"): `edges = false` is refused with
/// the fix; `edges = true` and `prepared_edges` are ignored with a warning naming the line.
fn removed(a: &FileAgent, doc: &Doc<'_>) -> Result<(), ConfigError> {
    let at = |s: &toml::Spanned<bool>, m: &str| {
        format!(
            "{}:{}: [agent]: {m}",
            doc.shown.display(),
            doc.line(s.span())
        )
    };
    if let Some(e) = &a.edges {
        if !*e.get_ref() {
            return Err(doc.invalid(doc.line(e.span()), format!("[agent]: {EDGES_OFF}")));
        }
        tracing::warn!("{}", at(e, EDGES_ON));
    }
    if let Some(p) = &a.prepared_edges {
        tracing::warn!("{}", at(p, PREPARED_GONE));
    }
    Ok(())
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
    if let Some(p) = &a.admin_socket {
        let public = cfg
            .socket
            .path
            .parent()
            .unwrap_or(std::path::Path::new("/"));
        if !p.is_absolute() {
            return Err(at_agent(format!(
                "admin_socket = {:?} must be an absolute path",
                p.display()
            )));
        }
        if p.starts_with(public) {
            return Err(at_agent(format!(
                "admin_socket = {:?} is inside the socket's directory {}, which the device plugin mounts into pods: put it in a directory of its own (e.g. /run/kfdqd/admin.sock)",
                p.display(),
                public.display()
            )));
        }
        cfg.admin_socket = Some(p.clone());
    }
    if let Some(g) = &a.admin_group {
        cfg.admin_group = Some((g.clone(), group_id(g).map_err(|e| at_agent(e.to_string()))?));
    }
    cfg.policy.release = super::release::release(a).map_err(|e| at_agent(e.to_string()))?;
    if let Some(file) = &a.calibration {
        let line = doc.line(file.span());
        let cal = super::calibration::read(a, file.get_ref(), line, doc.path)
            .map_err(|e| doc.invalid(line, format!("[agent]: {e}")))?;
        if let Release::Cost(c) = &mut cfg.policy.release {
            c.round_trip_ns = cal.round_trip_ns;
        }
        cfg.calibration = Some(cal);
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
    removed(a, doc)?;
    if let Some(v) = a.direct_edges {
        cfg.direct_edges = v;
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
    if let Some(v) = a.max_connections_per_uid {
        if v == 0 {
            return Err(at_agent(
                "max_connections_per_uid must be at least 1 (each process under the shim holds one connection)".into(),
            ));
        }
        cfg.max_connections_per_uid = v;
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
