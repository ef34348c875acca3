//! Permissions: who may open `/dev/kfd`, and whether the agent's socket can be trusted.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;

use super::{Finding, Options, Status};
use crate::kfd::Root;
use crate::proto::{DEFAULT_SOCKET, SOCKET_DIR_FIX};

/// Mode bit: writable by others.
const OTHER_WRITE: u32 = 0o002;
/// Mode bit: sticky (only the owner may remove or rename an entry).
const STICKY: u32 = 0o1000;

pub(super) fn inspect(root: &Root, options: &Options, out: &mut Vec<Finding>) {
    kfd_node(&root.kfd_device(), out);
    let socket = options
        .socket
        .clone()
        .unwrap_or_else(|| DEFAULT_SOCKET.into());
    agent_socket(&socket, out);
}

fn kfd_node(path: &Path, out: &mut Vec<Finding>) {
    let Ok(meta) = std::fs::metadata(path) else {
        return; // the kernel check already said that it is missing
    };
    let mode = meta.permissions().mode() & 0o7777;
    let group = nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(meta.gid()))
        .ok()
        .flatten()
        .map(|g| g.name)
        .unwrap_or_else(|| meta.gid().to_string());
    out.push(Finding::new(
        "kfd-access",
        Status::Info,
        format!(
            "{} mode {mode:04o}, group {group}: GPU programs need read and write access; the shim needs nothing more",
            path.display()
        ),
    ));
}

fn agent_socket(path: &Path, out: &mut Vec<Finding>) {
    let Some(dir) = path.parent() else {
        return;
    };
    match std::fs::metadata(dir) {
        Ok(d) => {
            let mode = d.permissions().mode();
            if mode & OTHER_WRITE != 0 {
                out.push(
                    Finding::new(
                        "socket-dir",
                        Status::Fail,
                        format!(
                            "{} is writable by every user (mode {:04o}{}): anyone can put an impostor agent's socket there",
                            dir.display(),
                            mode & 0o7777,
                            if mode & STICKY != 0 { ", sticky" } else { "" }
                        ),
                    )
                    .fix(format!("{SOCKET_DIR_FIX}, and give kfdq and the shim that path (--agent, KFDQ_SOCKET)")),
                );
            } else {
                out.push(Finding::new(
                    "socket-dir",
                    Status::Ok,
                    format!(
                        "{} is owned by uid {} and not writable by others (mode {:04o})",
                        dir.display(),
                        d.uid(),
                        mode & 0o7777
                    ),
                ));
            }
        }
        Err(_) => {
            out.push(
                Finding::new(
                    "agent",
                    Status::Info,
                    format!(
                        "no agent socket directory {}: kfdqd is not running; programs under the shim keep their class priorities but nothing preempts them",
                        dir.display()
                    ),
                )
                .fix("start kfdqd (systemctl start kfdqd)"),
            );
            return;
        }
    }
    match std::fs::metadata(path) {
        Ok(s) if s.file_type().is_socket() => {
            let listening = std::os::unix::net::UnixStream::connect(path).is_ok();
            out.push(if listening {
                Finding::new(
                    "agent",
                    Status::Ok,
                    format!(
                        "kfdqd listens at {} (socket owned by uid {})",
                        path.display(),
                        s.uid()
                    ),
                )
            } else {
                Finding::new(
                    "agent",
                    Status::Warn,
                    format!(
                        "{} exists but nobody accepts connections: a stale socket of an agent that is gone",
                        path.display()
                    ),
                )
                .fix("start kfdqd (it replaces a stale socket)")
            });
        }
        Ok(_) => out.push(
            Finding::new(
                "agent",
                Status::Fail,
                format!("{} exists but is not a socket", path.display()),
            )
            .fix(format!("remove {} and start kfdqd", path.display())),
        ),
        Err(_) => out.push(
            Finding::new(
                "agent",
                Status::Info,
                format!(
                    "no agent socket at {}: kfdqd is not running; programs under the shim keep their class priorities but nothing preempts them",
                    path.display()
                ),
            )
            .fix("start kfdqd (systemctl start kfdqd)"),
        ),
    }
}
