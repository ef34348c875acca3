//! The `kfdq` command line: the user's front door.
#![forbid(unsafe_code)]

mod doctor;
mod ps;
mod run;
mod table;
mod topology;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::kfd::Root;

/// kfdq — GPU queue priorities and preemption for AMD Instinct nodes.
///
/// Reads and controls amdkfd user-mode queues through the upstream /dev/kfd interface. Every
/// device and sysfs path is resolved under --root (default /), so the same commands work on a
/// kfd-emu mount.
#[derive(Debug, Parser)]
#[command(name = "kfdq", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// Root prefix for /dev/kfd, /dev/dri and /sys/class/kfd (a kfd-emu mount point in tests).
    #[arg(
        long,
        global = true,
        env = "KFDQ_ROOT",
        value_name = "DIR",
        default_value = "/"
    )]
    pub root: PathBuf,

    /// Print JSON instead of tables (stable field names, for scripts).
    #[arg(long, global = true)]
    pub json: bool,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// kfdq subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// GPUs and partitions: gfx target, CUs, XCCs, hardware queue slots, CWSR size per queue.
    ///
    /// A partition keeps `resident` active queues on the hardware (num_cp_queues; each queue
    /// of an N-XCC partition takes one HQD per XCC). Beyond that the scheduler time-slices the
    /// runlist and queue priority stops mattering.
    Topology,
    /// Processes with KFD queues: per queue its GPU, type and ring size.
    ///
    /// Read from /sys/class/kfd/kfd/proc, which is world-readable; no privileges needed.
    Ps,
    /// Run a command under the launch shim (LD_PRELOAD libkfdq_shim.so) with a class or priority.
    ///
    /// The shim maps every HIP stream, the null stream included, to a managed KFD queue and
    /// writes the class's priority into each queue it creates. Classes: latency (KFD 11..=15),
    /// normal (7..=10), batch (0..=6); HIP stream priorities map inside the class band.
    /// Example: `kfdq run --class latency -- ./inference-server`.
    Run {
        /// Priority class of the process (latency, normal, batch).
        #[arg(long, value_name = "CLASS")]
        class: Option<String>,
        /// Force this KFD priority (0..=15) on every queue instead of a class band.
        #[arg(long, value_name = "0..=15")]
        priority: Option<u32>,
        /// Agent socket the shim connects to (default: none; static priorities only).
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// Shim library (default: $KFDQ_SHIM, next to kfdq, /usr/local/lib/kfdq, /usr/lib/kfdq).
        #[arg(long, value_name = "PATH")]
        shim: Option<PathBuf>,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Inspect this node: what kfdq can do on each GPU partition, and why not.
    ///
    /// Checks the KFD interface version and the debugger API, amdgpu's sched_policy and
    /// cwsr_enable, whether the kernel programs per-queue priority (Linux 7.0 stopped), Yama's
    /// ptrace_scope (the tracer path), the HIP runtime and whether the shim covers its symbol
    /// versions, the resident queue slots, and the permissions of /dev/kfd and the agent's
    /// socket. Every finding that limits kfdq comes with its fix. Exits 1 when a check FAILs.
    Doctor {
        /// The agent's socket to check.
        #[arg(long, value_name = "PATH", default_value = crate::doctor::DEFAULT_SOCKET)]
        socket: PathBuf,
        /// The HIP runtime to check (default: libamdhip64.so.7/6/5 in $ROCM_PATH/lib,
        /// /opt/rocm/lib and the system library directories).
        #[arg(long, value_name = "PATH")]
        hip_runtime: Option<PathBuf>,
        /// The shim library to check (default: as `kfdq run` finds it).
        #[arg(long, value_name = "PATH")]
        shim: Option<PathBuf>,
    },
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let root = Root::new(&cli.root);
    let result = match cli.command {
        Command::Topology => topology::run(&root, cli.json),
        Command::Ps => ps::run(&root, cli.json),
        Command::Run {
            class,
            priority,
            socket,
            shim,
            command,
        } => run::run(
            &root,
            run::RunOptions {
                class: class.as_deref(),
                priority,
                socket: socket.as_deref(),
                shim: shim.as_deref(),
                command: &command,
            },
        ),
        Command::Doctor {
            socket,
            hip_runtime,
            shim,
        } => doctor::run(
            &root,
            doctor::DoctorOptions {
                socket: Some(socket),
                hip_runtime,
                shim,
            },
            cli.json,
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kfdq: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KFDQ_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// Errors of CLI commands: what failed, with a hint a person can act on.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A KFD layer error, with what the command was doing.
    #[error("{doing}: {source}{hint}")]
    Kfd {
        /// What the command was doing.
        doing: String,
        /// The error.
        source: crate::kfd::Error,
        /// A hint (leading newline included) or empty.
        hint: String,
    },
    /// The command line asked for something impossible; the text says what to do instead.
    #[error("{0}")]
    Usage(String),
    /// `kfdq doctor` found checks that fail (it printed them with their fixes).
    #[error("{0} check(s) FAILed: see the FAIL lines and their fixes above")]
    Findings(usize),
    /// Output could not be written or serialised.
    #[error("writing output: {0}")]
    Output(String),
}

pub(crate) fn kfd_error(
    doing: impl Into<String>,
    root: &Root,
    source: crate::kfd::Error,
) -> CliError {
    let hint = match &source {
        crate::kfd::Error::Io { source: io, .. } if io.kind() == std::io::ErrorKind::NotFound => {
            format!(
                "\n  hint: no amdkfd under {} — is the amdgpu driver loaded? On a machine without an AMD GPU, mount the emulator (`kfd-emu --mount DIR`) and pass --root DIR",
                root.path().display()
            )
        }
        _ => String::new(),
    };
    CliError::Kfd {
        doing: doing.into(),
        source,
        hint,
    }
}

pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(|e| CliError::Output(e.to_string()))?;
    println!("{text}");
    Ok(())
}
