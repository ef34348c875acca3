//! fakehip: a stand-in `libamdhip64.so.6` for kfdq's tests.
//!
//! The library itself is C (`src/*.c` around `src/fakehip_internal.h`, which lists what each
//! file holds), in the layers of [`LAYERS`], compiled by this crate's build script into
//! [`LIB_DIR`]. It exports a subset of the HIP runtime with the real library's
//! soname and symbol-version nodes (`hip_4.2` .. `hip_6.4`, ROCm 6.4's chain) and drives amdkfd the way
//! ROCr does: one KFD AQL queue per stream from three priority pools per device,
//! USERPTR queue buffers, CWSR areas, doorbells, and AQL dispatch packets whose
//! `reserved2` field carries the emulated kernel duration (kfd-emu convention).
//!
//! Test programs include `<hip/hip_runtime_api.h>` from [`INCLUDE_DIR`] and are built
//! with [`compile_program`].
//!
//! Environment read by the library at its first HIP call: `KFDQ_ROOT` (default `/`),
//! `GPU_MAX_HW_QUEUES` (default 4), `FAKEHIP_KERNEL_NS` (default 20000),
//! `FAKEHIP_TIMEOUT_MS` (default 10000), `FAKEHIP_RING_SIZE` (default 65536),
//! `FAKEHIP_SYNC` (`rptr` default, or `signal`), `FAKEHIP_DEBUG` (0/1/2).

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::Command;

/// Directory holding `libamdhip64.so.6` and the `libamdhip64.so` symlink.
pub const LIB_DIR: &str = env!("FAKEHIP_LIB_DIR");

/// Directory holding the library's object files, `<name>.o` for each `<name>.c` of [`LAYERS`].
pub const OBJ_DIR: &str = env!("FAKEHIP_OBJ_DIR");

include!("../layers.rs");

/// Full path of the library (`<LIB_DIR>/libamdhip64.so.6`).
pub const LIB_PATH: &str = concat!(env!("FAKEHIP_LIB_DIR"), "/libamdhip64.so.6");

/// The library's soname.
pub const SONAME: &str = "libamdhip64.so.6";

/// Include directory containing `hip/hip_runtime_api.h`.
pub const INCLUDE_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/include");

/// `struct fakehip_kernel.magic` ("FKHK"): a launch whose function pointer points at
/// such a struct runs for its `duration_ns`.
pub const KERNEL_MAGIC: u32 = 0x4B48_4B46;

/// Mangled name under which `hipExtModuleLaunchKernel` is exported (C++ only, as in ROCm).
pub const EXT_MODULE_LAUNCH_KERNEL_SYMBOL: &str = "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j";

/// Compiles and links a test program against fakehip.
///
/// C sources use `$CC` (default `cc`) with `-std=gnu11`; `.cc`/`.cpp`/`.cxx` sources use
/// `$CXX` (default `c++`). The program gets `-I INCLUDE_DIR -L LIB_DIR
/// -Wl,-rpath,LIB_DIR -lamdhip64 -ldl -lpthread`, so it loads this library without any
/// `LD_LIBRARY_PATH`. `extra_args` go after the source file (so `-l` flags work too).
pub fn compile_program(src: &Path, out: &Path, extra_args: &[&str]) -> io::Result<()> {
    let is_cxx = matches!(
        src.extension().and_then(|e| e.to_str()),
        Some("cc" | "cpp" | "cxx" | "C")
    );
    let (var, default) = if is_cxx { ("CXX", "c++") } else { ("CC", "cc") };
    let compiler: OsString = std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.into());

    let mut cmd = Command::new(&compiler);
    if !is_cxx {
        cmd.arg("-std=gnu11");
    }
    cmd.args(["-g", "-Wall"])
        .arg(format!("-I{INCLUDE_DIR}"))
        .arg(src)
        .arg("-o")
        .arg(out)
        .args(extra_args)
        .arg(format!("-L{LIB_DIR}"))
        .arg(format!("-Wl,-rpath,{LIB_DIR}"))
        .args(["-lamdhip64", "-ldl", "-lpthread"]);
    let output = cmd.output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run {}: {e}", compiler.to_string_lossy()),
        )
    })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{} failed to build {} ({}):\n{}{}",
            compiler.to_string_lossy(),
            src.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )))
    }
}
