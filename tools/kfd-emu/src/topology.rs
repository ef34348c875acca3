//! The KFD topology's property keys (what a node's `properties` file lists, in the kernel's
//! order) and the CWSR sizes a node publishes, which the kernel's formula gives
//! (`kfd_sys::cwsr`). The sysfs text itself is `sysfs_topology`.

pub use kfd_sys::cwsr::CwsrSizes;
use kfd_sys::cwsr::{NodeProperties, ctx_save_restore_size};

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

/// Keys the emulator derives from the links it builds (`crate::iolinks`); a topology file may
/// not set them.
pub(crate) const DERIVED_KEYS: [&str; 2] = ["io_links_count", "p2p_links_count"];

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

/// The per-XCC CWSR sizes of a node with these properties: the kernel's
/// `kfd_queue_ctx_save_restore_size` formula (`kfd_sys::cwsr::ctx_save_restore_size`).
///
/// `simd_count` and `array_count` are partition totals.
pub fn cwsr_sizes(
    simd_count: u32,
    simd_per_cu: u32,
    num_xcc: u32,
    array_count: u32,
    simd_arrays_per_engine: u32,
    gfx_target_version: u32,
    lds_size_in_kb: u32,
) -> CwsrSizes {
    ctx_save_restore_size(&NodeProperties {
        gfx_target_version,
        simd_count,
        simd_per_cu,
        array_count,
        simd_arrays_per_engine,
        lds_size_in_kb,
        num_xcc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // The formula's known values are kfd-sys's tests (kfd-sys/tests/cwsr_known_sizes.rs); here
    // only that each argument reaches its property.
    #[test]
    fn arguments_are_the_properties_in_order() {
        let by_name = ctx_save_restore_size(&NodeProperties {
            gfx_target_version: 90500,
            simd_count: 480,
            simd_per_cu: 4,
            array_count: 3,
            simd_arrays_per_engine: 2,
            lds_size_in_kb: 160,
            num_xcc: 2,
        });
        assert_eq!(cwsr_sizes(480, 4, 2, 3, 2, 90500, 160), by_name);
        // every argument matters in this case
        for changed in [
            cwsr_sizes(240, 4, 2, 3, 2, 90500, 160),
            cwsr_sizes(480, 2, 2, 3, 2, 90500, 160),
            cwsr_sizes(480, 4, 1, 3, 2, 90500, 160),
            cwsr_sizes(480, 4, 2, 6, 2, 90500, 160),
            cwsr_sizes(480, 4, 2, 3, 1, 90500, 160),
            cwsr_sizes(480, 4, 2, 3, 2, 90402, 160),
            cwsr_sizes(480, 4, 2, 3, 2, 90500, 64),
        ] {
            assert_ne!(changed, by_name);
        }
    }
}
