//! Before the phases run: the demo's arguments checked, its programs and workloads found, the
//! emulator mounted (or the kfd-emu mount given as --root taken), the workloads described.

use std::path::{Path, PathBuf};

use super::super::CliError;
use super::super::args::{DemoArgs, DemoRuntime};
use super::procs::Emulator;
use super::runtime::{self, Runtime};
use super::words;
use super::{LP_IN_FLIGHT, LP_WG_US, LP_WGS, Workload};

/// How to get the built-in workloads when they are missing.
const WORKLOADS_FIX: &str = "the built-in workloads are built by scripts/run.sh, which puts them beside kfdq in target/debug; or give their directory with --workloads DIR (built against your ROCm on a real GPU), or your own programs with --hp-command and --lp-command";
/// How to get kfdqd and kfd-emu when they are missing.
const PROGRAMS_FIX: &str = "install the kfdq package, or build the workspace (cargo build --release) and run target/release/kfdq";

/// Finds `name` in `dir`, else beside this `kfdq` and on `PATH`; `fix` says how to get it.
fn find_exe(name: &str, dir: Option<&Path>, fix: &str) -> Result<PathBuf, CliError> {
    let mut tried = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    match dir {
        Some(d) => dirs.push(d.to_owned()),
        None => {
            if let Some(d) = std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(Path::to_owned))
            {
                dirs.push(d);
            }
            if let Some(path) = std::env::var_os("PATH") {
                dirs.extend(std::env::split_paths(&path));
            }
        }
    }
    for d in dirs {
        let p = d.join(name);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(d.display().to_string());
    }
    Err(CliError::Usage(format!(
        "{name} not found (looked in {}); {fix}",
        tried.join(", ")
    )))
}

/// A workload from `--hp-command` / `--lp-command`, or the built-in `name` with `args`.
fn workload(
    given: Option<&str>,
    (name, args): (&str, Vec<String>),
    dir: Option<&Path>,
    flag: &str,
) -> Result<Workload, CliError> {
    match given {
        Some(line) => {
            let argv = words::split(line).map_err(|e| CliError::Usage(format!("{flag}: {e}")))?;
            Ok(Workload {
                argv,
                builtin: false,
            })
        }
        None => Ok(Workload {
            argv: std::iter::once(find_exe(name, dir, WORKLOADS_FIX)?.display().to_string())
                .chain(args)
                .collect(),
            builtin: true,
        }),
    }
}

/// The demo's numeric arguments, checked before anything starts.
pub(super) fn check_args(args: &DemoArgs) -> Result<(), CliError> {
    if args.requests < 2 {
        return Err(CliError::Usage(format!(
            "--requests {} is too few: at least 2 (P99 of fewer than 100 requests is close to the maximum)",
            args.requests
        )));
    }
    if !(args.rate.is_finite() && args.rate > 0.0 && args.rate <= 200.0) {
        return Err(CliError::Usage(format!(
            "--rate {} is out of range: above 0 and at most 200 requests per second",
            args.rate
        )));
    }
    if !(1..=100).contains(&args.repeat) {
        return Err(CliError::Usage(format!(
            "--repeat {} is out of range: 1 to 100 repetitions of every phase",
            args.repeat
        )));
    }
    Ok(())
}

/// What the demo runs: the runtime, both workloads, the shim, kfdqd and kfd-emu (when the demo
/// mounts the emulator).
pub(super) struct Programs {
    pub(super) runtime: Runtime,
    pub(super) hp: Workload,
    pub(super) lp: Workload,
    pub(super) shim: PathBuf,
    pub(super) kfdqd: PathBuf,
    pub(super) kfd_emu: Option<PathBuf>,
}

/// Finds the programs the demo runs; `existing`: `root` is a kfd-emu mount. The programs come
/// first: an error naming a missing one leaves no directory behind.
pub(super) fn programs(
    root: &Path,
    args: &DemoArgs,
    use_emu: bool,
    existing: bool,
) -> Result<Programs, CliError> {
    let runtime = Runtime::resolve(args, use_emu || existing)?;
    let builtin = args.hp_command.is_none() || args.lp_command.is_none();
    let workloads = match (&args.workloads, use_emu || existing) {
        (Some(d), _) => Some(d.clone()),
        (None, true) => None,
        (None, false) if !builtin || runtime.kind == DemoRuntime::Hip => None,
        (None, false) => {
            return Err(CliError::Usage(format!(
                "{} has a /dev/kfd: on a real GPU the demo needs workloads built for it: give --hp-command and --lp-command (docs/demo.md, \"Your own workloads\"), or --workloads DIR with kfdq-latency and kfdq-flood built against your ROCm, or --emulator to run on the built-in emulator",
                root.display()
            )));
        }
    };
    let [hp_hip, lp_hip] = runtime::builtin(runtime.kind);
    let fakehip_hp_args: Vec<String> = [
        args.requests.to_string(),
        format!("{:.3}", 1000.0 / args.rate),
    ]
    .into_iter()
    .chain(args.request_shape.client_args()?)
    .collect();
    let hp = workload(
        args.hp_command.as_deref(),
        hp_hip.unwrap_or(("kfdq-latency", fakehip_hp_args)),
        workloads.as_deref(),
        "--hp-command",
    )?;
    let lp = workload(
        args.lp_command.as_deref(),
        lp_hip.unwrap_or_else(|| {
            (
                "kfdq-flood",
                vec![
                    LP_WG_US.to_string(),
                    LP_WGS.to_string(),
                    LP_IN_FLIGHT.to_string(),
                ],
            )
        }),
        workloads.as_deref(),
        "--lp-command",
    )?;
    let shim = super::super::run::find_shim(None)?;
    let kfdqd = find_exe("kfdqd", None, PROGRAMS_FIX)?;
    let kfd_emu = if use_emu {
        Some(find_exe("kfd-emu", None, PROGRAMS_FIX)?)
    } else {
        None
    };
    let runtime = runtime.with_emulator(kfd_emu.as_deref());
    Ok(Programs {
        runtime,
        hp,
        lp,
        shim,
        kfdqd,
        kfd_emu,
    })
}

/// The emulator the demo runs on: mounted in `tmp` when the demo mounts one (`kfd_emu`), else
/// the kfd-emu mount given as --root (`existing`), else none (a GPU).
pub(super) fn emulator(
    kfd_emu: Option<PathBuf>,
    existing: Option<Emulator>,
    runtime: &Runtime,
    args: &DemoArgs,
    tmp: &Path,
    logs: &Path,
) -> Result<Option<Emulator>, CliError> {
    let Some(kfd_emu) = kfd_emu else {
        if let Some(e) = &existing {
            eprintln!(
                "kfdq demo: {} is a kfd-emu mount: the emulator's counters are read there",
                e.root.display()
            );
        }
        return Ok(existing);
    };
    let mnt = tmp.join("emu");
    eprintln!(
        "kfdq demo: mounting the emulator ({}) at {}",
        args.preset,
        mnt.display()
    );
    let kernel_times = runtime.kernel_times(tmp)?;
    Ok(Some(Emulator::mount(
        &kfd_emu,
        &args.preset,
        &mnt,
        &logs.join("kfd-emu.log"),
        kernel_times.as_deref(),
    )?))
}

/// The report's description of the workloads.
pub(super) fn workloads_text(
    hp: &Workload,
    lp: &Workload,
    runtime: &Runtime,
    args: &DemoArgs,
) -> Result<String, CliError> {
    Ok(match (hp.builtin, lp.builtin) {
        (true, true) if runtime.kind == DemoRuntime::Hip => {
            runtime::hipwork_text(args.request_shape).to_string()
        }
        (true, true) => format!(
            "HP: {}. LP: dispatches of {LP_WGS} work-groups x {} ms, {LP_IN_FLIGHT} in flight (a ResNet-50 training loop).",
            args.request_shape.describe()?,
            LP_WG_US / 1000
        ),
        _ => format!("HP: `{}`. LP: `{}`.", hp.argv.join(" "), lp.argv.join(" ")),
    })
}
