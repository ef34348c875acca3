//! `kfdqd --check` beyond the file: what startup would refuse — the pid namespace, the
//! socket's directory and path, the metrics port, another agent's lock — checked without creating or binding
//! anything that stays. An agent already running on this node (the one a changed file is
//! meant for) turns "in use" into a note.

use std::path::Path;

use super::config::AgentConfig;
use super::http::EndpointError;
use super::{AgentError, lock, socket};

/// The notes of a configuration startup would accept, or the error that startup would stop at.
pub fn preflight(cfg: &AgentConfig, root: &Path) -> Result<Vec<String>, AgentError> {
    super::pid_namespace::check()?;
    let mut notes = socket::check(&cfg.socket)?;
    let holder = lock::held_by(root);
    if let Some(h) = &holder {
        notes.push(format!(
            "kfdqd{}{} runs on the GPUs under {} now (lock {}): a second agent would be refused; a changed file applies to it at its reload (systemctl reload kfdqd)",
            h.pid.map_or(String::new(), |p| format!(" pid {p}")),
            h.socket.as_ref().map_or(String::new(), |s| format!(" serving {s}")),
            root.display(),
            h.path.display()
        ));
    }
    if let Some(addr) = cfg.metrics
        && let Err(source) = std::net::TcpListener::bind(addr)
    {
        if holder.is_some() || socket::live(&cfg.socket.path) {
            notes.push(format!(
                "metrics port {addr} is in use now ({source}), by the running agent if it serves it"
            ));
        } else {
            return Err(EndpointError::Listen { addr, source }.into());
        }
    }
    Ok(notes)
}
