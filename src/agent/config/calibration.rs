//! `[agent] calibration`: reading the node's calibration file (`kfdq bench --write`) for the
//! cost rule's C and the GPU kind it was measured on.

use std::path::{Path, PathBuf};

use super::{AgentConfig, ConfigError, FileAgent};
use crate::agent::setting::SettingError;

/// `[agent] calibration` in effect: what `kfdqd --check`, the agent's log and `kfdq status`
/// say of it.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationInUse {
    /// The file as the configuration names it (relative to the configuration's directory).
    pub file: PathBuf,
    /// 1-based line of the `calibration` key in the configuration.
    pub line: usize,
    /// The GPU kind it was measured on (`gfx942`) and its `gfx_target_version` (kfdqd refuses
    /// it on another kind, [`AgentConfig::load_for_node`]).
    pub gfx_target: String,
    /// amdkfd's `gfx_target_version` of that kind.
    pub gfx_target_version: u32,
    /// Its `preempt_round_trip_ns`: the cost rule's C.
    pub round_trip_ns: u64,
    /// Its round trip disagrees with its own fit (the line and both numbers): logged at load,
    /// printed by `kfdqd --check`, shown by `kfdq status`. The file's value is used.
    pub warning: Option<String>,
}

/// `[agent] calibration = FILE` (relative to the configuration's directory, its key at
/// `line`): the cost rule's C from the node's measured preempt and restore, and the GPU kind
/// it was measured on.
pub(super) fn read(
    a: &FileAgent,
    file: &Path,
    line: usize,
    config: Option<&Path>,
) -> Result<CalibrationInUse, SettingError> {
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
    Ok(CalibrationInUse {
        file: file.to_owned(),
        line,
        gfx_target: first.node.gfx_target.clone(),
        gfx_target_version: first.node.gfx_target_version,
        round_trip_ns: first.model.preempt_round_trip_ns,
        warning: first
            .round_trip_disagreement(&text, 0)
            .map(|w| format!("calibration = {}: {w}", full.display())),
    })
}

/// Refuses `[agent] calibration` measured on another GPU kind than the partitions under `root`,
/// naming the configuration's line and both kinds. A node without readable topology (no driver
/// yet) is checked when it has one.
pub(super) fn check_node(cfg: &AgentConfig, root: &Path) -> Result<(), ConfigError> {
    let Some(cal) = &cfg.calibration else {
        return Ok(());
    };
    let Ok(topo) = crate::kfd::Topology::read(&crate::kfd::Root::new(root)) else {
        return Ok(());
    };
    let Some(here) = topo.gpus().find(|n| {
        n.prop("gfx_target_version")
            .is_some_and(|v| v != u64::from(cal.gfx_target_version))
    }) else {
        return Ok(());
    };
    let version = here.prop("gfx_target_version").unwrap_or(0);
    let name = here
        .gfx_version()
        .map_or_else(|| "an unnamed GPU".to_owned(), |g| g.to_string());
    Err(ConfigError::Invalid {
        path: cfg.source.clone().unwrap_or_else(|| "<config>".into()),
        line: cal.line,
        message: format!(
            "[agent]: calibration = {}: the file was measured on {} (gfx_target_version {}), this node's GPU is {name} (gfx_target_version {version}): another GPU kind's preempt costs; run `kfdq bench --write FILE` on this node and name that file",
            cal.file.display(),
            cal.gfx_target,
            cal.gfx_target_version
        ),
    })
}
