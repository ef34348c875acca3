//! Which HIP runtime the demo's workloads run on (`--runtime`):
//!
//! * `hip`: the real one, through `kfdq-hipwork` (tools/hip-workloads), which loads
//!   `libamdhip64.so.7` or `.so.6` at run time. On a node with a GPU, the node's own. On the
//!   emulator, the ROCm user space of a Debian sid root (`scripts/sid-root.sh`, default
//!   `$KFDQ_CACHE/sid-root`; `--hip-root` picks another, such as the ROCm 7.2 root): every
//!   workload runs inside it through `kfd-emu run`, which puts the emulator where the driver's
//!   files are, and the emulator times the spin kernel from its argument.
//! * `fakehip`: kfdq's stand-in (`kfdq-latency`, `kfdq-flood` built by scripts/run.sh), fast,
//!   on the emulator only (its kernels exist only there).
//!
//! Default: `hip` on a node with a GPU, `fakehip` on the emulator.

use std::path::{Path, PathBuf};
use std::process::Command;

use kfdq::reaction::SPIN_PS_PER_ITERATION;

use super::super::CliError;
use super::super::args::{DemoArgs, DemoRuntime, RequestShape};

/// The workloads' program on the real runtime.
pub const HIPWORK: &str = "kfdq-hipwork";
/// The built-in workloads on the real runtime in the traces' shapes, for the table's header.
const HIPWORK_TRACES: &str = "HP: kfdq-hipwork latency, a ResNet-18 batch-1 inference request as its 145 measured kernels (H100 trace) of the spin kernel, work-group times x10, on the null stream. LP: kfdq-hipwork batch, a ResNet-50 training step's 11182 kernels x10, a unit of 256, 4 units in flight. The spin kernel's time is its argument: the GPU's clock on silicon, the emulator's model here.";
/// The same with `--request-shape synthetic`.
const HIPWORK_SYNTHETIC: &str = "HP: kfdq-hipwork latency, 4 spin dispatches x 80 work-groups x 4 waves x 2 ms on the null stream per request (~8 ms alone). LP: kfdq-hipwork batch, spin dispatches of 2560 work-groups x 4 waves x 20 ms, 4 in flight. The spin kernel's time is its argument: the GPU's clock on silicon, the emulator's model here.";

/// The built-in workloads on the real runtime, in words, for the request shape the demo gives
/// them (`$KFDQ_DEMO_SHAPE`, `$KFDQ_DEMO_KERNELS`).
pub fn hipwork_text(shape: RequestShape) -> &'static str {
    match shape {
        RequestShape::Synthetic => HIPWORK_SYNTHETIC,
        RequestShape::Resnet18 => HIPWORK_TRACES,
    }
}

/// Carries the shim's path through `kfd-emu run` (which must not preload it itself) to the
/// workload, where the wrapper's shell sets `LD_PRELOAD` from it.
const PRELOAD_VAR: &str = "KFDQ_DEMO_PRELOAD";
/// The wrapper inside the root: LD_PRELOAD from [`PRELOAD_VAR`], then the workload.
const WRAPPER: &str = "if [ -n \"$KFDQ_DEMO_PRELOAD\" ]; then export LD_PRELOAD=\"$KFDQ_DEMO_PRELOAD\"; fi; unset KFDQ_DEMO_PRELOAD; exec \"$@\"";

/// The runtime the phases run on.
pub struct Runtime {
    pub kind: DemoRuntime,
    /// hip on the emulator: (kfd-emu, the root holding the HIP runtime).
    sandbox: Option<(PathBuf, PathBuf)>,
}

/// hip on the emulator before kfd-emu is found: the root.
pub struct Resolved {
    pub kind: DemoRuntime,
    root: Option<PathBuf>,
}

impl Resolved {
    /// The runtime, with the emulator's program (hip on the emulator needs it).
    pub fn with_emulator(self, kfd_emu: Option<&Path>) -> Runtime {
        Runtime {
            kind: self.kind,
            sandbox: self
                .root
                .zip(kfd_emu.map(Path::to_owned))
                .map(|(r, e)| (e, r)),
        }
    }
}

/// The built-in workloads' programs on the real runtime: (HP, LP) names and arguments
/// (`None`: fakehip's, which the demo knows).
pub fn builtin(kind: DemoRuntime) -> [Option<(&'static str, Vec<String>)>; 2] {
    match kind {
        DemoRuntime::Hip => [
            Some((HIPWORK, vec!["latency".into()])),
            Some((HIPWORK, vec!["batch".into()])),
        ],
        DemoRuntime::Fakehip => [None, None],
    }
}

/// `$KFDQ_CACHE/sid-root`, where scripts/sid-root.sh builds the root.
fn default_root() -> PathBuf {
    PathBuf::from(std::env::var("KFDQ_CACHE").unwrap_or_else(|_| "/var/cache/kfdq".into()))
        .join("sid-root")
}

impl Runtime {
    /// The runtime `args` ask for, on the emulator (`use_emu`) or a GPU node.
    pub fn resolve(args: &DemoArgs, use_emu: bool) -> Result<Resolved, CliError> {
        let kind = args.runtime.unwrap_or(if use_emu {
            DemoRuntime::Fakehip
        } else {
            DemoRuntime::Hip
        });
        if args.hip_root.is_some() && kind != DemoRuntime::Hip {
            return Err(CliError::Usage(
                "--hip-root is the root of the real HIP runtime: it goes with --runtime hip".into(),
            ));
        }
        let root = match (kind, use_emu) {
            (DemoRuntime::Hip, true) => {
                let root = args.hip_root.clone().unwrap_or_else(default_root);
                if !root.join("usr/bin/rocminfo").is_file() {
                    return Err(CliError::Usage(format!(
                        "--runtime hip on the emulator runs the workloads in a root with the real ROCm runtime, and {} has none: build it with scripts/sid-root.sh (as root; scripts/run.sh does), give another with --hip-root DIR, or use --runtime fakehip",
                        root.display()
                    )));
                }
                Some(root)
            }
            (DemoRuntime::Hip, false) if args.hip_root.is_some() => {
                return Err(CliError::Usage(
                    "--hip-root is for the emulator (a root whose HIP runtime the workloads use there); on a GPU node the workloads load the node's runtime".into(),
                ));
            }
            _ => None,
        };
        Ok(Resolved { kind, root })
    }

    /// What a phase's `runtime` says when the workloads did not print it (the fakehip ones).
    pub fn fallback_label(&self, builtin: bool) -> Option<String> {
        (builtin && self.kind == DemoRuntime::Fakehip)
            .then(|| "fakehip (kfdq's stand-in for libamdhip64)".into())
    }

    /// The emulator's `--kernel-times` file for the spin kernel, written in `dir` (hip on the
    /// emulator only).
    pub fn kernel_times(&self, dir: &Path) -> Result<Option<PathBuf>, CliError> {
        if self.sandbox.is_none() {
            return Ok(None);
        }
        let p = dir.join("kernel-times.toml");
        let text = format!(
            "# kfdq demo: the spin kernel's work-group time is its iteration count (its argument) x {SPIN_PS_PER_ITERATION} ps\n[work_group_time_by_arg]\nkfdq_spin = {{ offset = 0, ps_per_unit = {SPIN_PS_PER_ITERATION} }}\n"
        );
        std::fs::write(&p, text).map_err(|e| CliError::Output(format!("{}: {e}", p.display())))?;
        Ok(Some(p))
    }

    /// The command running `argv`: as is, or inside the root through `kfd-emu run` against
    /// the emulator mounted at `emu`, with `binds` (directories the workload reads or writes:
    /// the phase's, the logs', the programs') at the same paths.
    pub fn command(&self, argv: &[String], emu: Option<&Path>, binds: &[&Path]) -> Command {
        let (Some((kfd_emu, root)), Some(emu)) = (&self.sandbox, emu) else {
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..]);
            return cmd;
        };
        let mut cmd = Command::new(kfd_emu);
        cmd.arg("run").arg("--emu").arg(emu).arg("--root").arg(root);
        let mut seen: Vec<&Path> = Vec::new();
        for b in binds {
            if !seen.iter().any(|s| b.starts_with(s)) {
                seen.push(b);
                cmd.arg("--bind")
                    .arg(format!("{}:{}", b.display(), b.display()));
            }
        }
        // Caches that follow $HOME (comgr's) go to the run's private /tmp, not the shared root.
        cmd.arg("--cwd")
            .arg("/tmp")
            .arg("--")
            .args(["/bin/sh", "-c", WRAPPER, "sh"])
            .args(argv)
            .env("HOME", "/tmp");
        cmd
    }

    /// Preloads the shim into the workload `cmd` runs.
    pub fn preload(&self, cmd: &mut Command, shim: &Path) {
        if self.sandbox.is_some() {
            cmd.env(PRELOAD_VAR, shim);
        } else {
            cmd.env("LD_PRELOAD", shim);
        }
    }

    /// The root the workloads' shim sees the driver under (`KFDQ_ROOT`): inside `kfd-emu run`
    /// the emulator is at `/`.
    pub fn workload_root<'a>(&self, root: &'a Path) -> &'a Path {
        if self.sandbox.is_some() {
            Path::new("/")
        } else {
            root
        }
    }

    /// The runtime as the table's header says it.
    pub fn describe(&self) -> String {
        match (&self.sandbox, self.kind) {
            (Some((_, root)), _) => format!(
                "the real HIP runtime of {} (in kfd-emu run)",
                root.display()
            ),
            (None, DemoRuntime::Hip) => "the node's HIP runtime".into(),
            (None, DemoRuntime::Fakehip) => "fakehip".into(),
        }
    }
}
