//! Known CWSR sizes: the oracle for `kfd_sys::cwsr`, which kfdq and the emulator both use.
//!
//! The expected numbers were worked out by hand, independently of the code, from the kernel's
//! formula (`kfd_queue_ctx_save_restore_size()` in Linux `drivers/gpu/drm/amd/amdkfd/
//! kfd_queue.c`, the sum in `kfd_queue_acquire_buffers()`) for AMD Instinct MI300X (gfx942,
//! `gfx_target_version` 90402: 304 CUs in 8 XCCs, 4 SIMDs per CU, 4 shader arrays per XCC, one
//! array per engine) in SPX mode (one node of 8 XCCs) and CPX mode (eight nodes of one XCC), and
//! for the emulator's MI308X layout (4 XCCs x 20 CUs, an assumed shape). The arithmetic is
//! written out beside each case; docs/kernel-interface.md §3 and the preset table of
//! docs/kfd-emulator.md quote the same figures. gfx942 saves 0x80000 bytes of VGPRs, 0x4000 of
//! SGPRs, 0x10000 of LDS and 0x1000 of hardware registers per CU: 610,304 bytes.

use kfd_sys::cwsr::{CwsrSizes, NodeProperties, ctx_save_restore_size, total_cwsr_size};

fn gfx942(simd_count: u32, num_xcc: u32, array_count: u32) -> NodeProperties {
    NodeProperties {
        gfx_target_version: 90402,
        simd_count,
        simd_per_cu: 4,
        array_count,
        simd_arrays_per_engine: 1,
        lds_size_in_kb: 64,
        num_xcc,
    }
}

#[test]
fn mi300x_spx() {
    // cu_num = 1216 / 4 / 8 = 38; wave_num = min(38 x 40, 32 / 1 x 512) = 1520
    let node = gfx942(1216, 8, 32);
    assert_eq!(
        ctx_save_restore_size(&node),
        CwsrSizes {
            // ALIGN(40 + 1520 x 8 + 8 = 12,208, 4096)
            ctl_stack_size: 12_288,
            // ALIGN(38 x 610,304, 4096)
            wg_data_size: 23_191_552,
            // 12,288 + 23,191,552
            cwsr_size: 23_203_840,
            // ALIGN(1520 x 32, 64)
            debug_memory_size: 48_640,
        }
    );
    // ALIGN((23,203,840 + 48,640) x 8, 4096)
    assert_eq!(total_cwsr_size(23_203_840, 48_640, 8), 186_019_840);
}

#[test]
fn mi300x_cpx() {
    // One XCC of the same part: cu_num = 152 / 4 / 1 = 38; wave_num = min(1520, 4 x 512) = 1520.
    let s = ctx_save_restore_size(&gfx942(152, 1, 4));
    assert_eq!(
        (s.ctl_stack_size, s.cwsr_size, s.debug_memory_size),
        (12_288, 23_203_840, 48_640)
    );
    // ALIGN(23,203,840 + 48,640 = 23,252,480, 4096)
    assert_eq!(
        total_cwsr_size(s.cwsr_size.into(), s.debug_memory_size.into(), 1),
        23_252_992
    );
}

#[test]
fn mi308x_emulator_layout() {
    // cu_num = 320 / 4 / 4 = 20; wave_num = min(20 x 40, 16 x 512) = 800
    let s = ctx_save_restore_size(&gfx942(320, 4, 16));
    assert_eq!(
        s,
        CwsrSizes {
            // ALIGN(40 + 800 x 8 + 8 = 6,448, 4096)
            ctl_stack_size: 8_192,
            // 20 x 610,304, already page-aligned
            wg_data_size: 12_206_080,
            cwsr_size: 12_214_272,
            // 800 x 32
            debug_memory_size: 25_600,
        }
    );
    // (12,214,272 + 25,600) x 4, already page-aligned
    assert_eq!(
        total_cwsr_size(s.cwsr_size.into(), s.debug_memory_size.into(), 4),
        48_959_488
    );
}
