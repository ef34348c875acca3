//! `sim --calibration FILE`: a node's measured costs applied to the partition model.

use preempt_lab::scenario::Scenario;

/// The partition model's gfx target (`gfx_target_version`): the lab's partitions are gfx942.
const LAB_TARGET_VERSION: u32 = 90402;

/// `sim --calibration FILE`: the node's measured parameters; returns the file for the cost
/// rule's C (set once the release options are applied).
pub fn apply_calibration(
    sc: &mut Scenario,
    path: &std::path::Path,
) -> Result<kfdq_calibration::Calibration, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--calibration {}: {e}", path.display()))?;
    let cal = kfdq_calibration::Calibration::parse(&text)
        .map_err(|e| format!("--calibration {}: {e}", path.display()))?;
    for (i, p) in cal.partitions.iter().enumerate() {
        if let Err(kfdq_calibration::CalibrationError::OtherGpu { line, .. }) =
            p.check_target(&text, i, LAB_TARGET_VERSION)
        {
            // Not "measure on a node of this kind": the lab models gfx942 partitions only.
            return Err(format!(
                "--calibration {}: line {line}: gfx_target_version = {}: the file was measured on {}, and the lab models gfx942 partitions only (gfx_target_version {LAB_TARGET_VERSION}): another kind's costs would be read as a gfx942's. Replay the file on the emulator of its kind instead (kfd-emu --preset mi210 --calibration FILE for gfx90a, docs/kfd-emulator.md), or give the lab its round trip by hand (sim --round-trip-us {:.0}), knowing the partition shape stays gfx942's",
                path.display(),
                p.node.gfx_target_version,
                p.node.gfx_target,
                p.model.preempt_round_trip_ns as f64 / 1e3
            ));
        }
    }
    let first = cal.first();
    sc.params = sc.params.calibrated(&first.model);
    // Say what was taken from the file (on stderr: stdout is the result).
    eprintln!(
        "preempt-lab: --calibration {}: {} ({}, {}), preempt_fixed_ns {}, save_wave_ns {}, restore_wave_ns {}, arbitration {}, C {} µs",
        path.display(),
        first.node.gpu_name,
        first.node.gfx_target,
        first.node.measured_with,
        first.model.preempt_fixed_ns,
        first.model.save_wave_ns,
        first.model.restore_wave_ns,
        first.model.arbitration.as_str(),
        first.model.preempt_round_trip_ns as f64 / 1e3
    );
    if let Some(w) = first.round_trip_disagreement(&text, 0) {
        eprintln!(
            "preempt-lab: warning: --calibration {}: {w}",
            path.display()
        );
    }
    Ok(cal)
}
