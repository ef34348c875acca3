//! The calibration file: one node's measured parameters in the model's vocabulary, written by
//! `kfdq bench --write FILE` and read by `kfd-emu --calibration`, `preempt-lab sim
//! --calibration` and the agent's release rule (docs/hardware.md).
//!
//! A leaf: the format and its checks only, so that the product (kfdq, kfdqd) reads the file
//! without linking the partition model; gfx-model applies a file to its parameters
//! (`Params::calibrated`). Pure: [`Calibration::parse`] takes the file's text, the callers read
//! it. A malformed file is refused with its line and reason; a file from another GPU kind with
//! [`Calibration::check_target`].
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

use serde::{Deserialize, Serialize};

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

/// Why a calibration file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CalibrationError {
    /// Not TOML of the calibration's layout (a missing or unknown key, a wrong type).
    #[error(
        "line {line}: {reason} (a calibration file is what `kfdq bench --write` writes: docs/hardware.md)"
    )]
    Malformed {
        /// 1-based line.
        line: usize,
        /// The parser's reason.
        reason: String,
    },
    /// A value out of its range.
    #[error("line {line}: {key} = {value}: {rule}")]
    Value {
        /// 1-based line of the key.
        line: usize,
        /// The key.
        key: &'static str,
        /// The value as written.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A file of several partitions for a reader whose partitions do not pair with them.
    #[error(
        "the file has {file} partitions, this GPU has {here}: a file of several partitions applies partition by partition; measure this node (`kfdq bench --write FILE`) or keep one partition of the file"
    )]
    Partitions {
        /// Partitions in the file.
        file: usize,
        /// Partitions of the reader's GPU.
        here: usize,
    },
    /// Measured on another GPU kind.
    #[error(
        "line {line}: gfx_target_version = {file}: the file was measured on {file_target}, this GPU is {here}; run `kfdq bench --write FILE` on a node of this kind"
    )]
    OtherGpu {
        /// Line of `gfx_target_version`.
        line: usize,
        /// The file's `gfx_target_version`.
        file: u32,
        /// The file's gfx target name.
        file_target: String,
        /// The reader's GPU (gfx target version).
        here: u32,
    },
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

fn malformed(text: &str, e: toml::de::Error) -> CalibrationError {
    CalibrationError::Malformed {
        line: e.span().map_or(1, |s| line_of(text, s.start)),
        reason: e.message().trim().to_string(),
    }
}

/// A value error at the `index`th occurrence of `key`.
fn value_error(
    text: &str,
    key: &'static str,
    index: usize,
    value: impl ToString,
    rule: &'static str,
) -> CalibrationError {
    CalibrationError::Value {
        line: key_line(text, key, index),
        key,
        value: value.to_string(),
        rule,
    }
}

/// 1-based line of byte `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// 1-based line where `key` is set for the `index`th time (the first when there are fewer; 1
/// when it is not found).
fn key_line(text: &str, key: &str, index: usize) -> usize {
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|(i, _)| i + 1)
        .collect();
    lines
        .get(index)
        .or_else(|| lines.first())
        .copied()
        .unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Calibration {
        Calibration {
            format: FORMAT,
            partitions: vec![partition(90402, 150_000)],
        }
    }

    fn partition(gfx_target_version: u32, fixed_ns: u64) -> PartitionCalibration {
        PartitionCalibration {
            node: NodeIdentity {
                gpu_name: "AMD Instinct MI308X".into(),
                gpu_id: 0xb1a0,
                gfx_target: "gfx942".into(),
                gfx_target_version,
                cus: 80,
                wave_slots: 2560,
                kernel: "7.0.0".into(),
                mec_firmware: 151,
                sdma_firmware: 19,
                kfd_version: "1.17".into(),
                measured_with: "kfdq 0.1.0 bench".into(),
            },
            model: Measured {
                preempt_fixed_ns: fixed_ns,
                save_wave_ns: 300,
                restore_wave_ns: 500,
                arbitration: MeasuredArbitration::Strict,
                preempt_round_trip_ns: round_trip_ns(fixed_ns, 300, 500, 2560),
                preempt_fixed_error_ns: 10,
                per_wave_error_ns: 1,
            },
        }
    }

    #[test]
    fn a_written_file_reads_back() {
        // Setting the model's parameters from it: gfx-model's `Params::calibrated` tests.
        let text = sample().to_toml();
        let c = Calibration::parse(&text).unwrap();
        assert_eq!(c, sample());
        c.check_target(&text, 90402).unwrap();
    }

    #[test]
    fn another_gpu_kind_is_refused_with_the_line_of_its_target() {
        let text = sample().to_toml();
        let c = Calibration::parse(&text).unwrap();
        let e = c.check_target(&text, 90010).unwrap_err();
        let line = text
            .lines()
            .position(|l| l.starts_with("gfx_target_version"))
            .unwrap()
            + 1;
        assert!(
            matches!(e, CalibrationError::OtherGpu { line: l, file: 90402, here: 90010, .. } if l == line),
            "{e}"
        );
        assert!(e.to_string().contains("gfx942"), "{e}");
    }

    #[test]
    fn a_round_trip_other_than_the_fits_is_named_with_its_line() {
        let text = sample().to_toml();
        let parsed = Calibration::parse(&text).unwrap();
        assert_eq!(parsed.first().round_trip_disagreement(&text, 0), None);
        let fit = parsed.first().model.preempt_round_trip_ns;
        let edited = text.replace(
            &format!("preempt_round_trip_ns = {fit}"),
            "preempt_round_trip_ns = 5000",
        );
        let parsed = Calibration::parse(&edited).unwrap();
        let w = parsed.first().round_trip_disagreement(&edited, 0).unwrap();
        let line = edited
            .lines()
            .position(|l| l.starts_with("preempt_round_trip_ns"))
            .unwrap()
            + 1;
        assert!(w.starts_with(&format!("line {line}: ")), "{w}");
        assert!(
            w.contains("5000") && w.contains(&format!("= {fit} ns")),
            "{w}"
        );
    }

    #[test]
    fn malformed_files_name_their_line_and_reason() {
        let text = sample().to_toml();
        let bad = text.replace("save_wave_ns = 300", "save_wave_ns = \"fast\"");
        let line = bad.lines().position(|l| l.contains("\"fast\"")).unwrap() + 1;
        match Calibration::parse(&bad).unwrap_err() {
            CalibrationError::Malformed { line: l, reason } => {
                assert_eq!(l, line);
                assert!(reason.contains("u64"), "{reason}");
            }
            e => panic!("{e}"),
        }
        let unknown = text.replace("save_wave_ns = 300", "save_wave_ns = 300\nspeed = 1");
        let e = Calibration::parse(&unknown).unwrap_err();
        assert!(e.to_string().contains("speed"), "{e}");
        let huge = text.replace("restore_wave_ns = 500", "restore_wave_ns = 5000000000");
        match Calibration::parse(&huge).unwrap_err() {
            CalibrationError::Value { key, line, .. } => {
                assert_eq!(key, "restore_wave_ns");
                assert_eq!(
                    line,
                    huge.lines()
                        .position(|l| l.starts_with("restore_wave_ns"))
                        .unwrap()
                        + 1
                );
            }
            e => panic!("{e}"),
        }
        let arb = text.replace("arbitration = \"strict\"", "arbitration = \"fifo\"");
        assert!(Calibration::parse(&arb).is_err());
    }

    #[test]
    fn every_partition_is_written_and_read_back_in_order() {
        let two = Calibration {
            format: FORMAT,
            partitions: vec![partition(90402, 150_000), partition(90402, 400_000)],
        };
        let text = two.to_toml();
        assert_eq!(
            text.lines().filter(|l| *l == "[[partition]]").count(),
            2,
            "{text}"
        );
        let c = Calibration::parse(&text).unwrap();
        assert_eq!(c, two);
        // Paired partition by partition with a GPU of two; a one-partition file with each.
        let paired = c.pair(&text, &[90402, 90402]).unwrap();
        assert_eq!(paired[1].model.preempt_fixed_ns, 400_000);
        match c.pair(&text, &[90402]).unwrap_err() {
            CalibrationError::Partitions { file: 2, here: 1 } => {}
            e => panic!("{e}"),
        }
        let one = sample().to_toml();
        let c1 = Calibration::parse(&one).unwrap();
        assert_eq!(c1.pair(&one, &[90402, 90402, 90402]).unwrap().len(), 3);
        // The second partition's target is refused with its own line.
        let mixed = Calibration {
            format: FORMAT,
            partitions: vec![partition(90402, 150_000), partition(90010, 150_000)],
        };
        let text = mixed.to_toml();
        let line = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.starts_with("gfx_target_version"))
            .nth(1)
            .unwrap()
            .0
            + 1;
        match mixed.check_target(&text, 90402).unwrap_err() {
            CalibrationError::OtherGpu {
                line: l,
                file: 90010,
                ..
            } => assert_eq!(l, line),
            e => panic!("{e}"),
        }
        // A value out of range in the second partition names its line.
        let huge = two
            .to_toml()
            .replace("preempt_fixed_ns = 400000", "preempt_fixed_ns = 4000000000");
        match Calibration::parse(&huge).unwrap_err() {
            CalibrationError::Value { key, line, .. } => {
                assert_eq!(key, "preempt_fixed_ns");
                assert!(huge.lines().nth(line - 1).unwrap().contains("4000000000"));
            }
            e => panic!("{e}"),
        }
    }

    #[test]
    fn a_file_of_the_first_format_is_still_read_as_one_partition() {
        let p = partition(90402, 150_000);
        #[derive(Serialize)]
        struct One<'a> {
            format: u32,
            node: &'a NodeIdentity,
            model: &'a Measured,
        }
        let text = toml::to_string(&One {
            format: FORMAT_ONE_PARTITION,
            node: &p.node,
            model: &p.model,
        })
        .unwrap();
        let c = Calibration::parse(&text).unwrap();
        assert_eq!(c.format, FORMAT_ONE_PARTITION);
        assert_eq!(c.partitions, vec![p]);
        // An unknown format and an empty list are refused with their rule.
        let e = Calibration::parse(&text.replace("format = 1", "format = 3")).unwrap_err();
        assert!(e.to_string().contains("formats 1"), "{e}");
        let e = Calibration::parse("format = 2\npartition = []\n").unwrap_err();
        assert!(e.to_string().contains("no [[partition]]"), "{e}");
    }
}
