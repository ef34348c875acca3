//! The calibration file: one node's measured parameters in the model's vocabulary, written by
//! `kfdq bench --write FILE` and read by `kfd-emu --calibration`, `preempt-lab sim
//! --calibration` and the agent's release rule (docs/hardware.md).
//!
//! A leaf: the format and its checks only, so that the product (kfdq, kfdqd) reads the file
//! without linking the partition model; gfx-model applies a file to its parameters
//! (`Params::calibrated`). Pure: [`Calibration::parse`] takes the file's text, the callers read
//! it. A malformed file is refused with its line and reason; a file from another GPU kind with
//! [`Calibration::check_target`].
//!
//! This file holds the format and its checks; `error.rs` the reasons a file is refused and
//! the line each points at; `tests.rs` the unit tests.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

use serde::{Deserialize, Serialize};

mod error;
#[cfg(test)]
mod tests;

pub use error::CalibrationError;
use error::{key_line, malformed, value_error};

/// The format version this crate writes: one `[[partition]]` table per measured partition.
pub const FORMAT: u32 = 2;
/// The first format (one partition, `[node]` and `[model]` at the top level): still read, as a
/// node of one partition.
pub const FORMAT_ONE_PARTITION: u32 = 1;

/// A node's calibration (the TOML file): every partition `kfdq bench` measured, in the order
/// of the node's topology.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// [`FORMAT`] (or [`FORMAT_ONE_PARTITION`] for a file of the first format).
    pub format: u32,
    /// The measured partitions (at least one), as `[[partition]]` tables.
    #[serde(rename = "partition")]
    pub partitions: Vec<PartitionCalibration>,
}

/// One measured partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionCalibration {
    /// Which node, partition and software measured it.
    pub node: NodeIdentity,
    /// The measured parameters.
    pub model: Measured,
}

/// A file of the first format.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FormatOne {
    #[allow(dead_code)]
    format: u32,
    node: NodeIdentity,
    model: Measured,
}

/// Only the format key, to choose the layout.
#[derive(Deserialize)]
struct Head {
    format: u32,
}

/// The node a calibration was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeIdentity {
    /// The GPU's name as the node reports it (`product_name`, else the topology node's name).
    pub gpu_name: String,
    /// The partition's `gpu_id` (`kfdq topology`); 0 in a file of the first format.
    #[serde(default)]
    pub gpu_id: u32,
    /// The gfx target, e.g. `gfx942`.
    pub gfx_target: String,
    /// amdkfd's `gfx_target_version` (90402 for gfx942): what a reader checks its GPU against.
    pub gfx_target_version: u32,
    /// CUs of the measured partition.
    pub cus: u32,
    /// Wave slots of the measured partition (CUs x waves per CU).
    pub wave_slots: u32,
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// The MEC firmware version (the node's `fw_version` property).
    pub mec_firmware: u64,
    /// The SDMA firmware version (`sdma_fw_version`).
    pub sdma_firmware: u64,
    /// The amdkfd interface version, `major.minor`.
    pub kfd_version: String,
    /// What measured it, e.g. `kfdq 0.1.0 bench`.
    pub measured_with: String,
}

/// The parameters a calibration sets (docs/gfx-model.md, "Parameters (named guesses)").
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measured {
    /// `Params::preempt_fixed_ns`: the stall of a device-wide preempt without waves to save.
    pub preempt_fixed_ns: u64,
    /// `Params::save_wave_ns`: CWSR save cost per wave.
    pub save_wave_ns: u64,
    /// `Params::restore_wave_ns`: CWSR restore cost per wave.
    pub restore_wave_ns: u64,
    /// The arbitration between priority bands the node showed; `none` when it matched none of
    /// the model's hypotheses (the model's own default is then kept).
    pub arbitration: MeasuredArbitration,
    /// The cost rule's `C` (docs/policy.md): two device-wide preempts plus the save and the
    /// restore of the partition's wave slots, `2 x fixed + (save + restore) x wave_slots`.
    pub preempt_round_trip_ns: u64,
    /// The fit's standard error of `preempt_fixed_ns`, ns (how far to trust it).
    pub preempt_fixed_error_ns: u64,
    /// The fit's standard error of the per-wave costs, ns.
    pub per_wave_error_ns: u64,
}

/// The arbitration a node showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasuredArbitration {
    /// gfx-model's `Arbitration::Equal`.
    Equal,
    /// gfx-model's `Arbitration::PipePriority`.
    Pipe,
    /// gfx-model's `Arbitration::StrictPriority`.
    Strict,
    /// None of the model's hypotheses.
    None,
}

impl MeasuredArbitration {
    /// The file's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            MeasuredArbitration::Equal => "equal",
            MeasuredArbitration::Pipe => "pipe",
            MeasuredArbitration::Strict => "strict",
            MeasuredArbitration::None => "none",
        }
    }
}

/// The most a fixed or per-wave cost may be (one second): beyond it the file is not a
/// measurement of a preempt.
const MAX_NS: u64 = 1_000_000_000;

impl Calibration {
    /// Parses and checks a calibration file's text (format 2, or a one-partition file of
    /// format 1).
    pub fn parse(text: &str) -> Result<Calibration, CalibrationError> {
        let head: Head = toml::from_str(text).map_err(|e| malformed(text, e))?;
        let c = match head.format {
            FORMAT => toml::from_str::<Calibration>(text).map_err(|e| malformed(text, e))?,
            FORMAT_ONE_PARTITION => {
                let one: FormatOne = toml::from_str(text).map_err(|e| malformed(text, e))?;
                Calibration {
                    format: FORMAT_ONE_PARTITION,
                    partitions: vec![PartitionCalibration {
                        node: one.node,
                        model: one.model,
                    }],
                }
            }
            other => {
                return Err(value_error(
                    text,
                    "format",
                    0,
                    other,
                    "this kfdq reads formats 1 (one partition) and 2 (`[[partition]]` tables)",
                ));
            }
        };
        if c.partitions.is_empty() {
            return Err(value_error(
                text,
                "format",
                0,
                c.format,
                "the file has no [[partition]]: a calibration holds at least one measured partition",
            ));
        }
        for (i, p) in c.partitions.iter().enumerate() {
            for (key, v) in [
                ("preempt_fixed_ns", p.model.preempt_fixed_ns),
                ("save_wave_ns", p.model.save_wave_ns),
                ("restore_wave_ns", p.model.restore_wave_ns),
                ("preempt_round_trip_ns", p.model.preempt_round_trip_ns),
            ] {
                if v > MAX_NS {
                    return Err(value_error(
                        text,
                        key,
                        i,
                        v,
                        "out of range 0..=1000000000 ns (one second)",
                    ));
                }
            }
            if p.node.wave_slots == 0 {
                return Err(value_error(
                    text,
                    "wave_slots",
                    i,
                    0,
                    "a partition has at least one wave slot",
                ));
            }
        }
        Ok(c)
    }

    /// The file as `kfdq bench --write` writes it: a commented header, then TOML.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).unwrap_or_default();
        format!(
            "# kfdq calibration: this node's preemption costs in the partition model's vocabulary,\n\
             # one [[partition]] per measured GPU partition (docs/hardware.md). Written by\n\
             # `kfdq bench --write`; read by `kfd-emu --calibration`, `preempt-lab sim\n\
             # --calibration` and kfdqd's `calibration` key. Times in ns.\n\n{body}"
        )
    }

    /// The first partition: what a reader with one set of parameters (the lab, kfdqd's cost
    /// rule) takes. The partitions of one node are of one GPU kind ([`Calibration::check_target`]).
    pub fn first(&self) -> &PartitionCalibration {
        // parse() refuses a file without partitions; a hand-built empty one is a caller's bug.
        &self.partitions[0]
    }

    /// Refuses a file with a partition measured on another GPU kind than `gfx_target_version`.
    pub fn check_target(
        &self,
        text: &str,
        gfx_target_version: u32,
    ) -> Result<(), CalibrationError> {
        for (i, p) in self.partitions.iter().enumerate() {
            p.check_target(text, i, gfx_target_version)?;
        }
        Ok(())
    }

    /// Pairs the file's partitions with a GPU's (their `gfx_target_version`s in topology
    /// order): a one-partition file applies to each, a file of several partition by partition
    /// (the counts must agree); each pair must be of one GPU kind. The file's partition for
    /// each of the GPU's.
    pub fn pair(
        &self,
        text: &str,
        targets: &[u32],
    ) -> Result<Vec<&PartitionCalibration>, CalibrationError> {
        let n = self.partitions.len();
        if n != 1 && n != targets.len() {
            return Err(CalibrationError::Partitions {
                file: n,
                here: targets.len(),
            });
        }
        targets
            .iter()
            .enumerate()
            .map(|(i, &t)| {
                let j = if n == 1 { 0 } else { i };
                let p = &self.partitions[j];
                p.check_target(text, j, t).map(|()| p)
            })
            .collect()
    }
}

impl PartitionCalibration {
    /// Refuses this partition (the `index`th of the file `text`) when it was measured on
    /// another GPU kind than `gfx_target_version`.
    pub fn check_target(
        &self,
        text: &str,
        index: usize,
        gfx_target_version: u32,
    ) -> Result<(), CalibrationError> {
        if self.node.gfx_target_version == gfx_target_version {
            return Ok(());
        }
        Err(CalibrationError::OtherGpu {
            line: key_line(text, "gfx_target_version", index),
            file: self.node.gfx_target_version,
            file_target: self.node.gfx_target.clone(),
            here: gfx_target_version,
        })
    }
}

/// How far a file's `preempt_round_trip_ns` may be from its own fit's before a reader warns:
/// 1 %. `kfdq bench --write` writes exactly [`round_trip_ns`] of the fit; the margin only
/// forgives another tool's rounding. Not a measured number.
pub const ROUND_TRIP_TOLERANCE: f64 = 0.01;

impl PartitionCalibration {
    /// Why this partition's (the `index`th of the file `text`) `preempt_round_trip_ns`, the
    /// cost rule's C, is not what its own fit gives (edited by hand, or written by another
    /// tool): its line and both numbers, for a reader to warn of; `None` when they agree
    /// within [`ROUND_TRIP_TOLERANCE`]. The file's value is still the one used.
    pub fn round_trip_disagreement(&self, text: &str, index: usize) -> Option<String> {
        let m = &self.model;
        let fit = round_trip_ns(
            m.preempt_fixed_ns,
            m.save_wave_ns,
            m.restore_wave_ns,
            self.node.wave_slots,
        );
        let off = m.preempt_round_trip_ns.abs_diff(fit) as f64;
        if off <= fit as f64 * ROUND_TRIP_TOLERANCE {
            return None;
        }
        Some(format!(
            "line {}: preempt_round_trip_ns = {} disagrees with the file's own fit: 2 x preempt_fixed_ns {} + (save_wave_ns {} + restore_wave_ns {}) x wave_slots {} = {fit} ns; the file's value is used as C (edited by hand? `kfdq bench --write` writes the fit's)",
            key_line(text, "preempt_round_trip_ns", index),
            m.preempt_round_trip_ns,
            m.preempt_fixed_ns,
            m.save_wave_ns,
            m.restore_wave_ns,
            self.node.wave_slots
        ))
    }
}

/// The cost rule's `C` for a partition of `wave_slots`: two device-wide preempts plus the save
/// and the restore of every wave slot (docs/policy.md, "Release").
pub fn round_trip_ns(fixed_ns: u64, save_ns: u64, restore_ns: u64, wave_slots: u32) -> u64 {
    2 * fixed_ns + (save_ns + restore_ns) * u64::from(wave_slots)
}
