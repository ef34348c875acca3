//! kfdqd must see the pids KFD names processes by: those of the initial pid namespace.
//!
//! amdkfd lists processes under `/sys/class/kfd/kfd/proc/<pid>` by their pid in the initial
//! namespace, and the agent reads a peer's or a discovered process's identity from `/proc/<pid>`
//! and seizes it with `ptrace(pid)`, both of which name pids in the agent's own namespaces (its
//! active pid namespace, and the one the `/proc` it sees was mounted for). An agent in a
//! container without `hostPID: true` would classify and trace whatever process has the number
//! there, or nothing: startup refuses it, and `kfdqd --check` says so.
//!
//! The initial pid namespace is the one whose nsfs inode is `PROC_PID_INIT_INO` (0xEFFFFFFC,
//! a fixed constant of the kernel, `include/linux/proc_ns.h`); every other namespace's inode
//! is allocated at or above `PROC_DYNAMIC_FIRST` (0xF0000000, `fs/proc/generic.c`).

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The nsfs inode of the initial pid namespace (`PROC_PID_INIT_INO`, include/linux/proc_ns.h).
pub const INITIAL_PID_NAMESPACE: u64 = 0xEFFF_FFFC;

/// Why the agent's pid namespace is not the one KFD names processes in.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PidNamespaceError {
    /// The agent runs in another pid namespace than the initial one.
    #[error(
        "kfdqd runs in pid namespace pid:[{found}], not the host's (the initial one, pid:[{INITIAL_PID_NAMESPACE}]): \
         KFD names processes by their host pids, so discovery, the tracer and the peers' /proc identities would name \
         other processes or none. Run kfdqd on the host, or in its pod with `hostPID: true` (as \
         deploy/kubernetes/kfdqd-daemonset.yaml does); docs/agent.md \"The pid namespace\""
    )]
    NotInitial {
        /// The inode of the agent's pid namespace.
        found: u64,
    },
    /// `/proc` is not the agent's own pid namespace's (mounted for another one).
    #[error(
        "/proc here is not of kfdqd's pid namespace (/proc/self names pid {proc_self}, kfdqd is pid {own}): \
         the peers' identities would be read from other processes' entries. Mount the host's /proc \
         (a pod with `hostPID: true` gets it); docs/agent.md \"The pid namespace\""
    )]
    ForeignProc {
        /// What `/proc/self` resolves to.
        proc_self: String,
        /// The agent's pid.
        own: u32,
    },
    /// The namespace could not be read.
    #[error(
        "cannot tell kfdqd's pid namespace ({path}: {source}): kfdqd needs /proc mounted and a kernel with /proc/<pid>/ns (Linux 3.8)"
    )]
    Unreadable {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Checks that this process runs in the initial pid namespace and sees a `/proc` of it.
pub fn check() -> Result<(), PidNamespaceError> {
    check_at(Path::new("/proc"))
}

fn check_at(proc: &Path) -> Result<(), PidNamespaceError> {
    let own = std::process::id();
    let proc_self = || match std::fs::read_link(proc.join("self")) {
        Ok(p) => p.display().to_string(),
        // A /proc mounted for a namespace this process is not in has no `self`.
        Err(e) => format!("nothing ({e})"),
    };
    let ns = proc.join("self/ns/pid");
    let found = match std::fs::metadata(&ns) {
        Ok(m) => m.ino(),
        Err(_) if proc.join("stat").exists() && proc_self() != own.to_string() => {
            return Err(PidNamespaceError::ForeignProc {
                proc_self: proc_self(),
                own,
            });
        }
        Err(source) => {
            return Err(PidNamespaceError::Unreadable {
                path: ns.display().to_string(),
                source,
            });
        }
    };
    if found != INITIAL_PID_NAMESPACE {
        return Err(PidNamespaceError::NotInitial { found });
    }
    if proc_self() != own.to_string() {
        return Err(PidNamespaceError::ForeignProc {
            proc_self: proc_self(),
            own,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_namespace_inode_is_the_kernels_constant() {
        assert_eq!(INITIAL_PID_NAMESPACE, 4_026_531_836);
    }

    #[test]
    fn a_proc_without_self_or_ns_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = check_at(dir.path()).unwrap_err();
        assert!(matches!(e, PidNamespaceError::Unreadable { .. }), "{e}");
    }
}
