//! The device plugin's allocations file as the agent holds it: read again when it changes
//! (its inode, size or mtime: the plugin replaces it by a rename, which is a new inode). A
//! file that cannot be read or parsed is logged once and counts as no allocations: every
//! token then gets the fallback class, which is never above what it was granted.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::allocation::AllocationFile;

/// What identifies a version of the file: (inode, size, mtime s, mtime ns); `None`: absent.
type Stamp = Option<(u64, u64, i64, i64)>;

/// The allocations file and the version of it last read.
#[derive(Debug)]
pub struct AllocationWatch {
    path: PathBuf,
    /// `None` before the first read.
    seen: Option<Stamp>,
}

impl AllocationWatch {
    /// Watches `path` (nothing read yet).
    pub fn new(path: &Path) -> AllocationWatch {
        AllocationWatch {
            path: path.to_owned(),
            seen: None,
        }
    }

    /// The watched file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Watches another file from now on (a reload changed `[kubernetes] allocations`).
    pub fn set_path(&mut self, path: &Path) {
        if path != self.path {
            *self = AllocationWatch::new(path);
        }
    }

    /// The file's contents when it changed since the last call (the first call always reads).
    pub fn poll(&mut self) -> Option<AllocationFile> {
        let stamp = std::fs::metadata(&self.path)
            .ok()
            .map(|m| (m.ino(), m.size(), m.mtime(), m.mtime_nsec()));
        if self.seen == Some(stamp) {
            return None;
        }
        self.seen = Some(stamp);
        Some(match AllocationFile::read(&self.path) {
            Ok(f) => {
                tracing::info!(
                    path = %self.path.display(),
                    allocations = f.allocations.len(),
                    "read the device plugin's allocations"
                );
                f
            }
            Err(e) => {
                tracing::error!(
                    "{e}: taken as no allocations (processes with a KFDQ_ALLOCATION get [kubernetes] pod_fallback_class) until the file is whole again"
                );
                AllocationFile::default()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocation::{Allocation, FILE_VERSION, Token};
    use crate::ids::GpuId;

    #[test]
    fn reads_on_change_only_and_a_broken_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allocations.json");
        let mut w = AllocationWatch::new(&path);
        assert_eq!(w.poll(), Some(AllocationFile::default()), "absent: empty");
        assert_eq!(w.poll(), None, "unchanged");
        let f = AllocationFile {
            version: FILE_VERSION,
            allocations: vec![Allocation {
                token: Token::from_bytes([3; 16]),
                class: "batch".into(),
                gpu: GpuId(1),
                devices: vec!["1-batch-0".into()],
                pod: None,
            }],
        };
        f.write(&path).unwrap();
        assert_eq!(w.poll(), Some(f.clone()));
        assert_eq!(w.poll(), None);
        std::fs::write(&path, "{ not json").unwrap();
        assert_eq!(w.poll(), Some(AllocationFile::default()), "broken: empty");
        f.write(&path).unwrap();
        assert_eq!(w.poll(), Some(f));
    }
}
