//! The KFD topology's IO links (`nodes/N/io_links/L/properties`) as amdkfd builds them: every
//! GPU node's direct link to its CPU node (`kfd_fill_gpu_direct_io_link_to_cpu` in
//! `kfd_crat.c`), made bidirectional because the emulated GPUs have a large BAR (all VRAM
//! CPU-visible), and XGMI links between the GPU nodes of one hive
//! (`kfd_fill_gpu_xgmi_link_to_gpu`), then the flags and recommended SDMA engines
//! `kfd_fill_iolink_non_crat_info` sets in `kfd_topology.c`.
//!
//! `p2p_links/` stays empty: the kernel adds indirect links only through a second CPU node
//! (`kfd_create_indirect_link_prop`) and PCIe peer links only between GPUs of different hives
//! (`kfd_dev_create_p2p_links`); the emulated machine has one CPU node and one hive.

use crate::config::{GpuNode, Topology};

/// `CRAT_IOLINK_TYPE_PCIEXPRESS`.
pub(crate) const TYPE_PCIE: u32 = 2;
/// `CRAT_IOLINK_TYPE_XGMI`.
pub(crate) const TYPE_XGMI: u32 = 11;
/// `CRAT_IOLINK_FLAGS_ENABLED`.
const FLAG_ENABLED: u32 = 1 << 0;
/// `CRAT_IOLINK_FLAGS_NON_COHERENT`: set on the CPU's link to a GPU over PCIe
/// (`kfd_set_iolink_non_coherent`).
const FLAG_NON_COHERENT: u32 = 1 << 1;
/// The weight `kfd_parse_subtype_iolink` gives a PCIe link.
const WEIGHT_PCIE: u32 = 20;
/// `KFD_CRAT_XGMI_WEIGHT`: one XGMI hop between GPUs.
const WEIGHT_XGMI: u32 = 15;
/// `KFD_CRAT_INTRA_SOCKET_WEIGHT`: between partitions of one GPU.
const WEIGHT_INTRA_SOCKET: u32 = 13;
/// The bandwidth `kfd_fill_gpu_xgmi_link_to_gpu` gives a link between partitions of one GPU
/// (`mem_bw`, MB/s).
const INTRA_SOCKET_MBYTES: u32 = 819_200;
/// One XGMI link in MB/s: `amdgpu_amdkfd_get_xgmi_bandwidth_mbytes` assumes x16 lanes at
/// 25 Gbit/s ("xGMI DPM is defeatured").
const XGMI_LINK_MBYTES: u32 = 16 * 25_000 / 8;
/// The slowest PCIe link in MB/s: `amdgpu_amdkfd_get_pcie_bandwidth_mbytes(adev, true)` takes
/// the lowest width (x1) and speed (Gen1, 2.5 GT/s) of the link's capability masks.
const PCIE_MIN_MBYTES: u32 = 2_500 / 8;
/// Physical GPUs of a hive for which the kernel recommends one XGMI SDMA engine per peer.
const REC_SDMA_NUM_GPU: usize = 8;
/// `rec_sdma_eng_map` of `kfd_topology.c`: the recommended SDMA engine from one socket (row)
/// to another (column) in an 8-GPU hive of single-partition GC 9.4.3 GPUs.
const REC_SDMA_ENG_MAP: [[i8; REC_SDMA_NUM_GPU]; REC_SDMA_NUM_GPU] = [
    [-1, 14, 12, 2, 4, 8, 10, 6],
    [14, -1, 2, 10, 8, 4, 6, 12],
    [10, 2, -1, 12, 14, 6, 4, 8],
    [2, 12, 10, -1, 6, 14, 8, 4],
    [4, 8, 14, 6, -1, 10, 12, 2],
    [8, 4, 6, 14, 12, -1, 2, 10],
    [10, 6, 4, 8, 12, 2, -1, 14],
    [6, 12, 8, 4, 2, 10, 14, -1],
];

/// One IO link as `iolink_show` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IoLink {
    pub kind: u32,
    pub node_from: u32,
    pub node_to: u32,
    pub weight: u32,
    pub min_bandwidth: u32,
    pub max_bandwidth: u32,
    pub rec_sdma_eng_id_mask: u32,
    pub flags: u32,
}

impl IoLink {
    /// The `properties` text in `iolink_show`'s order. `recommended_sdma_engine_id_mask`
    /// appeared with Linux 6.10 and is left out in the legacy (6.8) mode.
    pub fn properties(&self, with_rec_sdma: bool) -> String {
        let mut lines = vec![
            ("type", self.kind),
            ("version_major", 0),
            ("version_minor", 0),
            ("node_from", self.node_from),
            ("node_to", self.node_to),
            ("weight", self.weight),
            ("min_latency", 0),
            ("max_latency", 0),
            ("min_bandwidth", self.min_bandwidth),
            ("max_bandwidth", self.max_bandwidth),
            ("recommended_transfer_size", 0),
        ];
        if with_rec_sdma {
            lines.push(("recommended_sdma_engine_id_mask", self.rec_sdma_eng_id_mask));
        }
        lines.push(("flags", self.flags));
        lines.iter().map(|(k, v)| format!("{k} {v}\n")).collect()
    }
}

/// A property of a GPU node as a u32 (0 when absent or too large).
fn prop(g: &GpuNode, key: &str) -> u32 {
    g.props
        .get(key)
        .and_then(|v| u32::try_from(*v).ok())
        .unwrap_or(0)
}

/// Mask of `n` engines from engine id `first` on.
fn engines(first: u32, n: u32) -> u32 {
    (0..n).fold(0, |m, i| m | 1u32.checked_shl(first + i).unwrap_or(0))
}

/// `kfd_set_recommended_sdma_engines` for the link `from` -> `to` (`to` `None`: the CPU).
fn rec_sdma(topo: &Topology, from: &GpuNode, to: Option<&GpuNode>, xgmi: bool) -> u32 {
    let sdma = prop(from, "num_sdma_engines");
    let xgmi_sdma = prop(from, "num_sdma_xgmi_engines");
    if let Some(to) = to {
        let single_partition = topo.nodes_per_gpu == 1;
        let hive_of_eight = topo.physical_gpus as usize == REC_SDMA_NUM_GPU;
        if topo.has_aids && single_partition && hive_of_eight && xgmi_sdma >= 14 {
            let eng = REC_SDMA_ENG_MAP[from.physical as usize % REC_SDMA_NUM_GPU]
                [to.physical as usize % REC_SDMA_NUM_GPU];
            return u32::try_from(eng).map_or(0, |e| 1 << e);
        }
    }
    if xgmi && xgmi_sdma > 0 && to.is_some() {
        engines(sdma, xgmi_sdma)
    } else {
        engines(0, sdma)
    }
}

/// The link from GPU node `g` to the CPU node 0, and the CPU's link back.
fn cpu_links(topo: &Topology, g: &GpuNode) -> (IoLink, IoLink) {
    let mask = rec_sdma(topo, g, None, false);
    let out = IoLink {
        kind: TYPE_PCIE,
        node_from: g.node,
        node_to: 0,
        weight: WEIGHT_PCIE,
        min_bandwidth: PCIE_MIN_MBYTES,
        max_bandwidth: topo.pcie_max_mbytes,
        rec_sdma_eng_id_mask: mask,
        // The GPU's PCIe atomics are requested and granted (ASSUMED: a platform with atomics).
        flags: FLAG_ENABLED,
    };
    let back = IoLink {
        node_from: 0,
        node_to: g.node,
        flags: FLAG_ENABLED | FLAG_NON_COHERENT,
        ..out.clone()
    };
    (out, back)
}

/// The XGMI link from GPU node `a` to GPU node `b` of the same hive.
fn xgmi_link(topo: &Topology, a: &GpuNode, b: &GpuNode) -> IoLink {
    let (weight, min_bandwidth, max_bandwidth) = if topo.nodes_per_gpu == 1 {
        // From the XGMI firmware's topology (use_ta_info): one hop, `xgmi_links_per_peer`
        // links; the minimum is one link.
        let links = topo.xgmi_links_per_peer;
        (WEIGHT_XGMI, XGMI_LINK_MBYTES, links * XGMI_LINK_MBYTES)
    } else if a.physical == b.physical {
        (
            WEIGHT_INTRA_SOCKET,
            INTRA_SOCKET_MBYTES,
            INTRA_SOCKET_MBYTES,
        )
    } else {
        (2 * WEIGHT_INTRA_SOCKET + WEIGHT_XGMI, 0, 0)
    };
    IoLink {
        kind: TYPE_XGMI,
        node_from: a.node,
        node_to: b.node,
        weight,
        min_bandwidth,
        max_bandwidth,
        rec_sdma_eng_id_mask: rec_sdma(topo, a, Some(b), true),
        flags: FLAG_ENABLED,
    }
}

/// Every node's IO links, index 0 being the CPU node, in the order the kernel adds them: a GPU
/// node's link to the CPU first, then its XGMI links in node order; the CPU node's links to
/// the GPUs in node order.
pub(crate) fn io_links(topo: &Topology) -> Vec<Vec<IoLink>> {
    let mut nodes = vec![Vec::new(); topo.gpus.len() + 1];
    for g in &topo.gpus {
        let (out, back) = cpu_links(topo, g);
        nodes[g.node as usize].push(out);
        nodes[0].push(back);
        for peer in &topo.gpus {
            if peer.node != g.node && peer.hive_id == g.hive_id && g.hive_id != 0 {
                nodes[g.node as usize].push(xgmi_link(topo, g, peer));
            }
        }
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EmuConfig, Preset};

    fn topo(preset: Preset, gpus: u32) -> Topology {
        Topology::build(&EmuConfig {
            preset,
            gpus,
            ..EmuConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn one_gpu_has_only_its_cpu_link_both_ways() {
        let t = topo(Preset::Mi210, 1);
        let links = io_links(&t);
        assert_eq!(links.len(), 2);
        assert_eq!(links[1].len(), 1);
        let l = &links[1][0];
        assert_eq!((l.kind, l.node_from, l.node_to), (TYPE_PCIE, 1, 0));
        assert_eq!(
            (l.weight, l.min_bandwidth, l.max_bandwidth),
            (20, 312, 32_000)
        );
        assert_eq!((l.flags, l.rec_sdma_eng_id_mask), (1, 0b11));
        assert_eq!(links[0].len(), 1);
        assert_eq!((links[0][0].node_from, links[0][0].node_to), (0, 1));
        assert_eq!(links[0][0].flags, 3);
    }

    #[test]
    fn gpus_of_a_hive_are_linked_by_xgmi() {
        let t = topo(Preset::Mi308x, 2);
        let links = io_links(&t);
        assert_eq!(links[0].len(), 2);
        let x = &links[2][1];
        assert_eq!((x.kind, x.node_from, x.node_to), (TYPE_XGMI, 2, 1));
        assert_eq!(
            (x.weight, x.min_bandwidth, x.max_bandwidth),
            (15, 50_000, 50_000)
        );
        assert_eq!(x.rec_sdma_eng_id_mask, 0xfffc);
        assert_eq!(links[1][0].max_bandwidth, 64_000);
    }

    #[test]
    fn partitions_of_one_gpu_are_one_socket_apart() {
        let t = topo(Preset::Mi300xCpx, 2);
        let links = io_links(&t);
        // node 1: CPU, 7 partitions of its GPU, 8 of the other
        assert_eq!(links[1].len(), 16);
        assert_eq!(links[1][1].weight, 13);
        assert_eq!(links[1][1].max_bandwidth, 819_200);
        let far = links[1].iter().find(|l| l.node_to == 9).unwrap();
        assert_eq!((far.weight, far.max_bandwidth), (41, 0));
    }

    #[test]
    fn eight_spx_gpus_get_one_recommended_engine_per_peer() {
        let t = topo(Preset::Mi300xSpx, 8);
        let links = io_links(&t);
        let to = |from: usize, to: u32| {
            links[from]
                .iter()
                .find(|l| l.node_to == to)
                .unwrap()
                .rec_sdma_eng_id_mask
        };
        assert_eq!(to(1, 2), 1 << 14);
        assert_eq!(to(2, 1), 1 << 14);
        assert_eq!(to(3, 1), 1 << 10);
        assert_eq!(to(1, 0), 0b11);
    }

    #[test]
    fn legacy_text_has_no_recommended_engines() {
        let l = &io_links(&topo(Preset::Mi210, 1))[1][0];
        let keys: Vec<String> = l
            .properties(true)
            .lines()
            .map(|s| s.split(' ').next().unwrap().to_string())
            .collect();
        assert_eq!(keys.len(), 13);
        assert_eq!(keys[11], "recommended_sdma_engine_id_mask");
        assert_eq!(keys[12], "flags");
        assert!(!l.properties(false).contains("recommended_sdma"));
    }
}
