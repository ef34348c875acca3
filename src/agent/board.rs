//! The edge boards' memfds (`crate::proto::board`, docs/agent.md "Direct edges"): one board
//! per writer, made on first use, so that a writer can touch no slot but its own.
//!
//! * Made with `MFD_ALLOW_SEALING` and sealed at once against any change of its size
//!   (`F_SEAL_SHRINK | F_SEAL_GROW`): `ftruncate` by anyone holding it fails, and no mapping
//!   of it can fault (SIGBUS) for a page that went away.
//! * The agent maps it writable first (it clears a forged or stale slot through that mapping,
//!   with the compare-exchange of [`crate::kfd::board`], the code the shims run), then passes
//!   its writer a duplicate. The writer maps it and seals it against every later write
//!   (`F_SEAL_FUTURE_WRITE`), and says so (`ShimMsg::BoardSealed`); the agent checks the
//!   seal ([`Boards::sealed`]), adds `F_SEAL_SEAL`, and only then hands the board to watchers:
//!   a watcher's descriptor — reopened read-only through `/proc/self/fd`, and even if a root
//!   watcher changes the memfd's mode and reopens it read-write — can neither `write`,
//!   `ftruncate`, punch holes in nor map writable a sealed board.
//! * A board is dropped with its writer (gone, or no longer of a class that preempts anyone):
//!   the writer's mapping stays, but nobody watches that board any more.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use crate::kfd::board::{BoardMap, SIZE_SEALS, WRITE_SEALS, add_seals, seals};
use crate::proto::board::{BOARD_BYTES, busy};

/// Why a board's descriptor could not be made or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BoardError {
    /// `memfd_create`, `ftruncate`, sealing or mapping failed.
    #[error("making edge board {board} (memfd_create, ftruncate, seals, mmap): {source}")]
    Make {
        /// The board.
        board: u32,
        /// The system's error.
        source: std::io::Error,
    },
    /// Duplicating or reopening the descriptor failed.
    #[error("passing edge board {board} ({what}): {source}")]
    Pass {
        /// The board.
        board: u32,
        /// `dup` or the read-only reopen.
        what: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// A watcher's descriptor was asked for a board its writer has not sealed.
    #[error(
        "edge board {board} is not sealed against writes (F_SEAL_FUTURE_WRITE) by its writer: it is passed to no watcher"
    )]
    NotSealed {
        /// The board.
        board: u32,
    },
}

/// What [`Boards::check`] found of a slot whose writer the agent believes idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotCheck {
    /// Idle, as the agent believes (or no such board).
    Idle,
    /// Busy: look again at this time; if it still holds the same count then, it is forged.
    Suspect(Instant),
    /// Busy with the same count for [`FORGED_AFTER`] while the agent believed its writer idle:
    /// cleared.
    Cleared,
}

/// How long a slot may say busy, with one count, while the agent believes its writer idle,
/// before the agent takes it as forged and clears it. A real busy edge rings the agent's
/// doorbell (the writer's relay thread) within microseconds of the slot; the bound is the one
/// the agent gives a busy process's silence (`crate::proto::BUSY_STALE`, 100 ms), so a forged
/// slot costs its watchers no more than a stopped writer does.
pub const FORGED_AFTER: Duration = crate::proto::BUSY_STALE;

#[derive(Debug)]
struct Entry {
    file: File,
    map: BoardMap,
    /// A busy count seen while the agent believed the writer idle, and when first.
    suspect: Option<(u32, Instant)>,
}

/// The boards, by number.
#[derive(Debug, Default)]
pub struct Boards {
    by_id: BTreeMap<u32, Entry>,
}

impl Boards {
    fn board(&mut self, board: u32) -> Result<&Entry, BoardError> {
        use std::collections::btree_map::Entry as E;
        if let E::Vacant(e) = self.by_id.entry(board) {
            let make = |source| BoardError::Make { board, source };
            let fd = nix::sys::memfd::memfd_create(
                c"kfdq-edge-board",
                nix::sys::memfd::MFdFlags::MFD_CLOEXEC
                    | nix::sys::memfd::MFdFlags::MFD_ALLOW_SEALING,
            )
            .map_err(|e| make(e.into()))?;
            let file = File::from(fd);
            file.set_len(BOARD_BYTES as u64).map_err(make)?;
            add_seals(&file, SIZE_SEALS).map_err(make)?;
            // Read-only for its owner, nothing for others: no reopen for writing by others.
            file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o400))
                .map_err(make)?;
            let map = BoardMap::map(&file, true).map_err(make)?;
            e.insert(Entry {
                file,
                map,
                suspect: None,
            });
        }
        Ok(&self.by_id[&board])
    }

    /// A descriptor of `board` to pass: its writer's (a duplicate, before the writer sealed it)
    /// or a watcher's (reopened read-only; only once the writer sealed it).
    pub fn fd(&mut self, board: u32, writable: bool) -> Result<OwnedFd, BoardError> {
        let e = self.board(board)?;
        if writable {
            return e
                .file
                .as_fd()
                .try_clone_to_owned()
                .map_err(|source| BoardError::Pass {
                    board,
                    what: "dup",
                    source,
                });
        }
        if !has_write_seals(&e.file) {
            return Err(BoardError::NotSealed { board });
        }
        File::open(format!("/proc/self/fd/{}", e.file.as_raw_fd()))
            .map(OwnedFd::from)
            .map_err(|source| BoardError::Pass {
                board,
                what: "reopen read-only through /proc/self/fd",
                source,
            })
    }

    /// Whether `board`'s writer sealed it against writes (then its seals are sealed too).
    pub fn sealed(&mut self, board: u32) -> bool {
        let Some(e) = self.by_id.get(&board) else {
            return false;
        };
        if !has_write_seals(&e.file) {
            return false;
        }
        // No seal changes from now on (already there if the writer added it).
        let _ = add_seals(&e.file, libc::F_SEAL_SEAL);
        true
    }

    /// Forgets `board` (its writer went or lost its class): the agent's descriptor and
    /// mapping go; watchers are told to stop watching it.
    pub fn drop_board(&mut self, board: u32) {
        self.by_id.remove(&board);
    }

    /// Sets `slot` of `board` idle if it says busy (one compare-exchange from the count read:
    /// a fresh edge of its writer is never overwritten). True: this call cleared it.
    pub fn clear(&mut self, board: u32, slot: u32) -> bool {
        let Some(e) = self.by_id.get_mut(&board) else {
            return false;
        };
        e.suspect = None;
        e.map
            .count(slot)
            .is_some_and(|c| busy(c) && e.map.step(slot, c))
    }

    /// Looks at `slot` of `board`, whose writer the agent believes idle at `now`: a slot busy
    /// with one count for [`FORGED_AFTER`] is forged, and cleared.
    pub fn check(&mut self, board: u32, slot: u32, now: Instant) -> SlotCheck {
        let Some(e) = self.by_id.get_mut(&board) else {
            return SlotCheck::Idle;
        };
        let Some(c) = e.map.count(slot).filter(|c| busy(*c)) else {
            e.suspect = None;
            return SlotCheck::Idle;
        };
        match e.suspect {
            Some((seen, since)) if seen == c => {
                if now < since + FORGED_AFTER {
                    return SlotCheck::Suspect(since + FORGED_AFTER);
                }
                e.suspect = None;
                if e.map.step(slot, c) {
                    SlotCheck::Cleared
                } else {
                    // Its writer moved it meanwhile: a live writer; look again later.
                    SlotCheck::Idle
                }
            }
            _ => {
                e.suspect = Some((c, now));
                SlotCheck::Suspect(now + FORGED_AFTER)
            }
        }
    }

    /// The agent believes `board`'s writer busy: a busy slot is no suspect.
    pub fn believed_busy(&mut self, board: u32) {
        if let Some(e) = self.by_id.get_mut(&board) {
            e.suspect = None;
        }
    }

    /// Whether `slot` of `board` says busy.
    #[cfg(test)]
    pub fn is_busy(&self, board: u32, slot: u32) -> bool {
        self.by_id
            .get(&board)
            .and_then(|e| e.map.count(slot))
            .is_some_and(busy)
    }
}

fn has_write_seals(f: &File) -> bool {
    seals(f).is_ok_and(|s| s & (SIZE_SEALS | WRITE_SEALS) == SIZE_SEALS | WRITE_SEALS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kfd::board::seal_writes;
    use std::os::unix::fs::FileExt;

    #[test]
    fn a_board_is_sealed_and_passed_to_watchers_only_once_its_writer_sealed_it() {
        let mut b = Boards::default();
        let w = File::from(b.fd(3, true).unwrap());
        // Its size is sealed from the start.
        assert!(w.set_len(0).is_err());
        assert!(w.set_len(2 * BOARD_BYTES as u64).is_err());
        // No watcher before the writer sealed it.
        assert!(matches!(
            b.fd(3, false),
            Err(BoardError::NotSealed { board: 3 })
        ));
        assert!(!b.sealed(3));
        let wm = BoardMap::map(&w, true).unwrap();
        seal_writes(&w).unwrap();
        assert!(b.sealed(3));
        let r = File::from(b.fd(3, false).unwrap());
        // The writer's mapping raises slot 0; the watcher sees it and can write nothing.
        assert!(wm.flip(0, true));
        assert!(b.is_busy(3, 0));
        assert!(r.write_all_at(&0u32.to_ne_bytes(), 64).is_err());
        assert!(w.write_all_at(&0u32.to_ne_bytes(), 64).is_err());
        assert!(b.clear(3, 0));
        assert!(!b.is_busy(3, 0));
        assert!(!b.clear(3, 0));
        assert_eq!(wm.seq().load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_slot_busy_with_one_count_while_its_writer_is_believed_idle_is_cleared() {
        let mut b = Boards::default();
        let w = File::from(b.fd(0, true).unwrap());
        let wm = BoardMap::map(&w, true).unwrap();
        let t = Instant::now();
        assert_eq!(b.check(0, 0, t), SlotCheck::Idle);
        assert!(wm.flip(0, true));
        assert_eq!(b.check(0, 0, t), SlotCheck::Suspect(t + FORGED_AFTER));
        assert_eq!(
            b.check(0, 0, t + FORGED_AFTER / 2),
            SlotCheck::Suspect(t + FORGED_AFTER)
        );
        // A new edge (idle, busy again) starts the look anew.
        assert!(wm.flip(0, false) && wm.flip(0, true));
        let t2 = t + FORGED_AFTER;
        assert_eq!(b.check(0, 0, t2), SlotCheck::Suspect(t2 + FORGED_AFTER));
        assert_eq!(b.check(0, 0, t2 + FORGED_AFTER), SlotCheck::Cleared);
        assert!(!b.is_busy(0, 0));
    }
}
