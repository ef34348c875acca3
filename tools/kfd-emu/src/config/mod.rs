//! Emulator configuration: what the emulator is started with ([`EmuConfig`]), the machine
//! presets, the optional TOML topology file, and the topology (CPU node + GPU nodes) they
//! produce.
//!
//! Every GPU node is one KFD partition (one `kfd_node`): it has its own `gpu_id`,
//! render node, HQDs and HWS model. `--gpus N` repeats the preset's (or the file's)
//! nodes once per physical GPU.
//!
//! [`EmuConfig`] and [`Preset`] are `kfd-emu-api`'s (what a test names without linking the
//! emulator); what the emulator makes of them is here:
//!
//! * `mod.rs` — the GPU targets a configuration presents, and the model parameters it gives.
//! * `preset.rs` — [`PresetHw`]: each preset's hardware facts and node property template.
//! * `file.rs` — the TOML topology file: its format and the rules a file is checked against.
//! * `nodes.rs` — the topology built from a preset or a file: GPU nodes, their partitions, the
//!   CPU node.

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
pub(crate) use preset::PresetHw;

pub use kfd_emu_api::{ArgTime, EmuConfig, PartitionCosts};

/// The `gfx_target_version` of every GPU node the emulator presents for `config` (the topology
/// file's overrides included), in topology order.
pub fn gfx_target_versions(config: &EmuConfig) -> Result<Vec<u64>, EmuError> {
    Ok(Topology::build(config)?
        .gpus
        .iter()
        .map(|g| g.props.get("gfx_target_version").copied().unwrap_or(0))
        .collect())
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
    fn the_configuration_defaults_to_the_models_wave_costs() {
        let m = gfx_model::Params::default();
        let c = EmuConfig::default();
        assert_eq!(
            (c.save_wave_ns, c.restore_wave_ns),
            (m.save_wave_ns, m.restore_wave_ns),
            "kfd_emu_api::MODEL_WAVE_NS no longer matches gfx_model::Params::default()"
        );
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
