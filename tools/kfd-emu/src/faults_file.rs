//! `kfd-emu/faults` in the mount: another process injects failures at run time.
//!
//! * Reading gives the failures in effect and the last line refused, as JSON
//!   ([`FaultsFile`]).
//! * Writing takes lines: a fault spec (`fault_spec.rs`) adds a failure, `clear` ends them all.
//!   A write with a bad line fails with `EINVAL` and changes nothing (no line of it takes
//!   effect); the reason shows in the file's `refused` until the next good write, and in the
//!   emulator's log.

use crate::faults::{FaultSpec, FaultsFile, SpecError};
use crate::state::Emu;

/// The file's content now.
pub(crate) fn render(emu: &Emu) -> Vec<u8> {
    let f = FaultsFile {
        faults: emu.faults.list(),
        refused: emu.faults.refused(),
    };
    let mut out = serde_json::to_vec_pretty(&f).unwrap_or_default();
    out.push(b'\n');
    out
}

/// Why a write was refused.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// The bytes are not text.
    #[error("kfd-emu/faults: not UTF-8 text; write one fault spec or `clear` per line")]
    NotText,
    /// A line is not a fault spec.
    #[error("{0}")]
    Spec(SpecError),
}

/// One line of a write.
enum Line {
    Clear,
    Add(FaultSpec),
}

/// Applies a write: every line, or none of them (`Err`: the reason, also kept for readers).
pub(crate) fn write(emu: &Emu, data: &[u8]) -> Result<(), WriteError> {
    let parsed: Result<Vec<Line>, WriteError> = match std::str::from_utf8(data) {
        Err(_) => Err(WriteError::NotText),
        Ok(text) => text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| match l {
                "clear" => Ok(Line::Clear),
                spec => spec.parse().map(Line::Add).map_err(WriteError::Spec),
            })
            .collect(),
    };
    match parsed {
        Ok(lines) => {
            for l in lines {
                match l {
                    Line::Clear => {
                        tracing::info!("injected failures cleared");
                        emu.faults.clear();
                    }
                    Line::Add(spec) => {
                        tracing::info!(%spec, "failure injected");
                        emu.faults.inject(spec);
                    }
                }
            }
            emu.faults.set_refused(None);
            Ok(())
        }
        Err(e) => {
            tracing::warn!("{e}");
            emu.faults.set_refused(Some(e.to_string()));
            Err(e)
        }
    }
}
