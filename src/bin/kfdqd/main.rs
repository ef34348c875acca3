//! `kfdqd` — the kfdq node agent. See `kfdqd --help` and docs/agent.md.

use std::process::ExitCode;

use clap::Parser;
use kfdq::agent::{self, AgentConfig};

mod args;

use args::Args;

fn main() -> ExitCode {
    let args = Args::parse();
    init_logging();
    let mut cfg = match AgentConfig::load_for_node(args.config.as_deref(), &args.root) {
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
        // What startup checks beyond the file (the socket, the metrics port, another agent),
        // before a word on stdout: "configuration ok" means startup would take it.
        let notes = match agent::preflight(&cfg, &args.root) {
            Ok(notes) => notes,
            Err(e) => {
                eprintln!("kfdqd: startup would refuse this configuration: {e}");
                return ExitCode::from(2);
            }
        };
        println!(
            "configuration ok: {}",
            cfg.source
                .as_ref()
                .map_or("built-in".into(), |p| p.display().to_string())
        );
        println!(
            "socket {} mode {:04o}{}",
            cfg.socket.path.display(),
            cfg.socket.mode,
            cfg.socket
                .group
                .as_ref()
                .map(|(n, _)| format!(" group {n}"))
                .unwrap_or_default()
        );
        match cfg.metrics {
            None => {
                println!("metrics off (add [metrics] listen = \"127.0.0.1:9464\" to serve them)")
            }
            Some(a) => {
                println!("metrics on http://{a}/metrics");
                if !a.ip().is_loopback() {
                    println!(
                        "  note: {} is not a loopback address: anyone who reaches it reads which processes use the GPUs",
                        a.ip()
                    );
                }
            }
        }
        let mut classes = cfg.policy.classes.clone();
        classes.sort_by_key(|c| std::cmp::Reverse(c.rank));
        for c in classes {
            println!(
                "class {:<12} rank {:>3} priority {:>2} preempted {}{}{}",
                c.name,
                c.rank,
                c.priority,
                c.level.map_or("never".into(), |l| match l {
                    kfdq::proto::Level::Hold => "at level 1 (hold)".to_string(),
                    kfdq::proto::Level::Deactivate => "at level 2 (deactivate)".to_string(),
                    kfdq::proto::Level::Suspend => "at level 3 (suspend)".to_string(),
                }),
                c.window
                    .map_or(String::new(), |w| format!(", window {w} in flight")),
                c.hw_queues
                    .map_or(String::new(), |n| format!(", {n} hw queues per priority"))
            );
            if cfg.control(&c.name) == kfdq::proto::control::Control::Tracer {
                println!(
                    "  without the shim: traced (ptrace + DBG_TRAP, level 3 only; samples every {} µs, looks for processes every {} ms)",
                    cfg.tracer.activity.as_micros(),
                    cfg.tracer.scan.as_millis()
                );
            }
            if c.level == Some(kfdq::proto::Level::Hold) && c.window.is_none() {
                println!(
                    "  note: class {} is held (level 1) with an unbounded in-flight window: a hold stops only its \
                     future launches, and a job far ahead of the GPU keeps running; add `window = 2` (docs/shim.md)",
                    c.name
                );
            }
        }
        println!("default class {}", cfg.default_class);
        let k = &cfg.kubernetes;
        println!(
            "kubernetes: a process with KFDQ_ALLOCATION is capped at its allocation's class in {}; a token in no allocation gets {}; node labels: {}",
            k.allocations.display(),
            k.pod_fallback_class,
            k.features.as_ref().map_or_else(
                || "none".to_owned(),
                |f| format!("{} (node-feature-discovery)", f.display())
            )
        );
        println!(
            "release: {}",
            cfg.policy.release.describe(cfg.policy.hysteresis_ns)
        );
        if let Some(c) = &cfg.calibration {
            println!(
                "calibration: {} (measured on {}): C {} µs",
                c.file.display(),
                c.gfx_target,
                c.round_trip_ns as f64 / 1e3
            );
            if let Some(w) = &c.warning {
                println!("note: {w}");
            }
        }
        for n in notes {
            println!("note: {n}");
        }
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

/// Logs go to stderr through `tracing` (filter: KFDQ_LOG, default info). Under systemd stderr is
/// the journal (JOURNAL_STREAM is set): no timestamps (the journal has its own) and no colours.
fn init_logging() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("KFDQ_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let _ = if std::env::var_os("JOURNAL_STREAM").is_some() {
        fmt.without_time().try_init()
    } else {
        fmt.try_init()
    };
}
