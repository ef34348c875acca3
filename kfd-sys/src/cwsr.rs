//! The sizes of a compute queue's context save/restore (CWSR) area: the kernel's formula.
//!
//! This is amdkfd's `kfd_queue_ctx_save_restore_size()` (Linux
//! `drivers/gpu/drm/amd/amdkfd/kfd_queue.c`), with its helper `kfd_get_vgpr_size_per_cu()`, as
//! in recent mainline (whose VGPR table has gfx1151). Since Linux 6.12 the kernel runs it for
//! every topology node, publishes `ctl_stack_size` and `cwsr_size` in the node's sysfs
//! `properties` (`debug_memory_size` it keeps to itself) and CREATE_QUEUE checks the queue's
//! buffers against them (`kfd_queue_acquire_buffers()`, whose total size is
//! [`total_cwsr_size`]). Older kernels publish and check nothing; user space then sizes the area
//! with the same formula.
//!
//! Prefer a node's published values where it has them: a newer kernel may size GFX versions
//! that this code does not list differently.

use core::mem::size_of;

use crate::kfd_context_save_area_header;

/// The kernel's `PAGE_SIZE` on x86-64, the alignment of the control stack, the work-group data
/// and the whole area.
pub const PAGE_SIZE: u64 = 4096;

/// `SIZEOF_HSA_USER_CONTEXT_SAVE_AREA_HEADER`: the header in front of each XCC's control stack.
const HEADER_SIZE: u64 = size_of::<kfd_context_save_area_header>() as u64;
const SGPR_SIZE_PER_CU: u64 = 0x4000;
const LDS_SIZE_PER_CU: u64 = 0x10000;
const HWREG_SIZE_PER_CU: u64 = 0x1000;
const DEBUGGER_BYTES_PER_WAVE: u64 = 32;
const DEBUGGER_BYTES_ALIGN: u64 = 64;
/// The control stack of gfx10 parts is at most this big (a hardware limit).
const GFX10_CTL_STACK_LIMIT: u64 = 0x7000;

/// `GFX_VERSION_CARRIZO`: the first GFX version with CWSR; the kernel sizes nothing below it.
const GFX_VERSION_CARRIZO: u32 = 80001;
/// `GFX_VERSION_NAVI10`: from here on 32 waves per CU and 12-byte control-stack entries.
const GFX_VERSION_NAVI10: u32 = 100100;
/// gfx950, whose LDS size per CU is the node's `lds_size_in_kb`.
const GFX_VERSION_GFX950: u32 = 90500;

/// The topology-node properties the formula reads, named as in sysfs `properties`
/// (`gfx_target_version` is `major * 10000 + minor * 100 + stepping`, 90402 for gfx942).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeProperties {
    pub gfx_target_version: u32,
    /// SIMDs of the node (partition), over all its XCCs.
    pub simd_count: u32,
    pub simd_per_cu: u32,
    /// Shader arrays of the node, over all its XCCs.
    pub array_count: u32,
    pub simd_arrays_per_engine: u32,
    pub lds_size_in_kb: u32,
    /// XCCs of the node (the kernel's `NUM_XCC(xcc_mask)`).
    pub num_xcc: u32,
}

/// The per-XCC sizes the kernel derives for a node, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CwsrSizes {
    /// sysfs `ctl_stack_size`: the header and the control stack.
    pub ctl_stack_size: u32,
    /// The work-group state: VGPRs, SGPRs, LDS and hardware registers of every CU.
    pub wg_data_size: u32,
    /// sysfs `cwsr_size`: `ctl_stack_size + wg_data_size`.
    pub cwsr_size: u32,
    /// The debugger's area behind the save areas (not published).
    pub debug_memory_size: u32,
}

fn align(v: u64, to: u64) -> u64 {
    v.div_ceil(to).saturating_mul(to)
}

/// `kfd_get_vgpr_size_per_cu()`: VGPR bytes saved per CU.
fn vgpr_size_per_cu(gfxv: u32) -> u64 {
    match gfxv {
        // Aqua Vanjaram (gfx940-942), Aldebaran (gfx90a), Arcturus (gfx908), gfx950
        v if v / 100 == 904 => 0x80000,
        90010 | 90008 | GFX_VERSION_GFX950 => 0x80000,
        // gfx1100, gfx1101, gfx1151, gfx1200, gfx1201
        110000 | 110001 | 110501 | 120000 | 120001 => 0x60000,
        _ => 0x40000,
    }
}

/// `kfd_queue_ctx_save_restore_size()`: the CWSR sizes of one XCC of `node`.
///
/// All zero below gfx8.0.1, which has no CWSR. A zero `simd_per_cu`, `simd_arrays_per_engine`
/// or `num_xcc` (which the kernel divides by, and no GPU node has) counts as 1; a size past
/// `u32::MAX` (where the kernel's 32-bit arithmetic would wrap, far beyond any GPU) is
/// `u32::MAX`.
pub fn ctx_save_restore_size(node: &NodeProperties) -> CwsrSizes {
    let gfxv = node.gfx_target_version;
    if gfxv < GFX_VERSION_CARRIZO {
        return CwsrSizes::default();
    }
    let per = |v: u32| u64::from(v.max(1));
    let cu_num = u64::from(node.simd_count) / per(node.simd_per_cu) / per(node.num_xcc);
    let wave_num = if gfxv < GFX_VERSION_NAVI10 {
        (cu_num * 40).min(u64::from(node.array_count) / per(node.simd_arrays_per_engine) * 512)
    } else {
        cu_num * 32
    };
    let lds = if gfxv == GFX_VERSION_GFX950 {
        u64::from(node.lds_size_in_kb) << 10
    } else {
        LDS_SIZE_PER_CU
    };
    let wg_context_per_cu = vgpr_size_per_cu(gfxv) + SGPR_SIZE_PER_CU + lds + HWREG_SIZE_PER_CU;
    let wg_data_size = align(cu_num * wg_context_per_cu, PAGE_SIZE);
    let ctl_stack_bytes_per_wave = if gfxv >= GFX_VERSION_NAVI10 { 12 } else { 8 };
    let mut ctl_stack_size = align(
        HEADER_SIZE + wave_num * ctl_stack_bytes_per_wave + 8,
        PAGE_SIZE,
    );
    if gfxv / 10000 == 10 {
        ctl_stack_size = ctl_stack_size.min(GFX10_CTL_STACK_LIMIT);
    }
    let debug_memory_size = align(wave_num * DEBUGGER_BYTES_PER_WAVE, DEBUGGER_BYTES_ALIGN);
    let clamp = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
    CwsrSizes {
        ctl_stack_size: clamp(ctl_stack_size),
        wg_data_size: clamp(wg_data_size),
        cwsr_size: clamp(ctl_stack_size + wg_data_size),
        debug_memory_size: clamp(debug_memory_size),
    }
}

/// Bytes of a queue's whole CWSR allocation, as `kfd_queue_acquire_buffers()` expects it:
/// `ALIGN((ctx_save_restore_size + debug_memory_size) * num_xcc, PAGE_SIZE)`, one save area and
/// one debugger area per XCC. Computed in 64 bits, saturating; a zero `num_xcc` counts as 1.
pub fn total_cwsr_size(ctx_save_restore_size: u64, debug_memory_size: u64, num_xcc: u32) -> u64 {
    let per_xcc = ctx_save_restore_size.saturating_add(debug_memory_size);
    align(per_xcc.saturating_mul(u64::from(num_xcc.max(1))), PAGE_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(gfx_target_version: u32, simd_count: u32, num_xcc: u32) -> NodeProperties {
        NodeProperties {
            gfx_target_version,
            simd_count,
            simd_per_cu: 4,
            array_count: 4 * num_xcc,
            simd_arrays_per_engine: 1,
            lds_size_in_kb: 160,
            num_xcc,
        }
    }

    #[test]
    fn the_header_is_the_kernels_40_bytes() {
        assert_eq!(HEADER_SIZE, 40);
    }

    #[test]
    fn no_cwsr_before_gfx801() {
        assert_eq!(
            ctx_save_restore_size(&node(80000, 32, 1)),
            CwsrSizes::default()
        );
        assert_ne!(ctx_save_restore_size(&node(80001, 32, 1)).cwsr_size, 0);
    }

    #[test]
    fn vgpr_sizes_by_gfx_version() {
        for v in [90008, 90010, 90400, 90401, 90402, 90500] {
            assert_eq!(vgpr_size_per_cu(v), 0x80000, "{v}");
        }
        for v in [110000, 110001, 110501, 120000, 120001] {
            assert_eq!(vgpr_size_per_cu(v), 0x60000, "{v}");
        }
        for v in [80001, 90000, 90006, 90012, 100300, 110002, 110500] {
            assert_eq!(vgpr_size_per_cu(v), 0x40000, "{v}");
        }
    }

    #[test]
    fn gfx10_control_stack_is_capped() {
        // 80 CUs x 32 waves x 12 bytes would need 32 KiB.
        let s = ctx_save_restore_size(&node(100300, 320, 1));
        assert_eq!(s.ctl_stack_size, 0x7000);
        assert_eq!(s.cwsr_size, s.ctl_stack_size + s.wg_data_size);
        // gfx11 is not capped.
        assert_eq!(
            ctx_save_restore_size(&node(110000, 320, 1)).ctl_stack_size,
            0x8000
        );
    }

    #[test]
    fn only_gfx950_reads_the_lds_size() {
        let per_cu = |v| ctx_save_restore_size(&node(v, 4, 1)).wg_data_size;
        assert_eq!(per_cu(90500), 0x80000 + 0x4000 + 160 * 1024 + 0x1000);
        assert_eq!(per_cu(90402), 0x80000 + 0x4000 + 0x10000 + 0x1000);
    }

    #[test]
    fn zero_divisors_count_as_one() {
        let ones = NodeProperties {
            simd_per_cu: 1,
            simd_arrays_per_engine: 1,
            ..node(90402, 16, 1)
        };
        let zeros = NodeProperties {
            simd_per_cu: 0,
            simd_arrays_per_engine: 0,
            num_xcc: 0,
            ..ones
        };
        assert_eq!(ctx_save_restore_size(&zeros), ctx_save_restore_size(&ones));
        assert_eq!(total_cwsr_size(4096, 64, 0), total_cwsr_size(4096, 64, 1));
    }

    #[test]
    fn sizes_past_u32_saturate() {
        let s = ctx_save_restore_size(&node(90402, u32::MAX, 1));
        assert_eq!(s.cwsr_size, u32::MAX);
        assert_eq!(
            total_cwsr_size(u32::MAX.into(), u32::MAX.into(), 2),
            1 << 34
        );
        assert_eq!(total_cwsr_size(u64::MAX, 1, 2), u64::MAX);
    }
}
