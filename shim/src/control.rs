//! The control thread: the agent session and the registry's upkeep.
//!
//! The thread connects to `KFDQ_SOCKET` (if set), checks that the listener belongs to a uid it
//! trusts (`kfdq::proto::peer`; otherwise one warning and no control, ever), and speaks
//! `kfdq::proto`, answering the agent's messages (`commands.rs`, which executes the levels in
//! `levels.rs`); when the agent goes
//! away (EOF, error, overlong line) everything is released (fail open) and it reconnects with
//! backoff. It also samples queue activity every activity period (`KFDQ_ACTIVITY_US`, default 2 ms)
//! and publishes the registry as JSON for
//! `kfdq ps` (`registry_file.rs`).

use std::io::{BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kfdq::chain::Stage;
use kfdq::proto::peer::{AgentTrust, UntrustedAgent, peer_cred};
use kfdq::proto::{self, AgentMsg, DecodeError, LineReader, ShimMsg};
use kfdq::{Pid, QueueId};

use crate::commands::handle;
use crate::guard::guarded;
use crate::lease::Lease;
use crate::levels::fail_open;
use crate::log::Repeat;
use crate::registry_file::{EXITING, publish_file};
use crate::state::{F_DISABLED, F_EDGES, FLAGS, STATE, State, UNCLAIMED_GRACE};

/// Set once the control thread runs in this process (reset in a fork child).
pub static STARTED: AtomicBool = AtomicBool::new(false);

/// Starts the control thread once per process.
pub fn start() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("kfdq-shim-ctl".into())
        .spawn(|| {
            // Its wake-ups carry the agent's commands and the edges it samples: they should
            // preempt whatever runs on its CPU, as the watcher's do (`slice.rs`).
            crate::slice::request_slice(crate::slice::WATCHER_SLICE);
            guarded(main);
        });
    if let Err(e) = spawned {
        crate::log::warn_always(&format!(
            "cannot start the control thread ({e}); static priorities only"
        ));
    }
}

fn pid() -> Pid {
    Pid::this()
}

/// Reconnection backoff: from 20 ms, doubling up to this; reset only by a session that got as
/// far as the agent's welcome.
const BACKOFF_MAX: Duration = Duration::from_secs(5);

/// Repeating warnings: the socket (missing, not a socket, refused connection) and the agent's
/// behaviour before a session (closes at once, garbage, silence); malformed lines in a session.
static W_SOCKET: Repeat = Repeat::new();
static W_AGENT: Repeat = Repeat::new();
static W_MALFORMED: Repeat = Repeat::new();

fn main() {
    let cfg = crate::config::config();
    crate::chain::start();
    let mut backoff = Duration::from_millis(20);
    let mut last_published = 0u64;
    let mut controlling = cfg.socket.is_some();
    let mut watch = UnclaimedWatch::default();
    // The registry is written whether or not an agent ever answers.
    publish_file(&mut last_published);
    loop {
        if EXITING.load(Ordering::Relaxed) {
            return;
        }
        if controlling && FLAGS.load(Ordering::Relaxed) & F_DISABLED == 0 {
            if let Some(path) = cfg.socket.as_deref() {
                match UnixStream::connect(path) {
                    Ok(s) => {
                        if let Err(why) = trusted(&s, &cfg.agent_trust, path) {
                            // One warning, then this process runs uncontrolled for good: an
                            // impostor must not be retried into (nor wait for the real agent
                            // on a path someone else controls).
                            crate::log::warn_always(&why.to_string());
                            controlling = false;
                            continue;
                        }
                        let end = session(s, &mut last_published, &mut watch);
                        release_everything(&format!("agent connection ended ({end})"));
                        match end {
                            End::Refused(_) => controlling = false,
                            End::BeforeWelcome(why) => crate::log::warn_repeating(
                                &W_AGENT,
                                &format!(
                                    "the agent at {} {why}; this process keeps its static class priorities and retries \
                                     (every {} s at most); check kfdqd (systemctl status kfdqd, journalctl -u kfdqd)",
                                    path.display(),
                                    BACKOFF_MAX.as_secs()
                                ),
                            ),
                            End::Closed | End::Error(_) => backoff = Duration::from_millis(20),
                        }
                    }
                    Err(e) => crate::log::warn_repeating(&W_SOCKET, &socket_problem(path, &e)),
                }
            }
        }
        if !controlling || cfg.socket.is_none() {
            // No agent to talk to: wake only when the registry changes (or once a minute).
            wait_for_change(&mut last_published, &mut watch);
            continue;
        }
        // Between connection attempts keep the registry file current.
        let deadline = Instant::now() + backoff;
        while Instant::now() < deadline {
            retry_releases();
            publish_file(&mut last_published);
            std::thread::sleep(Duration::from_millis(10).min(backoff));
        }
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// What is wrong with `KFDQ_SOCKET`, worded for the user.
fn socket_problem(path: &Path, e: &std::io::Error) -> String {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    let what = match std::fs::metadata(path) {
        Err(_) => format!("KFDQ_SOCKET={shown} does not exist: no agent runs there"),
        Ok(m) if !m.file_type().is_socket() => {
            format!("KFDQ_SOCKET={shown} is not a socket (a regular file or directory is there)")
        }
        Ok(_) => format!("cannot connect to the agent at {shown} ({e}): no agent listens there"),
    };
    format!(
        "{what}; this process keeps its static class priorities and retries (every {} s at most); \
         start kfdqd, or point KFDQ_SOCKET at its socket (default /run/kfdq/kfdq.sock), or unset it",
        BACKOFF_MAX.as_secs()
    )
}

/// Without an agent: sleeps until the registry changes (`State::changed` and the window's
/// counters wake the condition variable) or a minute passes, then publishes — at most every
/// [`PUBLISH_EVERY`], so a burst of changes costs one file write.
fn wait_for_change(last_published: &mut u64, watch: &mut UnclaimedWatch) {
    {
        let mut st = STATE.lock();
        if st.generation == *last_published && !EXITING.load(Ordering::Relaxed) {
            st.wait_timeout(watch.timeout(Instant::now()));
        }
        watch.check(&mut st, Instant::now());
    }
    publish_file(last_published);
    std::thread::sleep(PUBLISH_EVERY);
}

/// When to look for queues with work that no stream claims ([`State::check_unclaimed`]): every
/// [`UNCLAIMED_GRACE`] while one is watched or for [`WATCH_AFTER_CREATE`] after a queue was
/// created (work follows creation), otherwise at the agent's ticks or the registry's changes
/// only — without an agent the thread still sleeps when nothing happens.
#[derive(Default)]
struct UnclaimedWatch {
    created_seen: u64,
    until: Option<Instant>,
    watching: bool,
}

/// How long after a queue's creation its first work is watched for.
const WATCH_AFTER_CREATE: Duration = Duration::from_secs(10);

impl UnclaimedWatch {
    fn check(&mut self, st: &mut State, now: Instant) {
        let created = crate::state::QUEUES_CREATED.load(Ordering::Relaxed);
        if created != self.created_seen {
            self.created_seen = created;
            self.until = Some(now + WATCH_AFTER_CREATE);
        }
        self.watching = st.check_unclaimed(now);
    }

    fn timeout(&self, now: Instant) -> Duration {
        if self.watching || self.until.is_some_and(|u| now < u) {
            UNCLAIMED_GRACE
        } else {
            Duration::from_secs(60)
        }
    }
}

/// Least time between two registry files written without an agent.
const PUBLISH_EVERY: Duration = Duration::from_millis(50);

/// Why the shim does not obey whoever listens at `KFDQ_SOCKET`.
#[derive(Debug, thiserror::Error)]
enum Distrust {
    /// `SO_PEERCRED` failed.
    #[error(
        "refusing the agent at {socket}: its credentials cannot be read ({source}); running uncontrolled"
    )]
    Unreadable {
        socket: String,
        source: std::io::Error,
    },
    /// The peer runs as a uid the shim does not trust.
    #[error(transparent)]
    Untrusted(#[from] UntrustedAgent),
}

/// Checks the kernel's credentials of the listening peer before a single byte is exchanged.
fn trusted(s: &UnixStream, trust: &AgentTrust, path: &Path) -> Result<(), Distrust> {
    let shown = path.display().to_string();
    let cred = peer_cred(s).map_err(|source| Distrust::Unreadable {
        socket: shown.clone(),
        source,
    })?;
    Ok(trust.check(&cred, &shown)?)
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
enum End {
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
enum NoWelcome {
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
enum Broken {
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

fn release_everything(why: &str) {
    crate::watch::end_session();
    let mut st = STATE.lock();
    let errors = fail_open(&mut st);
    // Edges are reported to an agent only.
    st.edges = false;
    crate::edges::session_ended();
    crate::hint::session_ended();
    st.refresh_flags();
    drop(st);
    STATE.notify_all();
    crate::log::debug(|| format!("{why}: released everything"));
    for e in errors {
        crate::log::warn_always(&format!("{why}; releasing: {e}"));
    }
}

/// Retries the releases the kernel refused, when due (`kfdq::policy::retry`), with or without an
/// agent.
fn retry_releases() {
    let mut st = STATE.lock();
    if st.owed.is_empty() {
        return;
    }
    crate::levels::retry_owed(&mut st);
}

fn send(w: &mut UnixStream, msg: &ShimMsg) -> Result<(), Broken> {
    w.write_all(&proto::encode(msg)).map_err(Broken::Write)
}

fn session(stream: UnixStream, last_published: &mut u64, watch: &mut UnclaimedWatch) -> End {
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
struct Session {
    w: UnixStream,
    reader: Reader,
    /// The socket's descriptor, polled with the watches' eventfd.
    fd: i32,
    lease: Lease,
    wake: Option<i32>,
    /// The registry's generation last sent.
    sent_gen: u64,
    /// When the busy queues were last said busy again (`BUSY_RENEW_PERIOD`).
    last_renew: Instant,
    /// Whether this session's doorbell was offered.
    offered: bool,
    /// What the agent was told of the request hints (hint.rs).
    hints: crate::hint::Reporter,
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

    /// One turn of the loop: wait for the agent, a watch or the next sample; answer what came;
    /// sample and report the queues' edges; send the registry when it changed.
    fn tick(&mut self, last_published: &mut u64, watch: &mut UnclaimedWatch) -> Result<(), End> {
        if EXITING.load(Ordering::Relaxed) || FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0 {
            return Err(End::Error(Broken::Stopped));
        }
        let edges = FLAGS.load(Ordering::Relaxed) & F_EDGES != 0;
        if edges && !self.offered {
            // Once per session, when the agent turns edges on: the launches ring the doorbell
            // once it is taken (edges.rs).
            self.offered = true;
            if let Err(e) = crate::edges::offer(&self.w, &proto::encode(&ShimMsg::Doorbell {})) {
                crate::log::debug(|| format!("no doorbell: {e}"));
            }
        }
        let readable = self.wait(edges);
        let mut woke_us = crate::chain::on().then(kfdq::chain::now_us);
        if let Some(w) = self.wake {
            crate::edges::drain(w);
        }
        let mut rang = false;
        if readable {
            match self.answer(&mut woke_us)? {
                Some(r) => rang = r,
                // A watch's message: the loop starts over.
                None => return Ok(()),
            }
        }
        for m in crate::watch::take_outbox() {
            send(&mut self.w, &m).map_err(End::Error)?;
        }
        self.lease.check(Instant::now());
        retry_releases();
        let edges_seen = self.sample_edges(edges, rang, watch);
        // Before the queues' edges: the agent keeps the process busy through the idle reports
        // that follow a hint's ring.
        if let Some(m) = self.hints.next(Instant::now()) {
            send(&mut self.w, &m).map_err(End::Error)?;
        }
        for (queue_id, busy) in edges_seen {
            let queue_id = QueueId(queue_id);
            if busy && let Some(t) = woke_us {
                // Before the write: the agent may read it before the write returns.
                crate::chain::mark_at(Stage::HpWoke, t);
                crate::chain::mark(Stage::EdgeSent);
            }
            send(&mut self.w, &ShimMsg::Activity { queue_id, busy }).map_err(End::Error)?;
        }
        let (gen_now, reg) = {
            let st = STATE.lock();
            (
                st.generation,
                (st.generation != self.sent_gen).then(|| st.to_proto(pid())),
            )
        };
        if let Some(reg) = reg {
            send(&mut self.w, &ShimMsg::Registry(reg)).map_err(End::Error)?;
            self.sent_gen = gen_now;
        }
        publish_file(last_published);
        crate::chain::flush();
        Ok(())
    }

    /// Waits until the agent's socket is readable, a watch pokes, or the next sample is due
    /// (finely while a busy report is outstanding); whether the socket has a line.
    fn wait(&mut self, edges: bool) -> bool {
        let cfg = crate::config::config();
        let period = if edges && crate::edges::armed() {
            proto::BUSY_SAMPLE_PERIOD
        } else {
            cfg.activity_period
        };
        let now = Instant::now();
        let timeout = self.lease.bound(period, now);
        let timeout = STATE
            .lock()
            .owed
            .wait(now)
            .map_or(timeout, |w| w.min(timeout));
        !self.reader.get_ref().buffer().is_empty() || poll_readable(self.fd, self.wake, timeout)
    }

    /// Reads and answers the agent's next message: `Some(whether it was a Rang)`, or `None`
    /// for a watch's message (handed to `watch.rs`).
    fn answer(&mut self, woke_us: &mut Option<u64>) -> Result<Option<bool>, End> {
        let msg = match self.reader.next::<AgentMsg>() {
            Ok(msg) => msg,
            Err(DecodeError::Malformed(m)) => {
                crate::log::warn_repeating(
                    &W_MALFORMED,
                    &format!("ignoring a malformed message from the agent: {m}"),
                );
                return Ok(Some(false));
            }
            Err(DecodeError::Closed) => return Err(End::Closed),
            Err(e) => return Err(End::Error(Broken::Protocol(e))),
        };
        let preempt = matches!(msg, AgentMsg::Preempt { .. });
        let rang = matches!(msg, AgentMsg::Rang {});
        if rang && woke_us.take().is_some() {
            // The launch rang: its time stands for the wake-up and the edge sent (the busy
            // edges this wake-up sends are not the chain's).
            if let Some(t) = crate::edges::rung_at_us() {
                crate::chain::mark_at(Stage::HpWoke, t);
                crate::chain::mark_at(Stage::EdgeSent, t);
            }
        }
        if preempt {
            crate::chain::mark(Stage::CmdRecv);
        }
        self.lease.heard(&msg, Instant::now());
        if matches!(
            msg,
            AgentMsg::BoardWriter { .. }
                | AgentMsg::Watch { .. }
                | AgentMsg::Unwatch { .. }
                | AgentMsg::BoardChanged {}
        ) {
            crate::watch::handle(msg, self.lease.length);
            return Ok(None);
        }
        // The command's fd duplicate is closed after its acknowledgement went out.
        let _closes = crate::kfd_fd::defer_closes();
        let replies = guarded(|| handle(msg)).unwrap_or_default();
        for r in replies {
            send(&mut self.w, &r).map_err(End::Error)?;
        }
        if preempt {
            crate::chain::mark(Stage::AckSent);
        }
        Ok(Some(rang))
    }

    /// Samples the queues: the busy/idle edges to report (with edges on: the slot and the busy
    /// report's flag kept in step; after a `Rang`: every queue's state; while busy: the busy
    /// queues again every `BUSY_RENEW_PERIOD`).
    fn sample_edges(
        &mut self,
        edges: bool,
        rang: bool,
        watch: &mut UnclaimedWatch,
    ) -> Vec<(u32, bool)> {
        let (mut edges_seen, busy) = sample_activity(watch);
        // An open request hint holds the process busy (hint.rs).
        let hinted = crate::hint::tick(!busy.is_empty());
        if edges {
            if !busy.is_empty() || hinted {
                crate::edges::arm();
                crate::edges::board_busy();
            } else if crate::edges::armed() {
                // Every queue idle: the next launch rings again. One more sample catches a
                // launch (or a hint) that saw the report still outstanding (edges.rs).
                crate::edges::board_idle();
                crate::edges::disarm();
                let (again, busy) = sample_activity(watch);
                edges_seen.extend(again);
                if !busy.is_empty() || crate::hint::open() {
                    crate::edges::arm();
                    crate::edges::board_busy();
                }
            }
        }
        if rang {
            // The agent took the ring as busy for every queue: each queue's state now, after it
            // (an idle edge sent before the ring may have been read before it).
            let st = STATE.lock();
            for q in st.queues() {
                if !edges_seen.iter().any(|(id, _)| *id == q.id) {
                    edges_seen.push((q.id, q.busy && !q.dying));
                }
            }
        }
        // While busy, say so again now and then: the agent takes a busy queue of a process that
        // has said nothing for a while as idle (a stopped process preempts nobody for long).
        let now = Instant::now();
        if edges
            && !busy.is_empty()
            && now.duration_since(self.last_renew) >= proto::BUSY_RENEW_PERIOD
        {
            self.last_renew = now;
            for &queue_id in &busy {
                if !edges_seen.iter().any(|(q, _)| *q == queue_id) {
                    edges_seen.push((queue_id, true));
                }
            }
        }
        edges_seen
    }
}

fn poll_readable(fd: i32, wake: Option<i32>, timeout: Duration) -> bool {
    let mut p = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            // A negative fd is ignored by ppoll.
            fd: wake.unwrap_or(-1),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // Sub-millisecond periods need ppoll's timespec (poll's milliseconds would round 500 µs to
    // a busy loop).
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: two valid pollfds and a timespec on the stack; `fd` is the open socket owned by
    // the session's reader, the second the watches' eventfd (never closed) or -1 (ignored); a
    // null signal mask pointer leaves the mask unchanged.
    let n = unsafe { libc::ppoll(p.as_mut_ptr(), 2, &ts, std::ptr::null()) };
    n > 0 && p[0].revents != 0
}

/// Busy (write index > read index) transitions since the last sample, and the queues busy
/// now (and the unclaimed-work check of this tick).
fn sample_activity(watch: &mut UnclaimedWatch) -> (Vec<(u32, bool)>, Vec<u32>) {
    let mut st = STATE.lock();
    // The same tick looks for work that no stream claims, under the same lock.
    watch.check(&mut st, Instant::now());
    let edges = st.sample_busy();
    let busy = st
        .queues()
        .iter()
        .filter(|q| q.busy && !q.dying)
        .map(|q| q.id)
        .collect();
    (edges, busy)
}
