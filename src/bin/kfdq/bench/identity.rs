//! The node's identity and the calibration file `kfdq bench --write` writes: every measured
//! partition (`kfdq_calibration`, docs/hardware.md).

use std::path::{Path, PathBuf};

use kfdq::kfd::{Kfd, Node, Root};
use kfdq_calibration::{
    Calibration, Measured, MeasuredArbitration, NodeIdentity, PartitionCalibration,
};

use super::R;
use super::report::PartitionReport;
use crate::CliError;

/// gfx targets whose CWSR and scheduler the partition model describes: MI200 (gfx90a) and
/// MI300 (gfx940-gfx942), as `kfdq topology` and kfd-emu's presets know them.
pub const KNOWN_TARGETS: &[u32] = &[90010, 90400, 90401, 90402];

fn read_trimmed(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `rel` under the root, else on the host (the root of an emulator mount has its own
/// `proc/sys/kernel/osrelease`).
fn under_root_or_host(root: &Root, rel: &str) -> PathBuf {
    let p = root.path().join(rel);
    if p.exists() {
        p
    } else {
        Path::new("/").join(rel)
    }
}

/// The gfx target's name (`gfx942`), or the raw version when it has none.
pub fn target_name(node: &Node) -> String {
    node.gfx_version().map_or_else(
        || {
            format!(
                "gfx_target_version {}",
                node.prop("gfx_target_version").unwrap_or(0)
            )
        },
        |g| g.to_string(),
    )
}

/// The identity of `node` for the calibration file.
pub fn identity(kfd: &Kfd, node: &Node, report: &PartitionReport) -> NodeIdentity {
    let root = kfd.root();
    let product = node.render_minor().and_then(|m| {
        read_trimmed(
            &root
                .path()
                .join(format!("sys/class/drm/renderD{m}/device/product_name")),
        )
    });
    NodeIdentity {
        gpu_name: product.unwrap_or_else(|| node.name.clone()),
        gpu_id: report.gpu_id,
        gfx_target: report.gfx_target.clone(),
        gfx_target_version: node.prop("gfx_target_version").unwrap_or(0) as u32,
        cus: report.cus,
        wave_slots: report.wave_slots,
        kernel: read_trimmed(&under_root_or_host(root, "proc/sys/kernel/osrelease"))
            .unwrap_or_default(),
        mec_firmware: node.prop("fw_version").unwrap_or(0),
        sdma_firmware: node.prop("sdma_fw_version").unwrap_or(0),
        kfd_version: format!("{}.{}", kfd.version().major, kfd.version().minor),
        measured_with: format!("kfdq {} bench", env!("CARGO_PKG_VERSION")),
    }
}

/// The calibration file of the measured partitions (one `[[partition]]` each, in topology
/// order); refused when a partition gave no fit.
pub fn calibration(kfd: &Kfd, measured: &[(&Node, &PartitionReport)]) -> R<Calibration> {
    Ok(Calibration {
        format: kfdq_calibration::FORMAT,
        partitions: measured
            .iter()
            .map(|(n, r)| partition(kfd, n, r))
            .collect::<R<_>>()?,
    })
}

/// The calibration of one measured partition; refused when the fit is missing.
fn partition(kfd: &Kfd, node: &Node, report: &PartitionReport) -> R<PartitionCalibration> {
    let Some(fit) = &report.fit else {
        return Err(CliError::Refused(format!(
            "--write: gpu {} gave no CWSR fit (see \"not measured\" above), so there is no calibration to write",
            report.gpu_id
        )));
    };
    let arbitration = match report.arbitration.as_ref().map(|a| a.verdict) {
        Some("equal") => MeasuredArbitration::Equal,
        Some("pipe") => MeasuredArbitration::Pipe,
        Some("strict") => MeasuredArbitration::Strict,
        _ => MeasuredArbitration::None,
    };
    let ns = |v: f64| v.max(0.0).round() as u64;
    let (fixed, save, restore) = (
        ns(fit.fixed_ns),
        ns(fit.save_wave_ns),
        ns(fit.restore_wave_ns),
    );
    Ok(PartitionCalibration {
        node: identity(kfd, node, report),
        model: Measured {
            preempt_fixed_ns: fixed,
            save_wave_ns: save,
            restore_wave_ns: restore,
            arbitration,
            preempt_round_trip_ns: kfdq_calibration::round_trip_ns(
                fixed,
                save,
                restore,
                report.wave_slots,
            ),
            preempt_fixed_error_ns: ns(fit.fixed_error_ns),
            per_wave_error_ns: ns(fit.save_error_ns.max(fit.restore_error_ns)),
        },
    })
}

/// Refuses a `--write` target the calibration could not be written to, before anything is
/// measured: a directory, a file in a directory that does not exist, a place this user cannot
/// write (tried: the file opened for writing without truncating it, or a scratch file created
/// and removed beside it).
pub fn check_write_target(path: &Path) -> R<()> {
    let refuse = |why: String| {
        CliError::Usage(format!(
            "--write {}: {why}; nothing was measured",
            path.display()
        ))
    };
    if path.is_dir() {
        return Err(refuse(format!(
            "is a directory: name a file in it, e.g. --write {}",
            path.join("node.toml").display()
        )));
    }
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !dir.is_dir() {
        return Err(refuse(format!(
            "the directory {} does not exist: create it first (mkdir -p {})",
            dir.display(),
            dir.display()
        )));
    }
    let tried = if path.exists() {
        std::fs::OpenOptions::new().write(true).open(path).map(drop)
    } else {
        tempfile::NamedTempFile::new_in(dir).map(drop)
    };
    tried.map_err(|e| refuse(format!("cannot be written ({e})")))
}
