//! Reading this process's own memory without faulting on an address that is no longer mapped:
//! `process_vm_readv(2)` on our own pid answers `EFAULT` where a load would be a `SIGSEGV`. The
//! registry reads queue indices this way, so that a runtime that frees a queue's memory without
//! destroying the queue through `ioctl` (which the hook would see) costs the queue its place in
//! the registry, not the process its life.

/// What a read of two words found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Words {
    /// The two 64-bit values.
    Read(u64, u64),
    /// At least one of them is not mapped, or not readable.
    Unmapped,
    /// The kernel refuses `process_vm_readv` here (seccomp, an old kernel): read them directly.
    Unsupported,
}

/// Reads the 64-bit words at `a` and `b`.
pub fn read_pair(a: u64, b: u64) -> Words {
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
        16 => Words::Read(out[0], out[1]),
        n if n >= 0 => Words::Unmapped,
        _ => match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EFAULT) => Words::Unmapped,
            _ => Words::Unsupported,
        },
    }
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
        // SAFETY: the page mapped above, unused from here on.
        assert_eq!(unsafe { libc::munmap(page, 4096) }, 0);
        assert_eq!(read_pair(p, p + 8), Words::Unmapped);
        assert_eq!(read_pair(a, p), Words::Unmapped, "one of the two");
    }
}
