//! Classification: the class an identity's rules give it ([`entitled_class`]), the class in
//! effect for a process that asked for one ([`classify`]), and who may move a process into
//! which class ([`may_set_class`]). A Kubernetes allocation caps both.

use super::Identity;
use crate::agent::config::AgentConfig;
use crate::agent::kubernetes::cap::Cap;

/// A process's class and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// The class in effect.
    pub class: String,
    /// The highest class this identity may be in (its cap).
    pub entitled: String,
    /// How it was chosen.
    pub reason: String,
    /// A `KFDQ_CLASS` request that was not granted, and why.
    pub refused: Option<String>,
}

/// The class an identity's rules give it: the first class (in file order) whose uid, gid,
/// cgroup or executable matches, else the default class.
pub fn entitled_class(cfg: &AgentConfig, id: &Identity) -> (String, String) {
    for c in &cfg.classes {
        let m = &c.matcher;
        let why = if m.uids.contains(&id.uid) {
            Some(format!("uid {}", id.uid))
        } else if let Some(g) = m.gids.iter().find(|g| id.in_group(**g)) {
            Some(format!("gid {g}"))
        } else if let Some(p) = m.cgroups.iter().find(|p| {
            id.cgroup == **p
                || id
                    .cgroup
                    .strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        }) {
            Some(format!("cgroup {p}"))
        } else if m.executables.contains(&id.exe) {
            Some(format!("executable {}", id.exe))
        } else {
            None
        };
        if let Some(why) = why {
            return (c.name.clone(), format!("matched {why}"));
        }
    }
    (cfg.default_class.clone(), "default class".into())
}

fn rank(cfg: &AgentConfig, class: &str) -> u8 {
    cfg.rule(class).map_or(0, |r| r.rank)
}

/// Classifies a process that asked for `requested` (`KFDQ_CLASS`): granted when the class
/// exists and is either selectable by anyone (`match.env`) or not above the identity's own
/// class; otherwise the identity's class, with the refusal recorded.
///
/// A process with a Kubernetes allocation (`cap`) is entitled to the allocation's class
/// instead, whatever rule its uid, group, cgroup or executable matches, and `KFDQ_CLASS` may
/// only lower it: `match.env` opens no class above the allocation's.
pub fn classify(
    cfg: &AgentConfig,
    id: &Identity,
    requested: Option<&str>,
    cap: Option<&Cap>,
) -> Classified {
    let (entitled, why) = match cap {
        Some(c) => (c.class.clone(), c.source.clone()),
        None => entitled_class(cfg, id),
    };
    let Some(req) = requested.map(str::trim).filter(|r| !r.is_empty()) else {
        return Classified {
            class: entitled.clone(),
            entitled,
            reason: why,
            refused: None,
        };
    };
    let refused = match cfg.class(req) {
        None => Some(format!(
            "KFDQ_CLASS={req} is not a configured class (classes: {}); using {entitled}",
            cfg.class_names().join(", ")
        )),
        Some(_) if rank(cfg, req) <= rank(cfg, &entitled) => None,
        Some(_) if cap.is_some() => cap.map(|c| {
            format!(
                "KFDQ_CLASS={req} is above class {entitled}: capped by {}; using {entitled}: {}",
                c.source,
                c.fix(req)
            )
        }),
        Some(c) if c.matcher.env => None,
        Some(_) => {
            // Root and the admin group write the rules themselves; others ask them.
            let fix = if id.is_admin(cfg) {
                format!(
                    "add a match rule for it to class {req} in {} (then reload: systemctl reload kfdqd), or move the running process with `kfdq class {} {req}`",
                    cfg.source
                        .as_ref()
                        .map_or("the configuration".into(), |p| p.display().to_string()),
                    id.pid
                )
            } else {
                format!(
                    "ask the node's admin to add a match rule for you to class {req}, or to move the process with `kfdq class PID {req}`"
                )
            };
            Some(format!(
                "KFDQ_CLASS={req} is above this process's class {entitled} ({why}) and class {req} does not allow match.env; using {entitled}: {fix}"
            ))
        }
    };
    match refused {
        None => Classified {
            class: req.to_owned(),
            entitled,
            reason: match cap {
                Some(c) => format!("KFDQ_CLASS={req}, within {}", c.source),
                None => format!("KFDQ_CLASS={req}"),
            },
            refused: None,
        },
        Some(r) => Classified {
            class: entitled.clone(),
            entitled,
            reason: match cap {
                Some(c) if cfg.class(req).is_some() => format!("capped by {}", c.source),
                _ => why,
            },
            refused: Some(r),
        },
    }
}

/// May `who` move a process entitled to `entitled` into `class`? Admins always; others only
/// to a class not above the process's entitlement (or one anyone may ask for). A process with
/// a Kubernetes allocation (`cap`) never goes above the allocation's class, whoever asks: the
/// cluster's scheduler placed its pod by that class.
pub fn may_set_class(
    cfg: &AgentConfig,
    who: &Identity,
    entitled: &str,
    class: &str,
    cap: Option<&Cap>,
) -> Result<(), ClassChangeError> {
    let Some(c) = cfg.class(class) else {
        return Err(ClassChangeError::NoClass {
            class: class.into(),
            classes: cfg.class_names().join(", "),
        });
    };
    if let Some(cap) = cap
        && rank(cfg, class) > rank(cfg, &cap.class)
    {
        return Err(ClassChangeError::AboveAllocation {
            class: class.into(),
            cap: cap.class.clone(),
            by: cap.source.clone(),
            fix: cap.fix(class),
        });
    }
    if who.is_admin(cfg) || c.matcher.env || rank(cfg, class) <= rank(cfg, entitled) {
        Ok(())
    } else {
        Err(ClassChangeError::AboveEntitlement {
            uid: who.uid,
            entitled: entitled.into(),
            class: class.into(),
        })
    }
}

/// Why [`may_set_class`] said no.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ClassChangeError {
    /// The configuration has no such class.
    #[error("no class {class:?} (classes: {classes}); see `kfdq status`")]
    NoClass {
        /// The class asked for.
        class: String,
        /// The configured classes, comma-separated.
        classes: String,
    },
    /// A class above the process's Kubernetes allocation (refused to admins too).
    #[error("class cap: {class} is above class {cap}: capped by {by}; {fix}")]
    AboveAllocation {
        /// The class asked for.
        class: String,
        /// The allocation's class (or the fallback class for pods).
        cap: String,
        /// The allocation, in words.
        by: String,
        /// How to get the class.
        fix: String,
    },
    /// A non-admin asked for a class above the process's entitlement.
    #[error(
        "class cap: uid {uid} may move this process at most into {entitled}, not {class}; root or the admin group may"
    )]
    AboveEntitlement {
        /// The requester.
        uid: u32,
        /// The class the process is entitled to.
        entitled: String,
        /// The class asked for.
        class: String,
    },
}
