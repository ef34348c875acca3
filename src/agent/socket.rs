//! The agent's listening socket: its directory (created root-owned 0755, refused when
//! world-writable), a stale socket from a dead agent removed, a live one refused, mode and group
//! applied after bind.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use super::config::SocketConfig;

/// Binds the agent's socket as `cfg` says. The error names what is wrong and the fix.
pub fn bind(cfg: &SocketConfig) -> Result<UnixListener, String> {
    let path = &cfg.path;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| format!("socket path {} has no directory", path.display()))?;
    prepare_dir(dir)?;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(format!(
                    "another agent is listening on {}: stop it first (systemctl stop kfdqd), or give this one another socket ([agent] socket)",
                    path.display()
                ));
            }
            std::fs::remove_file(path)
                .map_err(|e| format!("removing the stale socket {}: {e}", path.display()))?;
        }
        Ok(_) => {
            return Err(format!(
                "{} exists and is not a socket: remove it or choose another [agent] socket",
                path.display()
            ));
        }
        Err(_) => {}
    }
    let l = UnixListener::bind(path).map_err(|e| format!("bind {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(cfg.mode))
        .map_err(|e| format!("chmod {:o} {}: {e}", cfg.mode, path.display()))?;
    if let Some((name, gid)) = &cfg.group {
        std::os::unix::fs::chown(path, None, Some(*gid))
            .map_err(|e| format!("chgrp {name} {}: {e}", path.display()))?;
    }
    l.set_nonblocking(true)
        .map_err(|e| format!("socket {}: {e}", path.display()))?;
    Ok(l)
}

fn prepare_dir(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("creating the socket directory {}: {e}", dir.display()))?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod 755 {}: {e}", dir.display()))?;
    }
    let m = std::fs::metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    if m.mode() & 0o002 != 0 {
        return Err(format!(
            "the socket directory {} is world-writable: anyone could replace the agent's socket and command every shim; use a directory only root can write (chmod o-w {}, or [agent] socket = \"/run/kfdq/kfdq.sock\")",
            dir.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// Removes the socket at exit (only if it is still ours: a socket at that path).
pub fn remove(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}
