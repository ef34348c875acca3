//! `kfdq-hipwork`: `kfdq demo`'s latency client and batch job on the node's own HIP runtime
//! (`libamdhip64.so.7` or `.so.6`, loaded at run time), launching the committed spin kernel
//! (`kernels/spin.hip`) with `hipModuleLaunchKernel` in the shapes of measured traces
//! (`shape.rs`). They speak the demo's workload protocol on stdout (docs/demo.md, "Your own
//! workloads"), with one more line: `runtime <name and version>` before `ready`.

mod batch;
mod hint;
mod latency;
mod shape;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Parser, Subcommand};
use kfdq_bench_hip::hip::{Function, Hip, HipError};
use kfdq_bench_hip::{KERNEL, spin_code_object};

use self::hint::Hints;
use self::shape::Shape;

/// kfdq demo's workloads on the node's HIP runtime: `latency` (the HP client: open-loop
/// requests of many short kernels, like a ResNet-18 inference service) and `batch` (the LP
/// job: a training loop's kernels without end). The demo starts them and tells them what to do
/// in their environment (docs/demo.md, "Your own workloads"): KFDQ_DEMO_REQUESTS,
/// KFDQ_DEMO_RATE, KFDQ_DEMO_GO (latency), KFDQ_DEMO_STOP (batch), KFDQ_DEMO_SHAPE
/// (synthetic | resnet18, default resnet18) and KFDQ_DEMO_HINT=1 (call the shim's
/// kfdq_request_begin/end around each request).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    #[command(subcommand)]
    role: Role,
    /// The HIP runtime to load (default: the first of libamdhip64.so.7, .so.6, .so.5 in
    /// $ROCM_PATH/lib, /opt/rocm/lib and the system library directories, as kfdq doctor looks).
    #[arg(long, global = true, value_name = "PATH")]
    hip_runtime: Option<PathBuf>,
    /// The HIP device ordinal.
    #[arg(long, global = true, default_value_t = 0)]
    device: u32,
    /// The GPU's target, gfx942 or gfx90a (default: the device's, from the KFD topology).
    #[arg(long, global = true)]
    target: Option<String>,
    /// The factor applied to every traced kernel's work-group time (default: the emulator's
    /// time scale for traces, kfdq_trace::EMULATOR_TIME_SCALE; see `shape.rs`).
    #[arg(long, global = true, default_value_t = kfdq_trace::EMULATOR_TIME_SCALE)]
    scale: f64,
}

#[derive(Debug, Subcommand)]
enum Role {
    /// The latency client (HP).
    Latency,
    /// The batch job (LP).
    Batch,
}

/// What stops a workload.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkError {
    #[error(transparent)]
    Hip(#[from] HipError),
    #[error("{0}")]
    Setup(String),
    #[error("writing to the demo: {0}")]
    Io(#[from] std::io::Error),
}

/// What both workloads run with.
pub struct Gpu {
    pub hip: Hip,
    pub spin: Function,
    pub shape: Shape,
    pub scale: f64,
    pub hints: Option<Hints>,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        eprintln!("kfdq-hipwork: {e}");
        std::process::exit(1);
    }
}

/// One line to the demo, flushed.
pub fn say(line: &str) -> Result<(), WorkError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// CLOCK_MONOTONIC in µs (the demo's clock).
pub fn now_us() -> f64 {
    kfdq::reaction::mono_ns() as f64 / 1e3
}

/// A variable the demo must set.
pub fn env(name: &str) -> Result<String, WorkError> {
    std::env::var(name).map_err(|_| {
        WorkError::Setup(format!(
            "${name} is not set: kfdq demo starts this workload and sets it (docs/demo.md, \"Your own workloads\")"
        ))
    })
}

/// Waits until `path` exists (the demo's go / stop files), polling every millisecond.
pub fn exists_soon(path: &Path, wait: Duration) -> bool {
    let end = std::time::Instant::now() + wait;
    while std::time::Instant::now() < end {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    path.exists()
}

/// The device's target from the KFD topology: its place among the GPU nodes is its HIP ordinal.
fn target_of(device: u32) -> Result<String, WorkError> {
    let topo = kfdq::kfd::Topology::read(&kfdq::kfd::Root::new("/"))
        .map_err(|e| WorkError::Setup(format!("reading the KFD topology: {e}")))?;
    let node = topo.gpus().nth(device as usize).ok_or_else(|| {
        WorkError::Setup(format!(
            "no GPU {device} in the KFD topology; pass --device N"
        ))
    })?;
    Ok(match node.prop("gfx_target_version").unwrap_or(0) {
        90402 => "gfx942".into(),
        90010 => "gfx90a".into(),
        v => format!("gfx_target_version {v}"),
    })
}

fn run(args: &Args) -> Result<(), WorkError> {
    let shape =
        Shape::parse(std::env::var("KFDQ_DEMO_SHAPE").ok().as_deref()).map_err(WorkError::Setup)?;
    if !(args.scale.is_finite() && args.scale > 0.0) {
        return Err(WorkError::Setup(format!(
            "--scale {}: a factor above 0",
            args.scale
        )));
    }
    let target = match &args.target {
        Some(t) => t.clone(),
        None => target_of(args.device)?,
    };
    let image = spin_code_object(&target).ok_or_else(|| {
        WorkError::Setup(format!(
            "no spin code object for {target}: kfdq ships gfx942 and gfx90a (scripts/kernels.sh)"
        ))
    })?;
    let path = kfdq::doctor::find_hip_runtime(args.hip_runtime.as_deref()).ok_or_else(|| {
        WorkError::Setup(
            "no HIP runtime (libamdhip64.so.7/6/5) in $ROCM_PATH/lib, /opt/rocm/lib or the system library directories: install ROCm's HIP runtime or pass --hip-runtime PATH".into(),
        )
    })?;
    let hip = Hip::load(&path)?;
    hip.set_device(args.device)?;
    let spin = hip.load_function(image, KERNEL)?;
    let hints = (std::env::var("KFDQ_DEMO_HINT").as_deref() == Ok("1")).then(Hints::find);
    say(&format!("runtime {}", hip.describe()))?;
    let gpu = Gpu {
        hip,
        spin,
        shape,
        scale: args.scale,
        hints,
    };
    match args.role {
        Role::Latency => latency::run(&gpu),
        Role::Batch => batch::run(&gpu),
    }
}
