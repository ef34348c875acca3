//! The KFD topology in sysfs: `ROOT/sys/class/kfd/kfd/topology/nodes/<N>/{gpu_id,name,properties}`.
//!
//! Properties are parsed as a key -> u64 map; never by position, and newer keys may be absent.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::Serialize;

use super::cwsr::CwsrSizes;
use super::error::{Error, Result};
use super::ids::GpuId;
use super::paths::Root;

/// One topology node: a CPU, or a GPU partition (its own `gpu_id`, XCCs and HWS instance).
#[derive(Debug, Clone, Serialize)]
pub struct Node {
    /// Directory index under `nodes/`.
    pub index: u32,
    /// `gpu_id`; `None` for CPU nodes (the file says 0).
    pub gpu_id: Option<GpuId>,
    /// `name` (for IP-discovery parts such as MI300 this is "ip discovery"; do not use it to
    /// identify the GPU).
    pub name: String,
    /// Every `properties` line.
    pub properties: BTreeMap<String, u64>,
}

/// `gfx_target_version` decoded (major*10000 + minor*100 + stepping).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GfxVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Stepping.
    pub stepping: u32,
}

impl std::fmt::Display for GfxVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gfx{}{:x}{:x}", self.major, self.minor, self.stepping)
    }
}

impl Node {
    /// A property, if present.
    pub fn prop(&self, key: &str) -> Option<u64> {
        self.properties.get(key).copied()
    }

    fn prop_u32(&self, key: &str) -> Option<u32> {
        self.prop(key).map(|v| v as u32)
    }

    /// True for GPU nodes.
    pub fn is_gpu(&self) -> bool {
        self.gpu_id.is_some()
    }

    /// `gfx_target_version`, decoded.
    pub fn gfx_version(&self) -> Option<GfxVersion> {
        let v = self.prop_u32("gfx_target_version").filter(|v| *v != 0)?;
        Some(GfxVersion {
            major: v / 10000,
            minor: (v / 100) % 100,
            stepping: v % 100,
        })
    }

    /// True for GC 9.4.x (gfx942 family: MI300A/X, MI308X, MI325X).
    pub fn is_gfx94x(&self) -> bool {
        self.gfx_version()
            .is_some_and(|g| g.major == 9 && g.minor == 4)
    }

    /// XCCs in this partition (`num_xcc`, 1 when absent).
    pub fn num_xcc(&self) -> u32 {
        self.prop_u32("num_xcc").filter(|n| *n > 0).unwrap_or(1)
    }

    /// Compute units in this partition (`simd_count / simd_per_cu`).
    pub fn cu_count(&self) -> u32 {
        match (self.prop_u32("simd_count"), self.prop_u32("simd_per_cu")) {
            (Some(s), Some(p)) if p > 0 => s / p,
            _ => 0,
        }
    }

    /// `num_cp_queues`: hardware queue descriptors (HQDs) KFD's scheduler gets, per XCC.
    pub fn cp_queues_per_xcc(&self) -> u32 {
        self.prop_u32("num_cp_queues").unwrap_or(0)
    }

    /// Hardware queue slots of the partition: `num_cp_queues x num_xcc` HQDs.
    pub fn hw_queue_slots(&self) -> u32 {
        self.cp_queues_per_xcc() * self.num_xcc()
    }

    /// Active compute queues the HWS keeps resident before it time-slices the runlist.
    ///
    /// A queue of an N-XCC partition takes one HQD on every XCC, so this is `num_cp_queues`;
    /// past it the runlist is oversubscribed and priority stops mattering.
    pub fn resident_queue_limit(&self) -> u32 {
        self.cp_queues_per_xcc()
    }

    /// `drm_render_minor`: the node's `/dev/dri/renderD<minor>`.
    pub fn render_minor(&self) -> Option<u32> {
        self.prop_u32("drm_render_minor")
    }

    /// PCI device id.
    pub fn device_id(&self) -> Option<u32> {
        self.prop_u32("device_id")
    }

    /// True when sysfs publishes `cwsr_size` (Linux 6.12+, which also validates queue buffers).
    pub fn has_buffer_rules(&self) -> bool {
        self.prop("cwsr_size").is_some()
    }

    /// CWSR, control-stack, debug-area and EOP sizes of a compute queue on this node.
    pub fn cwsr_sizes(&self) -> Result<CwsrSizes> {
        CwsrSizes::from_properties(self.index, self.num_xcc(), |k| self.prop(k))
    }
}

/// The whole topology.
#[derive(Debug, Clone, Serialize)]
pub struct Topology {
    /// `generation_id`.
    pub generation_id: u64,
    /// Nodes in index order.
    pub nodes: Vec<Node>,
}

fn read_trimmed(path: &Path) -> Result<String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| Error::io(path, e))
}

/// Parses a `properties` file: one `name value` pair per line.
pub fn parse_properties(path: &Path, text: &str) -> Result<BTreeMap<String, u64>> {
    let mut map = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(key), Some(val), None) = (it.next(), it.next(), it.next()) else {
            return Err(Error::Sysfs {
                path: path.into(),
                what: format!("line {} is not `name value`: {line:?}", n + 1),
            });
        };
        let val = val.parse::<u64>().map_err(|_| Error::Sysfs {
            path: path.into(),
            what: format!(
                "line {}: value of {key} is not an unsigned integer: {val:?}",
                n + 1
            ),
        })?;
        map.insert(key.to_string(), val);
    }
    Ok(map)
}

impl Topology {
    /// Reads `ROOT/sys/class/kfd/kfd/topology`.
    pub fn read(root: &Root) -> Result<Topology> {
        let dir = root.topology_dir();
        let generation_id = read_trimmed(&dir.join("generation_id"))
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let nodes_dir = dir.join("nodes");
        let entries = fs::read_dir(&nodes_dir).map_err(|e| Error::io(&nodes_dir, e))?;
        let mut nodes = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&nodes_dir, e))?;
            let Some(index) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            let p = entry.path();
            let gpu_path = p.join("gpu_id");
            let gpu_raw = read_trimmed(&gpu_path)?;
            let gpu = gpu_raw.parse::<u32>().map_err(|_| Error::Sysfs {
                path: gpu_path.clone(),
                what: format!("gpu_id is not a decimal number: {gpu_raw:?}"),
            })?;
            let name = read_trimmed(&p.join("name")).unwrap_or_default();
            let props_path = p.join("properties");
            let text = fs::read_to_string(&props_path).map_err(|e| Error::io(&props_path, e))?;
            nodes.push(Node {
                index,
                gpu_id: (gpu != 0).then_some(GpuId(gpu)),
                name,
                properties: parse_properties(&props_path, &text)?,
            });
        }
        nodes.sort_by_key(|n| n.index);
        Ok(Topology {
            generation_id,
            nodes,
        })
    }

    /// GPU nodes (partitions) in index order.
    pub fn gpus(&self) -> impl Iterator<Item = &Node> {
        self.nodes.iter().filter(|n| n.is_gpu())
    }

    /// The GPU node with this id.
    pub fn gpu(&self, id: GpuId) -> Result<&Node> {
        self.gpus()
            .find(|n| n.gpu_id == Some(id))
            .ok_or(Error::UnknownGpu(id))
    }
}
