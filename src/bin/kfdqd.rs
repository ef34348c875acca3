//! `kfdqd` — the kfdq node agent. See `kfdqd --help` and docs/agent.md.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kfdq::agent::{self, AgentConfig};

/// kfdqd — the kfdq node agent.
///
/// Knows every GPU process that runs under the kfdq shim (it connects to the agent's socket),
/// classifies it (uid, gid, cgroup, executable, or KFDQ_CLASS within the class cap), and
/// preempts lower classes at their configured level while a higher class is busy: level 1
/// holds launches in the shim, level 2 deactivates the process's queues, level 3 suspends them
/// through the debugger API. `kfdq status`, `kfdq suspend`, `kfdq set-priority` and friends
/// talk to it on the same socket.
///
/// Signals: SIGHUP reloads the configuration (a bad file is refused, with its line and reason,
/// and the old configuration stays); SIGTERM and SIGINT release every process, then exit. If
/// the agent dies, every shim releases its process on its own (fail open).
#[derive(Debug, Parser)]
#[command(name = "kfdqd", version, max_term_width = 100)]
struct Args {
    /// Configuration file (default: /etc/kfdq/kfdq.toml if it exists, else built-in classes
    /// latency / normal / batch).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Override the configuration's socket path.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Root prefix for the GPU topology (a kfd-emu mount point on machines without a GPU).
    #[arg(long, env = "KFDQ_ROOT", value_name = "DIR", default_value = "/")]
    root: PathBuf,
    /// Validate the configuration, print what it means, and exit.
    #[arg(long)]
    check: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_env("KFDQ_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
    let mut cfg = match AgentConfig::load_or_default(args.config.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kfdqd: configuration refused: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(s) = args.socket {
        cfg.socket.path = s;
    }
    if args.check {
        println!(
            "configuration ok: {}",
            cfg.source
                .as_ref()
                .map_or("built-in".into(), |p| p.display().to_string())
        );
        println!(
            "socket {} mode {:o}{}",
            cfg.socket.path.display(),
            cfg.socket.mode,
            cfg.socket
                .group
                .as_ref()
                .map(|(n, _)| format!(" group {n}"))
                .unwrap_or_default()
        );
        let mut classes = cfg.policy.classes.clone();
        classes.sort_by_key(|c| std::cmp::Reverse(c.rank));
        for c in classes {
            println!(
                "class {:<12} rank {:>3} priority {:>2} preempted {}{}",
                c.name,
                c.rank,
                c.priority,
                c.level.map_or("never".into(), |l| format!("at {l:?}")),
                c.window
                    .map_or(String::new(), |w| format!(", window {w} in flight"))
            );
            if c.level == Some(kfdq::proto::Level::Hold) && c.window.is_none() {
                println!(
                    "  note: class {} is held (level 1) with an unbounded in-flight window: a hold stops only its \
                     future launches, and a job far ahead of the GPU keeps running; add `window = 2` (docs/shim.md)",
                    c.name
                );
            }
        }
        println!("default class {}", cfg.default_class);
        return ExitCode::SUCCESS;
    }
    let opts = agent::Options {
        root: args.root,
        config_path: args.config,
    };
    match agent::run(cfg, &opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kfdqd: {e}");
            ExitCode::FAILURE
        }
    }
}
