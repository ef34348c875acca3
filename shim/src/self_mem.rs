//! Reading this process's own memory without faulting on an address that is no longer mapped:
//! the kernel copies the words and answers `EFAULT` where a load of ours would be a `SIGSEGV`.
//! The shim reads queue indices only this way — under the registry lock and in the in-flight
//! window's lock-free check — so that a runtime that frees a queue's memory without destroying
//! the queue through `ioctl` (which the hook would see) costs the queue its place in the
//! registry, not the process its life (issue 50 item 12). Being kernel copies, these reads are
//! no access of Rust's to memory other threads and the GPU write, so no data race either.
//!
//! `process_vm_readv(2)` on our own pid copies both words in one call. Where the kernel refuses
//! it (a seccomp profile, an old kernel) the words go through a pipe instead: `write(2)` from the
//! address, which the kernel checks the same way, then `read(2)` back (four calls and a fresh
//! pipe per read; the refusal is remembered, so a refusing process pays only that).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// What a read of two words found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Words {
    /// The two 64-bit values.
    Read(u64, u64),
    /// At least one of them is not mapped, or not readable.
    Unmapped,
    /// Nothing could be read this time (no pipe to read through: out of descriptors): whether
    /// the memory is there is not known.
    Failed,
}

/// `process_vm_readv` was refused once: the pipe from then on.
static VM_READ_REFUSED: AtomicBool = AtomicBool::new(false);

/// Reads the 64-bit words at `a` and `b`.
pub fn read_pair(a: u64, b: u64) -> Words {
    if !VM_READ_REFUSED.load(Ordering::Relaxed) {
        match vm_read_pair(a, b) {
            Some(w) => return w,
            None => VM_READ_REFUSED.store(true, Ordering::Relaxed),
        }
    }
    pipe_read_pair(a, b)
}

/// Through `process_vm_readv`; `None` when the kernel refuses the call itself.
fn vm_read_pair(a: u64, b: u64) -> Option<Words> {
    let mut out = [0u64; 2];
    let local = [
        libc::iovec {
            iov_base: (&mut out[0] as *mut u64).cast(),
            iov_len: 8,
        },
        libc::iovec {
            iov_base: (&mut out[1] as *mut u64).cast(),
            iov_len: 8,
        },
    ];
    let remote = [a, b].map(|addr| libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: 8,
    });
    // SAFETY: `local` points at `out`, ours and 16 bytes long, for the whole call; `remote` only
    // names addresses, which the kernel checks (EFAULT) rather than our code dereferencing them.
    let n =
        unsafe { libc::process_vm_readv(libc::getpid(), local.as_ptr(), 2, remote.as_ptr(), 2, 0) };
    match n {
        16 => Some(Words::Read(out[0], out[1])),
        n if n >= 0 => Some(Words::Unmapped),
        _ => match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EFAULT) => Some(Words::Unmapped),
            _ => None,
        },
    }
}

/// Through a fresh pipe: each word written from its address (the kernel copies it, or answers
/// `EFAULT`), then read back.
fn pipe_read_pair(a: u64, b: u64) -> Words {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into `fds`, ours and two ints long.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Words::Failed;
    }
    // SAFETY: both descriptors were just made by pipe2 and belong to nothing else; each is owned
    // (and closed) exactly once, by these values.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let mut out = [0u64; 2];
    for (word, addr) in out.iter_mut().zip([a, b]) {
        // SAFETY: write(2) copies 8 bytes from `addr` inside the kernel, which checks the
        // address (EFAULT) rather than our code dereferencing it; the pipe is empty and holds 8
        // bytes without blocking.
        let n = unsafe { libc::write(w.as_raw_fd(), addr as *const libc::c_void, 8) };
        if n != 8 {
            return match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EFAULT) if n < 0 => Words::Unmapped,
                _ => Words::Failed,
            };
        }
        // SAFETY: reads the 8 bytes just written into `word`, ours and 8 bytes long.
        let n = unsafe { libc::read(r.as_raw_fd(), (word as *mut u64).cast(), 8) };
        if n != 8 {
            return Words::Failed;
        }
    }
    Words::Read(out[0], out[1])
}

/// A fresh private read-write page, for tests that unmap memory under the shim's readers.
#[cfg(test)]
pub fn test_page() -> *mut libc::c_void {
    // SAFETY: a new anonymous mapping; nothing else refers to it.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(page, libc::MAP_FAILED, "mmap a test page");
    page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_words_are_read_and_unmapped_ones_refused() {
        let words = Box::new([7u64, 9]);
        let (a, b) = (
            &words[0] as *const u64 as u64,
            &words[1] as *const u64 as u64,
        );
        assert_eq!(read_pair(a, b), Words::Read(7, 9));
        let page = test_page();
        let p = page as u64;
        assert_eq!(read_pair(p, p + 8), Words::Read(0, 0));
        // Inaccessible rather than unmapped, so that no other test thread's mapping takes the
        // range before the reads; the kernel answers EFAULT for both alike.
        // SAFETY: the page mapped above, unused from here on but by the reads below.
        assert_eq!(unsafe { libc::mprotect(page, 4096, libc::PROT_NONE) }, 0);
        assert_eq!(read_pair(p, p + 8), Words::Unmapped);
        assert_eq!(read_pair(a, p), Words::Unmapped, "one of the two");
        // SAFETY: the page mapped above; nothing refers to it any more.
        assert_eq!(unsafe { libc::munmap(page, 4096) }, 0);
    }

    #[test]
    fn the_pipe_reads_the_same_and_refuses_unmapped_words() {
        let words = Box::new([7u64, 9]);
        let (a, b) = (
            &words[0] as *const u64 as u64,
            &words[1] as *const u64 as u64,
        );
        assert_eq!(pipe_read_pair(a, b), Words::Read(7, 9));
        let page = test_page();
        let p = page as u64;
        // The page made inaccessible rather than unmapped: an unmapped range may be mapped again
        // by another test thread of this process before the reads (it was, beside two busy
        // loops: the read found zeros). The kernel answers EFAULT for both alike.
        // SAFETY: the page mapped above, unused from here on but by the reads below.
        assert_eq!(unsafe { libc::mprotect(page, 4096, libc::PROT_NONE) }, 0);
        assert_eq!(pipe_read_pair(p, p + 8), Words::Unmapped);
        assert_eq!(pipe_read_pair(a, p), Words::Unmapped, "one of the two");
        assert_eq!(pipe_read_pair(0, 0), Words::Unmapped, "address 0");
        // SAFETY: the page mapped above; nothing refers to it any more.
        assert_eq!(unsafe { libc::munmap(page, 4096) }, 0);
    }
}
