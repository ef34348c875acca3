//! The agent's socket read with `recvmsg`, so that the descriptors the agent passes
//! (`SCM_RIGHTS`: the edge boards of `AgentMsg::BoardWriter` and `AgentMsg::Watch`) are kept
//! instead of dropped. The kernel hands a descriptor over with the bytes it came with (the
//! first byte of its line), never after them, so a line that carries one finds it in
//! [`take_fd`], oldest first.

use std::collections::VecDeque;
use std::io::{IoSliceMut, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};

use crate::pmutex::PMutex;

/// Descriptors received and not claimed yet (at most a few: more are closed).
static RECEIVED: PMutex<VecDeque<OwnedFd>> = PMutex::new(VecDeque::new());
const MAX_KEPT: usize = 8;

/// The oldest descriptor received and not claimed.
pub fn take_fd() -> Option<OwnedFd> {
    RECEIVED.lock().pop_front()
}

/// In a fork child, before any of its threads run: the descriptors the parent received are
/// the parent's (its reader may have held the lock at the fork); the child's copies are left
/// open, as the child's other inherited descriptors are.
pub fn reset_after_fork() {
    // SAFETY: called only from the shim's `pthread_atfork` child handler, where the calling
    // thread is the only one.
    unsafe { RECEIVED.reset_after_fork(VecDeque::new()) };
}

/// Forgets the descriptors of a session that ended.
pub fn clear() {
    RECEIVED.lock().clear();
}

/// The agent's socket, read with `recvmsg`.
#[derive(Debug)]
pub struct FdStream(pub UnixStream);

impl Read for FdStream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 2]);
        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg::<()>(
            self.0.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(std::io::Error::from)?;
        let n = msg.bytes;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    for fd in fds {
                        // SAFETY: the kernel just installed `fd` in this process for us
                        // (SCM_RIGHTS); nothing else owns it.
                        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                        let mut r = RECEIVED.lock();
                        if r.len() < MAX_KEPT {
                            r.push_back(fd);
                        }
                    }
                }
            }
        }
        Ok(n)
    }
}
