//! The agent's listening socket: its directory (created by the agent 0755, or 0750 with the
//! socket group; refused when others can write it), a stale socket from a dead agent removed, a live one refused, mode and group
//! applied after bind.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use super::config::SocketConfig;

/// Binds the agent's socket as `cfg` says. The error names what is wrong and the fix.
pub fn bind(cfg: &SocketConfig) -> Result<UnixListener, SocketError> {
    let path = &cfg.path;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| SocketError::NoDirectory(path.clone()))?;
    prepare_dir(dir, cfg.group.as_ref())?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(SocketError::InUse(path.clone()));
            }
            std::fs::remove_file(path).map_err(|e| {
                SocketError::io(format!("removing the stale socket {}", path.display()), e)
            })?;
        }
        Ok(_) => {
            return Err(SocketError::NotASocket(path.clone()));
        }
        Err(_) => {}
    }
    let l = UnixListener::bind(path)
        .map_err(|e| SocketError::io(format!("bind {}", path.display()), e))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(cfg.mode))
        .map_err(|e| SocketError::io(format!("chmod {:04o} {}", cfg.mode, path.display()), e))?;
    if let Some((name, gid)) = &cfg.group {
        std::os::unix::fs::chown(path, None, Some(*gid))
            .map_err(|e| SocketError::io(format!("chgrp {name} {}", path.display()), e))?;
    }
    l.set_nonblocking(true)
        .map_err(|e| SocketError::io(format!("socket {}", path.display()), e))?;
    Ok(l)
}

fn prepare_dir(dir: &Path, group: Option<&(String, u32)>) -> Result<(), SocketError> {
    if !dir.exists() {
        // Created by the agent's own uid; with a socket group, only that group (and root) may
        // even reach the socket; otherwise every local process may (identity is SO_PEERCRED).
        let mode = if group.is_some() { 0o750 } else { 0o755 };
        std::fs::create_dir_all(dir).map_err(|e| {
            SocketError::io(
                format!("creating the socket directory {}", dir.display()),
                e,
            )
        })?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(|e| SocketError::io(format!("chmod {mode:04o} {}", dir.display()), e))?;
        if let Some((name, gid)) = group {
            std::os::unix::fs::chown(dir, None, Some(*gid))
                .map_err(|e| SocketError::io(format!("chgrp {name} {}", dir.display()), e))?;
        }
    }
    let m = std::fs::metadata(dir).map_err(|e| SocketError::io(dir.display().to_string(), e))?;
    if !m.is_dir() {
        return Err(SocketError::NotADirectory(dir.to_owned()));
    }
    match dir_problem(m.mode(), m.uid(), m.gid(), nix::unistd::geteuid().as_raw()) {
        Some(problem) => Err(SocketError::UnsafeDirectory {
            dir: dir.to_owned(),
            problem,
        }),
        None => Ok(()),
    }
}

/// Why a directory with `mode`, owner `uid` and group `gid` must not hold the agent's socket
/// when the agent runs as `agent_uid`: writable by others, writable by a group other than
/// root's, or owned by another user (who could chmod it at will).
pub fn dir_problem(mode: u32, uid: u32, gid: u32, agent_uid: u32) -> Option<String> {
    // No chmod/chown advice: the directory may be a shared one (/tmp) whose mode others rely
    // on; the fix is another directory (the error says which).
    if mode & 0o002 != 0 {
        return Some(format!(
            "is world-writable (mode {:04o}, a shared directory)",
            mode & 0o7777
        ));
    }
    if mode & 0o020 != 0 && gid != 0 {
        return Some(format!(
            "is writable by group {gid} (mode {:04o})",
            mode & 0o7777
        ));
    }
    if uid != 0 && uid != agent_uid {
        return Some(format!(
            "belongs to uid {uid}, not root or the agent's uid {agent_uid}"
        ));
    }
    None
}

/// What `kfdqd --check` can say about the socket without creating anything: an error where
/// startup would refuse it, else notes (a directory kfdqd will create; an agent listening
/// there now).
pub fn check(cfg: &SocketConfig) -> Result<Vec<String>, SocketError> {
    let path = &cfg.path;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| SocketError::NoDirectory(path.clone()))?;
    let mut notes = Vec::new();
    match std::fs::metadata(dir) {
        Err(_) => notes.push(format!(
            "socket directory {} does not exist: kfdqd creates it (mode {:04o})",
            dir.display(),
            if cfg.group.is_some() { 0o750 } else { 0o755 }
        )),
        Ok(m) if !m.is_dir() => return Err(SocketError::NotADirectory(dir.to_owned())),
        Ok(m) => {
            if let Some(problem) =
                dir_problem(m.mode(), m.uid(), m.gid(), nix::unistd::geteuid().as_raw())
            {
                return Err(SocketError::UnsafeDirectory {
                    dir: dir.to_owned(),
                    problem,
                });
            }
        }
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                notes.push(format!(
                    "an agent listens on {} now: a second one there would be refused (this file applies to it at its reload: systemctl reload kfdqd)",
                    path.display()
                ));
            }
        }
        Ok(_) => return Err(SocketError::NotASocket(path.clone())),
        Err(_) => {}
    }
    Ok(notes)
}

/// True when an agent answers on `path` now.
pub fn live(path: &Path) -> bool {
    UnixStream::connect(path).is_ok()
}

/// Removes the socket at exit (only if it is still ours: a socket at that path).
pub fn remove(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::dir_problem;

    #[test]
    fn only_directories_that_root_or_the_agent_alone_can_write_are_accepted() {
        assert_eq!(dir_problem(0o40755, 0, 0, 0), None);
        assert_eq!(dir_problem(0o40750, 0, 44, 0), None);
        assert_eq!(dir_problem(0o40775, 0, 0, 0), None, "root's group is root");
        assert_eq!(dir_problem(0o40700, 1000, 1000, 1000), None);
        let w = dir_problem(0o41777, 0, 0, 0).unwrap();
        assert!(w.contains("world-writable") && w.contains("1777"), "{w}");
        let g = dir_problem(0o40775, 0, 44, 0).unwrap();
        assert!(g.contains("group 44"), "{g}");
        let o = dir_problem(0o40755, 1000, 1000, 0).unwrap();
        assert!(o.contains("uid 1000"), "{o}");
    }
}

/// Why the agent's socket could not be set up; each text names the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SocketError {
    /// The socket path has no directory part.
    #[error("socket path {} has no directory", .0.display())]
    NoDirectory(PathBuf),
    /// A live agent listens there.
    #[error(
        "another agent is listening on {}: stop it first (systemctl stop kfdqd), or give this one another socket ([agent] socket)",
        .0.display()
    )]
    InUse(PathBuf),
    /// Something other than a socket is there.
    #[error(
        "{} exists and is not a socket: remove it or choose another [agent] socket",
        .0.display()
    )]
    NotASocket(PathBuf),
    /// The socket's directory is something else.
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// Others could replace the socket (see [`dir_problem`]).
    #[error(
        "the socket directory {} {problem}: whoever can write there could replace the agent's socket and command every shim; {}",
        dir.display(),
        crate::proto::SOCKET_DIR_FIX
    )]
    UnsafeDirectory {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A system call on the socket or its directory failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done, on which path.
        what: String,
        /// The error.
        source: std::io::Error,
    },
}

impl SocketError {
    fn io(what: String, source: std::io::Error) -> SocketError {
        SocketError::Io { what, source }
    }
}
