//! The agent's configuration: `/etc/kfdq/kfdq.toml` (or `--config`), validated as a whole
//! before it replaces the one in effect. docs/agent.md is the reference; every error names the
//! file, the line and the rule, the line taken from the parser's spans (`toml::Spanned`), never
//! from a search of the text (which would also match comments).
//!
//! * this file: the configuration's types, the whole file's structure and the order its
//!   sections are applied in ([`AgentConfig::parse`]);
//! * `agent.rs`: `[agent]` (socket, groups, edges, the lease, connection limits, `default_class`);
//! * `release.rs`: the release rule of `[agent]` and its parameters;
//! * `calibration.rs`: reading the calibration file `[agent] calibration` names;
//! * `class.rs`: `[[class]]` (the policy's rule of each class and its `match`);
//! * `lookup.rs`: user and group names looked up on this node;
//! * `toml_errors.rs`: TOML syntax and type errors put in the configuration's words;
//! * `tests.rs`: the parser's tests.
//!
//! Two sections are parsed by their owners: `[tracer]` by the tracer's side
//! (`src/agent/tracer_settings.rs`), `[kubernetes]` by [`crate::agent::kubernetes::settings`]; `[metrics]`, one
//! key, here.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::kubernetes::settings::{FileKubernetes, KubernetesConfig};
use super::setting::SettingError;
use super::tracer_settings::{FileTracer, TracerSettings};
use crate::policy::{ClassRule, PolicyConfig};
use crate::proto::control::Control;

mod agent;
mod calibration;
pub use calibration::CalibrationInUse;
mod class;
mod lookup;
mod release;
#[cfg(test)]
mod tests;
mod toml_errors;

pub use class::{parse_control, parse_level};

/// Default configuration file.
pub const DEFAULT_CONFIG: &str = "/etc/kfdq/kfdq.toml";
/// Default agent socket.
pub const DEFAULT_SOCKET: &str = crate::proto::DEFAULT_SOCKET;

/// The agent's socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketConfig {
    /// Where it is bound.
    pub path: PathBuf,
    /// Group owning it (name, gid), when configured.
    pub group: Option<(String, u32)>,
    /// Its mode bits.
    pub mode: u32,
}

/// Which processes a class takes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Matcher {
    /// Real user ids.
    pub uids: Vec<u32>,
    /// Group ids (primary or supplementary).
    pub gids: Vec<u32>,
    /// cgroup v2 path prefixes (`/kubepods.slice/...`).
    pub cgroups: Vec<String>,
    /// Executable paths (exact).
    pub executables: Vec<String>,
    /// A process may ask for the class with `KFDQ_CLASS` whoever it is.
    pub env: bool,
}

impl Matcher {
    /// True when the matcher names an identity (uid, gid, cgroup or executable), not only `env`.
    pub fn names_identity(&self) -> bool {
        !(self.uids.is_empty()
            && self.gids.is_empty()
            && self.cgroups.is_empty()
            && self.executables.is_empty())
    }
}

/// A class as the agent uses it: the policy's rule plus who belongs to it and what its users
/// may set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassConfig {
    /// Name.
    pub name: String,
    /// Highest priority its users (not admins) may set with `kfdq set-priority`.
    pub max_priority: u8,
    /// Who belongs to it.
    pub matcher: Matcher,
    /// How its processes that run without the shim are controlled: not at all (`Shim`, the
    /// default), or through the debugger API as their ptrace tracer (`Tracer`).
    pub control: Control,
}

/// Accepted `[agent] lease_ms` values.
pub const LEASE_RANGE_MS: std::ops::RangeInclusive<u32> = 100..=60_000;

/// The whole configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The file it came from (`None`: built-in defaults).
    pub source: Option<PathBuf>,
    /// The socket.
    pub socket: SocketConfig,
    /// Members of this group control any process (root always does).
    pub admin_group: Option<(String, u32)>,
    /// The admin socket (`[agent] admin_socket`, mode 0600, root only): whoever connects
    /// there is a node admin, in a pod or not. For the agent's own pod on Kubernetes, whose
    /// root is otherwise a pod's root; never in the socket's directory, which pods mount.
    pub admin_socket: Option<PathBuf>,
    /// Class of a process no rule matches.
    pub default_class: String,
    /// Level-3 grace period (units of 1K GPU clocks).
    pub grace_period: u32,
    /// Direct edges (`[agent] direct_edges`, default on): the launch that makes a process of
    /// a preempting class busy publishes the edge on an edge board (`crate::proto::board`) and
    /// the level-2/3 processes it preempts, subscribed by the agent, preempt themselves
    /// without the agent's hop (docs/agent.md, "Direct edges"). Processes of classes that
    /// preempt others always report their busy edges from the launch (`[agent] edges` is gone).
    pub direct_edges: bool,
    /// Every preemption's lease (`[agent] lease_ms`): a shim the agent stops renewing releases
    /// its process after this long.
    pub lease: std::time::Duration,
    /// Connections beyond this are closed at once.
    pub max_connections: usize,
    /// Connections one uid may hold at once on the agent's socket (the admin socket's are not
    /// counted); more are closed at once.
    pub max_connections_per_uid: usize,
    /// Control requests per second and peer (a burst of as many is allowed).
    pub control_rate: f64,
    /// Where Prometheus metrics are served (`[metrics] listen`; `None`: not served).
    pub metrics: Option<std::net::SocketAddr>,
    /// The tracer's periods (`[tracer]`).
    pub tracer: TracerSettings,
    /// Classes in file order (the order rules are matched in).
    pub classes: Vec<ClassConfig>,
    /// The policy's part.
    pub policy: PolicyConfig,
    /// `[agent] calibration`: the node's calibration file (`kfdq bench --write`), whose round
    /// trip is the cost rule's C, and the GPU kind it was measured on (kfdqd refuses it on
    /// another GPU kind, [`AgentConfig::load_for_node`]).
    pub calibration: Option<CalibrationInUse>,
    /// `[kubernetes]`: the device plugin's allocations, the fallback class for pods, the node
    /// feature file.
    pub kubernetes: KubernetesConfig,
}

/// A configuration that was refused; the one in effect stays.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Not readable.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A rule broken at a line.
    #[error("{path}:{line}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when not known).
        line: usize,
        /// The rule and the fix.
        message: String,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileMetrics {
    listen: Option<toml::Spanned<String>>,
}

/// `[agent]` as written (applied by `agent.rs`; `release.rs` and `calibration.rs` read the
/// release rule's keys).
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileAgent {
    socket: Option<PathBuf>,
    socket_group: Option<String>,
    socket_mode: Option<String>,
    admin_group: Option<String>,
    admin_socket: Option<PathBuf>,
    default_class: Option<toml::Spanned<String>>,
    release: Option<String>,
    hysteresis_ms: Option<f64>,
    preempt_round_trip_us: Option<f64>,
    calibration: Option<toml::Spanned<PathBuf>>,
    release_k: Option<f64>,
    release_epsilon: Option<f64>,
    release_max_hold_ms: Option<f64>,
    release_history: Option<u32>,
    release_min_history: Option<u32>,
    min_preempt_interval_ms: Option<f64>,
    grace_period: Option<u32>,
    /// Removed settings (docs/agent.md, "One path per job"): read to say so.
    edges: Option<toml::Spanned<bool>>,
    direct_edges: Option<bool>,
    prepared_edges: Option<toml::Spanned<bool>>,
    lease_ms: Option<u32>,
    max_connections: Option<usize>,
    max_connections_per_uid: Option<usize>,
    control_requests_per_s: Option<f64>,
}

/// The file as written: each section's table with its position.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    agent: Option<toml::Spanned<FileAgent>>,
    #[serde(default)]
    metrics: FileMetrics,
    tracer: Option<toml::Spanned<FileTracer>>,
    #[serde(default, rename = "class")]
    classes: Vec<class::FileClass>,
    kubernetes: Option<toml::Spanned<FileKubernetes>>,
}

/// The text being parsed and its name in messages.
struct Doc<'a> {
    text: &'a str,
    /// The file (`None`: text given directly).
    path: Option<&'a Path>,
    /// Its name in messages (`<config>` without a file).
    shown: PathBuf,
}

impl Doc<'_> {
    /// The refusal at `line` (1-based; 0 when not known).
    fn invalid(&self, line: usize, message: String) -> ConfigError {
        ConfigError::Invalid {
            path: self.shown.clone(),
            line,
            message,
        }
    }

    /// The line a parser span starts on.
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        toml_errors::line_of(self.text, span.start)
    }

    /// The line of a section's header (0 without the section).
    fn header<T>(&self, section: Option<&toml::Spanned<T>>) -> usize {
        section.map_or(0, |s| self.line(s.span()))
    }
}

/// A duration in milliseconds as nanoseconds, 0..=3600000 ms.
fn ms(v: f64, key: &'static str) -> Result<u64, SettingError> {
    if v.is_finite() && (0.0..=3_600_000.0).contains(&v) {
        Ok((v * 1e6) as u64)
    } else {
        Err(SettingError::Milliseconds { key, value: v })
    }
}

impl AgentConfig {
    /// The built-in configuration (no file): the policy's built-in classes, each selectable
    /// with `KFDQ_CLASS`, default class `normal`, socket [`DEFAULT_SOCKET`] mode 0666.
    pub fn builtin() -> AgentConfig {
        let policy = PolicyConfig::builtin();
        let classes = policy
            .classes
            .iter()
            .map(|c| ClassConfig {
                name: c.name.clone(),
                max_priority: c.priority,
                matcher: Matcher {
                    env: true,
                    ..Matcher::default()
                },
                control: Control::Shim,
            })
            .collect();
        AgentConfig {
            source: None,
            socket: SocketConfig {
                path: PathBuf::from(DEFAULT_SOCKET),
                group: None,
                mode: 0o666,
            },
            admin_group: None,
            admin_socket: None,
            default_class: "normal".into(),
            grace_period: 0,
            direct_edges: true,
            lease: crate::proto::DEFAULT_LEASE,
            max_connections: 4096,
            max_connections_per_uid: 1024,
            control_rate: 50.0,
            metrics: None,
            tracer: TracerSettings::default(),
            kubernetes: KubernetesConfig::without_section(&policy.classes),
            classes,
            policy,
            calibration: None,
        }
    }

    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<AgentConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, Some(path))
    }

    /// Parses and validates `text` (`path` for messages and [`AgentConfig::source`]).
    pub fn parse(text: &str, path: Option<&Path>) -> Result<AgentConfig, ConfigError> {
        let doc = Doc {
            text,
            path,
            shown: path.map_or_else(|| PathBuf::from("<config>"), Path::to_owned),
        };
        let file: File = toml::from_str(text).map_err(|e| {
            let (line, message) =
                toml_errors::explain(text, e.span().map(|s| s.start), e.message());
            doc.invalid(line, message)
        })?;
        let mut cfg = AgentConfig::builtin();
        cfg.source = path.map(Path::to_owned);
        let no_agent = FileAgent::default();
        let a = file.agent.as_ref().map_or(&no_agent, |s| s.get_ref());
        agent::apply(a, doc.header(file.agent.as_ref()), &doc, &mut cfg)?;

        if let Some(l) = &file.metrics.listen {
            let addr: std::net::SocketAddr = l.get_ref().parse().map_err(|_| {
                doc.invalid(
                    doc.line(l.span()),
                    format!(
                        "[metrics]: listen = {:?} is not an address and port such as \"127.0.0.1:9464\" (an IPv6 address goes in brackets: \"[::1]:9464\")",
                        l.get_ref()
                    ),
                )
            })?;
            cfg.metrics = Some(addr);
        }

        if let Some(t) = &file.tracer {
            super::tracer_settings::apply(t.get_ref(), &mut cfg.tracer)
                .map_err(|m| doc.invalid(doc.header(Some(t)), format!("[tracer]: {m}")))?;
        }

        class::apply(&file.classes, &doc, &mut cfg)?;
        agent::default_class(a, &doc, &mut cfg)?;
        cfg.policy
            .validate()
            .map_err(|e| doc.invalid(0, e.to_string()))?;
        let k = file.kubernetes.as_ref();
        cfg.kubernetes =
            super::kubernetes::settings::resolve(k.map(|s| s.get_ref()), &cfg.policy.classes)
                .map_err(|m| doc.invalid(doc.header(k), format!("[kubernetes]: {m}")))?;
        Ok(cfg)
    }

    /// Reads `path` if given, else [`DEFAULT_CONFIG`] if it exists, else the built-in defaults.
    pub fn load_or_default(path: Option<&Path>) -> Result<AgentConfig, ConfigError> {
        match path {
            Some(p) => Self::load(p),
            None if Path::new(DEFAULT_CONFIG).exists() => Self::load(Path::new(DEFAULT_CONFIG)),
            None => Ok(Self::builtin()),
        }
    }

    /// Reads `path` (as [`AgentConfig::load_or_default`]) and checks it against the node under
    /// `root`: every check of the file that startup, `kfdqd --check` and a reload (SIGHUP) run,
    /// in one place, so that a reload never accepts what the next start would refuse.
    pub fn load_for_node(path: Option<&Path>, root: &Path) -> Result<AgentConfig, ConfigError> {
        let cfg = Self::load_or_default(path)?;
        calibration::check_node(&cfg, root)?;
        Ok(cfg)
    }

    /// The class names, in file order.
    pub fn class_names(&self) -> Vec<String> {
        self.classes.iter().map(|c| c.name.clone()).collect()
    }

    /// The policy rule of class `name`.
    pub fn rule(&self, name: &str) -> Option<&ClassRule> {
        self.policy.classes.iter().find(|c| c.name == name)
    }

    /// The agent's part of class `name`.
    pub fn class(&self, name: &str) -> Option<&ClassConfig> {
        self.classes.iter().find(|c| c.name == name)
    }

    /// How class `name` controls processes without the shim.
    pub fn control(&self, name: &str) -> Control {
        self.class(name).map_or(Control::Shim, |c| c.control)
    }

    /// True when some class takes processes without the shim.
    pub fn uses_tracer(&self) -> bool {
        self.classes.iter().any(|c| c.control == Control::Tracer)
    }
}
