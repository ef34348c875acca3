//! The ROCm math libraries PyTorch reaches — rocBLAS, hipBLAS, hipBLASLt, MIOpen — of ROCm 6.4
//! (Debian sid's, in `sid-libs-root`) on the real runtime on an emulated MI210, with and without
//! the shim and under the real agent at levels 1-3. The tests are shared with the ROCm 7.2
//! libraries (`sid7_libs.rs`): `common/libs_suite.rs` says what each shows.

mod common;

use common::libs_suite as suite;
use common::sid_libs::ROCM64;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_rocminfo_lists_the_emulated_mi210() {
    suite::rocminfo_lists_the_emulated_mi210(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_statuses_are_equal_with_and_without_the_shim() {
    suite::statuses_are_equal_with_and_without_the_shim(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_every_launch_reaches_a_queue_and_completes_under_the_shim() {
    suite::every_launch_reaches_a_queue_and_completes_under_the_shim(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_under_kfdq_run_batch_ps_shows_the_libraries_streams() {
    suite::under_kfdq_run_batch_ps_shows_the_libraries_streams(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_a_python_extension_under_kfdq_run_batch() {
    suite::a_python_extension_under_kfdq_run_batch(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_level_1_holds_handle_creation_and_releases_it() {
    suite::level_1_holds_handle_creation_and_releases_it(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_level_1_holds_a_gemm_loop_and_releases_it() {
    suite::level_1_holds_a_gemm_loop_and_releases_it(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_level_1_holds_two_threads_using_the_libraries_and_releases_them() {
    suite::level_1_holds_two_threads_using_the_libraries_and_releases_them(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_levels_2_and_3_stop_a_gemm_loop_and_resume_it() {
    suite::levels_2_and_3_stop_a_gemm_loop_and_resume_it(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_every_hip_entry_point_the_libraries_import_that_the_shim_wraps_binds_to_it() {
    suite::every_hip_entry_point_the_libraries_import_that_the_shim_wraps_binds_to_it(&ROCM64);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_libs_every_launch_entry_point_the_libraries_import_is_wrapped() {
    suite::every_launch_entry_point_the_libraries_import_is_wrapped(&ROCM64);
}
