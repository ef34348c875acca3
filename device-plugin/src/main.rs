//! `kfdq-device-plugin`: the Kubernetes device plugin of kfdq (docs/kubernetes.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kfdq_device_plugin::config::{Config, DEFAULT_CONFIG};
use kfdq_device_plugin::host::AgentClasses;
use kfdq_device_plugin::run;

/// Shares each AMD GPU partition of this node among pods of different kfdq classes.
///
/// Each class of the configuration becomes a Kubernetes extended resource, e.g.
/// kfdq.io/latency and kfdq.io/batch, and each partition is advertised as a number of shares
/// of each class (e.g. 1 latency share and 4 batch shares). A pod asks for
/// `kfdq.io/latency: 1` and gets the partition's /dev/kfd and render node, the shim, the
/// agent's socket and an allocation token: kfdqd then holds its processes to the class of
/// the share, whatever their environment says.
///
/// Run by the kfdq-device-plugin DaemonSet (deploy/kubernetes/kfdqd-daemonset.yaml) on the
/// nodes labelled kfdq.io/gpu-sharing=true, beside kfdqd, as root, with the kubelet's
/// device-plugins and pod-resources directories and /var/lib/kfdq mounted. Logs go to stderr
/// (KFDQ_LOG=debug for more). Design and configuration: docs/kubernetes.md.
///
/// Examples:
///   kfdq-device-plugin --config /etc/kfdq/device-plugin.toml --check
///   kfdq-device-plugin --config /etc/kfdq/device-plugin.toml
#[derive(Debug, Parser)]
#[command(name = "kfdq-device-plugin", version, verbatim_doc_comment)]
struct Args {
    /// The configuration file (format: deploy/device-plugin.toml, docs/kubernetes.md).
    #[arg(long, short, default_value = DEFAULT_CONFIG, env = "KFDQ_PLUGIN_CONFIG")]
    config: PathBuf,
    /// Validate the configuration, print the resources it would advertise, and exit.
    #[arg(long)]
    check: bool,
    /// With --check: print the result as JSON.
    #[arg(long, requires = "check")]
    json: bool,
    /// With --check: kfdqd's configuration, whose classes every [[class]] must be (default:
    /// kfdqd's own, /etc/kfdq/kfdq.toml, else its built-in classes).
    #[arg(long, requires = "check", value_name = "PATH")]
    agent_config: Option<PathBuf>,
    /// With --check: the file alone (and kfdqd's classes), not the paths on this node: for a
    /// file checked off the node (CI, a package build).
    #[arg(long, requires = "check")]
    file_only: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal (a journal or a pod log gets plain text, as
        // kfdqd's).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KFDQ_LOG")
                .unwrap_or_else(|_| "info".into()),
        )
        .init();
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("kfdq-device-plugin: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check {
        // What the node must give the file: kfdqd's classes, the paths it names.
        let classes = match AgentClasses::read(args.agent_config.as_deref()) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("kfdq-device-plugin: kfdqd's configuration: {e}");
                return ExitCode::from(2);
            }
        };
        let text = std::fs::read_to_string(&args.config).unwrap_or_default();
        let checked = config.check_classes(&text, &classes).and_then(|()| {
            if args.file_only {
                Ok(())
            } else {
                config.check_paths(&text)
            }
        });
        if let Err(e) = checked {
            eprintln!("kfdq-device-plugin: {}", e.at(&args.config));
            return ExitCode::from(2);
        }
        let resources: Vec<serde_json::Value> = config
            .classes
            .iter()
            .map(|c| {
                serde_json::json!({
                    "resource": config.resource_name(&c.name),
                    "shares_per_partition": c.shares,
                    "socket": config.plugin_dir.join(Config::endpoint(&c.name)),
                })
            })
            .collect();
        if args.json {
            println!(
                "{}",
                serde_json::json!({ "ok": true, "resources": resources })
            );
        } else {
            println!("{}: ok", args.config.display());
            for c in &config.classes {
                println!(
                    "  {}: {} share(s) per partition",
                    config.resource_name(&c.name),
                    c.shares
                );
            }
        }
        return ExitCode::SUCCESS;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kfdq-device-plugin: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async {
        let plugin = match run::start(config.clone()).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("kfdq-device-plugin: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    eprintln!("kfdq-device-plugin: SIGTERM handler: {e}");
                    return ExitCode::FAILURE;
                }
            };
        tokio::select! {
            () = run::run(plugin) => {}
            _ = term.recv() => tracing::info!("SIGTERM: leaving"),
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted: leaving"),
        }
        run::remove_sockets(&config);
        ExitCode::SUCCESS
    })
}
