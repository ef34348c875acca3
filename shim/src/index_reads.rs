//! Reading a queue's indices without the registry lock, and the rule that makes it sound.
//!
//! The write and read indices of a queue live in the runtime's memory, which the runtime frees
//! once its DESTROY_QUEUE of the queue returns. Reads under the registry lock check that the
//! queue is registered and not dying (`state/queue.rs`). The in-flight window reads them on every
//! launch without the lock, from addresses it looked up earlier; for those reads the rule is:
//!
//! > A lock-free read of a queue's indices happens inside a *read section* opened at the
//! > [`WINDOW_GEN`] generation read before the addresses were looked up (under the lock, on a
//! > registered queue that was not dying); the section reads nothing if the generation has moved
//! > since. Whatever lets a queue's memory go — the ioctl hook's DESTROY_QUEUE, control stopping
//! > (after which the hook forwards DESTROY_QUEUE untouched) — first marks the queue dying or
//! > stops control under the lock, then moves the generation and waits, with [`retire`], until
//! > no section opened at an older generation is still open, and only then lets the call through.
//!
//! So a section either opened before the generation moved, and the memory stays until it closes,
//! or it sees the new generation and reads nothing (its caller looks the queue up again, under the
//! lock, and finds it dying or gone).
//!
//! Each thread announces its open section in a slot of its own (one store, no shared cache line),
//! and the waiting side makes the announcement visible with `membarrier(2)` (a barrier on every
//! thread of the process, paid only by the rare waiter), so a read costs two plain stores and a
//! load on top of the reads themselves, which are kernel copies (`self_mem.rs`: one
//! `process_vm_readv`), never loads of ours: memory the runtime freed without the hook seeing it
//! reads as (0, 0) instead of faulting the process (issue 50 item 12). Where `membarrier` is not available both sides use a full
//! fence instead. A thread without a slot (more than [`SLOTS`] threads reading at once) reads
//! under the registry lock instead.

use std::cell::Cell;
use std::sync::Once;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering, compiler_fence, fence};

use crate::self_mem::Words;
use crate::window_setting::WINDOW_GEN;

/// Slots for threads that read indices without the lock.
pub const SLOTS: usize = 128;

/// A slot no thread holds.
const FREE: u64 = u64::MAX;
/// A slot whose thread has no section open. Generations start at 1.
const IDLE: u64 = 0;

/// One slot per cache line, so that announcing touches no other thread's line.
#[repr(align(64))]
struct Slot(AtomicU64);

static TABLE: [Slot; SLOTS] = [const { Slot(AtomicU64::new(FREE)) }; SLOTS];

/// How the two sides order the announcement against the generation.
const MODE_UNKNOWN: u8 = 0;
/// `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)` on the waiting side, a compiler fence in reads.
const MODE_MEMBARRIER: u8 = 1;
/// A full fence on both sides.
const MODE_FENCE: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(MODE_UNKNOWN);
static MODE_ONCE: Once = Once::new();

/// `linux/membarrier.h`.
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// Chooses the mode, once, before the first slot is taken.
fn choose_mode() {
    MODE_ONCE.call_once(|| {
        // SAFETY: membarrier takes plain integers and touches no memory of ours.
        let r = unsafe {
            libc::syscall(
                libc::SYS_membarrier,
                MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
                0,
                0,
            )
        };
        let mode = if r == 0 { MODE_MEMBARRIER } else { MODE_FENCE };
        MODE.store(mode, Ordering::SeqCst);
    });
}

thread_local! {
    /// The calling thread's slot once it has one (a plain thread-local: reading it costs one
    /// load on the launch path).
    static MINE: Cell<Option<&'static AtomicU64>> = const { Cell::new(None) };
    /// Gives the slot back when the thread ends.
    static RELEASE: Release = const { Release(Cell::new(None)) };
}

/// Frees its slot when its thread ends.
struct Release(Cell<Option<usize>>);

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(i) = self.0.take() {
            MINE.with(|m| m.set(None));
            TABLE[i].0.store(FREE, Ordering::Release);
        }
    }
}

/// The calling thread's slot: the one it holds, or a free one taken now; `None` when every slot
/// is taken or the thread is ending.
#[inline(always)]
fn slot() -> Option<&'static AtomicU64> {
    match MINE.with(Cell::get) {
        Some(s) => Some(s),
        None => claim(),
    }
}

#[cold]
#[inline(never)]
fn claim() -> Option<&'static AtomicU64> {
    choose_mode();
    RELEASE
        .try_with(|r| {
            let i = TABLE.iter().position(|s| {
                s.0.compare_exchange(FREE, IDLE, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            })?;
            r.0.set(Some(i));
            let s = &TABLE[i].0;
            MINE.with(|m| m.set(Some(s)));
            Some(s)
        })
        .ok()
        .flatten()
}

/// What a lock-free read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// (write index, read index).
    Indices(u64, u64),
    /// The generation moved since the addresses were looked up: nothing was read; look the
    /// queue up again.
    Stale,
    /// This thread has no slot: nothing was read; read under the registry lock.
    NoSlot,
}

/// Reads the 64-bit indices at `wptr` and `rptr` inside a read section at `generation`.
///
/// The words are copied by the kernel (`self_mem.rs`), so the read cannot fault, even on memory
/// the runtime freed without a DESTROY_QUEUE the hook saw: such memory reads as an idle queue,
/// (0, 0), so the window lets the launch go (the registry forgets the queue at its next read
/// under the lock). The section and its generation make the words this queue's live indices:
/// `wptr` and `rptr` are to be a queue's index addresses, taken from the registry, under its
/// lock, for a registered queue that was not dying, after `generation` was read from
/// [`WINDOW_GEN`] (the module's rule); other addresses read whatever is there, or (0, 0).
#[inline(always)]
pub fn read(wptr: usize, rptr: usize, generation: u64) -> Read {
    let Some(slot) = slot() else {
        return Read::NoSlot;
    };
    slot.store(generation, Ordering::Relaxed);
    if MODE.load(Ordering::Relaxed) == MODE_MEMBARRIER {
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
    let r = if WINDOW_GEN.load(Ordering::SeqCst) == generation {
        // The section is open at `generation` and the generation has not moved, so whatever lets
        // this queue's memory go through the hook waits in `retire` until the section closes.
        match crate::self_mem::read_pair(wptr as u64, rptr as u64) {
            Words::Read(w, r) => Read::Indices(w, r),
            Words::Unmapped | Words::Failed => Read::Indices(0, 0),
        }
    } else {
        Read::Stale
    };
    slot.store(IDLE, Ordering::Release);
    r
}

/// Waits until no read section opened at a generation up to `before` is open. The caller moved
/// [`WINDOW_GEN`] past `before` after marking a queue dying (or stopping control) under the
/// registry lock, and lets the queue's memory go only after this returns.
pub fn retire(before: u64) {
    match MODE.load(Ordering::SeqCst) {
        // No thread ever took a slot: no section can be open.
        MODE_UNKNOWN => return,
        MODE_MEMBARRIER => {
            // SAFETY: as in `choose_mode`.
            let r = unsafe {
                libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0)
            };
            // Registered at `choose_mode`, so it cannot fail but for a kernel bug: then order
            // this side at least.
            if r != 0 {
                fence(Ordering::SeqCst);
            }
        }
        _ => fence(Ordering::SeqCst),
    }
    for slot in &TABLE {
        let mut spins = 0u32;
        loop {
            let v = slot.0.load(Ordering::Acquire);
            if v == FREE || v == IDLE || v > before {
                break;
            }
            // A section is a few loads long: spin briefly, then let its thread run.
            spins += 1;
            if spins < 100 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// In a `fork` child: the parent's other threads are gone, so their slots are free; the calling
/// thread keeps its own (no section is open while it forks).
pub fn reset_after_fork() {
    let mine = RELEASE.try_with(|r| r.0.get()).ok().flatten();
    for (i, slot) in TABLE.iter().enumerate() {
        let v = if Some(i) == mine { IDLE } else { FREE };
        slot.0.store(v, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_section_reads_at_its_generation_only() {
        let idx = [9u64, 4];
        let (w, r) = (
            &idx[0] as *const u64 as usize,
            &idx[1] as *const u64 as usize,
        );
        let now = WINDOW_GEN.load(Ordering::SeqCst);
        let got = read(w, r, now);
        // Another test may move the generation meanwhile; then nothing is read.
        assert!(matches!(got, Read::Indices(9, 4) | Read::Stale), "{got:?}");
        assert_eq!(read(w, r, 0), Read::Stale, "an older generation");
        // No section of this thread is open now: retire does not wait for it.
        retire(WINDOW_GEN.load(Ordering::SeqCst));
    }

    #[test]
    fn freed_memory_reads_as_an_idle_queue() {
        let page = crate::self_mem::test_page();
        let p = page as usize;
        // Inaccessible rather than unmapped, so that no other test thread's mapping takes the
        // range before the read; the kernel answers a freed and an inaccessible page alike.
        // SAFETY: the page mapped above, unused from here on but by the read below.
        assert_eq!(unsafe { libc::mprotect(page, 4096, libc::PROT_NONE) }, 0);
        let now = WINDOW_GEN.load(Ordering::SeqCst);
        let got = read(p, p + 8, now);
        assert!(matches!(got, Read::Indices(0, 0) | Read::Stale), "{got:?}");
        // SAFETY: the page mapped above; nothing refers to it any more.
        assert_eq!(unsafe { libc::munmap(page, 4096) }, 0);
    }
}
