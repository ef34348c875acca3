//! An edge board mapped (`kfdq::proto::board`, docs/shim.md "Direct edges"): the agent's
//! memfd, shared, writable for a writer and read-only for a watcher (the agent passes the
//! watcher a read-only descriptor, so its mapping cannot be made writable), and the futex
//! calls on its change counter. A mapping is never unmapped: a launch may hold a pointer into
//! it at any time (a page per board and session).

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use kfdq::proto::board::{BOARD_BYTES, SEQ_OFFSET, SLOTS, slot_offset};

/// A mapped board.
#[derive(Debug, Clone, Copy)]
pub struct BoardMap {
    base: *const u8,
}

// SAFETY: the mapping is shared memory read and written only through atomics, and never
// unmapped, so its address is valid on every thread for the life of the process.
unsafe impl Send for BoardMap {}
// SAFETY: as for Send: every access goes through `AtomicU32`.
unsafe impl Sync for BoardMap {}

impl BoardMap {
    /// Maps `fd` (closed after; the mapping keeps the memfd).
    pub fn map(fd: OwnedFd, writable: bool) -> std::io::Result<BoardMap> {
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of BOARD_BYTES of an open descriptor at offset 0; no
        // existing memory is replaced (null hint, no MAP_FIXED).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BOARD_BYTES,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(BoardMap {
            base: p.cast_const().cast(),
        })
    }

    fn word(&self, offset: usize) -> &'static AtomicU32 {
        // SAFETY: `offset` is one of the board's u32 words (SEQ_OFFSET, a slot's offset below
        // BOARD_BYTES), 4-aligned in a page-aligned mapping that is never unmapped; shared
        // memory other processes change is only read and written atomically.
        unsafe { &*self.base.add(offset).cast::<AtomicU32>() }
    }

    /// The change counter (the futex word).
    pub fn seq(&self) -> &'static AtomicU32 {
        self.word(SEQ_OFFSET)
    }

    /// Slot `i`'s edge count (`None` beyond the board).
    pub fn slot(&self, i: u32) -> Option<&'static AtomicU32> {
        (i < SLOTS).then(|| self.word(slot_offset(i)))
    }
}

/// Waits on `word` while it holds `seen`, at most `timeout` (`None`: until woken). Any outcome
/// (woken, changed, timed out, interrupted) returns: the caller looks again.
pub fn wait(word: &AtomicU32, seen: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: FUTEX_WAIT (shared: other processes wake it) on a live 4-aligned u32 of a shared
    // mapping, with a timespec on the stack or null; the kernel only reads them.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            tsp,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}

/// Wakes every waiter on `word` (in every process that maps it).
#[inline]
pub fn wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE (shared) on a live 4-aligned u32 of a shared mapping; no memory is
    // written.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        )
    };
}
