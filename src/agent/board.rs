//! The edge boards' descriptors (`crate::proto::board`, docs/agent.md "Direct edges"): one
//! memfd per class that preempts others, made on first use. A writer gets a duplicate of the
//! descriptor (writable), a watcher the board reopened read-only through `/proc/self/fd`, so
//! that its mapping cannot raise an edge. The memfd's mode is 0400: a descriptor is reopened
//! with the inode's permissions, so a watcher cannot reopen its read-only descriptor writable
//! through its own `/proc/self/fd` either (unless it runs as root, which bypasses modes). The
//! agent itself never maps a board: it clears a slot with `pread`/`pwrite` and tells the
//! watchers to look again (`AgentMsg::BoardChanged`).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::FileExt;

use crate::proto::board::{BOARD_BYTES, SEQ_OFFSET, busy, slot_offset};

/// Why a board's descriptor could not be made or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BoardError {
    /// `memfd_create`, `ftruncate` or `fchmod` failed.
    #[error("making edge board {board} (memfd_create, ftruncate, fchmod): {source}")]
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
    /// Reading or writing a slot failed.
    #[error("clearing slot {slot} of edge board {board}: {source}")]
    Clear {
        /// The board.
        board: u32,
        /// The slot.
        slot: u32,
        /// The system's error.
        source: std::io::Error,
    },
}

/// The boards, by number.
#[derive(Debug, Default)]
pub struct Boards {
    by_id: BTreeMap<u32, File>,
}

impl Boards {
    fn board(&mut self, board: u32) -> Result<&File, BoardError> {
        use std::collections::btree_map::Entry;
        if let Entry::Vacant(e) = self.by_id.entry(board) {
            let make = |source| BoardError::Make { board, source };
            let fd = nix::sys::memfd::memfd_create(
                c"kfdq-edge-board",
                nix::sys::memfd::MFdFlags::MFD_CLOEXEC,
            )
            .map_err(|e| make(e.into()))?;
            let f = File::from(fd);
            f.set_len(BOARD_BYTES as u64).map_err(make)?;
            // Read-only for its owner, nothing for others: no reopen for writing.
            f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o400))
                .map_err(make)?;
            e.insert(f);
        }
        Ok(&self.by_id[&board])
    }

    /// A descriptor of `board` to pass: writable (a duplicate) or read-only (reopened).
    pub fn fd(&mut self, board: u32, writable: bool) -> Result<OwnedFd, BoardError> {
        let f = self.board(board)?;
        if writable {
            return f
                .as_fd()
                .try_clone_to_owned()
                .map_err(|source| BoardError::Pass {
                    board,
                    what: "dup",
                    source,
                });
        }
        File::open(format!("/proc/self/fd/{}", f.as_raw_fd()))
            .map(OwnedFd::from)
            .map_err(|source| BoardError::Pass {
                board,
                what: "reopen read-only through /proc/self/fd",
                source,
            })
    }

    /// Sets `slot` of `board` idle if it says busy, and counts the change. True: it was busy.
    pub fn clear(&mut self, board: u32, slot: u32) -> Result<bool, BoardError> {
        let Some(f) = self.by_id.get(&board) else {
            return Ok(false);
        };
        let err = |source| BoardError::Clear {
            board,
            slot,
            source,
        };
        let at = slot_offset(slot) as u64;
        let count = read_u32(f, at).map_err(err)?;
        if !busy(count) {
            return Ok(false);
        }
        f.write_all_at(&count.wrapping_add(1).to_ne_bytes(), at)
            .map_err(err)?;
        let seq = read_u32(f, SEQ_OFFSET as u64).map_err(err)?;
        f.write_all_at(&seq.wrapping_add(1).to_ne_bytes(), SEQ_OFFSET as u64)
            .map_err(err)?;
        Ok(true)
    }

    /// Whether `slot` of `board` says busy.
    #[cfg(test)]
    pub fn is_busy(&self, board: u32, slot: u32) -> bool {
        self.by_id
            .get(&board)
            .and_then(|f| read_u32(f, slot_offset(slot) as u64).ok())
            .is_some_and(busy)
    }
}

fn read_u32(f: &File, at: u64) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    f.read_exact_at(&mut b, at)?;
    Ok(u32::from_ne_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn the_read_only_descriptor_cannot_write_and_clearing_counts() {
        let mut b = Boards::default();
        let w = File::from(b.fd(3, true).unwrap());
        let r = File::from(b.fd(3, false).unwrap());
        // The writer raises slot 2; the read-only descriptor sees it and cannot write.
        w.write_all_at(&1u32.to_ne_bytes(), slot_offset(2) as u64)
            .unwrap();
        assert!(b.is_busy(3, 2));
        assert!(
            r.write_all_at(&0u32.to_ne_bytes(), slot_offset(2) as u64)
                .is_err()
        );
        assert!(b.clear(3, 2).unwrap());
        assert!(!b.is_busy(3, 2));
        assert!(!b.clear(3, 2).unwrap());
        assert_eq!(read_u32(&r, SEQ_OFFSET as u64).unwrap(), 1);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(r.metadata().unwrap().permissions().mode() & 0o777, 0o400);
    }
}
