//! `[[class]]`: each class's policy rule (rank, priority, level, starvation, shares) and who
//! belongs to it (`match`), validated class by class so an error names the class that breaks a
//! rule.

use serde::Deserialize;

use super::lookup::{group_id, user_id};
use super::{AgentConfig, ClassConfig, ConfigError, Doc, Matcher, ms};
use crate::agent::setting::SettingError;
use crate::policy::{ClassRule, Starvation};
use crate::proto::Level;
use crate::proto::control::Control;

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileStarvation {
    run_ms: f64,
    after_ms: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileClass {
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

/// Replaces the configured classes with `classes` (when there are any), in file order.
pub(super) fn apply(
    classes: &[FileClass],
    doc: &Doc<'_>,
    cfg: &mut AgentConfig,
) -> Result<(), ConfigError> {
    if !classes.is_empty() {
        cfg.classes.clear();
        cfg.policy.classes.clear();
    }
    for c in classes {
        let line = doc.line(c.name.span());
        let name = c.name.get_ref().clone();
        let at = |m: String| doc.invalid(line, format!("class {name:?}: {m}"));
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
                after_ns: ms(s.after_ms, "starvation.after_ms").map_err(|e| at(e.to_string()))?,
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
            .map_err(|e| doc.invalid(line, e.to_string()))?;
    }
    Ok(())
}
