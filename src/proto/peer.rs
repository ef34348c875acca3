//! Who the shim may obey: the kernel's word on the peer of the agent socket (`SO_PEERCRED`,
//! taken when the listener was created), checked against the uids the shim trusts.
//!
//! The shim executes the agent's commands on its own queues, so whoever listens at
//! `KFDQ_SOCKET` could otherwise hold the process's GPU work forever. The trusted uids are:
//! root (kfdqd runs as root), the process's own effective uid (a process can already do anything
//! to itself; this also lets a user run a private agent), and the uids listed in
//! `KFDQ_AGENT_UID`. That variable is part of the controlled process's own environment — it
//! widens the process's trust, never another tenant's. Nothing the peer *says* is trusted.

use std::os::fd::{AsFd, OwnedFd};

use nix::sys::socket::{
    getsockopt,
    sockopt::{PeerCredentials, PeerPidfd},
};

use crate::ids::Pid;

/// Environment variable naming more uids the shim accepts as its agent (comma-separated numbers).
pub const AGENT_UID_ENV: &str = "KFDQ_AGENT_UID";

/// The kernel's record of a socket peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    /// Process that created the peer socket (0 if in another pid namespace).
    pub pid: Pid,
    /// Its effective user id at that time.
    pub uid: u32,
    /// Its effective group id at that time.
    pub gid: u32,
}

/// `SO_PEERCRED` of a connected Unix socket.
pub fn peer_cred(sock: &impl AsFd) -> std::io::Result<PeerCred> {
    let c = getsockopt(sock, PeerCredentials).map_err(std::io::Error::from)?;
    Ok(PeerCred {
        pid: Pid::from_raw(c.pid()).unwrap_or_default(),
        uid: c.uid(),
        gid: c.gid(),
    })
}

/// `SO_PEERPIDFD` of a connected Unix socket (Linux 6.5): a pidfd of the process that
/// connected, which names that process whatever its pid names later. `Ok(None)` on a kernel
/// without the option (`ENOPROTOOPT`); an `ESRCH` error when the process is already gone
/// (kernels before 6.16 hand out no pidfd for a reaped process).
pub fn peer_pidfd(sock: &impl AsFd) -> std::io::Result<Option<OwnedFd>> {
    match getsockopt(sock, PeerPidfd) {
        Ok(fd) => Ok(Some(fd)),
        Err(nix::errno::Errno::ENOPROTOOPT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The uids whose agent the shim obeys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTrust {
    uids: Vec<u32>,
    own_uid: u32,
}

impl AgentTrust {
    /// Root, `own_uid`, and the uids of a `KFDQ_AGENT_UID` value. A malformed entry is ignored
    /// (trust is never widened by a typo) and reported in the returned warning.
    pub fn new(own_uid: u32, agent_uid_env: Option<&str>) -> (AgentTrust, Option<String>) {
        let mut uids = vec![0, own_uid];
        let mut bad = Vec::new();
        for e in agent_uid_env
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
        {
            match e.parse::<u32>() {
                Ok(u) => uids.push(u),
                Err(_) => bad.push(e.to_string()),
            }
        }
        uids.sort_unstable();
        uids.dedup();
        let warning = (!bad.is_empty()).then(|| {
            format!(
                "{AGENT_UID_ENV}: ignoring {} (numeric uids only, comma-separated, e.g. {AGENT_UID_ENV}=0,1001)",
                bad.join(", ")
            )
        });
        (AgentTrust { uids, own_uid }, warning)
    }

    /// The trusted uids, sorted.
    pub fn uids(&self) -> &[u32] {
        &self.uids
    }

    /// Accepts `peer` or says who was found, who was expected and how to fix it.
    pub fn check(&self, peer: &PeerCred, socket: &str) -> Result<(), UntrustedAgent> {
        if self.uids.contains(&peer.uid) {
            return Ok(());
        }
        let expected = self
            .uids
            .iter()
            .map(|u| match *u {
                0 => "0 (root, as kfdqd runs)".to_string(),
                u if u == self.own_uid => format!("{u} (this process)"),
                u => format!("{u} ({AGENT_UID_ENV})"),
            })
            .collect::<Vec<_>>()
            .join(", ");
        Err(UntrustedAgent {
            socket: socket.into(),
            uid: peer.uid,
            pid: peer.pid,
            expected,
        })
    }
}

/// An agent [`AgentTrust::check`] refused: who was found, who was expected and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error(
    "refusing the agent at {socket}: it runs as uid {uid} (pid {pid}), expected uid {expected}; \
     anyone who can create that socket could otherwise hold this process's GPU work. \
     Running uncontrolled. Fix: point KFDQ_SOCKET at the real kfdqd's socket \
     (default /run/kfdq/kfdq.sock; check with 'ls -l {socket}'), or trust that uid with \
     {AGENT_UID_ENV}={uid}"
)]
pub struct UntrustedAgent {
    /// The socket, as shown.
    pub socket: String,
    /// The listening peer's uid.
    pub uid: u32,
    /// The listening peer's pid.
    pub pid: Pid,
    /// The trusted uids, described.
    pub expected: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cred(uid: u32) -> PeerCred {
        PeerCred {
            pid: Pid(42),
            uid,
            gid: uid,
        }
    }

    #[test]
    fn root_and_self_are_trusted_by_default() {
        let (t, w) = AgentTrust::new(1000, None);
        assert!(w.is_none());
        assert_eq!(t.uids(), &[0, 1000]);
        assert!(t.check(&cred(0), "/s").is_ok());
        assert!(t.check(&cred(1000), "/s").is_ok());
        let e = t
            .check(&cred(1001), "/run/kfdq/kfdq.sock")
            .unwrap_err()
            .to_string();
        assert!(e.contains("uid 1001 (pid 42)"), "{e}");
        assert!(e.contains("0 (root"), "{e}");
        assert!(e.contains("KFDQ_AGENT_UID=1001"), "{e}");
    }

    #[test]
    fn agent_uid_widens_trust_and_typos_never_do() {
        let (t, w) = AgentTrust::new(1000, Some(" 2000, bob,, 3000x"));
        assert_eq!(t.uids(), &[0, 1000, 2000]);
        let w = w.unwrap();
        assert!(w.contains("bob") && w.contains("3000x"), "{w}");
        assert!(t.check(&cred(2000), "/s").is_ok());
        assert!(t.check(&cred(3000), "/s").is_err());
    }
}
