//! Who is on the other end of a connection — from the kernel (`SO_PEERCRED`, `/proc`), never
//! from what the peer says — and which class that identity belongs to.

use std::os::fd::AsFd;

use super::config::AgentConfig;
use super::kubernetes::cap::Cap;
pub use super::kubernetes::cap::Claim;
use super::kubernetes::container::is_pod_cgroup;
pub use super::liveness::Liveness;
use crate::ids::Pid;

/// A peer's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Process id in the agent's pid namespace.
    pub pid: Pid,
    /// Its start time (`/proc/<pid>/stat` field 22, clock ticks after boot): with the pid, the
    /// process itself — a pid reused by another process has another start time
    /// ([`Identity::is_current`]).
    pub start: u64,
    /// Its user id.
    pub uid: u32,
    /// Its primary group id.
    pub gid: u32,
    /// Its supplementary groups (`/proc/<pid>/status`).
    pub groups: Vec<u32>,
    /// Its executable (`/proc/<pid>/exe`).
    pub exe: String,
    /// Its cgroup v2 path (`/proc/<pid>/cgroup`; empty on a host without cgroup v2).
    pub cgroup: String,
    /// The Kubernetes allocation it claims (`/proc/<pid>/environ`, its own or its container's
    /// first process's; the server resolves it against the container bindings).
    pub claim: Claim,
    /// Connected through the admin socket (`[agent] admin_socket`, root-only, never mounted
    /// into pods): a node admin whatever its cgroup.
    pub admin_channel: bool,
    /// How [`Identity::is_current`] tells the process still runs (a pidfd for a connection's
    /// peer where the kernel gives one, else the start time).
    pub liveness: Liveness,
}

impl Identity {
    /// The identity of the peer of a connected Unix socket. An error when the kernel's view of
    /// it could not be read whole (the peer exited, or the agent is out of descriptors): the
    /// connection is then refused, never classified from empty values. The peer's pidfd
    /// (`SO_PEERPIDFD`) is taken first and checked after the `/proc` reads: a process that
    /// exited before or during them (its pid perhaps another's now) gives an identity that is
    /// never current ([`Liveness::Exited`]), whose hello is refused.
    pub fn of_peer(sock: &impl AsFd) -> std::io::Result<Identity> {
        let c = crate::proto::peer::peer_cred(sock)?;
        let pidfd = crate::proto::peer::peer_pidfd(sock);
        let mut id = Identity::of_process(c.pid, c.uid, c.gid)?;
        id.liveness = Liveness::of_peer(pidfd)?;
        Ok(id)
    }

    /// The identity of a process found without a connection (real uid and gid from
    /// `/proc/<pid>/status`); `None` when it exited or could not be read.
    pub fn of_pid(pid: Pid) -> Option<Identity> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let first = |key: &str| -> Option<u32> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        Identity::of_process(pid, first("Uid:")?, first("Gid:")?).ok()
    }

    /// The identity of `pid`, whose credentials the kernel gave as `uid`/`gid`; an error when
    /// any of `/proc/<pid>/{stat,status,exe,cgroup,environ}` cannot be read, or when the pid
    /// named another process (another start time) after the reads than before them.
    pub fn of_process(pid: Pid, uid: u32, gid: u32) -> std::io::Result<Identity> {
        let proc_dir = format!("/proc/{pid}");
        let start = start_time(pid)?;
        let groups = std::fs::read_to_string(format!("{proc_dir}/status"))?
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let exe = std::fs::read_link(format!("{proc_dir}/exe"))?
            .display()
            .to_string();
        let cgroup = cgroup_of(pid.0)?;
        let claim = claim_of(pid, &cgroup)?;
        if start_time(pid)? != start {
            return Err(std::io::Error::other(format!(
                "pid {pid} was reused by another process while its identity was read"
            )));
        }
        Ok(Identity {
            pid,
            start,
            uid,
            gid,
            groups,
            exe,
            cgroup,
            claim,
            admin_channel: false,
            liveness: Liveness::StartTime,
        })
    }

    /// True while the process this identity was read from still runs under its pid (its
    /// pidfd not exited, else the same start time): false once it exited, even when another
    /// process took the pid since.
    pub fn is_current(&self) -> bool {
        match &self.liveness {
            Liveness::Exited => false,
            Liveness::Pidfd(fd) => !super::liveness::exited(fd),
            Liveness::StartTime => start_time(self.pid).is_ok_and(|s| s == self.start),
        }
    }

    /// The process made itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, or a set-id
    /// program): such a process asked not to be traced or read; the tracer leaves it alone.
    /// The kernel says so through a pidfd (`PIDFD_GET_INFO`, Linux 6.16, `kfd::pidfd`) for
    /// every uid; where it does not, the files in the process's `/proc/<pid>` tell it, being
    /// root's although its effective uid is another (proc(5), "/proc/pid"; the directory itself
    /// stays the user's), which cannot be seen for a process whose effective uid is 0 (its
    /// entry is root's either way). `None` when it could not be read.
    pub fn non_dumpable(&self) -> Option<bool> {
        use std::os::unix::fs::MetadataExt;
        if let Some(d) = self.dumpable_by_pidfd() {
            return Some(d != crate::kfd::pidfd::Dumpable::User);
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid)).ok()?;
        let euid: u32 = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        let owner = std::fs::metadata(format!("/proc/{}/status", self.pid))
            .ok()?
            .uid();
        Some(euid != 0 && owner == 0)
    }

    /// The kernel's word on the process's dumpable mode, by its connection's pidfd or one
    /// opened by pid (then checked to be this identity's process by its start time, read
    /// once the pidfd holds the process); `None` where the kernel does not say.
    fn dumpable_by_pidfd(&self) -> Option<crate::kfd::pidfd::Dumpable> {
        use crate::kfd::pidfd;
        match &self.liveness {
            Liveness::Pidfd(fd) => pidfd::dumpable(fd),
            Liveness::Exited => None,
            Liveness::StartTime => {
                let fd = pidfd::open(self.pid.0).ok()?;
                let d = pidfd::dumpable(&fd)?;
                (start_time(self.pid).ok()? == self.start).then_some(d)
            }
        }
    }

    /// A node admin: whoever connected through the admin socket; on the public socket, root
    /// or a member of the configured admin group **outside** kubelet pod cgroups (root in a
    /// pod is the pod's root, not the node's: it reaches the public socket only).
    pub fn is_admin(&self, cfg: &AgentConfig) -> bool {
        self.admin_channel
            || (!self.in_pod()
                && (self.uid == 0
                    || cfg
                        .admin_group
                        .as_ref()
                        .is_some_and(|(_, g)| self.in_group(*g))))
    }

    /// May this identity see `other` in `kfdq status` (its pid, executable, pod)? Admins and
    /// processes outside pods see every process; a pod's process only its own container's.
    pub fn may_see(&self, other: &Identity, cfg: &AgentConfig) -> bool {
        !self.in_pod() || self.cgroup == other.cgroup || self.is_admin(cfg)
    }

    /// In a kubelet pod cgroup.
    pub fn in_pod(&self) -> bool {
        is_pod_cgroup(&self.cgroup)
    }

    /// True when `other` is this identity's own process: the same uid, and, when either is
    /// in a pod, the same container (cgroup). Pods that share a uid do not own each other's
    /// processes, nor does a node user a pod's.
    pub fn owns(&self, other: &Identity) -> bool {
        self.uid == other.uid && (!(self.in_pod() || other.in_pod()) || self.cgroup == other.cgroup)
    }

    /// Primary or supplementary member of `gid`.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// How many ancestors [`claim_of`] looks at, at most.
const CLAIM_ANCESTORS: usize = 64;

/// `pid`'s cgroup v2 path (`/proc/<pid>/cgroup`'s `0::` line; empty on a v1-only host).
fn cgroup_of(pid: u32) -> std::io::Result<String> {
    Ok(std::fs::read_to_string(format!("/proc/{pid}/cgroup"))?
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(str::to_owned)
        .unwrap_or_default())
}

/// True for the errors of reading a process that exited (it ends an ancestor walk).
fn gone(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::NotFound || e.raw_os_error() == Some(nix::libc::ESRCH)
}

/// The Kubernetes allocation `pid` claims.
///
/// In a kubelet pod cgroup ([`is_pod_cgroup`]): the claim of the container's first process,
/// the topmost ancestor in the same cgroup (the one the runtime started, with the token the
/// device plugin gave the container); [`super::kubernetes::container::Bindings`] then binds
/// it to the container, so a process that dropped the token (`exec env -u
/// KFDQ_ALLOCATION`) or carries another container's stays in its own container's grant.
///
/// Elsewhere: its own initial environment's `KFDQ_ALLOCATION`, else the nearest ancestor's in
/// the same cgroup (an orphan is adopted by the first process).
///
/// An ancestor that exited ends the walk; any other read error is returned (the agent is
/// out of descriptors, say), never taken as "no token".
fn claim_of(pid: Pid, cgroup: &str) -> std::io::Result<Claim> {
    let environ =
        |p: u32| std::fs::read(format!("/proc/{p}/environ")).map(|e| Claim::of_environ(&e));
    let own = environ(pid.0)?;
    let pod = is_pod_cgroup(cgroup);
    if (own != Claim::None && !pod) || cgroup.is_empty() {
        return Ok(own);
    }
    let mut top = own;
    let mut p = pid.0;
    for _ in 0..CLAIM_ANCESTORS {
        let Some(parent) = parent_of(p).filter(|q| *q > 1) else {
            break;
        };
        let same = match cgroup_of(parent) {
            Ok(c) => c == cgroup,
            Err(e) if gone(&e) => false,
            Err(e) => return Err(e),
        };
        if !same {
            break;
        }
        let claim = match environ(parent) {
            Ok(c) => c,
            Err(e) if gone(&e) => break,
            Err(e) => return Err(e),
        };
        if pod {
            top = claim;
        } else if claim != Claim::None {
            return Ok(claim);
        }
        p = parent;
    }
    Ok(top)
}

/// Field `n` (numbered from 1, as proc(5) does; `n >= 3`) of `/proc/<pid>/stat`, counted
/// after the command in parentheses (which may hold spaces and parentheses itself).
fn stat_field(pid: u32, n: usize) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(n - 3)?.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/stat: no field {n}")))
}

/// The parent pid of `pid` (`/proc/<pid>/stat`'s fourth field).
fn parent_of(pid: u32) -> Option<u32> {
    stat_field(pid, 4).ok().and_then(|p| u32::try_from(p).ok())
}

/// `pid`'s start time, in clock ticks after boot (`/proc/<pid>/stat`'s field 22, proc(5)).
pub fn start_time(pid: Pid) -> std::io::Result<u64> {
    stat_field(pid.0, 22)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn id(uid: u32) -> Identity {
        Identity {
            pid: Pid(1),
            start: 0,
            uid,
            gid: uid,
            groups: vec![],
            exe: "/usr/bin/x".into(),
            cgroup: "/system.slice/app/c1".into(),
            claim: Claim::None,
            admin_channel: false,
            liveness: Liveness::StartTime,
        }
    }

    fn cfg() -> AgentConfig {
        AgentConfig::parse(
            r#"
[[class]]
name = "serving"
rank = 2
priority = 13
match = { uids = [1000] }
[[class]]
name = "pods"
rank = 1
priority = 8
match = { cgroups = ["/system.slice"] }
[[class]]
name = "batch"
rank = 0
priority = 3
level = "deactivate"
match = { env = true }
"#,
            None,
        )
        .unwrap()
    }

    #[test]
    fn the_parent_is_read_from_proc() {
        let me = std::process::id();
        assert_eq!(parent_of(me), Some(nix::unistd::getppid().as_raw() as u32));
        assert_eq!(parent_of(u32::MAX / 2), None);
        // The start time is this process's, and stays: the identity is current.
        let start = start_time(Pid(me)).unwrap();
        assert!(start > 0);
        assert_eq!(start_time(Pid(me)).unwrap(), start);
        // No token here or above in this cgroup (the test runs outside pods).
        let me = Identity::of_process(Pid(me), 0, 0).unwrap();
        assert_eq!(me.claim, Claim::None);
        assert_eq!(me.start, start);
        assert!(me.is_current());
        assert!(
            !Identity {
                start: start + 1,
                ..me
            }
            .is_current(),
            "another process's pid"
        );
    }

    #[test]
    fn rules_match_in_file_order() {
        let c = cfg();
        assert_eq!(entitled_class(&c, &id(1000)).0, "serving");
        assert_eq!(entitled_class(&c, &id(2000)).0, "pods");
        let mut other = id(2000);
        other.cgroup = "/system.slicex".into();
        assert_eq!(entitled_class(&c, &other).0, "batch", "prefix on / only");
    }

    #[test]
    fn kfdq_class_is_capped() {
        let c = cfg();
        let k = classify(&c, &id(2000), Some("serving"), None);
        assert_eq!(k.class, "pods");
        let r = k.refused.unwrap();
        assert!(
            r.contains("above") && r.contains("ask the node's admin"),
            "{r}"
        );
        let r = classify(&c, &id(0), Some("serving"), None).refused.unwrap();
        assert!(
            !r.contains("ask the node's admin") && r.contains("kfdq class 1 serving"),
            "root is the admin: {r}"
        );
        assert_eq!(classify(&c, &id(1000), Some("batch"), None).class, "batch");
        assert_eq!(classify(&c, &id(2000), Some("nope"), None).class, "pods");
        assert!(may_set_class(&c, &id(2000), "pods", "serving", None).is_err());
        assert!(may_set_class(&c, &id(0), "pods", "serving", None).is_ok());
    }

    #[test]
    fn root_in_a_pod_is_no_admin_and_owns_its_container_only() {
        let c = cfg();
        let pod = |uid, ctr: &str| Identity {
            cgroup: format!("/kubepods/besteffort/pod1/{ctr}"),
            ..id(uid)
        };
        assert!(id(0).is_admin(&c));
        assert!(!pod(0, "a").is_admin(&c), "root in a pod");
        let admin = Identity {
            admin_channel: true,
            ..pod(0, "kfdqd")
        };
        assert!(admin.is_admin(&c), "the admin socket");
        assert!(may_set_class(&c, &pod(0, "a"), "pods", "serving", None).is_err());
        assert!(pod(1000, "a").owns(&pod(1000, "a")));
        assert!(
            !pod(1000, "a").owns(&pod(1000, "b")),
            "same uid, other container"
        );
        assert!(
            !id(1000).owns(&pod(1000, "b")),
            "a node user, a pod's process"
        );
        assert!(id(1000).owns(&id(1000)));
        assert!(!id(1000).owns(&id(1001)));
        assert!(pod(0, "a").may_see(&pod(5, "a"), &c));
        assert!(!pod(0, "a").may_see(&pod(0, "b"), &c));
        assert!(!pod(0, "a").may_see(&id(0), &c));
        assert!(id(1000).may_see(&pod(0, "b"), &c));
    }
}
