//! `level2-held`: the batch job present but off throughout. Its queues are deactivated by
//! hand (`kfdq suspend --level 2`, through the phase's kfdqd) once it is running and before
//! the latency client starts, and resumed after the client's last request. The latency client
//! then has the GPU to itself while the batch job's process, its runtime's threads and its
//! emulated queues stay on the host: the row is the floor the host sets by itself for every
//! controlled row, the least a hint or a faster reaction could reach on this machine.

use std::path::Path;
use std::time::Duration;

use super::super::{CliError, client};
use super::BATCH_CLASS;
use super::procs::wait_until;
use kfdq::Pid;
use kfdq::proto::{Level, Reply, Request};

/// How long kfdqd may take to report the batch job deactivated.
const HOLD_WAIT: Duration = Duration::from_secs(30);

/// The batch job's process as kfdqd classified it.
fn batch_pid(sock: &Path) -> Result<Pid, CliError> {
    client::status(sock)?
        .processes
        .iter()
        .find(|p| p.class == BATCH_CLASS)
        .map(|p| p.pid)
        .ok_or_else(|| {
            CliError::Usage(format!(
                "level2-held: kfdqd lists no process in class `{BATCH_CLASS}`: the batch job connects to kfdqd under the shim before the phase holds it"
            ))
        })
}

/// One control request; kfdqd's refusal as the demo's error.
fn ask(sock: &Path, req: &Request) -> Result<(), CliError> {
    match client::ask(sock, req)? {
        Reply::Error { error } => Err(CliError::Usage(format!("level2-held: {error}"))),
        _ => Ok(()),
    }
}

/// Deactivates the batch job by hand and returns once kfdqd reports it deactivated.
pub(super) fn hold(sock: &Path) -> Result<Pid, CliError> {
    let pid = batch_pid(sock)?;
    ask(
        sock,
        &Request::Suspend {
            pid,
            level: Level::Deactivate,
        },
    )?;
    wait_until(
        "kfdqd reporting the batch job deactivated",
        HOLD_WAIT,
        || {
            client::status(sock).is_ok_and(|s| {
                s.processes
                    .iter()
                    .any(|p| p.pid == pid && p.level == Some(Level::Deactivate))
            })
        },
    )?;
    Ok(pid)
}

/// Gives the batch job back to the policy (before it is stopped: it drains its work on the GPU).
pub(super) fn release(sock: &Path, pid: Pid) -> Result<(), CliError> {
    ask(sock, &Request::Resume { pid })
}
