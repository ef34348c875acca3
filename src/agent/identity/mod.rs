//! Who is on the other end of a connection — from the kernel (`SO_PEERCRED`, `/proc`), never
//! from what the peer says — and which class that identity belongs to.
//!
//! Files:
//!
//! * `mod.rs`: [`Identity`], read whole from the kernel's view, and what it may do (admin,
//!   ownership, visibility, liveness, dumpable mode).
//! * `proc.rs`: the `/proc/<pid>` reads it is made of (cgroup, stat fields: parent, start time).
//! * `claim.rs`: the Kubernetes allocation a process claims (its own or an ancestor's
//!   environment).
//! * `class.rs`: classification: the class an identity's rules give it, a `KFDQ_CLASS` request
//!   granted or capped ([`classify`]), and who may move a process to which class
//!   ([`may_set_class`]).

mod claim;
mod class;
mod proc;
#[cfg(test)]
mod tests;

use std::os::fd::AsFd;

use crate::agent::config::AgentConfig;
pub use crate::agent::kubernetes::cap::Claim;
use crate::agent::kubernetes::container::is_pod_cgroup;
pub use crate::agent::liveness::Liveness;
use crate::ids::Pid;

use claim::claim_of;
pub use class::{ClassChangeError, Classified, classify, entitled_class, may_set_class};
use proc::cgroup_of;
pub use proc::start_time;

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
            Liveness::Pidfd(fd) => !crate::agent::liveness::exited(fd),
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
