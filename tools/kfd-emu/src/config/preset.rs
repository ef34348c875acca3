//! The hardware facts of each machine layout ([`Preset`], named in `kfd-emu-api`) and its node
//! property template.

use std::collections::BTreeMap;

use super::{HIVE_ID, RENDER_MINOR_BASE};
pub use kfd_emu_api::Preset;

/// What the emulator knows of a preset's machine.
pub(crate) trait PresetHw {
    /// Topology nodes (partitions) per physical GPU.
    fn nodes_per_gpu(self) -> u32;
    /// HBM of one GPU: 192 GiB of HBM3 on MI300X and MI308X (in CPX mode with NPS1 every
    /// partition sees the whole memory), 64 GiB of HBM2e on MI210.
    fn vram_bytes(self) -> u64;
    /// The fastest PCIe link to the CPU in MB/s, as `amdgpu_amdkfd_get_pcie_bandwidth_mbytes`
    /// computes it from the widest width and fastest speed of the link (x16 lanes, 8 bits a
    /// byte): PCIe 5.0 (32 GT/s) for MI300X and MI308X, PCIe 4.0 (16 GT/s) for MI210 (AMD's
    /// specifications; ASSUMED: the host's root port is as fast).
    fn pcie_max_mbytes(self) -> u32;
    /// XGMI links between two GPUs of a hive, which the kernel takes from the XGMI firmware's
    /// topology (`amdgpu_xgmi_get_num_links`). ASSUMED 1: an 8-GPU MI300X platform connects
    /// every pair by one of each GPU's 7 links; MI210 bridges vary.
    fn xgmi_links_per_peer(self) -> u32;
    /// The board's marketing name (libdrm's `amdgpu.ids` for the device id; sysfs
    /// `product_name`, which the kernel reads from the board's FRU).
    fn marketing_name(self) -> &'static str;
    /// Whether the GPU is built of AIDs (GC 9.4.3: MI300X, MI308X), one of the conditions of
    /// the kernel's per-peer recommended SDMA engines.
    fn has_aids(self) -> bool;
    /// The PCI revision the render node's DEV_INFO reports: libdrm's `amdgpu.ids` names a
    /// device by (device id, revision), and lists 0x740F only with revision 02 (MI210).
    fn pci_rev(self) -> u32;
    /// Properties of one node of this preset, without the per-node identifiers.
    fn template(self) -> BTreeMap<String, u64>;
}

impl PresetHw for Preset {
    fn nodes_per_gpu(self) -> u32 {
        match self {
            Preset::Mi300xSpx | Preset::Mi308x | Preset::Mi210 => 1,
            Preset::Mi300xCpx => 8,
        }
    }

    fn vram_bytes(self) -> u64 {
        match self {
            Preset::Mi300xSpx | Preset::Mi300xCpx | Preset::Mi308x => 192 << 30,
            Preset::Mi210 => 64 << 30,
        }
    }

    fn pcie_max_mbytes(self) -> u32 {
        match self {
            Preset::Mi300xSpx | Preset::Mi300xCpx | Preset::Mi308x => 16 * 32_000 / 8,
            Preset::Mi210 => 16 * 16_000 / 8,
        }
    }

    fn xgmi_links_per_peer(self) -> u32 {
        1
    }

    fn marketing_name(self) -> &'static str {
        match self {
            Preset::Mi300xSpx | Preset::Mi300xCpx => "AMD Instinct MI300X",
            Preset::Mi308x => "AMD Instinct MI308X",
            Preset::Mi210 => "AMD Instinct MI210",
        }
    }

    fn has_aids(self) -> bool {
        !matches!(self, Preset::Mi210)
    }

    fn pci_rev(self) -> u32 {
        match self {
            Preset::Mi210 => 2,
            _ => 0,
        }
    }

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
            // The kernel prints 0 here since memory moved to mem_banks/ (see PresetHw::vram_bytes).
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
