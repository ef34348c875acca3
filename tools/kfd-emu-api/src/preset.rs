//! The machine layouts the emulator knows, by name (their hardware facts and node properties are
//! kfd-emu's: its `config/preset.rs`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A machine layout the emulator knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Preset {
    /// MI300X in SPX mode: one node with 8 XCCs, 304 CUs.
    #[serde(rename = "mi300x-spx")]
    Mi300xSpx,
    /// MI300X in CPX mode: 8 nodes of 1 XCC, 38 CUs each.
    #[serde(rename = "mi300x-cpx")]
    Mi300xCpx,
    /// MI308X: one node with 4 XCCs, 80 CUs (layout ASSUMED: 4 XCDs x 20 CUs, unverified).
    #[serde(rename = "mi308x")]
    Mi308x,
    /// MI210 (gfx90a, Aldebaran, MI200 class): one node with one XCC, 104 CUs, 64 GiB HBM2e.
    /// The gfx target Debian's rocBLAS, hipBLASLt and MIOpen ship kernels for (not gfx942).
    #[serde(rename = "mi210")]
    Mi210,
}

impl Preset {
    /// Every preset, in `--help` order.
    pub const ALL: [Preset; 4] = [
        Preset::Mi300xSpx,
        Preset::Mi300xCpx,
        Preset::Mi308x,
        Preset::Mi210,
    ];

    /// The name used on the command line and in `config.json`.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Mi300xSpx => "mi300x-spx",
            Preset::Mi300xCpx => "mi300x-cpx",
            Preset::Mi308x => "mi308x",
            Preset::Mi210 => "mi210",
        }
    }
}

/// A preset name the emulator does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown preset {0:?}; expected one of {names}", names = Preset::names())]
pub struct UnknownPreset(pub String);

impl Preset {
    /// Every preset's name, comma-separated.
    fn names() -> String {
        let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        names.join(", ")
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = UnknownPreset;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPreset(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_names_round_trip() {
        for p in Preset::ALL {
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
        }
        let err = "mi250".parse::<Preset>().unwrap_err();
        assert!(
            err.to_string()
                .contains("mi300x-spx, mi300x-cpx, mi308x, mi210"),
            "{err}"
        );
    }
}
