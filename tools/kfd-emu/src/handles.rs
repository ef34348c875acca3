//! The mount's open files: FUSE file handle -> what was opened. Kept in the shared core
//! (`Emu::handles`) rather than in the filesystem value, because the `/dev/fuse` proxy's reader
//! thread resolves a `dev/kfd` handle too when it answers a queue ioctl itself
//! (`reader_ioctl`).
//!
//! The table's lock is a leaf: its holders (`fs::KfdFs`'s open, read, write, release and
//! ioctl) do nothing under it but look up, insert or remove an entry, and the control-file
//! writes (`faults_file::write`, `unplug::write`), which take only their own leaf locks.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// An open file.
pub(crate) enum Handle {
    Kfd {
        tgid: u32,
    },
    Render(usize),
    Text(Vec<u8>),
    /// `kfd-emu/faults`, with its content when opened.
    Faults(Vec<u8>),
    /// `kfd-emu/unplug`, with its content when opened.
    Unplug(Vec<u8>),
}

/// The handle table.
#[derive(Default)]
pub(crate) struct Handles(Mutex<HashMap<u64, Handle>>);

impl Handles {
    /// The table, locked.
    pub fn lock(&self) -> MutexGuard<'_, HashMap<u64, Handle>> {
        crate::locks::lock(&self.0, "handle table")
    }

    /// The process that opened `fh` when it is a `dev/kfd` handle (waiting for the table).
    pub fn kfd_opener(&self, fh: u64) -> Option<u32> {
        match self.lock().get(&fh) {
            Some(Handle::Kfd { tgid }) => Some(*tgid),
            _ => None,
        }
    }

    /// Without waiting: `None` when another thread holds the table now (the caller must not
    /// wait: `reader_ioctl`), else the process that opened `fh` when it is a `dev/kfd` handle.
    pub fn try_kfd_opener(&self, fh: u64) -> Option<Option<u32>> {
        let table = crate::locks::try_lock(&self.0, "handle table")?;
        Some(match table.get(&fh) {
            Some(Handle::Kfd { tgid }) => Some(*tgid),
            _ => None,
        })
    }
}
