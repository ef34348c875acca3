//! Emulator configuration: what the emulator is started with ([`EmuConfig`]), the machine
//! presets, the optional TOML topology file, and the topology (CPU node + GPU nodes) they
//! produce.
//!
//! Every GPU node is one KFD partition (one `kfd_node`): it has its own `gpu_id`,
//! render node, HQDs and HWS model. `--gpus N` repeats the preset's (or the file's)
//! nodes once per physical GPU.
//!
//! * `mod.rs` — [`EmuConfig`], a partition's measured costs, and the model parameters they give.
//! * `preset.rs` — [`Preset`]: the machine layouts and their property templates.
//! * `file.rs` — the TOML topology file: its format and the rules a file is checked against.
//! * `nodes.rs` — the topology built from a preset or a file: GPU nodes, their partitions, the
//!   CPU node.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::EmuError;

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

mod file;
mod nodes;
mod preset;

pub(crate) use nodes::{GPU_COUNTER_HZ, GpuNode, Topology, model_shape};
pub use preset::Preset;

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

#[cfg(test)]
mod tests {
    use super::file::parse_topology;
    use super::nodes::{Partition, build_node};
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
