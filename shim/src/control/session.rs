//! A session with the agent: how it ends (`End` and its causes), and its opening (hello,
//! the agent's welcome or refusal). Its loop is in `tick.rs`.

use std::io::{BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use kfdq::proto::{self, AgentMsg, DecodeError, LineReader, ShimMsg};

use crate::lease::Lease;
use crate::state::STATE;

use super::pid;
use super::unclaimed::UnclaimedWatch;

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
pub(super) enum End {
    /// The agent closed an established session.
    #[error("closed by the agent")]
    Closed,
    /// The agent refused this process (its reason, as it sent it).
    #[error("refused by the agent: {0}")]
    Refused(String),
    /// It ended before the agent's welcome (closed at once, garbage, silence).
    #[error(transparent)]
    BeforeWelcome(NoWelcome),
    /// An established session failed.
    #[error(transparent)]
    Error(Broken),
}

/// How a session ended before the agent's welcome.
#[derive(Debug, thiserror::Error)]
pub(super) enum NoWelcome {
    /// The hello could not be sent.
    #[error("did not take this process's hello ({0})")]
    Hello(Broken),
    /// The agent answered with another message.
    #[error("answered hello with {0:?} instead of a welcome")]
    Unexpected(Box<AgentMsg>),
    /// The agent closed the connection.
    #[error("closed the connection without answering hello")]
    Closed,
    /// The answer was not a message (or the socket failed, or timed out).
    #[error("did not answer hello with a welcome ({0})")]
    Unreadable(DecodeError),
}

/// How an established session failed (or could not start).
#[derive(Debug, thiserror::Error)]
pub(super) enum Broken {
    /// Cloning the socket failed.
    #[error("socket: {0}")]
    Socket(std::io::Error),
    /// Writing to the agent failed.
    #[error("write: {0}")]
    Write(std::io::Error),
    /// The agent's side broke the protocol (an overlong line, a socket error).
    #[error("protocol error: {0}")]
    Protocol(DecodeError),
    /// The process is exiting, or the shim stopped controlling it.
    #[error("shim stopped controlling")]
    Stopped,
}

pub(super) fn send(w: &mut UnixStream, msg: &ShimMsg) -> Result<(), Broken> {
    w.write_all(&proto::encode(msg)).map_err(Broken::Write)
}

pub(super) fn session(
    stream: UnixStream,
    last_published: &mut u64,
    watch: &mut UnclaimedWatch,
) -> End {
    let mut s = match Session::open(stream) {
        Ok(s) => s,
        Err(end) => return end,
    };
    loop {
        if let Err(end) = s.tick(last_published, watch) {
            return end;
        }
    }
}

/// The socket this process's line reader reads (`recvmsg`: the edge boards' descriptors come
/// with the agent's lines, fd_stream.rs).
type Reader = LineReader<BufReader<crate::fd_stream::FdStream>>;

/// An established session with the agent: its two ends and what the loop keeps between ticks.
pub(super) struct Session {
    pub(super) w: UnixStream,
    pub(super) reader: Reader,
    /// The socket's descriptor, polled with the watches' eventfd.
    pub(super) fd: i32,
    pub(super) lease: Lease,
    pub(super) wake: Option<i32>,
    /// The registry's generation last sent.
    pub(super) sent_gen: u64,
    /// When the busy queues were last said busy again (`BUSY_RENEW_PERIOD`).
    pub(super) last_renew: Instant,
    /// Whether this session's doorbell was offered.
    pub(super) offered: bool,
    /// What the agent was told of the request hints (hint.rs).
    pub(super) hints: crate::hint::Reporter,
}

impl Session {
    /// Says hello and waits for the agent's welcome.
    fn open(stream: UnixStream) -> Result<Session, End> {
        let cfg = crate::config::config();
        let mut w = stream
            .try_clone()
            .map_err(|e| End::Error(Broken::Socket(e)))?;
        let _ = w.set_write_timeout(Some(Duration::from_secs(2)));
        let (class, priority) = {
            let st = STATE.lock();
            (st.class.clone(), st.policy.forced)
        };
        let exe = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let hello = ShimMsg::Hello {
            version: proto::VERSION,
            pid: pid(),
            exe,
            class,
            priority,
        };
        send(&mut w, &hello).map_err(|e| End::BeforeWelcome(NoWelcome::Hello(e)))?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let fd = stream.as_raw_fd();
        let mut reader = LineReader::new(BufReader::new(crate::fd_stream::FdStream(stream)));
        let welcome_lease = match reader.next::<AgentMsg>() {
            Ok(AgentMsg::Welcome { lease_ms, .. }) => {
                lease_ms.map(|ms| Duration::from_millis(ms.into()))
            }
            Ok(AgentMsg::Refused { reason }) => {
                crate::log::warn_always(&format!("the agent refused this process: {reason}"));
                return Err(End::Refused(reason));
            }
            Ok(other) => return Err(End::BeforeWelcome(NoWelcome::Unexpected(Box::new(other)))),
            Err(DecodeError::Closed) => return Err(End::BeforeWelcome(NoWelcome::Closed)),
            Err(e) => return Err(End::BeforeWelcome(NoWelcome::Unreadable(e))),
        };
        let _ = reader.get_ref().get_ref().0.set_read_timeout(None);
        crate::log::debug(|| {
            format!(
                "connected to the agent at {}",
                cfg.socket
                    .as_deref()
                    .map(Path::display)
                    .map(|d| d.to_string())
                    .unwrap_or_default()
            )
        });
        crate::hint::session_started();
        Ok(Session {
            w,
            reader,
            fd,
            lease: Lease::new(welcome_lease),
            wake: crate::edges::wake_fd(),
            sent_gen: 0,
            last_renew: Instant::now(),
            offered: false,
            hints: crate::hint::Reporter::new(),
        })
    }
}
