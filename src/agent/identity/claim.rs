//! The Kubernetes allocation a process claims: the `KFDQ_ALLOCATION` token of its own initial
//! environment or of an ancestor's in the same cgroup (in a pod: the container's first
//! process's).

use super::proc::{cgroup_of, gone, parent_of};
use super::{Claim, is_pod_cgroup};
use crate::ids::Pid;

/// How many ancestors [`claim_of`] looks at, at most.
const CLAIM_ANCESTORS: usize = 64;

/// The Kubernetes allocation `pid` claims.
///
/// In a kubelet pod cgroup ([`is_pod_cgroup`]): the claim of the container's first process,
/// the topmost ancestor in the same cgroup (the one the runtime started, with the token the
/// device plugin gave the container);
/// [`Bindings`](crate::agent::kubernetes::container::Bindings) then binds it to the container,
/// so a process that dropped the token (`exec env -u KFDQ_ALLOCATION`) or carries another
/// container's stays in its own container's grant.
///
/// Elsewhere: its own initial environment's `KFDQ_ALLOCATION`, else the nearest ancestor's in
/// the same cgroup (an orphan is adopted by the first process).
///
/// An ancestor that exited ends the walk; any other read error is returned (the agent is
/// out of descriptors, say), never taken as "no token".
pub(super) fn claim_of(pid: Pid, cgroup: &str) -> std::io::Result<Claim> {
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
