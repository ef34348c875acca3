// The command-line definition of `kfdqd`: clap types and nothing else, so that the root
// package's build.rs can `include!` this file to generate the man page and the shell completions.
// Only `clap` and `std` may be used here.

use std::path::PathBuf;

use clap::Parser;

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
pub struct Args {
    /// Configuration file (default: /etc/kfdq/kfdq.toml if it exists, else built-in classes
    /// latency / normal / batch).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Override the configuration's socket path.
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Override `[metrics] listen`: the address and port that serve /metrics and /healthz. In
    /// Kubernetes, the pod's own address from the downward API (`$(POD_IP):9464`), so the
    /// endpoint is not on every interface.
    #[arg(long, env = "KFDQ_METRICS_LISTEN", value_name = "ADDR:PORT")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Root prefix for the GPU topology (a kfd-emu mount point on machines without a GPU).
    #[arg(long, env = "KFDQ_ROOT", value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Validate the configuration, print what it means, and exit.
    #[arg(long)]
    pub check: bool,
}
