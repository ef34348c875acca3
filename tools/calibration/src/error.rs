//! Why a calibration file is refused, and the line of the file each reason points at.

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

pub(crate) fn malformed(text: &str, e: toml::de::Error) -> CalibrationError {
    CalibrationError::Malformed {
        line: e.span().map_or(1, |s| line_of(text, s.start)),
        reason: e.message().trim().to_string(),
    }
}

/// A value error at the `index`th occurrence of `key`.
pub(crate) fn value_error(
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
pub(crate) fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// 1-based line where `key` is set for the `index`th time (the first when there are fewer; 1
/// when it is not found).
pub(crate) fn key_line(text: &str, key: &str, index: usize) -> usize {
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
