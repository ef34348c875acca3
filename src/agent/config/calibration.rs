//! `[agent] calibration`: reading the node's calibration file (`kfdq bench --write`) for the
//! cost rule's C and the GPU kind it was measured on.

use std::path::Path;

use super::{AgentConfig, ConfigError, FileAgent};
use crate::agent::setting::SettingError;

/// `[agent] calibration = FILE` (relative to the configuration's directory): the cost rule's C
/// from the node's measured preempt and restore, and the GPU kind it was measured on.
pub(super) fn read(
    a: &FileAgent,
    file: &Path,
    config: Option<&Path>,
) -> Result<(u64, u32), SettingError> {
    let fail = |message: String| SettingError::Calibration {
        path: file.to_owned(),
        message,
    };
    if a.preempt_round_trip_us.is_some() {
        return Err(fail(
            "preempt_round_trip_us sets C as well; remove one".into(),
        ));
    }
    if a.release.as_deref().map(str::trim) == Some("hysteresis") || a.hysteresis_ms.is_some() {
        return Err(SettingError::CostKeyUnderHysteresis("calibration"));
    }
    let full = config
        .and_then(Path::parent)
        .map_or_else(|| file.to_owned(), |d| d.join(file));
    let text = std::fs::read_to_string(&full).map_err(|e| fail(e.to_string()))?;
    let cal = kfdq_calibration::Calibration::parse(&text).map_err(|e| fail(e.to_string()))?;
    // The partitions of one node are of one kind (kfdqd checks it against the node's GPUs);
    // the cost rule has one C: the first partition's.
    let first = cal.first();
    if let Some(other) = cal
        .partitions
        .iter()
        .find(|p| p.node.gfx_target_version != first.node.gfx_target_version)
    {
        return Err(fail(format!(
            "its partitions were measured on different GPU kinds ({} and {}); keep the partitions of this node's kind",
            first.node.gfx_target, other.node.gfx_target
        )));
    }
    Ok((
        first.model.preempt_round_trip_ns,
        first.node.gfx_target_version,
    ))
}

/// Refuses `[agent] calibration` measured on another GPU kind than the partitions under `root`.
/// A node without readable topology (no driver yet) is checked when it has one.
pub(super) fn check_node(cfg: &AgentConfig, root: &Path) -> Result<(), ConfigError> {
    let Some((file, target)) = &cfg.calibration else {
        return Ok(());
    };
    let Ok(topo) = crate::kfd::Topology::read(&crate::kfd::Root::new(root)) else {
        return Ok(());
    };
    match topo
        .gpus()
        .filter_map(|n| n.prop("gfx_target_version"))
        .find(|v| *v != u64::from(*target))
    {
        None => Ok(()),
        Some(here) => Err(ConfigError::Node {
            path: cfg.source.clone().unwrap_or_else(|| "<config>".into()),
            message: format!(
                "calibration = {}: measured on gfx_target_version {target}, this node's GPU is {here}; run `kfdq bench --write FILE` on this node",
                file.display()
            ),
        }),
    }
}
