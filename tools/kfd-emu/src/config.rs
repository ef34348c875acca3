//! Emulator configuration: the presets, the optional TOML topology file, and the
//! topology (CPU node + GPU nodes) they produce.
//!
//! Every GPU node is one KFD partition (one `kfd_node`): it has its own `gpu_id`,
//! render node, HQDs and HWS model. `--gpus N` repeats the preset's (or the file's)
//! nodes once per physical GPU.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::EmuError;
use crate::topology::{self, CwsrSizes};

/// First `gpu_id` handed out; node `k` (0-based over all GPU nodes) gets `GPU_ID_BASE + k`.
pub const GPU_ID_BASE: u32 = 0xb1a0;
/// First DRM render minor; node `k` gets `/dev/dri/renderD<128 + k>`.
pub const RENDER_MINOR_BASE: u32 = 128;
/// `eop_buffer_size` of every gfx9 node.
pub const EOP_BUFFER_SIZE: u32 = 4096;
/// The same XGMI hive id for every emulated GPU.
const HIVE_ID: u64 = 0x5a7e_1d2c_3b4a_6f01;
/// CPU model name reported by node 0.
const CPU_NAME: &str = "AMD EPYC 9654 96-Core Processor";

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

    /// Topology nodes (partitions) per physical GPU.
    pub fn nodes_per_gpu(self) -> u32 {
        match self {
            Preset::Mi300xSpx | Preset::Mi308x | Preset::Mi210 => 1,
            Preset::Mi300xCpx => 8,
        }
    }

    /// HBM of one GPU: 192 GiB of HBM3 on MI300X and MI308X (in CPX mode with NPS1 every
    /// partition sees the whole memory), 64 GiB of HBM2e on MI210.
    pub fn vram_bytes(self) -> u64 {
        match self {
            Preset::Mi300xSpx | Preset::Mi300xCpx | Preset::Mi308x => 192 << 30,
            Preset::Mi210 => 64 << 30,
        }
    }

    /// The fastest PCIe link to the CPU in MB/s, as `amdgpu_amdkfd_get_pcie_bandwidth_mbytes`
    /// computes it from the widest width and fastest speed of the link (x16 lanes, 8 bits a
    /// byte): PCIe 5.0 (32 GT/s) for MI300X and MI308X, PCIe 4.0 (16 GT/s) for MI210 (AMD's
    /// specifications; ASSUMED: the host's root port is as fast).
    pub fn pcie_max_mbytes(self) -> u32 {
        match self {
            Preset::Mi300xSpx | Preset::Mi300xCpx | Preset::Mi308x => 16 * 32_000 / 8,
            Preset::Mi210 => 16 * 16_000 / 8,
        }
    }

    /// XGMI links between two GPUs of a hive, which the kernel takes from the XGMI firmware's
    /// topology (`amdgpu_xgmi_get_num_links`). ASSUMED 1: an 8-GPU MI300X platform connects
    /// every pair by one of each GPU's 7 links; MI210 bridges vary.
    pub fn xgmi_links_per_peer(self) -> u32 {
        1
    }

    /// The board's marketing name (libdrm's `amdgpu.ids` for the device id; sysfs
    /// `product_name`, which the kernel reads from the board's FRU).
    pub fn marketing_name(self) -> &'static str {
        match self {
            Preset::Mi300xSpx | Preset::Mi300xCpx => "AMD Instinct MI300X",
            Preset::Mi308x => "AMD Instinct MI308X",
            Preset::Mi210 => "AMD Instinct MI210",
        }
    }

    /// Whether the GPU is built of AIDs (GC 9.4.3: MI300X, MI308X), one of the conditions of
    /// the kernel's per-peer recommended SDMA engines.
    pub fn has_aids(self) -> bool {
        !matches!(self, Preset::Mi210)
    }

    /// The PCI revision the render node's DEV_INFO reports: libdrm's `amdgpu.ids` names a
    /// device by (device id, revision), and lists 0x740F only with revision 02 (MI210).
    pub fn pci_rev(self) -> u32 {
        match self {
            Preset::Mi210 => 2,
            _ => 0,
        }
    }

    /// The preset's `gfx_target_version` (gfx942: 90402, gfx90a: 90010).
    pub fn gfx_target_version(self) -> u64 {
        self.template()["gfx_target_version"]
    }

    /// Properties of one node of this preset, without the per-node identifiers.
    fn template(self) -> BTreeMap<String, u64> {
        // (simd_count, array_count, cu_per_simd_array, device_id, num_xcc)
        let (simd_count, array_count, cu_per_simd_array, device_id, num_xcc) = match self {
            Preset::Mi300xSpx => (1216, 32, 10, 0x74a1, 8),
            Preset::Mi300xCpx => (152, 4, 10, 0x74a1, 1),
            Preset::Mi308x => (320, 16, 5, 0x74a2, 4),
            // 104 CUs x 4 SIMDs; 8 shader engines of one shader array (ASSUMED, as rocminfo
            // reports MI200 parts); 0x740F (libdrm amdgpu.ids: "AMD Instinct MI210").
            Preset::Mi210 => (416, 8, 16, 0x740f, 1),
        };
        // What differs between GC 9.4.3 (gfx942) and GC 9.4.2 (gfx90a), docs/kfd-emulator.md:
        // (gfx_target_version, num_sdma_xgmi_engines, max_engine_clk_fcompute, fw_version,
        // debug_prop).
        let (gfx_target_version, xgmi_sdma, fcompute, fw_version, debug_prop) = match self {
            Preset::Mi300xSpx | Preset::Mi300xCpx | Preset::Mi308x => (90402, 14, 2100, 177, 0x5c7),
            // kfd_device.c: IP_VERSION(9, 4, 2) -> 90010. Aldebaran has 5 SDMA instances, 2 of
            // them PCIe (kfd_get_num_sdma_engines), 3 XGMI. 1700 MHz peak engine clock. MEC
            // firmware >= 51 has the debugger support (kfd_topology_set_dbg_firmware_support).
            // debug_prop: watch-address mask bits 6 and 29 (HSA_DBG_WATCH_ADDR_MASK_LO_BIT_GFX9,
            // _HI_BIT); no DISPATCH_INFO_ALWAYS_VALID from GC 9.4.2 on.
            Preset::Mi210 => (90010, 3, 1700, 78, 0x1d6),
        };
        let pairs: [(&str, u64); 36] = [
            ("cpu_cores_count", 0),
            ("simd_count", simd_count),
            ("mem_banks_count", 1),
            ("caches_count", u64::from(crate::topology::GPU_CACHES)),
            ("io_links_count", 0),
            ("p2p_links_count", 0),
            ("cpu_core_id_base", 0),
            ("simd_id_base", 0x8000_1000),
            ("max_waves_per_simd", 8),
            ("lds_size_in_kb", 64),
            ("gds_size_in_kb", 0),
            ("num_gws", 64),
            ("wave_front_size", 64),
            ("array_count", array_count),
            ("simd_arrays_per_engine", 1),
            ("cu_per_simd_array", cu_per_simd_array),
            ("simd_per_cu", 4),
            ("max_slots_scratch_cu", 32),
            ("gfx_target_version", gfx_target_version),
            ("vendor_id", 4098),
            ("device_id", device_id),
            ("location_id", 0),
            ("domain", 0),
            ("drm_render_minor", u64::from(RENDER_MINOR_BASE)),
            ("hive_id", HIVE_ID),
            ("num_sdma_engines", 2),
            ("num_sdma_xgmi_engines", xgmi_sdma),
            ("num_sdma_queues_per_engine", 8),
            ("num_cp_queues", 24),
            ("max_engine_clk_fcompute", fcompute),
            // The kernel prints 0 here since memory moved to mem_banks/ (see Preset::vram_bytes).
            ("local_mem_size", 0),
            ("fw_version", fw_version),
            // QUEUE_SIZE_POW2 | WATCH_POINTS_SUPPORTED | 4 watch bits | doorbell type 2.0
            // | TRAP_DEBUG_SUPPORT | WAVE_LAUNCH_TRAP_OVERRIDE | WAVE_LAUNCH_MODE
            // | PRECISE_MEMORY_OPERATIONS | MEM_EDC | RAS event notify | SRAM_EDC
            // | TRAP_DEBUG_FIRMWARE_SUPPORTED (what kfd_topology_set_capabilities reports for
            // GC 9.4.3 with current firmware; the thunk calls RUNTIME_ENABLE only when every GPU
            // node has the firmware bit). Bit 27, the SVM API, is clear: the emulator does not
            // implement AMDKFD_IOC_SVM. GC 9.4.2 gets the same bits (PRECISE_MEMORY_OPERATIONS
            // from 9.4.2 on).
            ("capability", 0x2437_a488),
            ("debug_prop", debug_prop),
            ("sdma_fw_version", 19),
            ("num_xcc", num_xcc),
        ];
        let mut map: BTreeMap<String, u64> =
            pairs.iter().map(|(k, v)| ((*k).to_string(), *v)).collect();
        map.insert("unique_id".into(), 0);
        map.insert("max_engine_clk_ccompute".into(), 3700);
        map
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = EmuError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
                EmuError::Config(format!(
                    "unknown preset {s:?}; expected one of {}",
                    names.join(", ")
                ))
            })
    }
}

/// What the emulator is started with. `Default` is one MI300X in SPX mode on a
/// Linux 6.12+ kernel with KFD 1.17.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmuConfig {
    /// Machine layout (ignored for node properties when `topology_file` is set, except
    /// as the template the file's nodes start from).
    pub preset: Preset,
    /// Number of physical GPUs; each repeats the preset's (or the file's) nodes.
    pub gpus: u32,
    /// TOML topology that overrides the preset when set.
    pub topology_file: Option<PathBuf>,
    /// Minor version GET_VERSION reports; RUNTIME_ENABLE/DBG_TRAP are ENOTTY below 13.
    pub kfd_minor: u32,
    /// `true` = Linux 6.12+: sysfs has `cwsr_size`/`ctl_stack_size` and CREATE_QUEUE
    /// validates the queue buffers; `false` = older kernel.
    pub buffer_checks: bool,
    /// Stall of every queue of a partition per device-wide preempt, in microseconds.
    pub preempt_cost_us: u64,
    /// CWSR cost per wave saved at a device-wide preempt, ns (the model's `save_wave_ns`).
    #[serde(default = "default_wave_ns")]
    pub save_wave_ns: u64,
    /// CWSR cost per wave restored when its queue is mapped again, ns (`restore_wave_ns`).
    #[serde(default = "default_wave_ns")]
    pub restore_wave_ns: u64,
    /// Execution time of one work-group of an AQL dispatch whose `reserved2` is 0, in ns.
    pub default_packet_ns: u64,
    /// Time slice of an oversubscribed partition, in microseconds.
    pub quantum_us: u64,
    /// The kernel programs the per-queue priority (`cp_hqd_queue_priority`), as kernels before
    /// upstream commit 73463e26f7e2 (Linux 7.0) did: the dispatcher then prefers higher queues
    /// strictly. Otherwise only the pipe priority (low / medium / high) arbitrates.
    #[serde(default)]
    pub queue_priority: bool,
    /// Overrides the arbitration the kernel mode implies (experiments: `equal`).
    #[serde(default)]
    pub arbitration: Option<gfx_model::Arbitration>,
    /// Work-group execution time in ns by kernel name, for dispatches of real code objects
    /// (whose packets carry no time); kernels not listed take `default_packet_ns`.
    #[serde(default)]
    pub kernel_wg_ns: BTreeMap<String, u64>,
    /// Work-group execution time by kernel name taken from one of the dispatch's arguments
    /// (a spin kernel's iteration count), for kernels not in `kernel_wg_ns`: the model of a
    /// kernel whose duration its arguments set.
    #[serde(default)]
    pub kernel_wg_time_by_arg: BTreeMap<String, ArgTime>,
    /// Each partition's costs, in topology order, from a calibration file of several
    /// partitions (`--calibration`); empty: every partition takes the costs above.
    #[serde(default)]
    pub partition_costs: Vec<PartitionCosts>,
}

/// A work-group time read from a kernel argument: `value x ps_per_unit` picoseconds, the
/// value being the unsigned 64-bit (or shorter: `size`) argument at byte `offset` of the
/// kernarg segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgTime {
    /// Byte offset of the argument in the kernarg segment.
    pub offset: u32,
    /// Its size in bytes (1 to 8; default 8).
    #[serde(default = "ArgTime::default_size")]
    pub size: u32,
    /// Picoseconds of one work-group per unit of the argument.
    pub ps_per_unit: u64,
}

impl ArgTime {
    fn default_size() -> u32 {
        8
    }

    /// The work-group time in ns for the argument's little-endian `bytes`.
    pub fn wg_ns(&self, bytes: &[u8]) -> u64 {
        let mut v = [0u8; 8];
        let n = bytes.len().min(8);
        v[..n].copy_from_slice(&bytes[..n]);
        let units = u128::from(u64::from_le_bytes(v));
        u64::try_from(units * u128::from(self.ps_per_unit) / 1000).unwrap_or(u64::MAX)
    }
}

/// One partition's measured costs (a calibration's `[[partition]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionCosts {
    /// The model's `preempt_fixed_ns`.
    pub preempt_fixed_ns: u64,
    /// CWSR cost per wave saved, ns.
    pub save_wave_ns: u64,
    /// CWSR cost per wave restored, ns.
    pub restore_wave_ns: u64,
    /// The arbitration.
    pub arbitration: gfx_model::Arbitration,
}

impl EmuConfig {
    /// The kernel release the emulated kernel stands for, as `proc/sys/kernel/osrelease` shows
    /// it: before 6.12 for `--legacy-kernel` (no queue-buffer rules), 6.12 with
    /// `--queue-priority` (queue priority still programmed), else 7.0 (pipe priority only,
    /// upstream 73463e26f7e2).
    pub fn kernel_release(&self) -> &'static str {
        if !self.buffer_checks {
            "6.8.0-kfd-emu"
        } else if self.queue_priority {
            "6.12.0-kfd-emu"
        } else {
            "7.0.0-kfd-emu"
        }
    }

    /// The `gfx_target_version` of every GPU node the emulator presents (the topology file's
    /// overrides included), in topology order.
    pub fn gfx_target_versions(&self) -> Result<Vec<u64>, EmuError> {
        Ok(Topology::build(self)?
            .gpus
            .iter()
            .map(|g| g.props.get("gfx_target_version").copied().unwrap_or(0))
            .collect())
    }

    /// The dispatcher's arbitration: the override, else what the kernel mode implies.
    pub fn effective_arbitration(&self) -> gfx_model::Arbitration {
        self.arbitration
            .unwrap_or(if self.queue_priority || !self.buffer_checks {
                gfx_model::Arbitration::StrictPriority
            } else {
                gfx_model::Arbitration::PipePriority
            })
    }
}

/// The model's default per-wave CWSR cost (`gfx_model::Params`, docs/gfx-model.md).
fn default_wave_ns() -> u64 {
    gfx_model::Params::default().save_wave_ns
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            preset: Preset::Mi300xSpx,
            gpus: 1,
            topology_file: None,
            kfd_minor: 17,
            buffer_checks: true,
            preempt_cost_us: 50,
            save_wave_ns: default_wave_ns(),
            restore_wave_ns: default_wave_ns(),
            default_packet_ns: 10_000,
            quantum_us: 10_000,
            queue_priority: false,
            arbitration: None,
            kernel_wg_ns: BTreeMap::new(),
            kernel_wg_time_by_arg: BTreeMap::new(),
            partition_costs: Vec::new(),
        }
    }
}

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

/// The model's parameters from the emulator's configuration (the rest keep the model's
/// documented defaults).
pub(crate) fn model_params(c: &EmuConfig, partition: usize) -> gfx_model::Params {
    let p = gfx_model::Params {
        arbitration: c.effective_arbitration(),
        default_wg_ns: c.default_packet_ns,
        preempt_fixed_ns: c.preempt_cost_us.saturating_mul(1000),
        save_wave_ns: c.save_wave_ns,
        restore_wave_ns: c.restore_wave_ns,
        quantum_ns: c.quantum_us.max(1).saturating_mul(1000),
        ..gfx_model::Params::default()
    };
    match c.partition_costs.get(partition) {
        Some(m) => gfx_model::Params {
            preempt_fixed_ns: m.preempt_fixed_ns,
            save_wave_ns: m.save_wave_ns,
            restore_wave_ns: m.restore_wave_ns,
            arbitration: m.arbitration,
            ..p
        },
        None => p,
    }
}

/// GPU clock counter frequency in Hz: the emulated counter runs at 100 MHz (GET_CLOCK_COUNTERS,
/// SDMA timestamps, and `DEV_INFO.gpu_counter_freq` in kHz on the render node).
pub(crate) const GPU_COUNTER_HZ: u64 = 100_000_000;

impl GpuNode {
    /// VRAM of the node in bytes (its `mem_banks/0` size, `Preset::vram_bytes`).
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
    /// The preset's [`Preset::has_aids`].
    pub has_aids: bool,
    /// The preset's [`Preset::pcie_max_mbytes`].
    pub pcie_max_mbytes: u32,
    /// The preset's [`Preset::xgmi_links_per_peer`].
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

/// A node entry of the TOML file (or an empty one for a preset node).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeSpec {
    gpu_id: Option<u32>,
    name: Option<String>,
    #[serde(default)]
    properties: BTreeMap<String, u64>,
}

/// The TOML topology file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyFile {
    preset: Option<String>,
    #[serde(default)]
    node: Vec<NodeSpec>,
}

fn load_topology_file(path: &Path, fallback: Preset) -> Result<(Preset, Vec<NodeSpec>), EmuError> {
    let text = std::fs::read_to_string(path).map_err(|source| EmuError::Io {
        context: format!("read topology file {}", path.display()),
        source,
    })?;
    parse_topology(&text, fallback)
        .map_err(|e| EmuError::Config(format!("topology file {}: {e}", path.display())))
}

/// Why a topology file's text was refused (the caller names the file).
#[derive(Debug, thiserror::Error)]
enum TopologyError {
    #[error("{0}")]
    Toml(#[from] toml::de::Error),
    #[error("{0}")]
    Preset(EmuError),
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
fn parse_topology(text: &str, fallback: Preset) -> Result<(Preset, Vec<NodeSpec>), TopologyError> {
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

/// Which of its GPU's partitions (KFD nodes) a node is.
#[derive(Debug, Clone, Copy)]
struct Partition {
    index: u32,
    of: u32,
}

fn build_node(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_argument_sets_the_work_group_time() {
        let a = ArgTime {
            offset: 0,
            size: 8,
            ps_per_unit: 30_476,
        };
        // 65,625 iterations of 30.476 ns: 2 ms.
        assert_eq!(a.wg_ns(&65_625u64.to_le_bytes()), 1_999_987);
        assert_eq!(a.wg_ns(&[]), 0);
        assert_eq!(a.wg_ns(&u64::MAX.to_le_bytes()), u64::MAX);
    }

    #[test]
    fn preset_names_round_trip() {
        for p in Preset::ALL {
            assert_eq!(p.name().parse::<Preset>().unwrap(), p);
        }
        assert!("mi250".parse::<Preset>().is_err());
    }

    #[test]
    fn presets_build_expected_nodes() {
        let mut cfg = EmuConfig::default();
        let t = Topology::build(&cfg).unwrap();
        assert_eq!(t.gpus.len(), 1);
        assert_eq!(t.gpus[0].num_xcc, 8);
        assert_eq!(t.gpus[0].sizes.cwsr_size, 23_203_840);
        assert_eq!(t.gpus[0].cwsr_total(23_203_840), 186_019_840);
        cfg.preset = Preset::Mi300xCpx;
        cfg.gpus = 2;
        let t = Topology::build(&cfg).unwrap();
        assert_eq!(t.gpus.len(), 16);
        assert_eq!(t.gpus[15].gpu_id, GPU_ID_BASE + 15);
        assert_eq!(t.gpus[15].render_minor, 143);
        assert_eq!(t.gpus[3].cu_per_xcc, 38);
        cfg.preset = Preset::Mi308x;
        cfg.gpus = 1;
        let t = Topology::build(&cfg).unwrap();
        assert_eq!(t.gpus[0].sizes.cwsr_size, 12_214_272);
        assert_eq!(t.gpus[0].props["device_id"], 0x74a2);
        cfg.preset = Preset::Mi210;
        let t = Topology::build(&cfg).unwrap();
        let g = &t.gpus[0];
        assert_eq!((g.num_xcc, g.cu_per_xcc, g.num_cp_queues), (1, 104, 24));
        assert_eq!(g.props["gfx_target_version"], 90010);
        assert_eq!((g.props["device_id"], g.pci_rev), (0x740f, 2));
        assert_eq!(g.vram_bytes(), 64 << 30);
        assert_eq!(
            (g.sizes.ctl_stack_size, g.sizes.cwsr_size),
            (36_864, 63_508_480)
        );
        assert_eq!(g.cwsr_total(g.sizes.cwsr_size), 63_639_552);
    }

    #[test]
    fn partitions_have_their_own_location_and_the_device_unique_id() {
        let t = Topology::build(&EmuConfig {
            preset: Preset::Mi300xCpx,
            gpus: 2,
            ..EmuConfig::default()
        })
        .unwrap();
        let id = |k: usize, key: &str| t.gpus[k].props[key];
        for k in 0..16 {
            let (gpu, part) = (k as u64 / 8, k as u64 % 8);
            assert_eq!(id(k, "location_id"), (0x0c + 0x10 * gpu) << 8 | part);
            assert_eq!(id(k, "unique_id"), id(8 * (k / 8), "unique_id"));
        }
        assert_ne!(id(0, "unique_id"), id(8, "unique_id"));
        // One node per GPU: the PCI function's own location.
        let spx = Topology::build(&EmuConfig {
            gpus: 2,
            ..EmuConfig::default()
        })
        .unwrap();
        assert_eq!(spx.gpus[1].props["location_id"], 0x1c00);
    }

    #[test]
    fn toml_overrides_and_rejects_unknown_keys() {
        let text = r#"
            preset = "mi308x"
            [[node]]
            gpu_id = 0x1234
            [node.properties]
            num_cp_queues = 4
            [[node]]
            [node.properties]
            simd_count = 160
            num_xcc = 2
            array_count = 8
        "#;
        let (preset, nodes) = parse_topology(text, Preset::Mi300xSpx).unwrap();
        assert_eq!(preset, Preset::Mi308x);
        let of = |index| Partition { index, of: 2 };
        let a = build_node(preset, 0, of(0), 0, &nodes[0]).unwrap();
        assert_eq!(a.gpu_id, 0x1234);
        assert_eq!(a.num_cp_queues, 4);
        let b = build_node(preset, 0, of(1), 1, &nodes[1]).unwrap();
        assert_eq!(b.num_xcc, 2);
        assert_eq!(b.cu_per_xcc, 20);
        assert_eq!(b.sizes.cwsr_size, 12_214_272);
        assert!(
            parse_topology(
                "[[node]]\n[node.properties]\nsimd_cnt = 1\n",
                Preset::Mi308x
            )
            .is_err()
        );
        assert!(parse_topology("preset = \"mi308x\"\n", Preset::Mi308x).is_err());
        let derived = parse_topology(
            "[[node]]\n[node.properties]\nio_links_count = 3\n",
            Preset::Mi308x,
        )
        .unwrap_err();
        assert!(
            derived.to_string().contains("io_links_count cannot be set"),
            "{derived}"
        );
    }
}
