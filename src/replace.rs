//! Replacing a file atomically: the new bytes go to a dot file beside it (created exclusively,
//! with the mode asked), are synced, and a rename puts them in place, so a reader sees the whole
//! old file or the whole new one. The dot name keeps half-written files out of readers that
//! skip hidden files (node-feature-discovery's `features.d`).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `path` with `bytes`; the file gets `mode` (less the umask). On failure the
/// temporary file is removed and `path` is unchanged.
pub(crate) fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}-{}-{n}.tmp", std::process::id()));
    let done = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done
}
