//! The calibration file: one node's measured parameters in the model's vocabulary, written by
//! `kfdq bench --write FILE` and read by `kfd-emu --calibration`, `preempt-lab sim
//! --calibration` and the agent's release rule (docs/hardware.md).
//!
//! Pure like the rest of the crate: [`Calibration::parse`] takes the file's text, the callers
//! read it. A malformed file is refused with its line and reason; a file from another GPU kind
//! with [`Calibration::check_target`].

use serde::{Deserialize, Serialize};

use crate::{Arbitration, Params};

/// The format version this crate writes and reads.
pub const FORMAT: u32 = 1;

/// A node's calibration (the TOML file).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// [`FORMAT`].
    pub format: u32,
    /// Which node and software measured it.
    pub node: NodeIdentity,
    /// The measured parameters.
    pub model: Measured,
}

/// The node a calibration was measured on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeIdentity {
    /// The GPU's name as the node reports it (`product_name`, else the topology node's name).
    pub gpu_name: String,
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
    /// [`Arbitration::Equal`].
    Equal,
    /// [`Arbitration::PipePriority`].
    Pipe,
    /// [`Arbitration::StrictPriority`].
    Strict,
    /// None of the model's hypotheses.
    None,
}

impl MeasuredArbitration {
    /// The model's arbitration, if the node matched one.
    pub fn model(self) -> Option<Arbitration> {
        match self {
            MeasuredArbitration::Equal => Some(Arbitration::Equal),
            MeasuredArbitration::Pipe => Some(Arbitration::PipePriority),
            MeasuredArbitration::Strict => Some(Arbitration::StrictPriority),
            MeasuredArbitration::None => None,
        }
    }

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
    /// Parses and checks a calibration file's text.
    pub fn parse(text: &str) -> Result<Calibration, CalibrationError> {
        let c: Calibration = toml::from_str(text).map_err(|e| CalibrationError::Malformed {
            line: e.span().map_or(1, |s| line_of(text, s.start)),
            reason: e.message().trim().to_string(),
        })?;
        if c.format != FORMAT {
            return Err(value_error(
                text,
                "format",
                c.format,
                "this kfdq reads format 1 only",
            ));
        }
        for (key, v) in [
            ("preempt_fixed_ns", c.model.preempt_fixed_ns),
            ("save_wave_ns", c.model.save_wave_ns),
            ("restore_wave_ns", c.model.restore_wave_ns),
            ("preempt_round_trip_ns", c.model.preempt_round_trip_ns),
        ] {
            if v > MAX_NS {
                return Err(value_error(
                    text,
                    key,
                    v,
                    "out of range 0..=1000000000 ns (one second)",
                ));
            }
        }
        if c.node.wave_slots == 0 {
            return Err(value_error(
                text,
                "wave_slots",
                0,
                "a partition has at least one wave slot",
            ));
        }
        Ok(c)
    }

    /// The file as `kfdq bench --write` writes it: a commented header, then TOML.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string(self).unwrap_or_default();
        format!(
            "# kfdq calibration: this node's preemption costs in the partition model's vocabulary\n\
             # (docs/hardware.md). Written by `kfdq bench --write`; read by `kfd-emu --calibration`,\n\
             # `preempt-lab sim --calibration` and kfdqd's `calibration` key. Times in ns.\n\n{body}"
        )
    }

    /// Refuses a file measured on another GPU kind than `gfx_target_version`.
    pub fn check_target(
        &self,
        text: &str,
        gfx_target_version: u32,
    ) -> Result<(), CalibrationError> {
        if self.node.gfx_target_version == gfx_target_version {
            return Ok(());
        }
        Err(CalibrationError::OtherGpu {
            line: key_line(text, "gfx_target_version"),
            file: self.node.gfx_target_version,
            file_target: self.node.gfx_target.clone(),
            here: gfx_target_version,
        })
    }

    /// `params` with the measured values (the arbitration only when the node matched one).
    pub fn apply(&self, params: Params) -> Params {
        Params {
            preempt_fixed_ns: self.model.preempt_fixed_ns,
            save_wave_ns: self.model.save_wave_ns,
            restore_wave_ns: self.model.restore_wave_ns,
            arbitration: self.model.arbitration.model().unwrap_or(params.arbitration),
            ..params
        }
    }
}

/// The cost rule's `C` for a partition of `wave_slots`: two device-wide preempts plus the save
/// and the restore of every wave slot (docs/policy.md, "Release").
pub fn round_trip_ns(fixed_ns: u64, save_ns: u64, restore_ns: u64, wave_slots: u32) -> u64 {
    2 * fixed_ns + (save_ns + restore_ns) * u64::from(wave_slots)
}

fn value_error(
    text: &str,
    key: &'static str,
    value: impl ToString,
    rule: &'static str,
) -> CalibrationError {
    CalibrationError::Value {
        line: key_line(text, key),
        key,
        value: value.to_string(),
        rule,
    }
}

/// 1-based line of byte `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// 1-based line where `key` is set (1 when it is not found).
fn key_line(text: &str, key: &str) -> usize {
    text.lines()
        .position(|l| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map_or(1, |i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Calibration {
        Calibration {
            format: FORMAT,
            node: NodeIdentity {
                gpu_name: "AMD Instinct MI308X".into(),
                gfx_target: "gfx942".into(),
                gfx_target_version: 90402,
                cus: 80,
                wave_slots: 2560,
                kernel: "7.0.0".into(),
                mec_firmware: 151,
                sdma_firmware: 19,
                kfd_version: "1.17".into(),
                measured_with: "kfdq 0.1.0 bench".into(),
            },
            model: Measured {
                preempt_fixed_ns: 150_000,
                save_wave_ns: 300,
                restore_wave_ns: 500,
                arbitration: MeasuredArbitration::Strict,
                preempt_round_trip_ns: round_trip_ns(150_000, 300, 500, 2560),
                preempt_fixed_error_ns: 10,
                per_wave_error_ns: 1,
            },
        }
    }

    #[test]
    fn a_written_file_reads_back_and_sets_the_parameters() {
        let text = sample().to_toml();
        let c = Calibration::parse(&text).unwrap();
        assert_eq!(c, sample());
        let p = c.apply(Params::default());
        assert_eq!(p.preempt_fixed_ns, 150_000);
        assert_eq!((p.save_wave_ns, p.restore_wave_ns), (300, 500));
        assert_eq!(p.arbitration, Arbitration::StrictPriority);
        assert_eq!(p.default_wg_ns, Params::default().default_wg_ns);
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
}
