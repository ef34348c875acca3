//! `kfd-emu`: mount the amdkfd emulator and serve it until SIGINT/SIGTERM.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use kfd_emu::{EmuConfig, EmuError, MountedEmu, Preset};
use nix::sys::signal::{SigSet, Signal};

const ABOUT: &str = "amdkfd emulated over FUSE: /dev/kfd, render nodes and KFD sysfs for AMD Instinct gfx942, \
with a model of the hardware scheduler (runlists, residency, device-wide preempts) and a CP that \
executes AQL packets from client memory";

const LONG_ABOUT: &str = "\
amdkfd emulated over FUSE: /dev/kfd, render nodes and KFD sysfs for AMD
Instinct gfx942, with a model of the hardware scheduler (runlists, residency,
device-wide preempts) and a CP that executes AQL packets from client memory.

The mount contains:
  dev/kfd, dev/dri/renderD<minor>    ioctl + mmap (regular files, mode 0666)
  sys/class/kfd/kfd/topology/        generation_id, system_properties,
                                     nodes/N/{gpu_id,name,properties,
                                     mem_banks/B/properties,caches/C/properties}
  sys/class/kfd/kfd/proc/<pid>/      pasid, queues/<qid>/{size,type,gpuid}
  kfd-emu/stats.json                 HWS model state (kfd_emu::Stats)
  kfd-emu/config.json                configuration and per-node CWSR sizes
  kfd-emu/faults                     injected failures: read for the list (JSON),
                                     write a SPEC line to add one, `clear` to end all

Faults (--fault SPEC or a line written to kfd-emu/faults):
  IOCTL=FAILURE[,every=N | ,p=P[,seed=S]][,times=K]
  IOCTL    create_queue, destroy_queue, update_queue, set_cu_mask, dbg_trap,
           dbg_trap/suspend_queues, dbg_trap/resume_queues
  FAILURE  an errno (EBUSY, EIO, ... or a number): the call fails, changes nothing;
           preempt-timeout: amdkfd's HWS preemption timeout: the call fails with
           ETIME and the partition is reset (every queue on it stops)
  every=N  the N-th, 2N-th ... matching call (default: every call)
  p=P      each call with probability P, seeded by seed=S (default 0): reproducible
  times=K  at most K failures
  e.g. echo update_queue=EBUSY,every=3 > MOUNT/kfd-emu/faults

Point kfdq at it with --root DIR or KFDQ_ROOT=DIR. Unmodified ROCm (rocminfo,
HIP, PyTorch) sees it at /dev/kfd and /sys/... through `kfd-emu run`.

Presets (24 HQDs per XCC):
  mi300x-spx  gfx942: 1 node per GPU: 8 XCCs, 304 CUs (simd_count 1216), 0x74a1
  mi300x-cpx  gfx942: 8 nodes per GPU: 1 XCC, 38 CUs each (simd_count 152), 0x74a1
  mi308x      gfx942: 1 node per GPU: 4 XCCs, 80 CUs (simd_count 320), 0x74a2
              The MI308X layout (4 XCDs x 20 CUs) is ASSUMED from
              third-party data and unverified.
  mi210       gfx90a (gfx_target_version 90010): 1 node, 1 XCC, 104 CUs,
              0x740f, 64 GiB HBM2e

Dispatches run on a model of the partition (crate gfx-model, docs/gfx-model.md):
their work-groups (grid / work-group size from the AQL packet) compete for the
CUs' wave slots; one work-group runs for the nanoseconds in the packet's reserved2
field (u64 at byte 48), or --packet-us when it is 0; for real code objects (no
time in the packet) --kernel-times FILE sets it per kernel name. The runtime's
copy kernels and SDMA queues really move bytes; other kernels change no memory.
Runlist updates preempt every queue of the partition and cost CWSR save/restore
time.
Must run as root to mount with allow_other.

Environment: KFD_EMU_LOG sets the log filter (e.g. debug, kfd_emu=trace);
logs go to stderr.";

#[derive(Parser)]
#[command(
    name = "kfd-emu",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Unmount a kfd-emu mount, also a stale one whose server died (ENOTCONN)
    Unmount {
        /// The mount point
        dir: PathBuf,
    },
    /// Run a program that sees a mounted emulator at the real driver's paths
    #[command(long_about = RUN_ABOUT)]
    Run(RunArgs),
}

const RUN_ABOUT: &str = "\
Run a program that sees a mounted emulator at the real driver's paths, so
unmodified ROCm (rocminfo, the HIP runtime, PyTorch) uses it: /dev/kfd,
/dev/dri/renderD*, /sys/devices/virtual/kfd/kfd, /sys/class/kfd/kfd and
/sys/module/amdgpu. The program runs in a private mount namespace (needs root);
nothing outside it changes. With --root it runs chrooted in that root filesystem,
e.g. the Debian sid root with the real ROCm 6.4 user space that
scripts/sid-root.sh builds. /tmp inside is a fresh tmpfs.

Example:
  kfd-emu --mount /run/kfd-emu --preset mi308x &
  kfd-emu run --emu /run/kfd-emu --root /var/cache/kfdq/sid-root -- rocminfo";

#[derive(Args)]
struct RunArgs {
    /// Mount point of a running emulator
    #[arg(long, value_name = "DIR")]
    emu: PathBuf,
    /// Root filesystem to run the program in (default: the host's)
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Make host path SRC visible at DST inside the root (repeatable)
    #[arg(long, value_name = "SRC:DST", value_parser = parse_bind)]
    bind: Vec<(PathBuf, PathBuf)>,
    /// Working directory inside the root
    #[arg(long, value_name = "DIR", default_value = "/")]
    cwd: PathBuf,
    /// The program and its arguments
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

fn parse_bind(s: &str) -> Result<(PathBuf, PathBuf), String> {
    match s.split_once(':') {
        Some((src, dst)) if !src.is_empty() && dst.starts_with('/') => {
            Ok((PathBuf::from(src), PathBuf::from(dst)))
        }
        _ => Err(format!(
            "{s:?} is not SRC:DST with an absolute DST (e.g. /tmp/work:/work)"
        )),
    }
}

#[derive(Args)]
struct ServeArgs {
    /// Directory to mount at (created if missing; a stale FUSE mount there is detached)
    #[arg(long, value_name = "DIR")]
    mount: Option<PathBuf>,
    /// Machine layout: mi300x-spx, mi300x-cpx, mi308x (layout assumed) or mi210 (gfx90a)
    #[arg(long, default_value = "mi300x-spx", value_parser = parse_preset)]
    preset: Preset,
    /// Number of physical GPUs; each repeats the preset's (or topology file's) nodes
    #[arg(long, default_value_t = 1, value_name = "N")]
    gpus: u32,
    /// TOML topology file ([[node]] entries with a [node.properties] table) overriding the preset
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// KFD minor version reported by GET_VERSION (RUNTIME_ENABLE/DBG_TRAP are ENOTTY below 13)
    #[arg(long, default_value_t = 17, value_name = "N")]
    kfd_minor: u32,
    /// Behave like a kernel older than 6.12: no cwsr_size/ctl_stack_size in sysfs, no
    /// queue-buffer validation in CREATE_QUEUE
    #[arg(long)]
    legacy_kernel: bool,
    /// Stall of every queue of a partition per device-wide preempt, in microseconds
    #[arg(long, default_value_t = 50, value_name = "N")]
    preempt_cost_us: u64,
    /// A node's calibration (`kfdq bench --write FILE`): its preempt cost, per-wave CWSR costs
    /// and arbitration (unless `none`) instead of the flags' defaults; a file of several
    /// partitions sets each partition from its own. Refused when a partition was measured on
    /// another GPU kind than the node it sets (the topology presented, --topology included)
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["preempt_cost_us", "save_wave_ns", "restore_wave_ns", "arbitration"]
    )]
    calibration: Option<PathBuf>,
    /// CWSR cost per wave saved at a device-wide preempt, in nanoseconds (the model's
    /// save_wave_ns)
    #[arg(long, default_value_t = 20, value_name = "NS")]
    save_wave_ns: u64,
    /// CWSR cost per wave restored when its queue is mapped again, in nanoseconds
    /// (restore_wave_ns)
    #[arg(long, default_value_t = 20, value_name = "NS")]
    restore_wave_ns: u64,
    /// Execution time of one work-group of an AQL dispatch whose reserved2 field is 0, in
    /// microseconds
    #[arg(long, default_value_t = 10, value_name = "N")]
    packet_us: u64,
    /// Time slice of an oversubscribed partition, in microseconds
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    quantum_us: u64,
    /// Behave like a kernel before Linux 7.0 (upstream 73463e26f7e2), which programs the
    /// per-queue priority: the dispatcher prefers higher queues strictly (implied by
    /// --legacy-kernel). Default: only the pipe priority (0-6 low, 7-10 medium, 11-15 high)
    #[arg(long)]
    queue_priority: bool,
    /// Override the dispatcher's arbitration: equal (round-robin), pipe, strict
    #[arg(long, value_name = "MODE", value_parser = parse_arbitration)]
    arbitration: Option<gfx_model::Arbitration>,
    /// TOML file with work-group times of real kernels by name, for dispatches whose packet
    /// carries no time: a [work_group_ns] table, e.g. "_Z7add_onePim" = 5000, and a
    /// [work_group_time_by_arg] table for kernels whose time an argument sets, e.g. kfdq_spin =
    /// { offset = 0, ps_per_unit = 30476 } (others take --packet-us)
    #[arg(long, value_name = "FILE")]
    kernel_times: Option<PathBuf>,
    /// Inject a failure from the start (repeatable): IOCTL=FAILURE[,every=N|,p=P[,seed=S]][,times=K],
    /// e.g. update_queue=EBUSY,every=3 or dbg_trap/suspend_queues=EIO,p=0.1,seed=7 or
    /// update_queue=preempt-timeout,times=1 (see FAULTS below); more at run time through
    /// kfd-emu/faults
    #[arg(long, value_name = "SPEC", value_parser = kfd_emu::parse_fault)]
    fault: Vec<kfd_emu::FaultSpec>,
    /// The whole configuration as JSON instead of the model flags: the "config" object of a
    /// mount's kfd-emu/config.json (to start an emulator exactly like another one)
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = [
            "preset", "gpus", "topology", "kfd_minor", "legacy_kernel", "preempt_cost_us",
            "calibration", "save_wave_ns", "restore_wave_ns", "packet_us", "quantum_us",
            "queue_priority", "arbitration", "kernel_times",
        ]
    )]
    config: Option<PathBuf>,
    /// Also exit (unmounting) when standard input reaches its end: a supervisor that holds
    /// the other end of a pipe ends the emulator by closing it, or by dying
    #[arg(long)]
    exit_with_stdin: bool,
}

/// The `--kernel-times` file.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KernelTimes {
    #[serde(default)]
    work_group_ns: std::collections::BTreeMap<String, u64>,
    #[serde(default)]
    work_group_time_by_arg: std::collections::BTreeMap<String, kfd_emu::ArgTime>,
}

fn load_kernel_times(path: &std::path::Path) -> Result<KernelTimes, EmuError> {
    let text = std::fs::read_to_string(path).map_err(|source| EmuError::Io {
        context: format!("read kernel times {}", path.display()),
        source,
    })?;
    let t: KernelTimes = toml::from_str(&text).map_err(|e| {
        EmuError::Config(format!(
            "kernel times {}: {e}; expected a [work_group_ns] table of \"kernel name\" = nanoseconds and a [work_group_time_by_arg] table of \"kernel name\" = {{ offset = BYTES, ps_per_unit = PS }}",
            path.display()
        ))
    })?;
    if let Some((k, _)) = t
        .work_group_time_by_arg
        .iter()
        .find(|(_, a)| !(1..=8).contains(&a.size))
    {
        return Err(EmuError::Config(format!(
            "kernel times {}: {k:?}: size must be 1 to 8 bytes",
            path.display()
        )));
    }
    Ok(t)
}

/// `--calibration FILE`: the measured parameters, paired with the GPU nodes the emulator
/// presents (the topology file's included): a one-partition file sets every partition, a file
/// of several sets each partition from its own; refused when a partition was measured on
/// another GPU kind than the node it would set, or the counts differ.
fn apply_calibration(config: &mut EmuConfig, path: &std::path::Path) -> Result<(), EmuError> {
    let text = std::fs::read_to_string(path).map_err(|source| EmuError::Io {
        context: format!("read calibration {}", path.display()),
        source,
    })?;
    let targets: Vec<u32> = kfd_emu::gfx_target_versions(config)?
        .into_iter()
        .map(|v| u32::try_from(v).unwrap_or(0))
        .collect();
    let refuse = |e: kfdq_calibration::CalibrationError| {
        EmuError::Config(format!("calibration {}: {e}", path.display()))
    };
    let cal = kfdq_calibration::Calibration::parse(&text).map_err(refuse)?;
    let paired = cal.pair(&text, &targets).map_err(refuse)?;
    let base = gfx_model::Params {
        arbitration: config.effective_arbitration(),
        ..gfx_model::Params::default()
    };
    let each: Vec<gfx_model::Params> = paired.iter().map(|p| base.calibrated(&p.model)).collect();
    // The flags' fields show the first partition (config.json); several partitions each
    // their own.
    if let Some(first) = each.first() {
        config.preempt_cost_us = (first.preempt_fixed_ns + 500) / 1000;
        config.save_wave_ns = first.save_wave_ns;
        config.restore_wave_ns = first.restore_wave_ns;
        config.arbitration = Some(first.arbitration);
    }
    if cal.partitions.len() > 1 {
        config.partition_costs = each
            .iter()
            .map(|p| kfd_emu::PartitionCosts {
                preempt_fixed_ns: p.preempt_fixed_ns,
                save_wave_ns: p.save_wave_ns,
                restore_wave_ns: p.restore_wave_ns,
                arbitration: p.arbitration,
            })
            .collect();
    }
    Ok(())
}

fn parse_arbitration(s: &str) -> Result<gfx_model::Arbitration, String> {
    match s {
        "equal" => Ok(gfx_model::Arbitration::Equal),
        "pipe" => Ok(gfx_model::Arbitration::PipePriority),
        "strict" => Ok(gfx_model::Arbitration::StrictPriority),
        other => Err(format!(
            "unknown arbitration {other:?}; expected equal, pipe or strict"
        )),
    }
}

fn parse_preset(s: &str) -> Result<Preset, String> {
    s.parse::<Preset>().map_err(|e| e.to_string())
}

/// The configuration the model flags describe.
fn config_from_flags(args: &ServeArgs) -> Result<EmuConfig, EmuError> {
    let mut config = EmuConfig {
        preset: args.preset,
        gpus: args.gpus,
        topology_file: args.topology.clone(),
        kfd_minor: args.kfd_minor,
        buffer_checks: !args.legacy_kernel,
        preempt_cost_us: args.preempt_cost_us,
        save_wave_ns: args.save_wave_ns,
        restore_wave_ns: args.restore_wave_ns,
        default_packet_ns: args.packet_us.saturating_mul(1000),
        quantum_us: args.quantum_us,
        queue_priority: args.queue_priority,
        arbitration: args.arbitration,
        kernel_wg_ns: Default::default(),
        kernel_wg_time_by_arg: Default::default(),
        partition_costs: Vec::new(),
    };
    if let Some(path) = &args.kernel_times {
        let t = load_kernel_times(path)?;
        config.kernel_wg_ns = t.work_group_ns;
        config.kernel_wg_time_by_arg = t.work_group_time_by_arg;
    }
    if let Some(path) = &args.calibration {
        apply_calibration(&mut config, path)?;
    }
    Ok(config)
}

/// `--config FILE`: an [`EmuConfig`] as JSON.
fn load_config(path: &std::path::Path) -> Result<EmuConfig, EmuError> {
    let text = std::fs::read_to_string(path).map_err(|source| EmuError::Io {
        context: format!("read configuration {}", path.display()),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| {
        EmuError::Config(format!(
            "configuration {}: {e}; expected the \"config\" object of a mount's \
             kfd-emu/config.json",
            path.display()
        ))
    })
}

fn serve(args: ServeArgs) -> Result<(), EmuError> {
    let Some(dir) = args.mount.clone() else {
        return Err(EmuError::Config(
            "--mount DIR is required (or use `kfd-emu unmount DIR`); see --help".into(),
        ));
    };
    let config = match &args.config {
        Some(path) => load_config(path)?,
        None => config_from_flags(&args)?,
    };
    // Block the signals before any thread exists so that only sigwait sees them.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.thread_block().map_err(|e| EmuError::Io {
        context: "block SIGINT/SIGTERM".into(),
        source: e.into(),
    })?;
    let emu = MountedEmu::mount(&dir, config)?;
    for f in args.fault {
        emu.inject_spec(f);
    }
    println!(
        "kfd-emu: serving {} at {} (pid {})",
        emu.config().preset,
        emu.root().display(),
        std::process::id()
    );
    let _ = std::io::stdout().flush();
    if args.exit_with_stdin {
        exit_with_stdin();
    }
    // Someone unmounting the directory (`kfd-emu unmount DIR`, umount) ends the FUSE session:
    // wake the signal wait below so that the server exits too instead of serving nothing.
    let end = emu.session_end();
    let watcher = std::thread::Builder::new()
        .name("kfd-emu-session-end".into())
        .spawn(move || {
            end.wait();
            let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGTERM);
        });
    if let Err(e) = watcher {
        tracing::warn!("cannot watch the mount for an outside unmount: {e}");
    }
    let sig = signals.wait().map_err(|e| EmuError::Io {
        context: "wait for SIGINT/SIGTERM".into(),
        source: e.into(),
    })?;
    tracing::info!(?sig, "unmounting");
    emu.unmount_for_exit()
}

/// Sends this process SIGTERM once standard input reaches its end (`--exit-with-stdin`).
fn exit_with_stdin() {
    let watcher = std::thread::Builder::new()
        .name("kfd-emu-stdin".into())
        .spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
            tracing::info!("standard input ended");
            let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), Signal::SIGTERM);
        });
    if let Err(e) = watcher {
        tracing::warn!("cannot watch standard input (--exit-with-stdin): {e}");
    }
}

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KFD_EMU_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fuser=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Cmd::Unmount { dir }) => kfd_emu::unmount_path(&dir),
        Some(Cmd::Run(r)) => {
            let sandbox = kfd_emu::Sandbox {
                emu: r.emu,
                root: r.root,
                binds: r.bind,
                cwd: r.cwd,
            };
            kfd_emu::run_sandboxed(&sandbox, &r.command).map(|never| match never {})
        }
        None => serve(cli.serve),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
