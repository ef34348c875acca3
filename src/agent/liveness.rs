//! Whether the process an [`Identity`](super::identity::Identity) was read from still runs:
//! by a pidfd of the process itself where the kernel hands one out for a socket's peer
//! (`SO_PEERPIDFD`, Linux 6.5), else by its start time under its pid.
//!
//! The start time alone is not enough for a connection: it is counted in clock ticks (10 ms
//! at `USER_HZ` 100), so two processes that take the same pid within one tick look alike,
//! and the agent reads `/proc/<pid>` only after `accept`, by when the process that connected
//! may have exited and its pid gone to another. A pidfd names the process, not the number.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// How an identity's process is told to be still running.
#[derive(Debug, Clone, Default)]
pub enum Liveness {
    /// By its start time under its pid: a process found without a connection (discovery, the
    /// tracer), or a peer on a kernel without `SO_PEERPIDFD`.
    #[default]
    StartTime,
    /// By a pidfd of the process itself (`SO_PEERPIDFD`): exact. Shared by the identity's
    /// clones; closed with the last one.
    Pidfd(Arc<OwnedFd>),
    /// The process that connected had exited by the time its `/proc` entries were read (or
    /// before the kernel could hand out its pidfd): what `/proc/<pid>` gave may be another
    /// process's, so the identity speaks for nobody.
    Exited,
}

impl Liveness {
    /// From the peer's pidfd, as `SO_PEERPIDFD` answered: `Ok(None)` on a kernel without it,
    /// `ESRCH` when the process was already gone. Called after `/proc` was read, so a
    /// process alive now was alive, under its pid, throughout the reads (a pid is not reused
    /// before its process has exited and been reaped, and a pidfd reports the exit).
    pub fn of_peer(pidfd: std::io::Result<Option<OwnedFd>>) -> std::io::Result<Liveness> {
        match pidfd {
            Ok(None) => Ok(Liveness::StartTime),
            Ok(Some(fd)) if exited(&fd) => Ok(Liveness::Exited),
            Ok(Some(fd)) => Ok(Liveness::Pidfd(Arc::new(fd))),
            Err(e) if e.raw_os_error() == Some(nix::libc::ESRCH) => Ok(Liveness::Exited),
            Err(e) => Err(e),
        }
    }
}

/// Liveness is how an identity is checked, not part of what it is: two identities compare
/// equal whatever they hold here, so long as both or neither can still be current.
impl PartialEq for Liveness {
    fn eq(&self, other: &Liveness) -> bool {
        matches!(self, Liveness::Exited) == matches!(other, Liveness::Exited)
    }
}

impl Eq for Liveness {}

/// True once the pidfd's process has exited (a pidfd polls readable then, pidfd_open(2));
/// also when the poll itself fails, so that an unreadable state never counts as alive.
pub fn exited(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(0))
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::net::UnixListener;
    use std::process::{Command, Stdio};

    use super::*;

    #[test]
    fn a_peers_pidfd_tells_a_running_process_from_an_exited_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path).unwrap();
        // A process that connects, says one byte and waits for its stdin to close.
        let mut child = Command::new("python3")
            .args([
                "-c",
                "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.send(b'x'); sys.stdin.read()",
            ])
            .arg(&path)
            .stdin(Stdio::piped())
            .spawn()
            .expect("python3");
        let (mut conn, _) = listener.accept().unwrap();
        let mut b = [0u8; 1];
        conn.read_exact(&mut b).unwrap();
        let live = Liveness::of_peer(crate::proto::peer::peer_pidfd(&conn)).unwrap();
        let Liveness::Pidfd(fd) = &live else {
            let _ = child.kill();
            panic!("no pidfd for a running peer ({live:?}): SO_PEERPIDFD needs Linux 6.5");
        };
        assert!(!exited(fd));
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(exited(fd), "the peer exited and was reaped");
        // A pidfd taken now reports the exit (or the kernel refuses one: ESRCH).
        assert_eq!(
            Liveness::of_peer(crate::proto::peer::peer_pidfd(&conn)).unwrap(),
            Liveness::Exited
        );
        let other = std::io::Error::from_raw_os_error(nix::libc::EBADF);
        assert!(Liveness::of_peer(Err(other)).is_err());
        assert_eq!(Liveness::of_peer(Ok(None)).unwrap(), Liveness::StartTime);
    }
}
