//! The ROCm math libraries of ROCm 7.2.4 — rocBLAS 5, hipBLAS 3, hipBLASLt and MIOpen 7.2.4, from
//! Debian experimental in `sid-rocm72-libs-root` (`scripts/sid-root.sh --rocm72 --libs`) — on HIP
//! 7.2 and ROCr 7.2.4 on an emulated MI210, with and without the shim and under the real agent at
//! levels 1-3: the same tests as ROCm 6.4's libraries (`sid_libs.rs`, `common/libs_suite.rs`),
//! on the 7.2 root (issue 52, item 5).

mod common;

use common::libs_suite as suite;
use common::sid_libs::ROCM72;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_rocminfo_lists_the_emulated_mi210() {
    suite::rocminfo_lists_the_emulated_mi210(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_statuses_are_equal_with_and_without_the_shim() {
    suite::statuses_are_equal_with_and_without_the_shim(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_every_launch_reaches_a_queue_and_completes_under_the_shim() {
    suite::every_launch_reaches_a_queue_and_completes_under_the_shim(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_under_kfdq_run_batch_ps_shows_the_libraries_streams() {
    suite::under_kfdq_run_batch_ps_shows_the_libraries_streams(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_a_python_extension_under_kfdq_run_batch() {
    suite::a_python_extension_under_kfdq_run_batch(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_level_1_holds_handle_creation_and_releases_it() {
    suite::level_1_holds_handle_creation_and_releases_it(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_level_1_holds_a_gemm_loop_and_releases_it() {
    suite::level_1_holds_a_gemm_loop_and_releases_it(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_level_1_holds_two_threads_using_the_libraries_and_releases_them() {
    suite::level_1_holds_two_threads_using_the_libraries_and_releases_them(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_levels_2_and_3_stop_a_gemm_loop_and_resume_it() {
    suite::levels_2_and_3_stop_a_gemm_loop_and_resume_it(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_every_hip_entry_point_the_libraries_import_that_the_shim_wraps_binds_to_it() {
    suite::every_hip_entry_point_the_libraries_import_that_the_shim_wraps_binds_to_it(&ROCM72);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_every_launch_entry_point_the_libraries_import_is_wrapped() {
    suite::every_launch_entry_point_the_libraries_import_is_wrapped(&ROCM72);
}

/// MIOpen 7.2.4 builds a convolution kernel at run time (its naive direct convolution, a HIP
/// kernel it compiles with hiprtc: Debian ships no kernel database) and runs it, with the same
/// statuses with and without the shim, and the emulator dispatches the built kernel in both.
/// Without `MIOPEN_DEBUG_GCN_ASM_KERNELS=0` find fails (status 7) with or without the shim:
/// Debian's libMIOpen lacks the sources of its assembly solvers' kernels
/// (`Failed to load kernel source: igemm_fwd_gtcx2_nhwc_fp32_....s`; docs/real-rocm.md, "ROCm
/// 7.2.4's libraries"). `MIOPEN_DEBUG_CONV_GEMM=0` keeps rocBLAS out of it (the GEMM solvers
/// need no kernel MIOpen builds).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_libs_miopen_builds_a_kernel_at_run_time_with_and_without_the_shim() {
    use common::sid::{self, Running};
    use common::{shim_path, sid_libs};
    use std::path::Path;
    let root = ROCM72.root();
    let emu = sid_libs::mount();
    let built = ROCM72.built(&emu, &root);
    let shim = shim_path();
    let dir = shim.parent().unwrap().to_path_buf();
    let run = |preload: bool| {
        let mut binds = vec![(built.dir.path(), Path::new("/work"))];
        if preload {
            binds.push((&dir, &dir));
        }
        let mut cmd = sid::command(
            &emu,
            &root,
            &binds,
            Path::new("/work"),
            &["./libs_check", "--only", "miopen", "--hold"],
        );
        cmd.env("MIOPEN_DEBUG_CONV_GEMM", "0")
            .env("MIOPEN_DEBUG_GCN_ASM_KERNELS", "0");
        if preload {
            cmd.env("LD_PRELOAD", &shim).env("KFDQ_PASSTHROUGH", "");
        }
        let mut p = Running::start(cmd);
        p.wait_line("libs_check: holding");
        let st = emu.stats();
        let by = st
            .processes
            .iter()
            .find(|x| x.pid == p.pid)
            .map(|x| x.dispatches_by_kernel.clone())
            .unwrap_or_default();
        let built_kernel: u64 = by
            .iter()
            .filter(|(k, _)| k.starts_with("naive_conv_"))
            .map(|(_, n)| *n)
            .sum();
        assert!(
            built_kernel >= 1,
            "shim {preload}: MIOpen's run-time-built naive_conv kernel among the dispatches {by:#?}\n{}",
            ROCM72.packages()
        );
        let lines = p.finish();
        assert_eq!(lines.last().map(String::as_str), Some("libs_check: done"));
        sid_libs::statuses(&lines)
    };
    let plain = run(false);
    assert!(
        plain
            .iter()
            .any(|l| l == "status miopenFindConvolutionForwardAlgorithm 0")
            && plain
                .iter()
                .any(|l| l == "status miopenConvolutionForward 0"),
        "{plain:#?}\n{}",
        ROCM72.packages()
    );
    assert_eq!(run(true), plain, "the statuses under the shim");
}
