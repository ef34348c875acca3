//! The `kfdq` command line: the user's front door.
#![forbid(unsafe_code)]

mod args;
mod bench;
mod client;
mod demo;
mod doctor;
mod ps;
mod report;
mod run;
mod status;
mod table;
mod topology;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command, LevelArg};

use kfdq::kfd::Root;

fn main() -> ExitCode {
    quiet_on_closed_stdout();
    let cli = Cli::parse();
    init_logging();
    let root = Root::new(&cli.root);
    let result = match cli.command {
        Command::Topology => topology::run(&root, cli.json),
        Command::Ps => ps::run(&root, &client::socket_path(cli.agent.as_deref()), cli.json),
        Command::Status => status::run(
            &root,
            &client::control_socket(cli.agent.as_deref(), cli.admin_socket.as_deref()),
            cli.json,
        ),
        Command::Watch { interval, count } => {
            if !(interval.is_finite() && interval >= 0.05) {
                Err(CliError::Usage(format!(
                    "--interval {interval} is too short: use at least 0.05 seconds"
                )))
            } else {
                status::watch(
                    &client::control_socket(cli.agent.as_deref(), cli.admin_socket.as_deref()),
                    std::time::Duration::from_secs_f64(interval),
                    count,
                    cli.json,
                )
            }
        }
        Command::SetPriority { pid, priority } => client::command(
            &client::control_socket(cli.agent.as_deref(), cli.admin_socket.as_deref()),
            &kfdq::proto::Request::SetPriority {
                pid: kfdq::Pid(pid),
                priority,
            },
            cli.json,
        ),
        Command::Suspend { pid, level } => client::command(
            &client::control_socket(cli.agent.as_deref(), cli.admin_socket.as_deref()),
            &kfdq::proto::Request::Suspend {
                pid: kfdq::Pid(pid),
                level: level.into(),
            },
            cli.json,
        ),
        Command::Resume { pid } => client::command(
            &client::control_socket(cli.agent.as_deref(), cli.admin_socket.as_deref()),
            &kfdq::proto::Request::Resume {
                pid: kfdq::Pid(pid),
            },
            cli.json,
        ),
        Command::Class { pid, class } => client::command(
            &client::control_socket(cli.agent.as_deref(), cli.admin_socket.as_deref()),
            &kfdq::proto::Request::SetClass {
                pid: kfdq::Pid(pid),
                class,
            },
            cli.json,
        ),
        Command::Demo(args) => demo::run(&cli.root, args, cli.json),
        Command::Bench(args) => bench::run(
            &root,
            &client::socket_path(cli.agent.as_deref()),
            args,
            cli.json,
        ),
        Command::Run {
            class,
            priority,
            shim,
            command,
        } => run::run(
            &root,
            run::RunOptions {
                class: class.as_deref(),
                priority,
                socket: cli.agent.as_deref(),
                shim: shim.as_deref(),
                command: &command,
            },
        ),
        Command::Report(args) => report::run(&root, cli.agent.as_deref(), args, cli.json),
        Command::Doctor { hip_runtime, shim } => doctor::run(
            &root,
            doctor::DoctorOptions {
                socket: Some(client::socket_path(cli.agent.as_deref())),
                hip_runtime,
                shim,
            },
            cli.json,
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // Already said (on stdout, as the command's JSON, or on stderr).
        Err(CliError::Reported) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("kfdq: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A reader that closed stdout early (`kfdq ps | head -1`) ends the command quietly, with
/// status 0, as `head`'s other writers do (they are killed by SIGPIPE, which Rust programs
/// ignore): `print!` then fails with EPIPE and panics, and this hook turns exactly that panic
/// into the quiet exit. Every other panic is reported as before.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    // std words the error as the OS does ("Broken pipe (os error 32)").
    let epipe_os = std::io::Error::from_raw_os_error(libc::EPIPE).to_string();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains(&epipe_os) {
            std::process::exit(0);
        }
        default(info);
    }));
}

impl From<LevelArg> for kfdq::proto::Level {
    fn from(l: LevelArg) -> Self {
        match l {
            LevelArg::Hold => kfdq::proto::Level::Hold,
            LevelArg::Deactivate => kfdq::proto::Level::Deactivate,
            LevelArg::Suspend => kfdq::proto::Level::Suspend,
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("KFDQ_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
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
        source: kfdq::kfd::Error,
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
    /// The command failed and already said why (`--json`: as its JSON object).
    #[error("failed")]
    Reported,
}

pub(crate) fn kfd_error(
    doing: impl Into<String>,
    root: &Root,
    source: kfdq::kfd::Error,
) -> CliError {
    let hint = match &source {
        kfdq::kfd::Error::Io { source: io, .. } if io.kind() == std::io::ErrorKind::NotFound => {
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_cli_definition_is_consistent() {
        use clap::CommandFactory;
        super::args::Cli::command().debug_assert();
    }
}
