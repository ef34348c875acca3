//! The control thread: the agent session and the registry's upkeep.
//!
//! The thread connects to `KFDQ_SOCKET` (if set), checks that the listener belongs to a uid it
//! trusts (`kfdq::proto::peer`; otherwise one warning and no control, ever), and speaks
//! `kfdq::proto`, answering the agent's messages (`commands.rs`, which executes the levels in
//! `levels/`); when the agent goes
//! away (EOF, error, overlong line) everything is released (fail open) and it reconnects with
//! backoff. It also samples queue activity every activity period (`KFDQ_ACTIVITY_US`, default 2 ms)
//! and publishes the registry as JSON for
//! `kfdq ps` (`registry_file.rs`).
//!
//! This file holds the thread, its reconnection and the trust check; `session.rs` a
//! session's opening and how it ends; `tick.rs` one turn of a session's loop; `unclaimed.rs`
//! when to look for work that no stream claims.

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use kfdq::Pid;
use kfdq::proto::peer::{AgentTrust, UntrustedAgent, peer_cred};

use crate::guard::guarded;
use crate::levels::fail_open;
use crate::log::Repeat;
use crate::registry_file::{EXITING, publish_file};
use crate::state::{F_DISABLED, FLAGS, STATE};

mod session;
mod tick;
mod unclaimed;

use session::{End, session};
use unclaimed::UnclaimedWatch;

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
