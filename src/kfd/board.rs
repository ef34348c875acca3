//! An edge board mapped (`crate::proto::board`, docs/agent.md "Direct edges"): the one piece
//! of code through which the agent and the shims read and write a board. Every word is an
//! [`AtomicU32`] (other processes change them at any time); a slot moves only by a
//! compare-exchange from the count its mover saw ([`Board::step`]), so the agent clearing a
//! slot never overwrites a fresh edge of its writer, and a count never moves backwards.
//!
//! The board's memfd (made by the agent, `crate::agent::board`) is sealed against any change of
//! its size, and, once its writer mapped it, against every new write or writable mapping
//! ([`seal_writes`]): a watcher's descriptor, whatever it is reopened or re-moded as, can
//! neither write nor map it writable; the writer's and the agent's mappings made before stay
//! writable.

#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::proto::board::{BOARD_BYTES, SEQ_OFFSET, SLOTS, busy, slot_offset};

/// A board's page: `BOARD_BYTES / 4` words, each only ever read and written atomically.
#[derive(Debug)]
#[repr(C, align(4096))]
pub struct Board([AtomicU32; BOARD_BYTES / 4]);

const _: () = assert!(std::mem::size_of::<Board>() == BOARD_BYTES);

impl Board {
    /// The change counter (the futex word).
    pub fn seq(&self) -> &AtomicU32 {
        &self.0[SEQ_OFFSET / 4]
    }

    /// Slot `i`'s edge count (`None` beyond the board).
    pub fn slot(&self, i: u32) -> Option<&AtomicU32> {
        (i < SLOTS).then(|| &self.0[slot_offset(i) / 4])
    }

    /// Moves slot `i` one step (busy <-> idle) if it still holds `from`: then bumps the
    /// counter and wakes the board's waiters. False: the slot moved meanwhile (whoever moved
    /// it bumped the counter), or `i` is beyond the board.
    pub fn step(&self, i: u32, from: u32) -> bool {
        let Some(slot) = self.slot(i) else {
            return false;
        };
        if slot
            .compare_exchange(
                from,
                from.wrapping_add(1),
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_err()
        {
            return false;
        }
        self.seq().fetch_add(1, Ordering::SeqCst);
        wake(self.seq());
        true
    }

    /// Moves slot `i` to `to_busy` (odd: busy) unless it is there already or moved meanwhile.
    /// True: this call moved it.
    pub fn flip(&self, i: u32, to_busy: bool) -> bool {
        let Some(c) = self.slot(i).map(|s| s.load(Ordering::SeqCst)) else {
            return false;
        };
        busy(c) != to_busy && self.step(i, c)
    }

    /// Slot `i`'s edge count now (`None` beyond the board).
    pub fn count(&self, i: u32) -> Option<u32> {
        self.slot(i).map(|s| s.load(Ordering::SeqCst))
    }
}

/// A board mapped shared; unmapped when dropped (unless [`BoardMap::leak`]ed).
#[derive(Debug)]
pub struct BoardMap {
    base: NonNull<Board>,
}

// SAFETY: the mapping is shared memory read and written only through atomics (`Board`), valid
// until this owner unmaps it; moving the owner to another thread changes neither.
unsafe impl Send for BoardMap {}
// SAFETY: as for Send: every access through `&Board` is atomic.
unsafe impl Sync for BoardMap {}

impl BoardMap {
    /// Maps the board `fd` shared, writable or read-only. The descriptor may be closed after:
    /// the mapping keeps the memfd.
    pub fn map(fd: impl AsFd, writable: bool) -> std::io::Result<BoardMap> {
        let size = fd_size(fd.as_fd())?;
        if size != BOARD_BYTES as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("an edge board is {BOARD_BYTES} bytes; this one is {size}"),
            ));
        }
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of BOARD_BYTES at offset 0 of an open descriptor
        // whose file is that long (checked above; the agent seals its size, so it stays that
        // long); the null hint and no MAP_FIXED replace no existing memory. Failure returns
        // MAP_FAILED and maps nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                BOARD_BYTES,
                prot,
                libc::MAP_SHARED,
                fd.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<Board>()).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "mmap returned null")
        })?;
        Ok(BoardMap { base })
    }

    /// The mapping, never unmapped (a launch may hold a pointer into it at any time).
    pub fn leak(self) -> &'static Board {
        let b = self.base;
        std::mem::forget(self);
        // SAFETY: a live page-aligned mapping of BOARD_BYTES (`map`), never unmapped from now
        // on (the owner is forgotten); `Board` is only atomics, so shared access by other
        // threads and processes is sound.
        unsafe { b.as_ref() }
    }
}

impl std::ops::Deref for BoardMap {
    type Target = Board;
    fn deref(&self) -> &Board {
        // SAFETY: a live page-aligned mapping of BOARD_BYTES, unmapped only by `drop`, which
        // cannot run while this borrow of `self` lives; `Board` is only atomics.
        unsafe { self.base.as_ref() }
    }
}

impl Drop for BoardMap {
    fn drop(&mut self) {
        // SAFETY: the mapping `map` made, of BOARD_BYTES; no borrow of it outlives `self`
        // (every `&Board` borrows `self`), so nothing uses it after. An error leaves it mapped.
        unsafe { libc::munmap(self.base.as_ptr().cast(), BOARD_BYTES) };
    }
}

fn fd_size(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<u64> {
    Ok(nix::sys::stat::fstat(fd)
        .map_err(std::io::Error::from)?
        .st_size as u64)
}

/// The seals a board's memfd carries from its making: its size never changes.
pub const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;

/// The seals of a board whose writer mapped it: no new write or writable mapping through any
/// descriptor, and no seal changes.
pub const WRITE_SEALS: libc::c_int = libc::F_SEAL_FUTURE_WRITE;

/// The seals `fd` carries (`F_GET_SEALS`).
pub fn seals(fd: impl AsFd) -> std::io::Result<libc::c_int> {
    // SAFETY: F_GET_SEALS on an open descriptor takes no pointer and changes nothing.
    let r = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_GET_SEALS) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r)
}

/// Adds `seals` to the memfd `fd` (`F_ADD_SEALS`).
pub fn add_seals(fd: impl AsFd, seals: libc::c_int) -> std::io::Result<()> {
    // SAFETY: F_ADD_SEALS on an open descriptor takes an int and no pointer.
    let r = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_ADD_SEALS, seals) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The writer, once it mapped its board: no write or writable mapping is possible from now on
/// except through the mappings already made (its own and the agent's).
pub fn seal_writes(fd: impl AsFd) -> std::io::Result<()> {
    add_seals(fd, WRITE_SEALS)
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
    // SAFETY: FUTEX_WAIT (shared: other processes wake it) on a live 4-aligned u32 (the
    // borrow keeps its mapping), with a timespec on the stack or null; the kernel only reads
    // them.
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
    // SAFETY: FUTEX_WAKE (shared) on a live 4-aligned u32 (the borrow keeps its mapping); no
    // memory is written.
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
