//! Files in directories that other users must not be able to redirect.
//!
//! * [`replace`]: replacing a file atomically — the new bytes go to a dot file beside it
//!   (created with `O_EXCL | O_NOFOLLOW` relative to the directory's descriptor, with the mode
//!   asked), are synced, and a `renameat` in the same directory puts them in place, so a reader
//!   sees the whole old file or the whole new one, and a symlink planted at either name is
//!   never followed. The dot name keeps half-written files out of readers that skip hidden
//!   files (node-feature-discovery's `features.d`).
//! * [`PrivateDir`]: a directory of this user's own (`/tmp/kfdq-<uid>`): created 0700,
//!   refused unless it is a real directory (no symlink), owned by this user and writable by
//!   no one else; its files are opened relative to it, never through a path that could be
//!   swapped.

use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat, renameat};
use nix::sys::stat::{Mode, SFlag, fstat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// Replaces `path` with `bytes`; the file gets `mode` (less the umask). On failure the
/// temporary file is removed and `path` is unchanged.
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::other(format!("{}: not a file name", path.display())))?;
    let dirfd = open_dir(dir)?;
    replace_at(&dirfd, Path::new(name), bytes, mode)
}

/// [`replace`] of `name` in the directory `dir` (a descriptor).
fn replace_at(dir: &impl AsFd, name: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let tmp = PathBuf::from(format!(
        ".{}-{}-{n}.tmp",
        name.display(),
        std::process::id()
    ));
    let done = (|| {
        let fd = openat(
            dir,
            &tmp,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )?;
        let mut f = std::fs::File::from(fd);
        f.write_all(bytes)?;
        f.sync_all()?;
        renameat(dir, &tmp, dir, name)?;
        Ok(())
    })();
    if done.is_err() {
        let _ = unlinkat(dir, &tmp, UnlinkatFlags::NoRemoveDir);
    }
    done
}

fn open_dir(dir: &Path) -> std::io::Result<OwnedFd> {
    Ok(nix::fcntl::open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?)
}

/// A directory checked to be this user's own, held open.
#[derive(Debug)]
pub struct PrivateDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl PrivateDir {
    /// Opens `path` (creating it 0700 when missing; its parent must exist) and checks it:
    /// a directory, not a symlink, owned by this process's effective user, and writable by
    /// neither group nor others. Another user who created it first, or left a symlink there,
    /// gets it refused with the reason.
    pub fn open(path: &Path) -> std::io::Result<PrivateDir> {
        match nix::unistd::mkdir(path, Mode::S_IRWXU) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
        Self::check(path)
    }

    /// Opens an existing directory `path` and checks it as [`PrivateDir::open`] does,
    /// creating nothing.
    pub fn check(path: &Path) -> std::io::Result<PrivateDir> {
        let refused = |why: String| {
            std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!("{}: {why}", path.display()),
            )
        };
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ELOOP | Errno::ENOTDIR => {
                refused("not a directory (a symlink or a file is there)".into())
            }
            e => e.into(),
        })?;
        let st = fstat(&fd)?;
        let me = nix::unistd::geteuid().as_raw();
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFDIR {
            return Err(refused("not a directory".into()));
        }
        if st.st_uid != me {
            return Err(refused(format!(
                "owned by uid {}, not by this user (uid {me}): another user made it; remove it or set KFDQ_STATE_DIR",
                st.st_uid
            )));
        }
        if st.st_mode & 0o022 != 0 {
            return Err(refused(format!(
                "mode {:04o} lets others write in it; chmod go-w it",
                st.st_mode & 0o7777
            )));
        }
        Ok(PrivateDir {
            fd,
            path: path.to_owned(),
        })
    }

    /// Opens `path` (created when missing, as `mkdir -p`) as a directory named by its user
    /// (`KFDQ_STATE_DIR`): no ownership check, but its files are still written relative to
    /// it, never through a symlink.
    pub fn named(path: &Path) -> std::io::Result<PrivateDir> {
        std::fs::create_dir_all(path)?;
        Ok(PrivateDir {
            fd: open_dir(path)?,
            path: path.to_owned(),
        })
    }

    /// The directory's path (for messages and readers).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file `name` in it with `bytes` (see [`replace`]).
    pub fn replace(&self, name: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
        replace_at(&self.fd, Path::new(name), bytes, mode)
    }

    /// Opens (creating with `mode` when missing) the regular file `name` in it for reading
    /// and writing, never through a symlink.
    pub fn open_file(&self, name: &str, mode: u32) -> std::io::Result<std::fs::File> {
        let fd = openat(
            &self.fd,
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )?;
        let st = fstat(&fd)?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err(std::io::Error::other(format!(
                "{}/{name}: not a regular file",
                self.path.display()
            )));
        }
        Ok(std::fs::File::from(fd))
    }

    /// Removes the file `name` from it (an error when it is absent).
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        Ok(unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_private_dir_is_made_0700_and_a_symlink_or_open_one_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("kfdq-1");
        let p = PrivateDir::open(&d).unwrap();
        assert_eq!(
            std::fs::metadata(&d).unwrap().permissions().mode() & 0o777,
            0o700
        );
        p.replace("a.json", b"{}", 0o644).unwrap();
        assert_eq!(std::fs::read(d.join("a.json")).unwrap(), b"{}");
        // A symlink planted at the name is replaced, never followed.
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"mine").unwrap();
        std::os::unix::fs::symlink(&victim, d.join("b.json")).unwrap();
        p.replace("b.json", b"new", 0o644).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"mine");
        assert!(p.open_file("c.lock", 0o600).is_ok());
        std::os::unix::fs::symlink(&victim, d.join("d.lock")).unwrap();
        assert!(p.open_file("d.lock", 0o600).is_err(), "a symlinked lock");
        p.remove("a.json").unwrap();
        // The directory itself as a symlink, or writable by others: refused.
        let link = t.path().join("kfdq-2");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(
            PrivateDir::open(&link)
                .unwrap_err()
                .to_string()
                .contains("not a directory")
        );
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            PrivateDir::open(&d)
                .unwrap_err()
                .to_string()
                .contains("others write")
        );
    }
}
