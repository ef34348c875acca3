//! The TOML topology file (`topology_file`): its format, and the rules a file is checked against
//! (known keys only, no derived key, at least one node).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::Preset;
use crate::error::EmuError;
use crate::topology;

/// A node entry of the TOML file (or an empty one for a preset node).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct NodeSpec {
    pub(super) gpu_id: Option<u32>,
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) properties: BTreeMap<String, u64>,
}

/// The TOML topology file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    preset: Option<String>,
    #[serde(default)]
    node: Vec<NodeSpec>,
}

pub(super) fn load_topology_file(
    path: &Path,
    fallback: Preset,
) -> Result<(Preset, Vec<NodeSpec>), EmuError> {
    let text = std::fs::read_to_string(path).map_err(|source| EmuError::Io {
        context: format!("read topology file {}", path.display()),
        source,
    })?;
    parse_topology(&text, fallback)
        .map_err(|e| EmuError::Config(format!("topology file {}: {e}", path.display())))
}

/// Why a topology file's text was refused (the caller names the file).
#[derive(Debug, thiserror::Error)]
pub(super) enum TopologyError {
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    #[error("{0}")]
    Preset(kfd_emu_api::UnknownPreset),
    #[error("no [[node]] entries")]
    NoNodes,
    #[error(
        "node {node}: {key} cannot be set: it is the number of links the emulator builds \
         (io_links/, p2p_links/); remove it"
    )]
    Derived { node: usize, key: String },
    #[error("node {node}: unknown property {key:?} (known: {known})")]
    UnknownKey {
        node: usize,
        key: String,
        known: String,
    },
}

/// Parses the TOML topology text.
pub(super) fn parse_topology(
    text: &str,
    fallback: Preset,
) -> Result<(Preset, Vec<NodeSpec>), TopologyError> {
    let file: TopologyFile = toml::from_str(text)?;
    let preset = match &file.preset {
        Some(p) => p.parse::<Preset>().map_err(TopologyError::Preset)?,
        None => fallback,
    };
    if file.node.is_empty() {
        return Err(TopologyError::NoNodes);
    }
    for (node, spec) in file.node.iter().enumerate() {
        for key in spec.properties.keys() {
            if topology::DERIVED_KEYS.contains(&key.as_str()) {
                return Err(TopologyError::Derived {
                    node,
                    key: key.clone(),
                });
            }
            if !topology::is_known_key(key) {
                return Err(TopologyError::UnknownKey {
                    node,
                    key: key.clone(),
                    known: topology::known_keys().join(", "),
                });
            }
        }
    }
    Ok((preset, file.node))
}
