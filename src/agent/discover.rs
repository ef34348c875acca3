//! Finding GPU processes that run without the shim: every process with KFD queues
//! (`/sys/class/kfd/kfd/proc/<pid>/queues/`), less those the agent already knows.

use std::collections::BTreeSet;

use super::identity::Identity;
use crate::ids::Pid;
use crate::kfd::Root;
use crate::kfd::procfs;

/// A process with KFD queues the agent does not know yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Who it is.
    pub id: Identity,
    /// The class it asks for in its environment (`KFDQ_CLASS`), honoured as a shim's request
    /// would be (within the class rules' `env` permission).
    pub requested: Option<String>,
}

/// Processes under `root` with at least one KFD queue, not this agent, and not `known`.
/// An unreadable KFD sysfs is an empty list (logged): discovery retries at the next scan.
pub fn gpu_processes(root: &Root, known: impl Fn(Pid) -> bool) -> Vec<Found> {
    let me = Pid::this();
    let procs = match procfs::processes(root) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!("discovery: {e}");
            return Vec::new();
        }
    };
    procs
        .into_iter()
        .filter(|p| !p.queues.is_empty())
        .map(|p| Pid(p.pid))
        .filter(|&pid| pid != me && !known(pid))
        .filter_map(|pid| {
            Some(Found {
                id: Identity::of_pid(pid)?,
                requested: requested_class(pid),
            })
        })
        .collect()
}

/// `KFDQ_CLASS` from `/proc/<pid>/environ` (readable by root and the process's owner).
pub fn requested_class(pid: Pid) -> Option<String> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|b| *b == 0)
        .find_map(|kv| kv.strip_prefix(b"KFDQ_CLASS="))
        .and_then(|v| std::str::from_utf8(v).ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// Which of this scan's candidates were also candidates at the previous one: a process is
/// taken only when it has had queues for a whole scan period without a shim session, so a
/// shim that connects just after creating its first queue is never raced.
pub fn settled(previous: &BTreeSet<Pid>, now: &[Found]) -> Vec<Found> {
    now.iter()
        .filter(|f| previous.contains(&f.id.pid))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_environment_class_is_read() {
        // The test process's own environ: KFDQ_CLASS is unset unless a caller set it.
        let me = Pid::this();
        assert_eq!(
            requested_class(me),
            std::env::var("KFDQ_CLASS").ok().filter(|v| !v.is_empty())
        );
        assert_eq!(requested_class(Pid(u32::MAX / 2)), None);
    }

    #[test]
    fn only_candidates_seen_twice_settle() {
        let id = |pid| Found {
            id: Identity {
                pid,
                start: 0,
                uid: 0,
                gid: 0,
                groups: vec![],
                exe: String::new(),
                cgroup: String::new(),
                claim: crate::agent::identity::Claim::None,
                admin_channel: false,
                liveness: Default::default(),
            },
            requested: None,
        };
        let prev: BTreeSet<Pid> = [Pid(1), Pid(2)].into();
        let got: Vec<Pid> = settled(&prev, &[id(Pid(2)), id(Pid(3))])
            .iter()
            .map(|f| f.id.pid)
            .collect();
        assert_eq!(got, [Pid(2)]);
    }
}
