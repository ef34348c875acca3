//! `kfdqd`, the node agent: it knows every GPU process that runs under the shim (over the
//! Unix socket, identities from `SO_PEERCRED`), classifies it, runs the policy on their
//! activity and sends the shims the commands that apply it — and takes `kfdq`'s control
//! requests on the same socket. docs/agent.md describes it for operators.
//!
//! * [`config`]: the TOML configuration and its validation.
//! * [`identity`]: who a peer is, and which class that makes it.
//! * [`node`]: the processes, the policy's decisions and the executor (no I/O).
//! * [`server`]: the event loop (socket, signals, connections).
//! * [`discover`] and [`tracer`]: processes of `control = "tracer"` classes that run without
//!   the shim, controlled as their ptrace tracer through the debugger API.
//! * [`metrics`]: what a Prometheus scrape shows; `http`: the endpoint that serves it.
#![forbid(unsafe_code)]

mod board;
pub mod config;
mod conn;
pub mod discover;
mod doorbell;
mod http;
pub mod identity;
mod kernel_queues;
pub mod kubernetes;
mod liveness;
pub mod lock;
pub mod metrics;
pub mod node;
mod notify;
pub mod pid_namespace;
mod preflight;
pub mod server;
mod setting;
mod socket;
pub mod tracer;
mod tracer_settings;

pub use config::{AgentConfig, CalibrationInUse, ConfigError};
pub use http::EndpointError;
pub use preflight::preflight;
pub use server::{Options, run};
pub use setting::SettingError;
pub use socket::SocketError;

/// Why the agent could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The configuration.
    #[error("configuration: {0}")]
    Config(#[from] crate::policy::PolicyError),
    /// The socket.
    #[error("socket: {0}")]
    Socket(#[from] SocketError),
    /// Another agent runs on these GPUs, or the lock could not be taken.
    #[error("{0}")]
    Lock(#[from] lock::LockError),
    /// The GPU topology.
    #[error("GPU topology: {0} (is amdgpu loaded? on kfd-emu, pass --root)")]
    Topology(#[from] crate::kfd::Error),
    /// The metrics endpoint.
    #[error("metrics: {0}")]
    Metrics(#[from] EndpointError),
    /// The agent runs in another pid namespace than KFD's.
    #[error("{0}")]
    PidNamespace(#[from] pid_namespace::PidNamespaceError),
    /// Signal handling.
    #[error("signals: {0}")]
    Signals(nix::errno::Errno),
    /// Waiting for events failed.
    #[error("poll: {0}")]
    Poll(nix::errno::Errno),
}
