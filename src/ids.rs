//! The ids every layer passes around: a process's [`Pid`], a GPU node's [`GpuId`] and a KFD
//! queue's [`QueueId`]. They live at the crate's root, below every layer: the safe layer
//! (`kfd`, which re-exports the two it defines in the kernel's terms), the policy, the protocol
//! and the agent all name them, and none of those imports another for them. On the wire they
//! are the bare numbers (`serde(transparent)`).

use std::fmt;

/// Topology `gpu_id` of a GPU node (a partition on multi-partition parts). Shown in decimal
/// everywhere (tables, messages, JSON, metrics), as sysfs's `topology/nodes/N/gpu_id` shows it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct GpuId(pub u32);

impl fmt::Display for GpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Per-process KFD queue id (0..1024).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct QueueId(pub u32);

impl fmt::Display for QueueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "queue {}", self.0)
    }
}

/// A process id, as the kernel numbers processes (in the agent's pid namespace; 0 where the
/// kernel could not translate one, as `SO_PEERCRED` gives for a peer in another namespace).
///
/// The kernel's `pid_t` is signed only so that calls like `kill` can name groups; a process's
/// own id is never negative, so a `Pid` holds it unsigned, and [`Pid::from_raw`] is the checked
/// way in from a `pid_t`.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(transparent)]
pub struct Pid(pub u32);

impl Pid {
    /// The calling process.
    pub fn this() -> Pid {
        Pid(std::process::id())
    }

    /// A `pid_t` the kernel gave, or `None` for a negative one (a process group, an error).
    pub fn from_raw(pid: libc::pid_t) -> Option<Pid> {
        u32::try_from(pid).ok().map(Pid)
    }

    /// As a `pid_t`, for a system call. A pid above `i32::MAX` names no process (the kernel's
    /// `pid_max` is at most 2^22), so it becomes -1, which no call takes for a process.
    pub fn as_raw(self) -> libc::pid_t {
        libc::pid_t::try_from(self.0).unwrap_or(-1)
    }

    /// As nix's pid, for nix's calls (see [`Pid::as_raw`]).
    pub fn as_nix(self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.as_raw())
    }
}

impl From<u32> for Pid {
    fn from(pid: u32) -> Pid {
        Pid(pid)
    }
}

impl From<Pid> for u32 {
    fn from(pid: Pid) -> u32 {
        pid.0
    }
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::str::FromStr for Pid {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Pid, Self::Err> {
        s.parse().map(Pid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_pid_t_is_no_pid() {
        assert_eq!(Pid::from_raw(-1), None);
        assert_eq!(Pid::from_raw(0), Some(Pid(0)));
        assert_eq!(Pid::from_raw(4242), Some(Pid(4242)));
        assert_eq!(Pid(4242).as_raw(), 4242);
        assert_eq!(Pid(u32::MAX).as_raw(), -1);
        assert_eq!(Pid(4242).as_nix(), nix::unistd::Pid::from_raw(4242));
        assert_eq!(Pid::this().as_raw(), nix::unistd::getpid().as_raw());
    }

    #[test]
    fn ids_are_bare_numbers_on_the_wire_and_in_words() {
        assert_eq!(serde_json::to_string(&Pid(7)).unwrap(), "7");
        assert_eq!(serde_json::to_string(&GpuId(0x1234)).unwrap(), "4660");
        assert_eq!(serde_json::to_string(&QueueId(3)).unwrap(), "3");
        assert_eq!(serde_json::from_str::<Pid>("7").unwrap(), Pid(7));
        assert_eq!(Pid(7).to_string(), "7");
        assert_eq!("7".parse::<Pid>().unwrap(), Pid(7));
        assert_eq!(GpuId(0x1234).to_string(), "4660");
        assert_eq!(QueueId(3).to_string(), "queue 3");
    }
}
