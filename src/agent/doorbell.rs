//! The shims' doorbells (`ShimMsg::Doorbell`): one end of a `SOCK_SEQPACKET` pair per shim
//! connection, passed with `SCM_RIGHTS`. The launch that makes a process of a preempting class
//! busy sends one small message there (docs/shim.md, "Busy edges"); the server polls these
//! with its connections and takes a ring as a busy edge of the connection's process
//! (`NodeState::doorbell_rang`), which checks the class. A doorbell belongs to the connection
//! that passed it and goes with it.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::net::{RecvFlags, SocketType, recv, sockopt};

use super::conn::ConnId;

/// Why a passed descriptor is not taken as a doorbell.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DoorbellError {
    /// The doorbell line came without a descriptor.
    #[error("a doorbell message must carry one socket descriptor (SCM_RIGHTS) in the same sendmsg")]
    NoDescriptor,
    /// The descriptor is not a `SOCK_SEQPACKET` socket.
    #[error("the doorbell must be a SOCK_SEQPACKET Unix socket (socketpair); got something else")]
    NotSeqpacket,
}

/// What a doorbell had to say since the last look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ring {
    /// Nothing (a spurious wake-up).
    Quiet,
    /// At least one ring (several pending rings are one edge).
    Rang,
    /// The shim's end is closed (or the socket failed): forget it.
    Gone,
}

/// The doorbells, by the connection they belong to.
#[derive(Debug, Default)]
pub struct Doorbells {
    by_conn: BTreeMap<ConnId, OwnedFd>,
}

impl Doorbells {
    /// Takes `fd` as the doorbell of `conn` (replacing an earlier one).
    pub fn take(&mut self, conn: ConnId, fd: Option<OwnedFd>) -> Result<(), DoorbellError> {
        let fd = fd.ok_or(DoorbellError::NoDescriptor)?;
        if sockopt::socket_type(&fd) != Ok(SocketType::SEQPACKET) {
            return Err(DoorbellError::NotSeqpacket);
        }
        self.by_conn.insert(conn, fd);
        Ok(())
    }

    /// The doorbells to poll, in a stable order.
    pub fn polled(&self) -> Vec<(ConnId, BorrowedFd<'_>)> {
        self.by_conn.iter().map(|(c, f)| (*c, f.as_fd())).collect()
    }

    /// Reads every pending ring of `conn`'s doorbell (without blocking).
    pub fn read(&mut self, conn: ConnId) -> Ring {
        let Some(fd) = self.by_conn.get(&conn) else {
            return Ring::Quiet;
        };
        let mut ring = Ring::Quiet;
        let mut buf = [0u8; 16];
        loop {
            match recv(fd, &mut buf[..], RecvFlags::DONTWAIT) {
                // A shim rings with one byte; zero bytes is the end of the peer.
                Ok((_, 0)) => return self.forget(conn),
                Ok(_) => ring = Ring::Rang,
                Err(Errno::AGAIN) => return ring,
                Err(Errno::INTR) => {}
                Err(_) => return self.forget(conn),
            }
        }
    }

    fn forget(&mut self, conn: ConnId) -> Ring {
        self.by_conn.remove(&conn);
        Ring::Gone
    }

    /// Forgets the doorbells of connections that are gone.
    pub fn retain(&mut self, live: impl Fn(ConnId) -> bool) {
        self.by_conn.retain(|c, _| live(*c));
    }
}
