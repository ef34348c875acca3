//! The `kfdq` command line: the user's front door.
#![forbid(unsafe_code)]

mod client;
mod demo;
mod doctor;
mod ps;
mod run;
mod status;
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

    /// The agent's socket (kfdqd) for status, control commands and the agent's columns of ps.
    #[arg(long, global = true, value_name = "PATH", env = "KFDQ_SOCKET")]
    pub agent: Option<PathBuf>,

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
    /// Processes with KFD queues: per queue its GPU, type, ring size, priority and state.
    ///
    /// Read from /sys/class/kfd/kfd/proc, which is world-readable, joined with what the shim
    /// publishes; when the agent (kfdqd) answers, its class, state and busy columns are added.
    Ps,
    /// The agent's view: partitions, classes, who is preempted at which level and why,
    /// device-wide preempts per second, decision latency.
    ///
    /// Without a running agent it says so and shows `kfdq ps` instead.
    Status,
    /// `kfdq status`, redrawn in place (with --json: one JSON object per line).
    Watch {
        /// Seconds between frames.
        #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
        interval: f64,
        /// Stop after this many frames (default: until Ctrl-C).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Set the KFD priority (0..=15) of every queue of a process (level 0).
    ///
    /// What a priority buys depends on the kernel (see `kfdq status`): since Linux 7.0 only the
    /// pipe priority counts (0-6 low, 7-10 medium, 11-15 high). Users may set their own
    /// processes up to their class's max_priority; root and the admin group any.
    SetPriority {
        /// The process.
        pid: u32,
        /// 0..=15.
        priority: u32,
    },
    /// Preempt a process by hand until `kfdq resume` (overrides the policy).
    ///
    /// Levels: hold (1: the shim holds its launches; running work drains), deactivate (2: its
    /// queues leave the runlist; running waves are context-saved), suspend (3: the debugger
    /// API suspends its queues). Users may preempt their own processes.
    Suspend {
        /// The process.
        pid: u32,
        /// hold | deactivate | suspend (or 1 | 2 | 3).
        #[arg(long, default_value = "deactivate", value_parser = parse_level)]
        level: crate::proto::Level,
    },
    /// Undo `kfdq suspend`: the policy decides for the process again.
    Resume {
        /// The process.
        pid: u32,
    },
    /// Move a process to another class until it exits.
    ///
    /// Users may move their own processes down, or into classes anyone may ask for; root and
    /// the admin group anywhere.
    Class {
        /// The process.
        pid: u32,
        /// A class of the agent's configuration (`kfdq status` lists them).
        class: String,
    },
    /// The main job: a latency client next to a batch job, uncontrolled and under each
    /// preemption level, in one table.
    ///
    /// Without an AMD GPU it mounts the built-in emulator (kfd-emu, mi308x preset) and runs the
    /// workloads on fakehip; every phase runs real processes under the shim with a real kfdqd.
    /// Phases: HP alone, LP alone, HP+LP uncontrolled, priorities only, levels 1, 2 and 3.
    /// Prints HP P50/P99/max relative to alone, LP throughput relative to alone, preemption
    /// latency and device-wide preempts per second (--json: the same numbers).
    Demo(demo::DemoArgs),
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

fn parse_level(s: &str) -> Result<crate::proto::Level, String> {
    match crate::agent::config::parse_level(s)? {
        Some(l) => Ok(l),
        None => Err("level none preempts nothing: use hold, deactivate or suspend".into()),
    }
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let root = Root::new(&cli.root);
    let result = match cli.command {
        Command::Topology => topology::run(&root, cli.json),
        Command::Ps => ps::run(&root, &client::socket_path(cli.agent.as_deref()), cli.json),
        Command::Status => status::run(&root, &client::socket_path(cli.agent.as_deref()), cli.json),
        Command::Watch { interval, count } => {
            if !(interval.is_finite() && interval >= 0.05) {
                Err(CliError::Usage(format!(
                    "--interval {interval} is too short: use at least 0.05 seconds"
                )))
            } else {
                status::watch(
                    &client::socket_path(cli.agent.as_deref()),
                    std::time::Duration::from_secs_f64(interval),
                    count,
                    cli.json,
                )
            }
        }
        Command::SetPriority { pid, priority } => client::command(
            &client::socket_path(cli.agent.as_deref()),
            &crate::proto::Request::SetPriority { pid, priority },
            cli.json,
        ),
        Command::Suspend { pid, level } => client::command(
            &client::socket_path(cli.agent.as_deref()),
            &crate::proto::Request::Suspend { pid, level },
            cli.json,
        ),
        Command::Resume { pid } => client::command(
            &client::socket_path(cli.agent.as_deref()),
            &crate::proto::Request::Resume { pid },
            cli.json,
        ),
        Command::Class { pid, class } => client::command(
            &client::socket_path(cli.agent.as_deref()),
            &crate::proto::Request::SetClass { pid, class },
            cli.json,
        ),
        Command::Demo(args) => demo::run(&cli.root, args, cli.json),
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
    /// The agent refused a request or a shim failed it; the text names the rule and the fix.
    #[error("{0}")]
    Refused(String),
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
