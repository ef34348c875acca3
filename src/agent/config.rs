//! The agent's configuration: `/etc/kfdq/kfdq.toml` (or `--config`), validated as a whole
//! before it replaces the one in effect. docs/agent.md is the reference; every error names the
//! file, the line and the rule.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::config_toml::{self, line_of};
use super::kubernetes::settings::{FileKubernetes, KubernetesConfig};
use super::setting::SettingError;
use super::tracer::TracerSettings;
use crate::policy::{ClassRule, CostRelease, PolicyConfig, Release, Starvation};
use crate::proto::Level;
use crate::proto::control::Control;

/// Default configuration file.
pub const DEFAULT_CONFIG: &str = "/etc/kfdq/kfdq.toml";
/// Default agent socket.
pub const DEFAULT_SOCKET: &str = crate::doctor::DEFAULT_SOCKET;

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
    /// trip is the cost rule's C, and the `gfx_target_version` it was measured on (kfdqd
    /// refuses it on another GPU kind, `check_calibration`).
    pub calibration: Option<(PathBuf, u32)>,
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

/// `edges = false`: the sampled mode is gone (docs/agent.md, "Configuration").
const EDGES_OFF: &str = "edges = false is no longer supported: processes of classes that preempt others always report their busy edges from the launch (the activity-samples-only mode was removed); remove the line (direct_edges = false keeps every preemption on the agent's commands)";
/// `edges = true`: what it asked for is how the agent runs; the line is ignored.
const EDGES_ON: &str = "edges = true is no longer a setting (busy edges are always on); the line is ignored: remove it";
/// `prepared_edges`: removed (they did not pay on the default path, docs/agent.md); either
/// value leaves the agent as it runs, so the line is ignored.
const PREPARED_GONE: &str = "prepared_edges is no longer a setting (prepared edges were removed; every edge is decided on its path); the line is ignored: remove it";

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileAgent {
    socket: Option<PathBuf>,
    socket_group: Option<String>,
    socket_mode: Option<String>,
    admin_group: Option<String>,
    default_class: Option<toml::Spanned<String>>,
    release: Option<String>,
    hysteresis_ms: Option<f64>,
    preempt_round_trip_us: Option<f64>,
    calibration: Option<PathBuf>,
    release_k: Option<f64>,
    release_epsilon: Option<f64>,
    release_max_hold_ms: Option<f64>,
    release_history: Option<u32>,
    release_min_history: Option<u32>,
    min_preempt_interval_ms: Option<f64>,
    grace_period: Option<u32>,
    edges: Option<bool>,
    direct_edges: Option<bool>,
    prepared_edges: Option<bool>,
    lease_ms: Option<u32>,
    max_connections: Option<usize>,
    control_requests_per_s: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileMatch {
    #[serde(default)]
    uids: Vec<u32>,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    gids: Vec<u32>,
    #[serde(default)]
    groups: Vec<String>,
    #[serde(default)]
    cgroups: Vec<String>,
    #[serde(default)]
    executables: Vec<String>,
    #[serde(default)]
    env: bool,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileTracer {
    activity_us: Option<u64>,
    scan_ms: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStarvation {
    run_ms: f64,
    after_ms: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileClass {
    name: toml::Spanned<String>,
    rank: u8,
    priority: u8,
    level: Option<LevelValue>,
    max_priority: Option<u8>,
    cu_share: Option<u16>,
    window: Option<u32>,
    hw_queues: Option<u32>,
    control: Option<String>,
    starvation: Option<FileStarvation>,
    #[serde(default, rename = "match")]
    matches: FileMatch,
}

/// A class's `level`: a name, or its number as `kfdq suspend --level` takes it.
#[derive(Deserialize)]
#[serde(untagged)]
enum LevelValue {
    Name(String),
    Number(i64),
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileMetrics {
    listen: Option<toml::Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    agent: FileAgent,
    #[serde(default)]
    metrics: FileMetrics,
    #[serde(default)]
    tracer: FileTracer,
    #[serde(default, rename = "class")]
    classes: Vec<FileClass>,
    kubernetes: Option<FileKubernetes>,
}

/// Parses a level name (`hold`, `deactivate`, `suspend`, or `1`..`3`; `none` = never).
pub fn parse_level(s: &str) -> Result<Option<Level>, SettingError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "none" | "0" => Ok(None),
        "hold" | "1" => Ok(Some(Level::Hold)),
        "deactivate" | "2" => Ok(Some(Level::Deactivate)),
        "suspend" | "3" => Ok(Some(Level::Suspend)),
        other => Err(SettingError::UnknownLevel(other.into())),
    }
}

/// Parses a class's `control` (`shim` or `tracer`).
pub fn parse_control(s: &str) -> Result<Control, SettingError> {
    match s.trim().to_ascii_lowercase().as_str() {
        "shim" => Ok(Control::Shim),
        "tracer" => Ok(Control::Tracer),
        other => Err(SettingError::UnknownControl(other.into())),
    }
}

fn ms(v: f64, key: &'static str) -> Result<u64, SettingError> {
    if v.is_finite() && (0.0..=3_600_000.0).contains(&v) {
        Ok((v * 1e6) as u64)
    } else {
        Err(SettingError::Milliseconds { key, value: v })
    }
}

/// `[agent] calibration = FILE` (relative to the configuration's directory): the cost rule's C
/// from the node's measured preempt and restore, and the GPU kind it was measured on.
fn calibration(
    a: &FileAgent,
    file: &Path,
    config: Option<&Path>,
) -> Result<(u64, u32), SettingError> {
    let fail = |message: String| SettingError::Calibration {
        path: file.to_owned(),
        message,
    };
    if a.preempt_round_trip_us.is_some() {
        return Err(fail(
            "preempt_round_trip_us sets C as well; remove one".into(),
        ));
    }
    if a.release.as_deref().map(str::trim) == Some("hysteresis") || a.hysteresis_ms.is_some() {
        return Err(SettingError::CostKeyUnderHysteresis("calibration"));
    }
    let full = config
        .and_then(Path::parent)
        .map_or_else(|| file.to_owned(), |d| d.join(file));
    let text = std::fs::read_to_string(&full).map_err(|e| fail(e.to_string()))?;
    let cal = gfx_model::Calibration::parse(&text).map_err(|e| fail(e.to_string()))?;
    // The partitions of one node are of one kind (kfdqd checks it against the node's GPUs);
    // the cost rule has one C: the first partition's.
    let first = cal.first();
    if let Some(other) = cal
        .partitions
        .iter()
        .find(|p| p.node.gfx_target_version != first.node.gfx_target_version)
    {
        return Err(fail(format!(
            "its partitions were measured on different GPU kinds ({} and {}); keep the partitions of this node's kind",
            first.node.gfx_target, other.node.gfx_target
        )));
    }
    Ok((
        first.model.preempt_round_trip_ns,
        first.node.gfx_target_version,
    ))
}

/// The release rule of `[agent]`: `release = "cost"` (the default) with its parameters, or
/// `"hysteresis"`, which `hysteresis_ms` alone also selects (the old fixed rule).
fn release(a: &FileAgent) -> Result<Release, SettingError> {
    let cost_keys = [
        ("preempt_round_trip_us", a.preempt_round_trip_us.is_some()),
        ("release_k", a.release_k.is_some()),
        ("release_epsilon", a.release_epsilon.is_some()),
        ("release_max_hold_ms", a.release_max_hold_ms.is_some()),
        ("release_history", a.release_history.is_some()),
        ("release_min_history", a.release_min_history.is_some()),
    ];
    let named: Option<&str> = a.release.as_deref().map(str::trim);
    let hysteresis = match named {
        None => a.hysteresis_ms.is_some(),
        Some(r) if r.eq_ignore_ascii_case("hysteresis") => true,
        Some(r) if r.eq_ignore_ascii_case("cost") => {
            if a.hysteresis_ms.is_some() {
                return Err(SettingError::CostAndHysteresis);
            }
            false
        }
        Some(r) => {
            return Err(SettingError::UnknownRelease(r.into()));
        }
    };
    if hysteresis {
        if let Some((key, _)) = cost_keys.iter().find(|(_, set)| *set) {
            return Err(SettingError::CostKeyUnderHysteresis(key));
        }
        return Ok(Release::Hysteresis);
    }
    let mut c = CostRelease::default();
    if let Some(v) = a.preempt_round_trip_us {
        if !(v.is_finite() && (0.0..=1e6).contains(&v)) {
            return Err(SettingError::RoundTrip(v));
        }
        c.round_trip_ns = (v * 1e3) as u64;
    }
    if let Some(v) = a.release_k {
        c.k = v;
    }
    if let Some(v) = a.release_epsilon {
        c.epsilon = v;
    }
    if let Some(v) = a.release_max_hold_ms {
        c.max_hold_ns = ms(v, "release_max_hold_ms")?;
    }
    if let Some(v) = a.release_history {
        c.history = v;
        c.min_history = c.min_history.min(v);
    }
    if let Some(v) = a.release_min_history {
        c.min_history = v;
    }
    c.validate()?;
    Ok(Release::Cost(c))
}

fn group_id(name: &str) -> Result<u32, SettingError> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err(SettingError::NoGroup(name.into())),
        Err(errno) => Err(SettingError::Lookup {
            kind: "group",
            name: name.into(),
            errno,
        }),
    }
}

fn user_id(name: &str) -> Result<u32, SettingError> {
    match nix::unistd::User::from_name(name) {
        Ok(Some(u)) => Ok(u.uid.as_raw()),
        Ok(None) => Err(SettingError::NoUser(name.into())),
        Err(errno) => Err(SettingError::Lookup {
            kind: "user",
            name: name.into(),
            errno,
        }),
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
            default_class: "normal".into(),
            grace_period: 0,
            direct_edges: true,
            lease: crate::proto::DEFAULT_LEASE,
            max_connections: 4096,
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
        let shown = path.map_or_else(|| PathBuf::from("<config>"), Path::to_owned);
        let invalid = |line: usize, message: String| ConfigError::Invalid {
            path: shown.clone(),
            line,
            message,
        };
        let file: File = toml::from_str(text).map_err(|e| {
            let (line, message) =
                config_toml::explain(text, e.span().map(|s| s.start), e.message());
            invalid(line, message)
        })?;
        let mut cfg = AgentConfig::builtin();
        cfg.source = path.map(Path::to_owned);
        let a = &file.agent;
        let agent_line = text.find("[agent]").map_or(0, |o| line_of(text, o));
        let at_agent = |m: String| invalid(agent_line, format!("[agent]: {m}"));
        if let Some(p) = &a.socket {
            if !p.is_absolute() {
                return Err(at_agent(format!(
                    "socket = {:?} must be an absolute path",
                    p.display()
                )));
            }
            cfg.socket.path = p.clone();
        }
        if let Some(g) = &a.socket_group {
            cfg.socket.group = Some((g.clone(), group_id(g).map_err(|e| at_agent(e.to_string()))?));
        }
        if let Some(m) = &a.socket_mode {
            let v = u32::from_str_radix(m.trim_start_matches("0o"), 8)
                .ok()
                .filter(|v| *v <= 0o777)
                .ok_or_else(|| {
                    at_agent(format!(
                        "socket_mode = {m:?} is not an octal mode such as \"0660\""
                    ))
                })?;
            cfg.socket.mode = v;
        }
        if let Some(g) = &a.admin_group {
            cfg.admin_group = Some((g.clone(), group_id(g).map_err(|e| at_agent(e.to_string()))?));
        }
        cfg.policy.release = release(a).map_err(|e| at_agent(e.to_string()))?;
        if let Some(file) = &a.calibration {
            let line = text
                .find("calibration")
                .map_or(agent_line, |o| line_of(text, o));
            let (round_trip_ns, target) =
                calibration(a, file, path).map_err(|e| invalid(line, format!("[agent]: {e}")))?;
            if let Release::Cost(c) = &mut cfg.policy.release {
                c.round_trip_ns = round_trip_ns;
            }
            cfg.calibration = Some((file.clone(), target));
        }
        if let Some(v) = a.hysteresis_ms {
            cfg.policy.hysteresis_ns =
                ms(v, "hysteresis_ms").map_err(|e| at_agent(e.to_string()))?;
        }
        if let Some(v) = a.min_preempt_interval_ms {
            cfg.policy.min_preempt_interval_ns =
                ms(v, "min_preempt_interval_ms").map_err(|e| at_agent(e.to_string()))?;
        }
        if let Some(v) = a.grace_period {
            cfg.grace_period = v;
        }
        match a.edges {
            Some(false) => return Err(at_agent(EDGES_OFF.into())),
            Some(true) => tracing::warn!("{}: [agent]: {EDGES_ON}", shown.display()),
            None => {}
        }
        if let Some(v) = a.direct_edges {
            cfg.direct_edges = v;
        }
        if a.prepared_edges.is_some() {
            tracing::warn!("{}: [agent]: {PREPARED_GONE}", shown.display());
        }
        if let Some(v) = a.lease_ms {
            if !LEASE_RANGE_MS.contains(&v) {
                return Err(at_agent(format!(
                    "lease_ms = {v} is outside {}..={}: a shorter lease makes a loaded agent's preemptions flap, a longer one lets a hung agent starve preempted jobs (default {})",
                    LEASE_RANGE_MS.start(),
                    LEASE_RANGE_MS.end(),
                    crate::proto::DEFAULT_LEASE.as_millis()
                )));
            }
            cfg.lease = std::time::Duration::from_millis(v.into());
        }
        if let Some(v) = a.max_connections {
            if v == 0 {
                return Err(at_agent("max_connections must be at least 1".into()));
            }
            cfg.max_connections = v;
        }
        if let Some(v) = a.control_requests_per_s {
            if !(v.is_finite() && v > 0.0) {
                return Err(at_agent(format!(
                    "control_requests_per_s = {v} must be above 0"
                )));
            }
            cfg.control_rate = v;
        }

        if let Some(l) = &file.metrics.listen {
            let addr: std::net::SocketAddr = l.get_ref().parse().map_err(|_| {
                invalid(
                    line_of(text, l.span().start),
                    format!(
                        "[metrics]: listen = {:?} is not an address and port such as \"127.0.0.1:9464\" (an IPv6 address goes in brackets: \"[::1]:9464\")",
                        l.get_ref()
                    ),
                )
            })?;
            cfg.metrics = Some(addr);
        }

        let tracer_line = text.find("[tracer]").map_or(0, |o| line_of(text, o));
        let tracer_range = |v: u64, range: std::ops::RangeInclusive<u64>, what: &str| {
            if range.contains(&v) {
                Ok(v)
            } else {
                Err(invalid(
                    tracer_line,
                    format!(
                        "[tracer]: {what} = {v} is out of range {}..={}",
                        range.start(),
                        range.end()
                    ),
                ))
            }
        };
        if let Some(v) = file.tracer.activity_us {
            let v = tracer_range(
                v,
                crate::proto::ACTIVITY_RANGE_US,
                "activity_us (µs between samples of a traced process's queues)",
            )?;
            cfg.tracer.activity = std::time::Duration::from_micros(v);
        }
        if let Some(v) = file.tracer.scan_ms {
            let v = tracer_range(
                v,
                50..=60_000,
                "scan_ms (ms between looks for GPU processes without the shim)",
            )?;
            cfg.tracer.scan = std::time::Duration::from_millis(v);
        }

        if !file.classes.is_empty() {
            cfg.classes.clear();
            cfg.policy.classes.clear();
        }
        for c in &file.classes {
            let line = line_of(text, c.name.span().start);
            let name = c.name.get_ref().clone();
            let at = |m: String| invalid(line, format!("class {name:?}: {m}"));
            let level = match &c.level {
                None => None,
                Some(LevelValue::Name(l)) => parse_level(l).map_err(|e| at(e.to_string()))?,
                Some(LevelValue::Number(n)) => {
                    parse_level(&n.to_string()).map_err(|e| at(e.to_string()))?
                }
            };
            let starvation = match &c.starvation {
                None => None,
                Some(s) => Some(Starvation {
                    run_ns: ms(s.run_ms, "starvation.run_ms").map_err(|e| at(e.to_string()))?,
                    after_ns: ms(s.after_ms, "starvation.after_ms")
                        .map_err(|e| at(e.to_string()))?,
                }),
            };
            let control = match &c.control {
                None => Control::Shim,
                Some(v) => parse_control(v).map_err(|e| at(e.to_string()))?,
            };
            if c.priority > 15 {
                return Err(at(format!(
                    "priority = {} is out of range 0..=15 (KFD's queue priorities)",
                    c.priority
                )));
            }
            let max_priority = c.max_priority.unwrap_or(c.priority);
            if max_priority > 15 {
                return Err(at(format!(
                    "max_priority = {max_priority} is out of range 0..=15 (KFD's queue priorities)"
                )));
            }
            let m = &c.matches;
            let mut uids = m.uids.clone();
            for u in &m.users {
                uids.push(user_id(u).map_err(|e| at(e.to_string()))?);
            }
            let mut gids = m.gids.clone();
            for g in &m.groups {
                gids.push(group_id(g).map_err(|e| at(e.to_string()))?);
            }
            if let Some(bad) = m.cgroups.iter().find(|p| !p.starts_with('/')) {
                return Err(at(format!(
                    "match.cgroups entry {bad:?} must start with '/' (a cgroup v2 path as /proc/<pid>/cgroup shows it)"
                )));
            }
            cfg.classes.push(ClassConfig {
                name: name.clone(),
                max_priority,
                matcher: Matcher {
                    uids,
                    gids,
                    cgroups: m.cgroups.clone(),
                    executables: m.executables.clone(),
                    env: m.env,
                },
                control,
            });
            cfg.policy.classes.push(ClassRule {
                name: name.clone(),
                rank: c.rank,
                priority: c.priority,
                level,
                starvation,
                cu_share_permille: c.cu_share,
                window: c.window,
                hw_queues: c.hw_queues,
            });
            // Validate as we go, so the error points at the class that breaks a rule.
            cfg.policy
                .validate()
                .map_err(|e| invalid(line, e.to_string()))?;
        }
        match &a.default_class {
            Some(d) => {
                if !cfg.classes.iter().any(|c| &c.name == d.get_ref()) {
                    return Err(invalid(
                        line_of(text, d.span().start),
                        format!(
                            "default_class {:?} is not a configured class (classes: {})",
                            d.get_ref(),
                            cfg.class_names().join(", ")
                        ),
                    ));
                }
                cfg.default_class = d.get_ref().clone();
            }
            None => {
                if !cfg.classes.iter().any(|c| c.name == cfg.default_class) {
                    // Without a `normal` class, the lowest-ranked one.
                    if let Some(low) = cfg.policy.classes.iter().min_by_key(|c| c.rank) {
                        cfg.default_class = low.name.clone();
                    }
                }
            }
        }
        cfg.policy
            .validate()
            .map_err(|e| invalid(0, e.to_string()))?;
        cfg.kubernetes =
            super::kubernetes::settings::resolve(file.kubernetes.as_ref(), &cfg.policy.classes)
                .map_err(|m| {
                    let line = text.find("[kubernetes]").map_or(0, |o| line_of(text, o));
                    invalid(line, format!("[kubernetes]: {m}"))
                })?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_file_parses() {
        let c = AgentConfig::parse(
            r#"
[agent]
socket = "/run/x/kfdq.sock"
socket_mode = "0660"
hysteresis_ms = 5
default_class = "batch"

[[class]]
name = "serving"
rank = 5
priority = 14
match = { uids = [1000], cgroups = ["/kubepods.slice"], env = false }

[[class]]
name = "batch"
rank = 1
priority = 2
level = "suspend"
starvation = { run_ms = 10, after_ms = 500 }
"#,
            None,
        )
        .unwrap();
        assert_eq!(c.socket.mode, 0o660);
        assert_eq!(c.policy.hysteresis_ns, 5_000_000);
        assert_eq!(c.default_class, "batch");
        assert_eq!(c.class_names(), ["serving", "batch"]);
        assert_eq!(c.rule("batch").unwrap().level, Some(Level::Suspend));
        assert_eq!(c.class("serving").unwrap().matcher.uids, [1000]);
    }

    #[test]
    fn the_release_rule_is_cost_by_default_and_hysteresis_ms_selects_the_fixed_one() {
        let cost = |c: &AgentConfig| match c.policy.release {
            Release::Cost(c) => c,
            Release::Hysteresis => panic!("the fixed rule"),
        };
        assert_eq!(
            cost(&AgentConfig::builtin()),
            CostRelease::default(),
            "built in"
        );
        let c = AgentConfig::parse("[agent]\nmin_preempt_interval_ms = 1\n", None).unwrap();
        assert_eq!(cost(&c), CostRelease::default(), "a file without a rule");
        let c = AgentConfig::parse("[agent]\nhysteresis_ms = 20\n", None).unwrap();
        assert_eq!(c.policy.release, Release::Hysteresis);
        assert_eq!(c.policy.hysteresis_ns, 20_000_000);
        let c = AgentConfig::parse("[agent]\nrelease = \"hysteresis\"\n", None).unwrap();
        assert_eq!(c.policy.release, Release::Hysteresis);
        let c = AgentConfig::parse(
            "[agent]\nrelease = \"cost\"\npreempt_round_trip_us = 350\nrelease_k = 2.5\nrelease_epsilon = 0.05\nrelease_max_hold_ms = 8\nrelease_history = 4\n",
            None,
        )
        .unwrap();
        assert_eq!(
            cost(&c),
            CostRelease {
                round_trip_ns: 350_000,
                k: 2.5,
                epsilon: 0.05,
                max_hold_ns: 8_000_000,
                history: 4,
                min_history: 4,
            },
            "a shorter history lowers the default minimum with it"
        );
    }

    #[test]
    fn bad_release_settings_are_refused_with_the_rule() {
        for (text, want) in [
            ("release = \"fast\"", "is not cost"),
            ("release = \"cost\"\nhysteresis_ms = 20", "contradict"),
            (
                "hysteresis_ms = 20\nrelease_k = 2",
                "release_k belongs to the cost",
            ),
            (
                "release = \"hysteresis\"\npreempt_round_trip_us = 100",
                "preempt_round_trip_us belongs",
            ),
            ("preempt_round_trip_us = -1", "0..=1000000 µs"),
            ("release_k = 0", "release_k = 0 is out of range"),
            ("release_epsilon = 1", "0 <= epsilon < 1"),
            ("release_max_hold_ms = -3", "release_max_hold_ms = -3"),
            (
                "release_history = 0",
                "release_history = 0 is out of range 1..=1024",
            ),
            (
                "release_history = 8\nrelease_min_history = 9",
                "release_min_history = 9 is out of range 1..=release_history (8)",
            ),
        ] {
            let e = AgentConfig::parse(&format!("\n[agent]\n{text}\n"), None)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains(":2: [agent]: ") && e.contains(want),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn metrics_listen_is_an_address_and_port() {
        let c = AgentConfig::parse("[metrics]\nlisten = \"127.0.0.1:9464\"\n", None).unwrap();
        assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
        assert_eq!(AgentConfig::builtin().metrics, None);
        let e = AgentConfig::parse("\n[metrics]\nlisten = \"localhost\"\n", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("<config>:3:") && e.contains("127.0.0.1:9464"),
            "{e}"
        );
        let e = AgentConfig::parse("[metrics]\nport = 1\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field"), "{e}");
    }

    #[test]
    fn errors_name_the_line_and_the_rule() {
        let text = "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\n\n[[class]]\nname = \"b\"\nrank = 1\npriority = 2\n";
        let e = AgentConfig::parse(text, None).unwrap_err().to_string();
        assert!(e.contains(":7:") && e.contains("rank 1"), "{e}");
        let e = AgentConfig::parse("[[class]]\nname = \"a\"\nrank = 1\npriority = 30\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(":2:") && e.contains("0..=15"), "{e}");
        let e = AgentConfig::parse("[agent]\nsockt = \"/x\"\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(":2:") && e.contains("sockt"), "{e}");
        let e = AgentConfig::parse(
            "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nlevel = \"pause\"\n",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("suspend (3)"), "{e}");
    }

    #[test]
    fn windows_are_checked_and_the_builtin_batch_class_has_one() {
        assert_eq!(
            AgentConfig::builtin().rule("batch").unwrap().window,
            Some(2)
        );
        let c = AgentConfig::parse(
            "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nlevel = \"hold\"\nwindow = 1\n",
            None,
        )
        .unwrap();
        assert_eq!(c.rule("a").unwrap().window, Some(1));
        for bad in ["0", "5000"] {
            let e = AgentConfig::parse(
                &format!("[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nwindow = {bad}\n"),
                None,
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains(":2:") && e.contains("1..=4096"), "{e}");
        }
    }

    #[test]
    fn control_and_tracer_periods_are_checked() {
        let c = AgentConfig::parse(
            "[tracer]\nactivity_us = 1000\nscan_ms = 100\n\n[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nlevel = \"suspend\"\ncontrol = \"tracer\"\n\n[[class]]\nname = \"b\"\nrank = 2\npriority = 9\n",
            None,
        )
        .unwrap();
        assert_eq!(c.control("a"), Control::Tracer);
        assert_eq!(c.control("b"), Control::Shim);
        assert!(c.uses_tracer());
        assert!(!AgentConfig::builtin().uses_tracer(), "opt-in");
        assert_eq!(c.tracer.activity, std::time::Duration::from_millis(1));
        assert_eq!(c.tracer.scan, std::time::Duration::from_millis(100));
        let e = AgentConfig::parse(
            "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\ncontrol = \"ptrace\"\n",
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(":2:") && e.contains("tracer (also"), "{e}");
        let e = AgentConfig::parse("\n[tracer]\nscan_ms = 5\n", None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(":2:") && e.contains("50..=60000"), "{e}");
    }

    #[test]
    fn hw_queues_are_checked_and_the_builtin_classes_have_them() {
        let b = AgentConfig::builtin();
        assert_eq!(b.rule("latency").unwrap().hw_queues, Some(8));
        assert_eq!(b.rule("batch").unwrap().hw_queues, Some(4));
        let c = AgentConfig::parse(
            "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nhw_queues = 2\n\n[[class]]\nname = \"b\"\nrank = 0\npriority = 3\n",
            None,
        )
        .unwrap();
        assert_eq!(c.rule("a").unwrap().hw_queues, Some(2));
        assert_eq!(
            c.rule("b").unwrap().hw_queues,
            None,
            "omitted: the shim's default"
        );
        for bad in ["0", "1025"] {
            let e = AgentConfig::parse(
                &format!("[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nhw_queues = {bad}\n"),
                None,
            )
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(":2:") && e.contains("hw_queues") && e.contains("1..=1024"),
                "{e}"
            );
        }
    }
}
