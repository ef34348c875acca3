//! The sysfs text of the KFD topology (`/sys/class/kfd/kfd/topology`): `generation_id`,
//! `system_properties`, and per node `gpu_id`, `name`, `properties` (in the kernel's
//! `node_show` order), `mem_banks/B/properties`, `caches/C/properties`,
//! `io_links/L/properties` (`crate::iolinks`) and the directories `p2p_links/` and `perf/`,
//! which `kfd_build_sysfs_node_entry` creates for every node even when empty.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::config::Topology;
use crate::iolinks::io_links;
use crate::topology::{COMMON_KEYS, CWSR_KEYS, GPU_KEYS};

/// The `properties` file of one node: `name value\n` lines in the kernel's order; the link
/// counts are those of the links the node's `io_links/` holds (`p2p_links/` is empty).
fn render_properties(
    props: &BTreeMap<String, u64>,
    links: usize,
    gpu: bool,
    buffer_checks: bool,
) -> String {
    let mut props = props.clone();
    props.insert("io_links_count".into(), links as u64);
    props.insert("p2p_links_count".into(), 0);
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

/// One generated topology entry: path relative to `sys/class/kfd/kfd/topology` and the text
/// of a file, or `None` for a directory (directories that hold files are implied).
pub(crate) struct TopologyFile {
    pub path: Vec<String>,
    pub text: Option<String>,
}

/// Subdirectories of every node (`kfd_build_sysfs_node_entry`).
const NODE_DIRS: [&str; 5] = ["mem_banks", "caches", "io_links", "p2p_links", "perf"];

/// All files under `sys/class/kfd/kfd/topology`.
pub(crate) fn topology_files(topo: &Topology, buffer_checks: bool) -> Vec<TopologyFile> {
    let links = io_links(topo);
    let mut files = vec![
        TopologyFile {
            path: vec!["generation_id".into()],
            text: Some("1\n".into()),
        },
        TopologyFile {
            path: vec!["system_properties".into()],
            text: Some("platform_oem 0\nplatform_id 0\nplatform_rev 0\n".into()),
        },
    ];
    let mut node =
        |n: u32, gpu_id: u32, name: &str, props: String, mut extra: Vec<(Vec<String>, String)>| {
            let dir = vec!["nodes".to_string(), n.to_string()];
            let with = |f: &str| {
                let mut p = dir.clone();
                p.push(f.to_string());
                p
            };
            files.push(TopologyFile {
                path: with("gpu_id"),
                text: Some(format!("{gpu_id}\n")),
            });
            files.push(TopologyFile {
                path: with("name"),
                text: Some(format!("{name}\n")),
            });
            files.push(TopologyFile {
                path: with("properties"),
                text: Some(props),
            });
            for d in NODE_DIRS {
                files.push(TopologyFile {
                    path: with(d),
                    text: None,
                });
            }
            extra.extend(links[n as usize].iter().enumerate().map(|(l, link)| {
                (
                    vec!["io_links".into(), l.to_string(), "properties".into()],
                    link.properties(buffer_checks),
                )
            }));
            for (sub, text) in extra {
                let mut path = dir.clone();
                path.extend(sub);
                files.push(TopologyFile {
                    path,
                    text: Some(text),
                });
            }
        };
    let sub = |parts: [&str; 3]| parts.iter().map(|p| (*p).to_string()).collect::<Vec<_>>();
    node(
        0,
        0,
        &topo.cpu_name,
        render_properties(&topo.cpu_props, links[0].len(), false, buffer_checks),
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
            render_properties(&g.props, links[g.node as usize].len(), true, buffer_checks),
            extra,
        );
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EmuConfig, Preset};

    #[test]
    fn properties_order_and_optional_keys() {
        let topo = Topology::build(&EmuConfig {
            preset: Preset::Mi308x,
            ..EmuConfig::default()
        })
        .unwrap();
        let text = render_properties(&topo.gpus[0].props, 1, true, true);
        let keys: Vec<&str> = text.lines().map(|l| l.split(' ').next().unwrap()).collect();
        assert_eq!(keys[0], "cpu_cores_count");
        assert_eq!(keys[29], "cwsr_size");
        assert_eq!(keys[30], "ctl_stack_size");
        assert_eq!(keys.last(), Some(&"max_engine_clk_ccompute"));
        assert!(!keys.contains(&"capability2"));
        assert!(text.contains("\nnum_xcc 4\n"));
        let legacy = render_properties(&topo.gpus[0].props, 1, true, false);
        assert!(!legacy.contains("cwsr_size"));
        assert!(!legacy.contains("ctl_stack_size"));
        let cpu = render_properties(&topo.cpu_props, 1, false, true);
        assert!(!cpu.contains("num_xcc"));
        assert!(cpu.contains("cpu_cores_count 96\n"));
    }
}
