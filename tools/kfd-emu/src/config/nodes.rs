//! The emulated topology built from a preset or a topology file: one GPU node per partition,
//! their ids, render minors and derived sizes, the CPU node.

use std::collections::{BTreeMap, BTreeSet};

use super::file::{NodeSpec, load_topology_file};
use super::{
    CPU_NAME, EOP_BUFFER_SIZE, EmuConfig, GPU_ID_BASE, HIVE_ID, Preset, PresetHw, RENDER_MINOR_BASE,
};
use crate::error::EmuError;
use crate::topology::{self, CwsrSizes};

/// One GPU topology node (a partition) with everything derived from its properties.
#[derive(Debug, Clone)]
pub(crate) struct GpuNode {
    /// Topology node number (`nodes/<node>`), 1-based (node 0 is the CPU).
    pub node: u32,
    pub gpu_id: u32,
    pub name: String,
    /// Property values by key (rendered in the kernel's order by `topology`).
    pub props: BTreeMap<String, u64>,
    pub num_xcc: u32,
    pub num_cp_queues: u32,
    pub render_minor: u32,
    /// HBM of the node in bytes (the preset's).
    pub vram: u64,
    /// PCI revision (render node DEV_INFO).
    pub pci_rev: u32,
    pub sizes: CwsrSizes,
    pub eop_buffer_size: u32,
    /// Compute units of XCC 0 (used by the wave-state model).
    pub cu_per_xcc: u32,
    /// Index of the physical GPU the node is a partition of.
    pub physical: u32,
    /// XGMI hive of the node (`hive_id`; 0: none).
    pub hive_id: u64,
}

/// The model's shape of a topology node.
pub(crate) fn model_shape(g: &GpuNode) -> gfx_model::Shape {
    let prop = |k: &str, d: u64| g.props.get(k).copied().unwrap_or(d);
    let waves = prop("max_waves_per_simd", 8) * prop("simd_per_cu", 4);
    gfx_model::Shape {
        num_xcc: g.num_xcc,
        cus_per_xcc: g.cu_per_xcc,
        waves_per_cu: u32::try_from(waves).unwrap_or(u32::MAX),
        resident_queues: g.num_cp_queues,
    }
}

/// GPU clock counter frequency in Hz: the emulated counter runs at 100 MHz (GET_CLOCK_COUNTERS,
/// SDMA timestamps, and `DEV_INFO.gpu_counter_freq` in kHz on the render node).
pub(crate) const GPU_COUNTER_HZ: u64 = 100_000_000;

impl GpuNode {
    /// VRAM of the node in bytes (its `mem_banks/0` size, `PresetHw::vram_bytes`).
    pub fn vram_bytes(&self) -> u64 {
        self.vram
    }

    /// `ALIGN((ctx_save_restore_size + debug_memory_size) * num_xcc, 4096)`: the exact
    /// CWSR mapping size CREATE_QUEUE wants for a given per-XCC save area size.
    pub fn cwsr_total(&self, ctx_save_restore_size: u32) -> u64 {
        kfd_sys::cwsr::total_cwsr_size(
            ctx_save_restore_size.into(),
            self.sizes.debug_memory_size.into(),
            self.num_xcc,
        )
    }
}

/// The whole emulated topology.
#[derive(Debug, Clone)]
pub(crate) struct Topology {
    pub cpu_name: String,
    pub cpu_props: BTreeMap<String, u64>,
    pub gpus: Vec<GpuNode>,
    /// Nodes (partitions) per physical GPU.
    pub nodes_per_gpu: u32,
    /// Physical GPUs (`--gpus`).
    pub physical_gpus: u32,
    /// The preset's `PresetHw::has_aids`.
    pub has_aids: bool,
    /// The preset's `PresetHw::pcie_max_mbytes`.
    pub pcie_max_mbytes: u32,
    /// The preset's `PresetHw::xgmi_links_per_peer`.
    pub xgmi_links_per_peer: u32,
    /// The preset's [`Preset::marketing_name`].
    pub marketing_name: &'static str,
}

impl Topology {
    /// Index into `gpus` of the node with this `gpu_id`.
    pub fn gpu_index(&self, gpu_id: u32) -> Option<usize> {
        self.gpus.iter().position(|g| g.gpu_id == gpu_id)
    }

    /// Builds the topology for a configuration (reads the TOML file if set).
    pub fn build(config: &EmuConfig) -> Result<Topology, EmuError> {
        if config.gpus == 0 {
            return Err(EmuError::Config("--gpus must be at least 1".into()));
        }
        let (preset, specs) = match &config.topology_file {
            Some(path) => load_topology_file(path, config.preset)?,
            None => (
                config.preset,
                (0..config.preset.nodes_per_gpu())
                    .map(|_| NodeSpec::default())
                    .collect(),
            ),
        };
        let mut gpus = Vec::new();
        for gpu in 0..config.gpus {
            for (part, spec) in specs.iter().enumerate() {
                let k = u32::try_from(gpus.len())
                    .map_err(|_| EmuError::Config("too many GPU nodes".into()))?;
                let part = Partition {
                    index: part as u32,
                    of: specs.len() as u32,
                };
                gpus.push(build_node(preset, gpu, part, k, spec)?);
            }
        }
        check_unique(&gpus)?;
        Ok(Topology {
            cpu_name: CPU_NAME.to_string(),
            cpu_props: cpu_props(),
            gpus,
            nodes_per_gpu: u32::try_from(specs.len()).unwrap_or(u32::MAX),
            physical_gpus: config.gpus,
            has_aids: preset.has_aids(),
            pcie_max_mbytes: preset.pcie_max_mbytes(),
            xgmi_links_per_peer: preset.xgmi_links_per_peer(),
            marketing_name: preset.marketing_name(),
        })
    }
}

/// Which of its GPU's partitions (KFD nodes) a node is.
#[derive(Debug, Clone, Copy)]
pub(super) struct Partition {
    pub(super) index: u32,
    pub(super) of: u32,
}

pub(super) fn build_node(
    preset: Preset,
    gpu: u32,
    part: Partition,
    k: u32,
    spec: &NodeSpec,
) -> Result<GpuNode, EmuError> {
    let mut props = preset.template();
    // `location_id` is the PCI function's `bus << 8 | devfn`; on a GPU of several KFD nodes the
    // kernel ORs the node's index into it (`kfd_topology_add_device`), so each partition has
    // its own. `unique_id` is the device's, the same on every partition (`node_show` before
    // AMD's August 2025 change to per-XCD ids; docs/kfd-emulator.md, "Partitions").
    let pci_location = (0x0c + 0x10 * (gpu & 0xf)) << 8;
    let partition_bits = if part.of > 1 { part.index } else { 0 };
    let ids: [(&str, u64); 5] = [
        ("drm_render_minor", u64::from(RENDER_MINOR_BASE + k)),
        ("location_id", u64::from(pci_location | partition_bits)),
        ("unique_id", 0x4a3c_5e21_7d90_0000 | u64::from(gpu) << 8),
        ("simd_id_base", 0x8000_1000 + u64::from(k) * 0x1000),
        ("hive_id", HIVE_ID),
    ];
    for (key, v) in ids {
        props.insert(key.to_string(), v);
    }
    for (key, v) in &spec.properties {
        props.insert(key.clone(), *v);
    }
    let get = |key: &str| props.get(key).copied().unwrap_or(0);
    let node = k + 1;
    let to_u32 = |key: &str| -> Result<u32, EmuError> {
        u32::try_from(get(key))
            .map_err(|_| EmuError::Config(format!("node {node}: {key} does not fit in 32 bits")))
    };
    for key in [
        "simd_per_cu",
        "num_xcc",
        "simd_arrays_per_engine",
        "num_cp_queues",
        "simd_count",
    ] {
        if get(key) == 0 {
            return Err(EmuError::Config(format!(
                "node {node}: {key} must not be 0"
            )));
        }
    }
    let computed = topology::cwsr_sizes(
        to_u32("simd_count")?,
        to_u32("simd_per_cu")?,
        to_u32("num_xcc")?,
        to_u32("array_count")?,
        to_u32("simd_arrays_per_engine")?,
        to_u32("gfx_target_version")?,
        to_u32("lds_size_in_kb")?,
    );
    let mut sizes = computed;
    if spec.properties.contains_key("cwsr_size") {
        sizes.cwsr_size = to_u32("cwsr_size")?;
    }
    if spec.properties.contains_key("ctl_stack_size") {
        sizes.ctl_stack_size = to_u32("ctl_stack_size")?;
    }
    let num_xcc = to_u32("num_xcc")?;
    let cu_per_xcc = to_u32("simd_count")? / to_u32("simd_per_cu")? / num_xcc;
    let num_cp_queues = to_u32("num_cp_queues")?;
    let render_minor = to_u32("drm_render_minor")?;
    props.insert("cwsr_size".into(), u64::from(sizes.cwsr_size));
    props.insert("ctl_stack_size".into(), u64::from(sizes.ctl_stack_size));
    let gpu_id = spec.gpu_id.unwrap_or(GPU_ID_BASE + k);
    if gpu_id == 0 || gpu_id > 0xffff {
        return Err(EmuError::Config(format!(
            "node {node}: gpu_id {gpu_id:#x} must be in 1..=0xffff (it is encoded in 16 bits of the doorbell offset)"
        )));
    }
    Ok(GpuNode {
        node,
        gpu_id,
        name: spec
            .name
            .clone()
            .unwrap_or_else(|| "ip discovery".to_string()),
        num_xcc,
        num_cp_queues,
        render_minor,
        vram: preset.vram_bytes(),
        pci_rev: preset.pci_rev(),
        sizes,
        eop_buffer_size: EOP_BUFFER_SIZE,
        cu_per_xcc,
        physical: gpu,
        hive_id: props.get("hive_id").copied().unwrap_or(0),
        props,
    })
}

fn check_unique(gpus: &[GpuNode]) -> Result<(), EmuError> {
    let mut ids = BTreeSet::new();
    let mut minors = BTreeSet::new();
    for g in gpus {
        if !ids.insert(g.gpu_id) {
            return Err(EmuError::Config(format!(
                "gpu_id {:#x} is used by more than one node",
                g.gpu_id
            )));
        }
        if !minors.insert(g.render_minor) {
            return Err(EmuError::Config(format!(
                "drm_render_minor {} is used by more than one node",
                g.render_minor
            )));
        }
    }
    Ok(())
}

/// Properties of the CPU node 0.
fn cpu_props() -> BTreeMap<String, u64> {
    let mut map = BTreeMap::new();
    for key in topology::known_keys() {
        map.insert(key.to_string(), 0);
    }
    map.insert("cpu_cores_count".into(), 96);
    map.insert("mem_banks_count".into(), 1);
    map.insert("max_engine_clk_ccompute".into(), 3700);
    map
}
