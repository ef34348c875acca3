//! One agent per node: while it runs, kfdqd holds an exclusive `flock(2)` on a lock file for
//! its GPUs (the topology root it serves), with its pid and socket in it. A second kfdqd on
//! the same GPUs — on another socket, or in another container that shares `/run/kfdq` — finds
//! the lock held and refuses to start, naming the file and the first agent: two agents would
//! classify, preempt and trace the same processes against each other.
//!
//! The file lives in `/run/kfdq` (the unit's and the DaemonSet's runtime directory), else in
//! `/tmp/kfdq-<uid>` for an agent that may not create `/run/kfdq` (a user's agent on the
//! emulator). Either is used only when it is the agent user's own and writable by no one else
//! (`crate::replace::PrivateDir`: the fallback is created 0700; another user who made it
//! first gets it refused), and the lock file is opened relative to it, never through a
//! symlink. The kernel drops the lock when the agent dies, however it dies; a clean exit
//! also removes the file.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::replace::PrivateDir;

/// The directory of the lock files when it can be created.
pub const LOCK_DIR: &str = "/run/kfdq";

/// The lock an agent holds while it runs (released and removed on drop).
#[derive(Debug)]
pub struct AgentLock {
    /// Held open (and locked) for the agent's life; closing it releases the lock.
    _file: Flock<File>,
    path: PathBuf,
}

impl AgentLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for AgentLock {
    fn drop(&mut self) {
        // Removed while still locked: an agent that opens the path later creates a new file.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The lock file's name for GPUs under `root`: `kfdqd.lock` for `/`, else the root's path
/// in the name (each emulator mount is a node of its own).
pub fn file_name(root: &Path) -> String {
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
    let s = root.display().to_string();
    let s = s.trim_matches('/');
    if s.is_empty() {
        "kfdqd.lock".into()
    } else {
        let name: String = s
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        format!("kfdqd-{name}.lock")
    }
}

/// Where the lock for GPUs under `root` is held (creating [`LOCK_DIR`] when it can).
pub fn lock_path(root: &Path) -> PathBuf {
    match lock_dir() {
        Ok(d) => d.path().join(file_name(root)),
        Err(_) => fallback_dir().join(file_name(root)),
    }
}

fn fallback_dir() -> PathBuf {
    std::env::temp_dir().join(format!("kfdq-{}", nix::unistd::geteuid().as_raw()))
}

/// [`LOCK_DIR`] (created 0755 when missing) when it is this user's own, else the fallback
/// (created 0700), each checked; the fallback's error when neither is.
fn lock_dir() -> std::io::Result<PrivateDir> {
    let run = Path::new(LOCK_DIR);
    if !run.exists() && std::fs::create_dir_all(run).is_ok() {
        let _ = std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o755));
    }
    PrivateDir::check(run).or_else(|_| PrivateDir::open(&fallback_dir()))
}

/// Who holds a lock: what the holder wrote into the file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// Its pid.
    pub pid: Option<u32>,
    /// Its socket.
    pub socket: Option<String>,
    /// The lock file.
    pub path: PathBuf,
}

fn holder(text: &str) -> Holder {
    let mut lines = text.lines();
    Holder {
        path: PathBuf::new(),
        pid: lines.next().and_then(|l| l.trim().parse().ok()),
        socket: lines
            .next()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    }
}

/// The agent holding the lock for GPUs under `root`, if one does (`kfdqd --check`; creates
/// nothing).
pub fn held_by(root: &Path) -> Option<Holder> {
    let name = file_name(root);
    let (path, file) = [Path::new(LOCK_DIR).join(&name), fallback_dir().join(&name)]
        .into_iter()
        .find_map(|p| File::open(&p).ok().map(|f| (p, f)))?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        Ok(_free) => None,
        Err((mut f, _)) => {
            let mut text = String::new();
            let _ = f.read_to_string(&mut text);
            Some(Holder {
                path,
                ..holder(&text)
            })
        }
    }
}

/// Takes the lock for GPUs under `root` for an agent serving `socket`, or says who holds it.
pub fn acquire(root: &Path, socket: &Path) -> Result<AgentLock, LockError> {
    let name = file_name(root);
    let dir = lock_dir().map_err(|source| LockError::Io {
        what: "the lock's directory".into(),
        source,
    })?;
    let path = dir.path().join(&name);
    let io = |what: &str, source: std::io::Error| LockError::Io {
        what: format!("{what} {}", path.display()),
        source,
    };
    // A file removed by its exiting holder between our open and our lock is not the lock any
    // more: try again on the new one (a few times; each round means an agent just exited).
    for _ in 0..8 {
        let file = dir
            .open_file(&name, 0o644)
            .map_err(|e| io("opening the lock file", e))?;
        let mut locked = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut f, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let _ = f.read_to_string(&mut text);
                return Err(LockError::Held {
                    path,
                    holder: holder(&text),
                    root: root.to_owned(),
                });
            }
            Err((_, e)) => return Err(io("locking", e.into())),
        };
        let same = match (locked.metadata(), std::fs::metadata(&path)) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            _ => false,
        };
        if !same {
            continue;
        }
        locked.set_len(0).map_err(|e| io("writing", e))?;
        locked.rewind().map_err(|e| io("writing", e))?;
        write!(locked, "{}\n{}\n", std::process::id(), socket.display())
            .map_err(|e| io("writing", e))?;
        return Ok(AgentLock {
            _file: locked,
            path,
        });
    }
    Err(LockError::Io {
        what: format!("locking {}", path.display()),
        source: std::io::Error::other("the lock file kept being replaced"),
    })
}

/// Why the agent could not take its lock.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// Another agent runs on these GPUs.
    #[error(
        "another kfdqd{} runs on the GPUs under {}{}: it holds the lock {}. Two agents would classify, preempt and trace the same processes against each other; stop it first (systemctl stop kfdqd), or talk to it (kfdq --agent {})",
        .holder.pid.map_or(String::new(), |p| format!(" (pid {p})")),
        .root.display(),
        .holder.socket.as_ref().map_or(String::new(), |s| format!(" serving {s}")),
        .path.display(),
        .holder.socket.as_deref().unwrap_or("ITS_SOCKET")
    )]
    Held {
        /// The lock file.
        path: PathBuf,
        /// Who holds it.
        holder: Holder,
        /// The GPUs' root.
        root: PathBuf,
    },
    /// The lock file could not be created, locked or written.
    #[error(
        "{what}: {source} (the agent's lock file: it needs a writable {LOCK_DIR} or temporary directory)"
    )]
    Io {
        /// What was done, on which path.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_s_lock_is_kfdqd_lock_and_other_roots_have_their_own() {
        assert_eq!(file_name(Path::new("/")), "kfdqd.lock");
        let a = file_name(Path::new("/nonexistent/emu-a/root"));
        let b = file_name(Path::new("/nonexistent/emu-b/root"));
        assert_ne!(a, b);
        assert!(
            a.starts_with("kfdqd-") && a.ends_with(".lock") && !a.contains('/'),
            "{a}"
        );
    }

    #[test]
    fn a_held_lock_names_its_holder_and_a_released_one_is_taken_again() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("gpus");
        std::fs::create_dir(&root).unwrap();
        let first = acquire(&root, Path::new("/run/a.sock")).unwrap();
        let text = std::fs::read_to_string(first.path()).unwrap();
        assert_eq!(holder(&text).pid, Some(std::process::id()));
        // flock locks belong to the open file description: a second open conflicts even in
        // the same process, as a second agent's would.
        let e = acquire(&root, Path::new("/run/b.sock")).unwrap_err();
        let m = e.to_string();
        assert!(
            m.contains(&first.path().display().to_string()) && m.contains("/run/a.sock"),
            "{m}"
        );
        assert_eq!(
            held_by(&root).and_then(|h| h.socket).as_deref(),
            Some("/run/a.sock")
        );
        let path = first.path().to_owned();
        drop(first);
        assert!(!path.exists(), "removed at exit");
        assert_eq!(held_by(&root), None);
        let again = acquire(&root, Path::new("/run/b.sock")).unwrap();
        drop(again);
    }
}
