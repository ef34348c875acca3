//! Which runtime the reaction chain's helpers run on (docs/hardware.md, "Two paths"): the node's
//! own HIP runtime (`kfdq-bench-hip`, beside kfdq, dlopening `libamdhip64.so`: the latency
//! launch is a launch edge the shim reports) or kfdq's raw KFD queues (`kfdq bench --helper`:
//! the shim sees them only in its activity samples).

use std::path::{Path, PathBuf};

use kfdq::kfd::Root;

use super::R;
use super::spin;
use crate::CliError;
use crate::args::BenchRuntime;

/// The HIP helper's file name, beside the kfdq binary (as the demo's workloads; the .deb
/// installs it there).
pub const HIP_HELPER: &str = "kfdq-bench-hip";

/// The helpers' runtime, with what the HIP helper needs.
#[derive(Debug, Clone)]
pub enum HelperRuntime {
    /// kfdq's raw queue layer.
    Raw,
    /// The node's HIP runtime.
    Hip {
        /// The helper binary.
        helper: PathBuf,
        /// The HIP runtime it loads.
        hip_runtime: PathBuf,
        /// The GPU's target (the code object it loads).
        target: String,
        /// The partition's HIP device ordinal.
        device: u32,
    },
}

impl HelperRuntime {
    /// `hip` or `raw`, as the report says.
    pub fn name(&self) -> &'static str {
        match self {
            HelperRuntime::Raw => "raw",
            HelperRuntime::Hip { .. } => "hip",
        }
    }
}

/// Why the HIP helpers cannot run, and what to change.
fn hip_missing(
    root: &Root,
    gfx_target_version: u64,
    helper: &Path,
) -> Result<PathBuf, (String, &'static str)> {
    if root.path() != Path::new("/") {
        return Err((
            format!(
                "--root is {}: the HIP runtime opens the node's /dev/kfd, not the root's",
                root.path().display()
            ),
            "run the bench inside the root (`kfd-emu run` on an emulator) without --root",
        ));
    }
    if spin::code_object(gfx_target_version).is_none() {
        return Err((
            format!("no spin code object for gfx_target_version {gfx_target_version}"),
            "add the target to scripts/kernels.sh",
        ));
    }
    if !helper.is_file() {
        return Err((
            format!("{} is missing", helper.display()),
            "install kfdq's package (it puts kfdq-bench-hip beside kfdq) or build the workspace",
        ));
    }
    kfdq::doctor::find_hip_runtime(None).ok_or((
        "no HIP runtime (libamdhip64.so.5/6/7) in $ROCM_PATH/lib, /opt/rocm/lib or the system library directories".to_string(),
        "install ROCm's HIP runtime or set ROCM_PATH",
    ))
}

/// The helpers' runtime: `want`, or hip when it can run, else raw with a line saying why.
/// `device` is the partition's HIP device ordinal (its place among the topology's GPUs, as ROCr
/// enumerates them).
pub fn choose(
    root: &Root,
    want: Option<BenchRuntime>,
    gfx_target_version: u64,
    target: &str,
    device: u32,
    quiet: bool,
) -> R<HelperRuntime> {
    if want == Some(BenchRuntime::Raw) {
        return Ok(HelperRuntime::Raw);
    }
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Output(format!("finding kfdq's own binary: {e}")))?;
    let helper = exe.with_file_name(HIP_HELPER);
    match hip_missing(root, gfx_target_version, &helper) {
        Ok(hip_runtime) => Ok(HelperRuntime::Hip {
            helper,
            hip_runtime,
            target: target.to_string(),
            device,
        }),
        Err((why, fix)) if want == Some(BenchRuntime::Hip) => Err(CliError::Refused(format!(
            "--runtime hip: {why}; {fix}, or pass --runtime raw"
        ))),
        Err((why, _)) => {
            if !quiet {
                eprintln!(
                    "kfdq bench: the reaction chain runs on the raw queue layer, not HIP: {why}"
                );
            }
            Ok(HelperRuntime::Raw)
        }
    }
}
