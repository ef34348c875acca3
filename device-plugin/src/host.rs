//! `kfdq-device-plugin --check` on the node: what the file names must be there — every class a
//! class of kfdqd's configuration (a pod of an unknown class would run in kfdqd's
//! `pod_fallback_class`, silently), and the paths it mounts or serves from existing.
//! Startup does not require them (kfdqd and the kubelet may come later); `--check` says
//! what would not work.

use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use serde::Deserialize;

use crate::config::{Config, ConfigError};

/// Whether a path is what its key needs (a directory, a file, a socket).
type PathTest = dyn Fn(&Path) -> bool;

/// kfdqd's configuration file when it is given none (its `DEFAULT_CONFIG`).
pub const AGENT_CONFIG: &str = "/etc/kfdq/kfdq.toml";

/// What to check the file against: kfdqd's class names and the file they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentClasses {
    /// kfdqd's classes, in its file's order.
    pub names: Vec<String>,
    /// kfdqd's configuration file (`built-in` for its defaults).
    pub source: String,
}

/// The part of kfdqd's configuration the plugin reads: its `[[class]]` names (the plugin does
/// not link the agent; `kfdqd --check` checks the rest of the file).
#[derive(Deserialize)]
struct AgentFile {
    #[serde(default)]
    class: Vec<AgentClass>,
}

#[derive(Deserialize)]
struct AgentClass {
    name: String,
}

impl AgentClasses {
    /// kfdqd's classes from its configuration `path` (default [`AGENT_CONFIG`]; kfdqd's
    /// built-in classes when that default is absent, or when the file defines none, as kfdqd
    /// does).
    pub fn read(path: Option<&Path>) -> Result<AgentClasses, String> {
        let file = path.unwrap_or(Path::new(AGENT_CONFIG));
        let builtin = |source: String| AgentClasses {
            names: kfdq::policy::PolicyConfig::builtin()
                .classes
                .into_iter()
                .map(|c| c.name)
                .collect(),
            source,
        };
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if path.is_none() && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(builtin("built-in".into()));
            }
            Err(e) => return Err(format!("{}: {e}", file.display())),
        };
        let f: AgentFile = toml::from_str(&text).map_err(|e| {
            format!(
                "{}: {} (kfdqd --check --config {} says more)",
                file.display(),
                e.message().trim(),
                file.display()
            )
        })?;
        let source = file.display().to_string();
        if f.class.is_empty() {
            return Ok(builtin(format!("{source}, its built-in classes")));
        }
        Ok(AgentClasses {
            names: f.class.into_iter().map(|c| c.name).collect(),
            source,
        })
    }
}

impl Config {
    /// Refuses a class kfdqd does not define, naming the key's line in `text` (this file's
    /// text) and the fix.
    pub fn check_classes(&self, text: &str, agent: &AgentClasses) -> Result<(), ConfigError> {
        for (i, c) in self.classes.iter().enumerate() {
            if !agent.names.contains(&c.name) {
                return Err(crate::config::invalid_at(
                    text,
                    "name",
                    i,
                    format!(
                        "kfdqd's configuration ({}) defines no class {:?} (its classes: {}): a pod asking for {} would run in kfdqd's pod_fallback_class instead; add a [[class]] name = {:?} to kfdqd's configuration, or name one of its classes",
                        agent.source,
                        c.name,
                        agent.names.join(", "),
                        self.resource_name(&c.name),
                        c.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses a path the file names that is not there on this node, naming the key's line
    /// in `text` and what it must be.
    pub fn check_paths(&self, text: &str) -> Result<(), ConfigError> {
        let dir = |p: &Path| p.is_dir();
        let file = |p: &Path| p.is_file();
        let socket = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket());
        let paths: [(&str, &Path, &PathTest, &str); 4] = [
            (
                "root",
                &self.root,
                &dir,
                "a directory (/ on a node; the emulator's mount in tests)",
            ),
            (
                "device_plugins_dir",
                &self.plugin_dir,
                &dir,
                "the kubelet's device-plugins directory (/var/lib/kubelet/device-plugins, mounted into the plugin's pod)",
            ),
            (
                "shim",
                &self.shim,
                &file,
                "the shim library the kfdq package installs (/var/lib/kfdq/lib/libkfdq_shim.so)",
            ),
            (
                "agent_socket",
                &self.agent_socket,
                &socket,
                "kfdqd's socket (`kfdqd --check` names it): start kfdqd first, or name its socket",
            ),
        ];
        for (key, path, ok, what) in paths {
            if !ok(path) {
                return Err(crate::config::invalid_at(
                    text,
                    key,
                    0,
                    format!("{} is not there; it must be {what}", path.display()),
                ));
            }
        }
        Ok(())
    }
}
