//! The CLI's end of the agent's control socket: one request line, one reply line.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::CliError;
use kfdq::proto::control::NodeStatus;
use kfdq::proto::{LineReader, Reply, Request, encode};

/// How long the CLI waits for the agent's reply (the agent itself waits up to 5 s for shims).
const REPLY_TIMEOUT: Duration = Duration::from_secs(8);

/// The agent's socket: `--agent`, else `$KFDQ_SOCKET`, else the default.
pub fn socket_path(arg: Option<&Path>) -> PathBuf {
    arg.map(Path::to_owned)
        .or_else(|| {
            std::env::var_os("KFDQ_SOCKET")
                .filter(|s| !s.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from(kfdq::proto::DEFAULT_SOCKET))
}

/// Where the agent's admin socket is when `[agent] admin_socket` is the documented one.
pub const DEFAULT_ADMIN_SOCKET: &str = "/run/kfdqd/admin.sock";

/// The socket for status and control requests: `--admin` when given; else, when no
/// `--agent` (or `$KFDQ_SOCKET`) names an agent, the default admin socket if it lets this
/// user connect (root on a node whose agent has one); else the agent's socket.
pub fn control_socket(agent: Option<&Path>, admin: Option<&Path>) -> PathBuf {
    if let Some(a) = admin {
        return a.to_owned();
    }
    let default = Path::new(DEFAULT_ADMIN_SOCKET);
    if agent.is_none() && UnixStream::connect(default).is_ok() {
        return default.to_owned();
    }
    socket_path(agent)
}

/// Why the agent could not be asked.
#[derive(Debug)]
pub enum Unreachable {
    /// No agent listens there.
    NotRunning(String),
    /// It answered nonsense or not at all.
    Broken(String),
}

impl Unreachable {
    /// What went wrong, worded for the user (with the fix).
    pub fn into_message(self) -> String {
        match self {
            Unreachable::NotRunning(m) | Unreachable::Broken(m) => m,
        }
    }
}

impl From<Unreachable> for CliError {
    fn from(u: Unreachable) -> CliError {
        CliError::Usage(u.into_message())
    }
}

/// Sends `req` to the agent at `sock` and returns its reply.
pub fn ask(sock: &Path, req: &Request) -> Result<Reply, Unreachable> {
    let mut s = UnixStream::connect(sock).map_err(|e| {
        let fix = match e.kind() {
            std::io::ErrorKind::PermissionDenied => {
                "the socket's mode or group keeps this user out: the agent's [agent] socket_group / socket_mode decide who may connect"
            }
            _ => {
                "start it (systemctl start kfdqd, or `kfdqd --root DIR` on kfd-emu), or point kfdq at it with --agent PATH / KFDQ_SOCKET"
            }
        };
        Unreachable::NotRunning(format!(
            "no kfdq agent at {} ({e}): {fix}",
            sock.display()
        ))
    })?;
    let broken = |e: String| Unreachable::Broken(format!("agent at {}: {e}", sock.display()));
    s.set_read_timeout(Some(REPLY_TIMEOUT))
        .map_err(|e| broken(e.to_string()))?;
    s.write_all(&encode(req))
        .map_err(|e| broken(format!("sending the request: {e}")))?;
    let mut r = LineReader::new(BufReader::new(s));
    r.next::<Reply>()
        .map_err(|e| broken(format!("reading the reply: {e}")))
}

/// The agent's status.
pub fn status(sock: &Path) -> Result<NodeStatus, Unreachable> {
    match ask(sock, &Request::Status)? {
        Reply::Status(s) => Ok(*s),
        Reply::Error { error } => Err(Unreachable::Broken(error)),
        other => Err(Unreachable::Broken(format!(
            "unexpected answer to status: {other:?}"
        ))),
    }
}

/// Sends a control request and turns the reply into the command's result.
pub fn command(sock: &Path, req: &Request, json: bool) -> Result<(), CliError> {
    let reply = ask(sock, req)?;
    if json {
        super::print_json(&reply)?;
    }
    match reply {
        Reply::Done { detail } => {
            if !json {
                println!("{detail}");
            }
            Ok(())
        }
        Reply::Error { error } => Err(CliError::Refused(error)),
        other => Err(CliError::Usage(format!("unexpected reply: {other:?}"))),
    }
}
