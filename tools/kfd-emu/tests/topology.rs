//! sysfs topology served by the emulator: presets, the legacy-kernel mode, a TOML
//! topology file, multiple GPUs.

mod common;

use kfd_emu::{EmuConfig, Preset};

use common::*;

/// The kernel's `node_show` key order up to `num_cp_queues`.
const COMMON_KEYS: [&str; 29] = [
    "cpu_cores_count",
    "simd_count",
    "mem_banks_count",
    "caches_count",
    "io_links_count",
    "p2p_links_count",
    "cpu_core_id_base",
    "simd_id_base",
    "max_waves_per_simd",
    "lds_size_in_kb",
    "gds_size_in_kb",
    "num_gws",
    "wave_front_size",
    "array_count",
    "simd_arrays_per_engine",
    "cu_per_simd_array",
    "simd_per_cu",
    "max_slots_scratch_cu",
    "gfx_target_version",
    "vendor_id",
    "device_id",
    "location_id",
    "domain",
    "drm_render_minor",
    "hive_id",
    "num_sdma_engines",
    "num_sdma_xgmi_engines",
    "num_sdma_queues_per_engine",
    "num_cp_queues",
];

fn keys(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn mi300x_spx_topology_matches_preset() {
    require_root();
    let t = mount_preset(Preset::Mi300xSpx);
    assert_eq!(t.read("sys/class/kfd/kfd/topology/generation_id"), "1\n");
    assert!(
        t.read("sys/class/kfd/kfd/topology/system_properties")
            .starts_with("platform_oem ")
    );
    // Node 0 is the CPU.
    assert_eq!(t.read("sys/class/kfd/kfd/topology/nodes/0/gpu_id"), "0\n");
    let cpu = parse_properties(&t.read("sys/class/kfd/kfd/topology/nodes/0/properties"));
    assert!(cpu["cpu_cores_count"] > 0);
    assert_eq!(cpu["simd_count"], 0);
    assert!(!cpu.contains_key("num_xcc"));
    // One GPU node.
    let nodes = t.gpu_nodes();
    assert_eq!(nodes.len(), 1);
    let g = &nodes[0];
    assert_eq!(
        t.read("sys/class/kfd/kfd/topology/nodes/1/name"),
        "ip discovery\n"
    );
    assert_eq!(
        t.read("sys/class/kfd/kfd/topology/nodes/1/gpu_id"),
        format!("{}\n", g.gpu_id)
    );
    assert!(g.gpu_id > 0 && g.gpu_id <= 0xffff);
    let p = &g.props;
    for (k, v) in [
        ("simd_count", 1216),
        ("array_count", 32),
        ("cu_per_simd_array", 10),
        ("simd_per_cu", 4),
        ("simd_arrays_per_engine", 1),
        ("num_xcc", 8),
        ("gfx_target_version", 90402),
        ("vendor_id", 4098),
        ("device_id", 0x74a1),
        ("max_waves_per_simd", 8),
        ("lds_size_in_kb", 64),
        ("wave_front_size", 64),
        ("num_cp_queues", 24),
        ("num_sdma_engines", 2),
        ("num_sdma_xgmi_engines", 14),
        ("num_sdma_queues_per_engine", 8),
        ("num_gws", 64),
        ("drm_render_minor", 128),
        ("local_mem_size", 0),
        ("cwsr_size", 23_203_840),
        ("ctl_stack_size", 12_288),
    ] {
        assert_eq!(p[k], v, "{k}");
    }
    assert_eq!(g.cwsr_total(), 186_019_840);
    // Key order as in the kernel.
    let text = t.read("sys/class/kfd/kfd/topology/nodes/1/properties");
    let k = keys(&text);
    assert_eq!(&k[..29], &COMMON_KEYS[..]);
    assert_eq!(&k[29..31], &["cwsr_size", "ctl_stack_size"]);
    assert_eq!(
        &k[31..],
        &[
            "max_engine_clk_fcompute",
            "local_mem_size",
            "fw_version",
            "capability",
            "debug_prop",
            "sdma_fw_version",
            "unique_id",
            "num_xcc",
            "max_engine_clk_ccompute"
        ]
    );
    assert!(text.ends_with('\n'));
    assert!(t.path("dev/dri/renderD128").exists());
    assert!(t.path("sys/class/kfd/kfd/proc").is_dir());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn mi300x_cpx_has_eight_partitions_per_gpu() {
    require_root();
    let t = mount(EmuConfig {
        preset: Preset::Mi300xCpx,
        gpus: 2,
        ..EmuConfig::default()
    });
    let nodes = t.gpu_nodes();
    assert_eq!(nodes.len(), 16);
    let mut ids: Vec<u32> = nodes.iter().map(|n| n.gpu_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 16, "gpu_ids are distinct");
    for (i, n) in nodes.iter().enumerate() {
        assert_eq!(n.props["num_xcc"], 1);
        assert_eq!(n.props["simd_count"], 152);
        assert_eq!(n.props["array_count"], 4);
        assert_eq!(n.props["device_id"], 0x74a1);
        assert_eq!(n.props["cwsr_size"], 23_203_840);
        assert_eq!(n.props["drm_render_minor"], 128 + i as u64);
        assert!(t.path(&format!("dev/dri/renderD{}", 128 + i)).exists());
        // The kernel ORs the node's index into the PCI location of a GPU of several nodes;
        // every partition shows the device's unique_id.
        let (gpu, part) = (i as u64 / 8, i as u64 % 8);
        assert_eq!(n.props["location_id"], (0x0c + 0x10 * gpu) << 8 | part);
        assert_eq!(n.props["unique_id"], nodes[8 * (i / 8)].props["unique_id"]);
        let card = if part == 0 {
            format!(
                "pci0000:{:02x}/0000:{:02x}:00.0",
                0x0c + 0x10 * gpu,
                0x0c + 0x10 * gpu
            )
        } else {
            format!("platform-kfd-emu/amdgpu_xcp_{}", 7 * gpu + part - 1)
        };
        assert_eq!(
            std::fs::read_link(t.path(&format!("sys/class/drm/renderD{}", 128 + i))).unwrap(),
            std::path::PathBuf::from(format!("../../devices/{card}/drm/renderD{}", 128 + i))
        );
    }
    assert_eq!(nodes[0].cwsr_total(), 23_252_992);
    assert_eq!(t.stats().partitions.len(), 16);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn mi308x_topology_matches_preset() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let nodes = t.gpu_nodes();
    assert_eq!(nodes.len(), 1);
    let p = &nodes[0].props;
    assert_eq!(p["num_xcc"], 4);
    assert_eq!(p["simd_count"], 320);
    assert_eq!(p["array_count"], 16);
    assert_eq!(p["cu_per_simd_array"], 5);
    assert_eq!(p["device_id"], 0x74a2);
    assert_eq!(p["cwsr_size"], 12_214_272);
    assert_eq!(p["ctl_stack_size"], 8192);
    assert_eq!(nodes[0].cwsr_total(), 48_959_488);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn legacy_kernel_omits_cwsr_keys() {
    require_root();
    let t = mount(EmuConfig {
        buffer_checks: false,
        ..EmuConfig::default()
    });
    let text = t.read("sys/class/kfd/kfd/topology/nodes/1/properties");
    assert!(!text.contains("cwsr_size"));
    assert!(!text.contains("ctl_stack_size"));
    assert_eq!(&keys(&text)[..29], &COMMON_KEYS[..]);
    assert_eq!(keys(&text)[29], "max_engine_clk_fcompute");
    let cpu = t.read("sys/class/kfd/kfd/topology/nodes/0/properties");
    assert!(!cpu.contains("cwsr_size"));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn toml_topology_file_overrides_preset() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("topo.toml");
    std::fs::write(
        &file,
        r#"
preset = "mi308x"

[[node]]
gpu_id = 0x4242
[node.properties]
num_cp_queues = 2

[[node]]
name = "custom"
[node.properties]
simd_count = 160
num_xcc = 2
array_count = 8
capability2 = 7
"#,
    )
    .unwrap();
    let t = mount(EmuConfig {
        topology_file: Some(file),
        ..EmuConfig::default()
    });
    let nodes = t.gpu_nodes();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0].gpu_id, 0x4242);
    assert_eq!(nodes[0].props["num_cp_queues"], 2);
    assert_eq!(nodes[0].props["device_id"], 0x74a2, "preset default kept");
    assert_eq!(nodes[1].props["num_xcc"], 2);
    assert_eq!(nodes[1].props["simd_count"], 160);
    assert_eq!(
        nodes[1].props["cwsr_size"], 12_214_272,
        "recomputed per XCC"
    );
    assert_eq!(nodes[1].props["capability2"], 7);
    assert_eq!(
        t.read("sys/class/kfd/kfd/topology/nodes/2/name"),
        "custom\n"
    );
    let stats = t.stats();
    assert_eq!(stats.partitions[0].num_cp_queues, 2);
    assert_eq!(stats.partitions[1].num_xcc, 2);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn bad_topology_file_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("topo.toml");
    std::fs::write(&file, "[[node]]\n[node.properties]\nsimd_cnt = 1\n").unwrap();
    let err = kfd_emu::MountedEmu::mount(
        &dir.path().join("root"),
        EmuConfig {
            topology_file: Some(file),
            ..EmuConfig::default()
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("simd_cnt"), "{err}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn stats_and_config_json_are_served() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let stats: kfd_emu::Stats = serde_json::from_str(&t.read("kfd-emu/stats.json")).unwrap();
    let mut now = t.stats();
    // Reading stats.json is itself a FUSE reply, which may be the largest message so far.
    assert!(stats.fuse_largest_message <= now.fuse_largest_message);
    now.fuse_largest_message = stats.fuse_largest_message;
    assert_eq!(stats, now);
    let cfg: serde_json::Value = serde_json::from_str(&t.read("kfd-emu/config.json")).unwrap();
    assert_eq!(cfg["config"]["preset"], "mi308x");
    assert_eq!(cfg["nodes"][0]["debug_memory_size"], 25_600);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn io_links_match_their_counts_and_link_the_gpus() {
    require_root();
    let t = mount(EmuConfig {
        preset: Preset::Mi308x,
        gpus: 2,
        ..EmuConfig::default()
    });
    let links = |node: u32| -> Vec<std::collections::BTreeMap<String, u64>> {
        let dir = format!("sys/class/kfd/kfd/topology/nodes/{node}/io_links");
        let n = std::fs::read_dir(t.path(&dir)).unwrap().count();
        (0..n)
            .map(|l| parse_properties(&t.read(&format!("{dir}/{l}/properties"))))
            .collect()
    };
    for node in 0..=2 {
        let props = parse_properties(&t.read(&format!(
            "sys/class/kfd/kfd/topology/nodes/{node}/properties"
        )));
        assert_eq!(
            props["io_links_count"] as usize,
            links(node).len(),
            "node {node}"
        );
        assert_eq!(props["p2p_links_count"], 0);
        let p2p = t.path(&format!(
            "sys/class/kfd/kfd/topology/nodes/{node}/p2p_links"
        ));
        assert_eq!(std::fs::read_dir(p2p).unwrap().count(), 0);
    }
    // The CPU has a link to each GPU; each GPU one to the CPU (first) and one XGMI link to the
    // other GPU.
    let cpu = links(0);
    assert_eq!(
        cpu.iter().map(|l| l["node_to"]).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert!(cpu.iter().all(|l| l["type"] == 2 && l["flags"] == 3));
    let g1 = links(1);
    assert_eq!(
        (g1[0]["type"], g1[0]["node_to"], g1[0]["weight"]),
        (2, 0, 20)
    );
    assert_eq!(
        (g1[1]["type"], g1[1]["node_to"], g1[1]["weight"]),
        (11, 2, 15)
    );
    assert_eq!(g1[1]["recommended_sdma_engine_id_mask"], 0xfffc);
    // The DRM sysfs ROCm SMI reads: the render node's device is the GPU's PCI function.
    let dev = std::fs::read_link(t.path("sys/class/drm/renderD128/device")).unwrap();
    assert_eq!(dev.to_str(), Some("../../../0000:0c:00.0"));
    assert_eq!(t.read("sys/class/drm/renderD129/device/vendor"), "0x1002\n");
    assert_eq!(t.read("sys/class/drm/card1/device/device"), "0x74a2\n");
    assert_eq!(
        t.read("sys/class/drm/card0/device/mem_info_vram_used"),
        "0\n"
    );
    assert_eq!(t.read("proc/modules").split(' ').next(), Some("amdgpu"));
}
