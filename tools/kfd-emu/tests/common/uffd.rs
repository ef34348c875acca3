//! A userfaultfd page of the test process: an access to it, by this process or by the emulator
//! through `process_vm_readv`/`writev`, waits until the test fills it; and what a thread of
//! this process is blocked in.

use std::fmt::Debug;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{self, Receiver};
use std::time::Duration;

use super::{Mapping, WAIT_LIMIT, abort_fuse_connection, raw_ioctl};

/// A userfaultfd over one anonymous page of this process: the first access to the page, by
/// this process or by another through `process_vm_writev`, waits until [`Uffd::fill`].
pub struct Uffd {
    fd: OwnedFd,
    pub page: Mapping,
}

/// `include/uapi/linux/userfaultfd.h`: the API version, the ioctls (`_IOWR(0xAA, nr, size)`),
/// the register mode and the page-fault event.
const UFFD_API: u64 = 0xAA;
const UFFDIO_API: u32 = 0xC018_AA3F;
const UFFDIO_REGISTER: u32 = 0xC020_AA00;
const UFFDIO_ZEROPAGE: u32 = 0xC020_AA04;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;

impl Uffd {
    pub fn new() -> Uffd {
        let page = Mapping::new(4096);
        // SAFETY: plain syscall; the descriptor it returns is owned below.
        let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC) };
        assert!(fd >= 0, "userfaultfd: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // struct uffdio_api { api, features, ioctls }
        let mut api = [UFFD_API, 0, 0];
        raw_ioctl(fd.as_raw_fd(), UFFDIO_API, api.as_mut_ptr().cast()).expect("UFFDIO_API");
        // struct uffdio_register { range { start, len }, mode, ioctls }
        let mut reg = [page.addr(), 4096, UFFDIO_REGISTER_MODE_MISSING, 0];
        raw_ioctl(fd.as_raw_fd(), UFFDIO_REGISTER, reg.as_mut_ptr().cast())
            .expect("UFFDIO_REGISTER");
        Uffd { fd, page }
    }

    /// Waits (at most `limit`) for a fault on the page; true when one came.
    pub fn wait_fault(&self, limit: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut pfd, 1, limit.as_millis() as i32) };
        if n != 1 {
            return false;
        }
        // struct uffd_msg: 32 bytes, the event first.
        let mut msg = [0u8; 32];
        let n = nix::unistd::read(&self.fd, &mut msg).expect("read the userfaultfd");
        n == 32 && msg[0] == UFFD_EVENT_PAGEFAULT
    }

    /// Maps the zero page there: the waiting access goes on.
    pub fn fill(&self) {
        // struct uffdio_zeropage { range { start, len }, mode, zeropage }
        let mut z = [self.page.addr(), 4096, 0, 0];
        raw_ioctl(self.fd.as_raw_fd(), UFFDIO_ZEROPAGE, z.as_mut_ptr().cast())
            .expect("UFFDIO_ZEROPAGE");
    }

    /// [`Uffd::fill`], then the results of the two calls the page held, from their threads'
    /// channels. When either does not come within the wait limit, the FUSE connection `conn`
    /// is aborted (so no thread stays hung in the mount) and the test fails naming `what`.
    pub fn fill_and_collect<A: Debug, B: Debug>(
        &self,
        conn: u64,
        a: &Receiver<A>,
        b: &Receiver<B>,
        what: &str,
    ) -> (A, B) {
        self.fill();
        match (a.recv_timeout(WAIT_LIMIT), b.recv_timeout(WAIT_LIMIT)) {
            (Ok(a), Ok(b)) => (a, b),
            done => {
                let _ = abort_fuse_connection(conn);
                panic!("{what} did not return once the fault was filled: {done:?}");
            }
        }
    }
}

/// Reads the first byte of `page`, an untouched page of a live device-file mapping, on another
/// thread and waits for it: once it returns, the proxy's reader has dealt with every request
/// and interrupt queued before that READ (interrupts are read first). False when the reader
/// did not serve it within the wait limit.
pub fn reader_serves(page: usize) -> bool {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // SAFETY: the caller names the first byte of an untouched page of a live mapping.
        let _ = unsafe { std::ptr::read_volatile(page as *const u8) };
        let _ = tx.send(());
    });
    rx.recv_timeout(WAIT_LIMIT).is_ok()
}

/// This thread's kernel id.
pub fn gettid() -> u32 {
    nix::unistd::gettid().as_raw() as u32
}

/// Whether thread `tid` of this process sleeps in an ioctl (`/proc/<pid>/task/<tid>/syscall`
/// starts with the syscall number while it is blocked in one; 16 is ioctl on x86-64).
pub fn blocked_in_ioctl(tid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{}/task/{tid}/syscall", std::process::id()))
        .is_ok_and(|s| s.starts_with("16 "))
}
