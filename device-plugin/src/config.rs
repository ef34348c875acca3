//! The plugin's configuration file (`deploy/device-plugin.toml`, docs/kubernetes.md,
//! "Configuration"): where the kubelet's sockets are, which GPUs kfdq shares, and how many
//! shares of each class one partition gives.
//!
//! A malformed file or a bad value is refused with its line and the rule it breaks; nothing
//! starts.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kfdq::GpuId;
use serde::Deserialize;

/// Where the kubelet keeps device-plugin sockets (its own `kubelet.sock` among them).
pub const DEFAULT_PLUGIN_DIR: &str = "/var/lib/kubelet/device-plugins";
/// The kubelet's PodResources socket.
pub const DEFAULT_POD_RESOURCES: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// The configuration file the binary reads unless told otherwise.
pub const DEFAULT_CONFIG: &str = "/etc/kfdq/device-plugin.toml";

/// Most shares one partition may give per class: each share is a kubelet device, and a
/// partition keeps a few dozen queues resident at most, so more pods than this on one
/// partition would time-slice the hardware scheduler whatever their class.
pub const MAX_SHARES: u32 = 64;

/// The whole file, validated.
#[derive(Debug, Clone)]
pub struct Config {
    /// The kubelet's device-plugin directory.
    pub plugin_dir: PathBuf,
    /// The kubelet's PodResources socket.
    pub pod_resources: PathBuf,
    /// How often PodResources `List` is asked.
    pub pod_resources_period: Duration,
    /// How long a grant lives without a container that holds its shares.
    pub grant_grace: Duration,
    /// How often health (topology, agent) is checked.
    pub health_period: Duration,
    /// `kfdq.io` in `kfdq.io/latency`.
    pub resource_prefix: String,
    /// Which partitions kfdq shares (`None`: every GPU node of the topology at start).
    pub gpus: Option<Vec<GpuId>>,
    /// Root prefix of `/dev/kfd`, `/dev/dri` and `/sys` (`/`; an emulator mount in tests).
    pub root: PathBuf,
    /// The allocations file ([`kfdq::allocation`]).
    pub allocations: PathBuf,
    /// The agent's socket (its directory is mounted read-only into containers).
    pub agent_socket: PathBuf,
    /// The shim library on the host (its directory is mounted read-only at [`SHIM_DIR`]).
    pub shim: PathBuf,
    /// The classes, in file order.
    pub classes: Vec<ClassShares>,
}

/// Where containers see the shim's directory.
pub const SHIM_DIR: &str = "/opt/kfdq";

/// One class resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassShares {
    /// The agent's class name (`latency`).
    pub name: String,
    /// Shares per partition.
    pub shares: u32,
}

impl Config {
    /// `<prefix>/<class>`.
    pub fn resource_name(&self, class: &str) -> String {
        format!("{}/{class}", self.resource_prefix)
    }

    /// The socket file name of a class's server in [`Config::plugin_dir`].
    pub fn endpoint(class: &str) -> String {
        format!("kfdq-{class}.sock")
    }

    /// Reads and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Config::parse(&text).map_err(|e| e.at(path))
    }

    /// Validates the text of a configuration file.
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            ConfigError::Invalid {
                path: PathBuf::new(),
                line,
                rule: format!(
                    "{} ({})",
                    rule_at(text, e.span().map(|s| s.start)),
                    e.message().trim()
                ),
            }
        })?;
        raw.validate(text)
    }
}

/// Why the configuration was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A value breaks a rule.
    #[error(
        "{}{}{rule}",
        if path.as_os_str().is_empty() { String::new() } else { format!("{}: ", path.display()) },
        if *line == 0 { String::new() } else { format!("line {line}: ") }
    )]
    Invalid {
        /// The file (empty for text).
        path: PathBuf,
        /// 1-based; 0 when the whole file is at fault (then no line is named).
        line: usize,
        /// The rule and the fix.
        rule: String,
    },
}

impl ConfigError {
    /// The error of the text as the error of the file `path`.
    pub fn at(self, path: &Path) -> ConfigError {
        match self {
            ConfigError::Invalid { line, rule, .. } => ConfigError::Invalid {
                path: path.to_owned(),
                line,
                rule,
            },
            other => other,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default)]
    kubelet: RawKubelet,
    #[serde(default)]
    plugin: RawPlugin,
    #[serde(default)]
    class: Vec<RawClass>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawKubelet {
    device_plugins_dir: Option<PathBuf>,
    pod_resources_socket: Option<PathBuf>,
    pod_resources_poll_ms: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawPlugin {
    resource_prefix: Option<String>,
    gpus: Option<Gpus>,
    root: Option<PathBuf>,
    allocations: Option<PathBuf>,
    agent_socket: Option<PathBuf>,
    shim: Option<PathBuf>,
    grant_grace_ms: Option<u64>,
    health_period_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Gpus {
    All(String),
    List(Vec<u32>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawClass {
    name: String,
    shares: u32,
}

/// What each key takes.
fn takes(key: &str) -> Option<&'static str> {
    Some(match key {
        "device_plugins_dir"
        | "root"
        | "allocations"
        | "agent_socket"
        | "shim"
        | "pod_resources_socket" => "an absolute path in quotes",
        "pod_resources_poll_ms" => "milliseconds 100..=600000, e.g. 5000",
        "grant_grace_ms" => "milliseconds 1000..=3600000, e.g. 30000",
        "health_period_ms" => "milliseconds 100..=60000, e.g. 1000",
        "resource_prefix" => "a DNS subdomain in quotes, e.g. \"kfdq.io\"",
        "gpus" => "\"all\" or a list of KFD gpu_ids, e.g. [45704, 12345] (kfdq status shows them)",
        "name" => "an agent class name in quotes: lowercase letters, digits and '-'",
        "shares" => "an integer 1..=64: how many pods of this class one partition takes",
        _ => return None,
    })
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// The rule of the key on the line at `offset`, if it names one.
fn rule_at(text: &str, offset: Option<usize>) -> String {
    let Some(offset) = offset else {
        return "not a device-plugin configuration (docs/kubernetes.md, \"Configuration\")".into();
    };
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next().unwrap_or("");
    // A class written as one table, as kfdqd's configuration explains it.
    if line.trim() == "[class]" {
        return "[class]: each class is an array-of-tables entry, written [[class]] (double brackets), one per class".into();
    }
    let key = line.split('=').next().unwrap_or("").trim();
    match takes(key) {
        Some(rule) => format!("{key} takes {rule}"),
        None => "see docs/kubernetes.md, \"Configuration\", for the keys".into(),
    }
}

/// The line of the `nth` (0-based) `key = ` in `text`, or 0.
fn key_line(text: &str, key: &str, nth: usize) -> usize {
    text.lines()
        .enumerate()
        .filter(|(_, l)| {
            let l = l.trim_start();
            l.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .nth(nth)
        .map_or(0, |(i, _)| i + 1)
}

/// [`invalid`] for the checks of other files (`crate::host`): the `nth` `key` of `text`.
pub(crate) fn invalid_at(text: &str, key: &str, nth: usize, why: String) -> ConfigError {
    ConfigError::Invalid {
        path: PathBuf::new(),
        line: key_line(text, key, nth),
        rule: format!("{key}: {why}"),
    }
}

fn invalid(text: &str, key: &str, nth: usize, why: String) -> ConfigError {
    let rule = match takes(key) {
        Some(r) => format!("{key}: {why}; it takes {r}"),
        None => format!("{key}: {why}"),
    };
    ConfigError::Invalid {
        path: PathBuf::new(),
        line: key_line(text, key, nth),
        rule,
    }
}

fn absolute(
    text: &str,
    key: &str,
    p: Option<PathBuf>,
    default: &str,
) -> Result<PathBuf, ConfigError> {
    let p = p.unwrap_or_else(|| PathBuf::from(default));
    if p.is_absolute() {
        Ok(p)
    } else {
        Err(invalid(
            text,
            key,
            0,
            format!("{} is relative", p.display()),
        ))
    }
}

fn millis(
    text: &str,
    key: &str,
    v: Option<u64>,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Duration, ConfigError> {
    let v = v.unwrap_or(default);
    if range.contains(&v) {
        Ok(Duration::from_millis(v))
    } else {
        Err(invalid(text, key, 0, format!("{v} is out of range")))
    }
}

/// A DNS label: lowercase letters, digits and '-', not at either end.
fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl RawConfig {
    fn validate(self, text: &str) -> Result<Config, ConfigError> {
        let k = self.kubelet;
        let p = self.plugin;
        let prefix = p.resource_prefix.unwrap_or_else(|| "kfdq.io".into());
        if !prefix.split('.').all(dns_label) {
            return Err(invalid(
                text,
                "resource_prefix",
                0,
                format!("{prefix:?} is not a DNS subdomain"),
            ));
        }
        let gpus = match p.gpus {
            None => None,
            Some(Gpus::All(s)) if s == "all" => None,
            Some(Gpus::All(s)) => {
                return Err(invalid(text, "gpus", 0, format!("{s:?} is not \"all\"")));
            }
            Some(Gpus::List(l)) if l.is_empty() => {
                return Err(invalid(
                    text,
                    "gpus",
                    0,
                    "the list is empty (kfdq would share nothing)".into(),
                ));
            }
            Some(Gpus::List(l)) => {
                if let Some(z) = l.iter().find(|g| **g == 0) {
                    return Err(invalid(
                        text,
                        "gpus",
                        0,
                        format!("{z} is a CPU node's gpu_id, not a GPU's"),
                    ));
                }
                Some(l.into_iter().map(GpuId).collect())
            }
        };
        if self.class.is_empty() {
            return Err(ConfigError::Invalid {
                path: PathBuf::new(),
                line: 0,
                rule: "no [[class]]: give each class kfdq shares a [[class]] with name and shares, e.g. name = \"latency\", shares = 1".into(),
            });
        }
        let mut classes = Vec::new();
        for (i, c) in self.class.into_iter().enumerate() {
            if !dns_label(&c.name) || c.name.len() + prefix.len() + 1 > 63 {
                return Err(invalid(
                    text,
                    "name",
                    i,
                    format!("{:?} cannot name a resource {prefix}/<name>", c.name),
                ));
            }
            if classes.iter().any(|x: &ClassShares| x.name == c.name) {
                return Err(invalid(
                    text,
                    "name",
                    i,
                    format!("class {:?} appears twice", c.name),
                ));
            }
            if !(1..=MAX_SHARES).contains(&c.shares) {
                return Err(invalid(
                    text,
                    "shares",
                    i,
                    format!("{} is out of range", c.shares),
                ));
            }
            classes.push(ClassShares {
                name: c.name,
                shares: c.shares,
            });
        }
        Config {
            plugin_dir: absolute(
                text,
                "device_plugins_dir",
                k.device_plugins_dir,
                DEFAULT_PLUGIN_DIR,
            )?,
            pod_resources: absolute(
                text,
                "pod_resources_socket",
                k.pod_resources_socket,
                DEFAULT_POD_RESOURCES,
            )?,
            pod_resources_period: millis(
                text,
                "pod_resources_poll_ms",
                k.pod_resources_poll_ms,
                5000,
                100..=600_000,
            )?,
            grant_grace: millis(
                text,
                "grant_grace_ms",
                p.grant_grace_ms,
                30_000,
                1000..=3_600_000,
            )?,
            health_period: millis(
                text,
                "health_period_ms",
                p.health_period_ms,
                1000,
                100..=60_000,
            )?,
            resource_prefix: prefix,
            gpus,
            root: absolute(text, "root", p.root, "/")?,
            allocations: absolute(
                text,
                "allocations",
                p.allocations,
                kfdq::allocation::DEFAULT_PATH,
            )?,
            agent_socket: absolute(text, "agent_socket", p.agent_socket, "/run/kfdq/kfdq.sock")?,
            shim: absolute(text, "shim", p.shim, "/var/lib/kfdq/lib/libkfdq_shim.so")?,
            classes,
        }
        .mounts_hide_the_grants(text)
    }
}

impl Config {
    /// The directories every container mounts (the shim's and the agent socket's) must not
    /// hold the allocations file: a container would read every grant's token there.
    fn mounts_hide_the_grants(self, text: &str) -> Result<Config, ConfigError> {
        for (key, file) in [("shim", &self.shim), ("agent_socket", &self.agent_socket)] {
            let dir = file.parent().unwrap_or(Path::new("/"));
            if self.allocations.starts_with(dir) {
                return Err(invalid(
                    text,
                    key,
                    0,
                    format!(
                        "{}'s directory {} is mounted into every container, and it holds the allocations file {} (every grant's token): keep the allocations in a directory no container mounts (the default {})",
                        file.display(),
                        dir.display(),
                        self.allocations.display(),
                        kfdq::allocation::DEFAULT_PATH
                    ),
                ));
            }
        }
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "[plugin]\ngpus = \"all\"\n[[class]]\nname = \"latency\"\nshares = 1\n[[class]]\nname = \"batch\"\nshares = 4\n";

    fn err(text: &str) -> String {
        Config::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn tenant_a_mounted_directory_never_holds_the_allocations() {
        assert!(Config::parse(GOOD).is_ok(), "the defaults keep them apart");
        let e = err(&GOOD.replace(
            "[plugin]\n",
            "[plugin]\nallocations = \"/run/kfdq/allocations.json\"\n",
        ));
        assert!(
            e.contains("agent_socket") && e.contains("every grant's token"),
            "{e}"
        );
        let e = err(&GOOD.replace(
            "[plugin]\n",
            "[plugin]\nshim = \"/var/lib/kfdq/libkfdq_shim.so\"\n",
        ));
        assert!(
            e.contains("shim") && e.contains("no container mounts"),
            "{e}"
        );
    }

    #[test]
    fn defaults_and_classes() {
        let c = Config::parse(GOOD).unwrap();
        assert_eq!(c.plugin_dir, Path::new(DEFAULT_PLUGIN_DIR));
        assert_eq!(c.resource_name("batch"), "kfdq.io/batch");
        assert_eq!(c.classes[1].shares, 4);
        assert_eq!(c.pod_resources_period, Duration::from_secs(5));
        assert!(c.gpus.is_none());
    }

    #[test]
    fn bad_values_name_their_line_and_rule() {
        let e = err(&GOOD.replace("shares = 4", "shares = 0"));
        assert!(e.starts_with("line 8: shares: 0 is out of range"), "{e}");
        let e = err(&GOOD.replace("shares = 4", "shares = \"four\""));
        assert!(e.starts_with("line 8: shares takes an integer"), "{e}");
        let e = err(&GOOD.replace("gpus = \"all\"", "gpus = \"some\""));
        assert!(e.starts_with("line 2: gpus:"), "{e}");
        let e = err(&GOOD.replace("name = \"batch\"", "name = \"latency\""));
        assert!(
            e.starts_with("line 7: name: class \"latency\" appears twice"),
            "{e}"
        );
        let e = err(&format!("{GOOD}[plugin]\n"));
        assert!(e.starts_with("line 9:"), "{e}");
        let e = err("[plugin]\nsharez = 1\n");
        assert!(
            e.starts_with("line 2:") && e.contains("unknown field"),
            "{e}"
        );
        let e = err("[plugin]\n");
        assert!(e.starts_with("no [[class]]"), "no line 0: {e}");
        // One bracket: explained as kfdqd explains it.
        let e = err("[class]\nname = \"latency\"\nshares = 1\n");
        assert!(e.contains("written [[class]] (double brackets)"), "{e}");
        let e = err(&format!("[plugin]\nroot = \"emu\"\n{}", &GOOD[9..]));
        assert!(e.starts_with("line 2: root: emu is relative"), "{e}");
    }
}
