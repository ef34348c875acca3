//! The runtime's `/dev/kfd` fd, as the shim acts on it (levels 0, 2 and 3, CU masks).
//!
//! The fd is the runtime's: the shim learns its number from the runtime's CREATE_QUEUE and
//! records which file it was open on then (device and inode). The runtime may close it at any
//! time, and the number may then be reused for another file, so the shim never borrows the
//! number itself: each command takes a duplicate of it (`F_DUPFD_CLOEXEC`), checks with `fstat`
//! that the duplicate is open on the recorded file, acts through the duplicate, and closes it
//! when the command ends. A closed or replaced fd refuses the command before any ioctl; a
//! duplicate that passed the check stays on that file for as long as the command holds it,
//! whatever the runtime does with its own number meanwhile.
//!
//! The control thread closes a command's duplicate after the command's acknowledgement was sent
//! ([`CommandFd`], [`defer_closes`]): on kfd-emu a close is a FUSE FLUSH round trip through the
//! emulator, which the agent would otherwise wait for (on amdkfd closing a duplicate is cheap).

use std::cell::RefCell;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

thread_local! {
    /// Inside [`defer_closes`]: the command duplicates to close when its guard is dropped.
    static LATER: RefCell<Option<Vec<OwnedFd>>> = const { RefCell::new(None) };
}

/// A command's duplicate of the runtime's fd ([`KfdFd::open`]). Dropped, it is closed at once,
/// or inside [`defer_closes`] on this thread when that guard is dropped.
#[derive(Debug)]
pub struct CommandFd(Option<OwnedFd>);

impl CommandFd {
    /// Wraps a duplicate.
    pub fn new(fd: OwnedFd) -> CommandFd {
        CommandFd(Some(fd))
    }
}

impl AsFd for CommandFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.0 {
            Some(fd) => fd.as_fd(),
            // Only `drop` takes it.
            None => unreachable!("a CommandFd is taken only when dropped"),
        }
    }
}

impl Drop for CommandFd {
    fn drop(&mut self) {
        let Some(fd) = self.0.take() else { return };
        // Kept for later inside a deferral on this thread; otherwise closed here.
        let rest = LATER.with(|l| match l.borrow_mut().as_mut() {
            Some(v) => {
                v.push(fd);
                None
            }
            None => Some(fd),
        });
        drop(rest);
    }
}

/// Until the guard is dropped, the command duplicates dropped on this thread stay open; the
/// guard closes them. The control thread holds one while it answers an agent message and sends
/// the replies.
#[must_use]
pub fn defer_closes() -> DeferredCloses {
    LATER.with(|l| {
        let mut l = l.borrow_mut();
        if l.is_none() {
            *l = Some(Vec::new());
        }
    });
    DeferredCloses(())
}

/// See [`defer_closes`].
#[derive(Debug)]
pub struct DeferredCloses(());

impl Drop for DeferredCloses {
    fn drop(&mut self) {
        let fds = LATER.with(|l| l.borrow_mut().take());
        drop(fds);
    }
}

/// The runtime's `/dev/kfd` fd: its number and the file it was open on when recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KfdFd {
    fd: RawFd,
    dev: u64,
    ino: u64,
}

/// Why the runtime's `/dev/kfd` fd cannot be acted on.
#[derive(Debug)]
#[non_exhaustive]
pub enum KfdFdError {
    /// The number is not open any more: the runtime closed its `/dev/kfd` fd.
    Closed {
        /// The fd number.
        fd: RawFd,
    },
    /// The number is open on another file: the runtime closed its `/dev/kfd` fd and the number
    /// was reused.
    Replaced {
        /// The fd number.
        fd: RawFd,
    },
    /// Duplicating or inspecting the fd failed otherwise (e.g. too many open files).
    Io {
        /// The fd number.
        fd: RawFd,
        /// What failed.
        error: io::Error,
    },
}

impl fmt::Display for KfdFdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KfdFdError::Closed { fd } => write!(
                f,
                "the runtime's /dev/kfd fd {fd} was closed (by the runtime, after its last CREATE_QUEUE); no ioctl was issued"
            ),
            KfdFdError::Replaced { fd } => write!(
                f,
                "the runtime's /dev/kfd fd {fd} was replaced: the number now refers to another file (the runtime closed its \
                 /dev/kfd fd after its last CREATE_QUEUE); no ioctl was issued"
            ),
            KfdFdError::Io { fd, error } => write!(
                f,
                "cannot duplicate the runtime's /dev/kfd fd {fd} to act on it ({error}); no ioctl was issued"
            ),
        }
    }
}

impl std::error::Error for KfdFdError {}

impl KfdFd {
    /// Records the file fd `fd` is open on now (the runtime's fd, just used for a CREATE_QUEUE).
    pub fn identify(fd: RawFd) -> Result<KfdFd, KfdFdError> {
        let (dev, ino) = file_id(fd)?;
        Ok(KfdFd { fd, dev, ino })
    }

    /// A duplicate of the runtime's fd, checked to be open on the recorded file; the caller acts
    /// through it and closes it (drops it) when its command ends.
    pub fn open(&self) -> Result<OwnedFd, KfdFdError> {
        let fd = self.fd;
        // SAFETY: fcntl(F_DUPFD_CLOEXEC) takes the number by value and touches no memory of
        // ours; on a number that is not open it fails with EBADF.
        let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if new < 0 {
            return Err(error(fd, io::Error::last_os_error()));
        }
        // SAFETY: `new` is the descriptor fcntl just created for this call; nothing else owns
        // it, and the `OwnedFd` closes it once.
        let dup = unsafe { OwnedFd::from_raw_fd(new) };
        // The duplicate is ours: what it is open on cannot change until it is dropped.
        if file_id(dup.as_raw_fd())? != (self.dev, self.ino) {
            return Err(KfdFdError::Replaced { fd });
        }
        Ok(dup)
    }
}

/// (device, inode) of the file `fd` is open on (`fstat`); errors name the runtime's `fd`.
fn file_id(fd: RawFd) -> Result<(u64, u64), KfdFdError> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat takes the number by value and writes one `struct stat` through the pointer,
    // which points at one; on a number that is not open it fails (EBADF) and writes nothing.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(error(fd, io::Error::last_os_error()));
    }
    // SAFETY: fstat returned 0, so it filled the struct.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

fn error(fd: RawFd, error: io::Error) -> KfdFdError {
    if error.raw_os_error() == Some(libc::EBADF) {
        KfdFdError::Closed { fd }
    } else {
        KfdFdError::Io { fd, error }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn same_file(a: &OwnedFd, b: &File) -> bool {
        let (ma, mb) = (
            File::from(a.try_clone().expect("dup"))
                .metadata()
                .expect("fstat"),
            b.metadata().expect("fstat"),
        );
        (ma.dev(), ma.ino()) == (mb.dev(), mb.ino())
    }

    #[test]
    fn the_recorded_file_is_handed_out_as_a_duplicate() {
        let f = tempfile::tempfile().expect("tempfile");
        let k = KfdFd::identify(f.as_raw_fd()).expect("identify");
        assert_eq!(k.fd, f.as_raw_fd());
        let dup = k.open().expect("the same file");
        assert_ne!(
            dup.as_fd().as_raw_fd(),
            f.as_raw_fd(),
            "a duplicate, not the number"
        );
        assert!(same_file(&dup, &f));
    }

    #[test]
    fn inside_a_deferral_command_fds_close_when_the_guard_is_dropped() {
        let f = tempfile::tempfile().expect("tempfile");
        let k = KfdFd::identify(f.as_raw_fd()).expect("identify");
        // Open on the temporary file (another test's file may take the number once closed).
        let open = |fd: RawFd| file_id(fd).ok() == Some((k.dev, k.ino));
        let guard = defer_closes();
        let dup = CommandFd::new(k.open().expect("open"));
        let n = dup.as_fd().as_raw_fd();
        drop(dup);
        assert!(open(n), "still open inside the deferral");
        drop(guard);
        assert!(!open(n), "closed with the guard");
        // Outside a deferral: closed at once.
        let dup = CommandFd::new(k.open().expect("open"));
        let n = dup.as_fd().as_raw_fd();
        drop(dup);
        assert!(!open(n));
    }

    #[test]
    fn a_replaced_fd_is_refused() {
        let kfd = tempfile::tempfile().expect("tempfile");
        let other = tempfile::tempfile().expect("tempfile");
        let k = KfdFd::identify(kfd.as_raw_fd()).expect("identify");
        // The runtime closes its fd and the number is reused for another file.
        // SAFETY: dup2 onto a number `kfd` owns (it keeps owning it: afterwards the number is
        // open on `other`'s file, and `kfd` closes it once when dropped).
        let r = unsafe { libc::dup2(other.as_raw_fd(), kfd.as_raw_fd()) };
        assert_eq!(r, kfd.as_raw_fd());
        let e = k.open().expect_err("another file");
        assert!(
            matches!(e, KfdFdError::Replaced { fd } if fd == kfd.as_raw_fd()),
            "{e:?}"
        );
        let shown = e.to_string();
        assert!(
            shown.contains("/dev/kfd fd") && shown.contains("replaced"),
            "{shown}"
        );
    }

    #[test]
    fn a_closed_fd_is_refused() {
        let f = tempfile::tempfile().expect("tempfile");
        let k = KfdFd::identify(f.as_raw_fd()).expect("identify");
        // A number far above any open one (the test threads open and close files meanwhile, so
        // the number `f` frees could be reused at once).
        let closed = KfdFd { fd: 1 << 20, ..k };
        let e = closed.open().expect_err("closed");
        assert!(
            matches!(e, KfdFdError::Closed { fd } if fd == 1 << 20),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("/dev/kfd fd 1048576 was closed"),
            "{e}"
        );
    }
}
