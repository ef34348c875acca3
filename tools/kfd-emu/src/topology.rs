//! sysfs text of the KFD topology (`/sys/class/kfd/kfd/topology`) and the CWSR size
//! formula the kernel and libhsakmt use when sysfs lacks the sizes.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::config::Topology;

/// Keys printed for every node, in the kernel's `node_show` order.
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

/// Keys added by Linux 6.12 (printed only when buffer checks are modelled).
const CWSR_KEYS: [&str; 2] = ["cwsr_size", "ctl_stack_size"];

/// Keys printed for GPU nodes only. `capability2` is printed only when a topology
/// file sets it (newer kernels).
const GPU_KEYS: [&str; 10] = [
    "max_engine_clk_fcompute",
    "local_mem_size",
    "fw_version",
    "capability",
    "capability2",
    "debug_prop",
    "sdma_fw_version",
    "unique_id",
    "num_xcc",
    "max_engine_clk_ccompute",
];

/// Every property key a topology file may set.
pub(crate) fn known_keys() -> Vec<&'static str> {
    COMMON_KEYS
        .iter()
        .chain(CWSR_KEYS.iter())
        .chain(GPU_KEYS.iter())
        .copied()
        .collect()
}

pub(crate) fn is_known_key(key: &str) -> bool {
    known_keys().contains(&key)
}

/// The `properties` file of one node: `name value\n` lines in the kernel's order.
fn render_properties(props: &BTreeMap<String, u64>, gpu: bool, buffer_checks: bool) -> String {
    let mut out = String::new();
    let mut line = |key: &str| {
        let value = props.get(key).copied().unwrap_or(0);
        // Writing to a String cannot fail.
        let _ = writeln!(out, "{key} {value}");
    };
    for key in COMMON_KEYS {
        line(key);
    }
    if buffer_checks {
        for key in CWSR_KEYS {
            line(key);
        }
    }
    if gpu {
        for key in &GPU_KEYS[..GPU_KEYS.len() - 1] {
            if *key == "capability2" && !props.contains_key(*key) {
                continue;
            }
            line(key);
        }
    }
    line("max_engine_clk_ccompute");
    out
}

/// Caches listed under each GPU node's `caches/` (L1 vector, L2, MALL).
pub(crate) const GPU_CACHES: u32 = 3;
/// `HSA_MEM_HEAP_TYPE_SYSTEM` and `HSA_MEM_HEAP_TYPE_FB_PUBLIC` (all VRAM CPU-visible, as on
/// MI300X with its large BAR).
const HEAP_SYSTEM: u32 = 0;
const HEAP_FB_PUBLIC: u32 = 1;
/// System memory of the CPU node's bank: it only sizes ROCr's system memory pool.
const CPU_MEM_BYTES: u64 = 512 << 30;
/// `HSA_CACHE_TYPE_DATA | HSA_CACHE_TYPE_HSACU`.
const CACHE_DATA_HSACU: u32 = 0x9;

/// `mem_banks/N/properties` in the kernel's `mem_show` order.
fn mem_bank_properties(heap_type: u32, size: u64, width: u32, clk_mhz: u32) -> String {
    format!(
        "heap_type {heap_type}\nsize_in_bytes {size}\nflags 0\nwidth {width}\nmem_clk_max {clk_mhz}\n"
    )
}

/// `caches/K/properties` of a GPU node in the kernel's `kfd_cache_show` order: (level, size in
/// KiB, line size, latency) for the vector L1, the per-XCC L2 and the MALL (Infinity Cache).
fn cache_properties(k: u32, simd_id_base: u64) -> String {
    let (level, kib, line, latency) = match k {
        0 => (1, 16, 128, 1),
        1 => (2, 4096, 128, 5),
        _ => (3, 262_144, 64, 10),
    };
    format!(
        "processor_id_low {simd_id_base}\nlevel {level}\nsize {kib}\ncache_line_size {line}\ncache_lines_per_tag 1\nassociation 16\nlatency {latency}\ntype {CACHE_DATA_HSACU}\nsibling_map 1\n"
    )
}

/// One generated topology file: path relative to `sys/class/kfd/kfd/topology` and text.
pub(crate) struct TopologyFile {
    pub path: Vec<String>,
    pub text: String,
}

/// All files under `sys/class/kfd/kfd/topology`.
pub(crate) fn topology_files(topo: &Topology, buffer_checks: bool) -> Vec<TopologyFile> {
    let mut files = vec![
        TopologyFile {
            path: vec!["generation_id".into()],
            text: "1\n".into(),
        },
        TopologyFile {
            path: vec!["system_properties".into()],
            text: "platform_oem 0\nplatform_id 0\nplatform_rev 0\n".into(),
        },
    ];
    let mut node =
        |n: u32, gpu_id: u32, name: &str, props: String, extra: Vec<(Vec<String>, String)>| {
            let dir = vec!["nodes".to_string(), n.to_string()];
            let with = |f: &str| {
                let mut p = dir.clone();
                p.push(f.to_string());
                p
            };
            files.push(TopologyFile {
                path: with("gpu_id"),
                text: format!("{gpu_id}\n"),
            });
            files.push(TopologyFile {
                path: with("name"),
                text: format!("{name}\n"),
            });
            files.push(TopologyFile {
                path: with("properties"),
                text: props,
            });
            for (sub, text) in extra {
                let mut path = dir.clone();
                path.extend(sub);
                files.push(TopologyFile { path, text });
            }
        };
    let sub = |parts: [&str; 3]| parts.iter().map(|p| (*p).to_string()).collect::<Vec<_>>();
    node(
        0,
        0,
        &topo.cpu_name,
        render_properties(&topo.cpu_props, false, buffer_checks),
        vec![(
            sub(["mem_banks", "0", "properties"]),
            mem_bank_properties(HEAP_SYSTEM, CPU_MEM_BYTES, 64, 4800),
        )],
    );
    for g in &topo.gpus {
        let prop = |k: &str| g.props.get(k).copied().unwrap_or(0);
        let mut extra: Vec<(Vec<String>, String)> = (0..prop("mem_banks_count"))
            .map(|b| {
                (
                    sub(["mem_banks", &b.to_string(), "properties"]),
                    mem_bank_properties(HEAP_FB_PUBLIC, g.vram_bytes(), 8192, 1300),
                )
            })
            .collect();
        extra.extend((0..prop("caches_count")).map(|k| {
            (
                sub(["caches", &k.to_string(), "properties"]),
                cache_properties(u32::try_from(k).unwrap_or(u32::MAX), prop("simd_id_base")),
            )
        }));
        node(
            g.node,
            g.gpu_id,
            &g.name,
            render_properties(&g.props, true, buffer_checks),
            extra,
        );
    }
    files
}

/// Context-save sizes of one node (all per XCC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CwsrSizes {
    /// Control stack size (sysfs `ctl_stack_size`).
    pub ctl_stack_size: u32,
    /// Work-group state size (VGPR + SGPR + LDS + HWREG per CU).
    pub wg_data_size: u32,
    /// `ctl_stack_size + wg_data_size` (sysfs `cwsr_size`).
    pub cwsr_size: u32,
    /// Debugger memory per XCC (not exported in sysfs).
    pub debug_memory_size: u32,
}

fn align(v: u64, a: u64) -> u64 {
    v.div_ceil(a) * a
}

/// The kernel's `kfd_queue_ctx_save_restore_size` formula (gfx9 family; gfx10+ uses
/// 32 waves per CU and 12-byte control-stack entries).
///
/// `simd_count` and `array_count` are partition totals; the result is per XCC.
pub fn cwsr_sizes(
    simd_count: u32,
    simd_per_cu: u32,
    num_xcc: u32,
    array_count: u32,
    simd_arrays_per_engine: u32,
    gfx_target_version: u32,
    lds_size_in_kb: u32,
) -> CwsrSizes {
    let gfx10_plus = gfx_target_version >= 100_100;
    let cu_num = u64::from(simd_count) / u64::from(simd_per_cu.max(1)) / u64::from(num_xcc.max(1));
    let wave_num = if gfx10_plus {
        cu_num * 32
    } else {
        (cu_num * 40).min(u64::from(array_count / simd_arrays_per_engine.max(1)) * 512)
    };
    let wave_entry = if gfx10_plus { 12 } else { 8 };
    let ctl_stack_size = align(40 + wave_num * wave_entry + 8, 4096);
    let big_vgpr =
        matches!(gfx_target_version, 90008 | 90010 | 90500) || gfx_target_version / 100 == 904;
    let vgpr: u64 = if big_vgpr { 0x80000 } else { 0x40000 };
    let lds: u64 = if gfx_target_version == 90500 {
        u64::from(lds_size_in_kb) * 1024
    } else {
        0x10000
    };
    let wg_data_size = align(cu_num * (vgpr + 0x4000 + lds + 0x1000), 4096);
    let cwsr_size = align(ctl_stack_size + wg_data_size, 4096);
    let debug_memory_size = align(wave_num * 32, 64);
    let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    CwsrSizes {
        ctl_stack_size: clamp(ctl_stack_size),
        wg_data_size: clamp(wg_data_size),
        cwsr_size: clamp(cwsr_size),
        debug_memory_size: clamp(debug_memory_size),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EmuConfig, Preset};

    #[test]
    fn worked_example_mi300x_spx() {
        let s = cwsr_sizes(1216, 4, 8, 32, 1, 90402, 64);
        assert_eq!(s.ctl_stack_size, 12_288);
        assert_eq!(s.wg_data_size, 23_191_552);
        assert_eq!(s.cwsr_size, 23_203_840);
        assert_eq!(s.debug_memory_size, 48_640);
        let total = align(
            (u64::from(s.cwsr_size) + u64::from(s.debug_memory_size)) * 8,
            4096,
        );
        assert_eq!(total, 186_019_840);
    }

    #[test]
    fn mi308x_and_cpx_sizes() {
        let s = cwsr_sizes(320, 4, 4, 16, 1, 90402, 64);
        assert_eq!(
            (s.ctl_stack_size, s.cwsr_size, s.debug_memory_size),
            (8192, 12_214_272, 25_600)
        );
        let s = cwsr_sizes(152, 4, 1, 4, 1, 90402, 64);
        assert_eq!(
            (s.ctl_stack_size, s.cwsr_size, s.debug_memory_size),
            (12_288, 23_203_840, 48_640)
        );
    }

    #[test]
    fn properties_order_and_optional_keys() {
        let topo = Topology::build(&EmuConfig {
            preset: Preset::Mi308x,
            ..EmuConfig::default()
        })
        .unwrap();
        let text = render_properties(&topo.gpus[0].props, true, true);
        let keys: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(keys[0], "cpu_cores_count");
        assert_eq!(keys[29], "cwsr_size");
        assert_eq!(keys[30], "ctl_stack_size");
        assert_eq!(keys.last(), Some(&"max_engine_clk_ccompute"));
        assert!(!keys.contains(&"capability2"));
        assert!(text.contains("\nnum_xcc 4\n"));
        let legacy = render_properties(&topo.gpus[0].props, true, false);
        assert!(!legacy.contains("cwsr_size"));
        assert!(!legacy.contains("ctl_stack_size"));
        let cpu = render_properties(&topo.cpu_props, false, true);
        assert!(!cpu.contains("num_xcc"));
        assert!(cpu.contains("cpu_cores_count 96\n"));
    }
}
