//! The KFD topology's property keys (what a node's `properties` file lists, in the kernel's
//! order) and the CWSR size formula the kernel and libhsakmt use when sysfs lacks the sizes.
//! The sysfs text itself is `sysfs_topology`.

use serde::{Deserialize, Serialize};

/// Keys printed for every node, in the kernel's `node_show` order.
pub(crate) const COMMON_KEYS: [&str; 29] = [
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
pub(crate) const CWSR_KEYS: [&str; 2] = ["cwsr_size", "ctl_stack_size"];

/// Keys printed for GPU nodes only. `capability2` is printed only when a topology
/// file sets it (newer kernels).
pub(crate) const GPU_KEYS: [&str; 10] = [
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

/// Caches listed under each GPU node's `caches/` (L1 vector, L2, MALL).
pub(crate) const GPU_CACHES: u32 = 3;
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
}
