//! The metrics endpoint: `GET /metrics` (a scrape the event loop renders) and `GET /healthz`
//! (liveness: answered only when the event loop turns) on the configured TCP address, served
//! by hyper on a thread of its own (`serve.rs`).
//!
//! The event loop never waits on HTTP: a request asks through a socket pair the loop polls,
//! the loop answers between two wake-ups (a scrape rendered, a health probe's turn counted)
//! and publishes the answer on a watch channel the request waits on. A loop that does not
//! answer within [`RENDER_WAIT`] gets the last scrape served again, and a health probe a 503.
//! Clients do not cooperate (issue 50 item 9): every connection has a deadline for its head
//! and one for the whole exchange, and connections are capped in total and per client
//! address (`limits.rs`), so a client that opens connections and sends nothing holds no more
//! than its share, for no longer than the deadline.

mod limits;
mod serve;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::body::Bytes;
use tokio::sync::watch;

/// How long a scrape waits for the event loop before the previous text is served.
pub const RENDER_WAIT: Duration = Duration::from_secs(2);
/// How long a health probe waits for the event loop to turn before it answers 503. The loop
/// turns at every wake-up; a decision takes milliseconds, so 2 s is a stuck loop.
pub const HEALTH_WAIT: Duration = Duration::from_secs(2);

/// What the event loop published last.
#[derive(Debug, Default)]
struct Answers {
    /// Scrapes asked up to this count are answered by `text`.
    scraped: u64,
    /// The last scrape.
    text: Bytes,
    /// Health probes asked up to this count saw the loop turn.
    turned: u64,
}

/// What the serving thread and the event loop share.
#[derive(Debug)]
struct Shared {
    /// Scrapes asked (counted before the wake-up is written).
    scrapes: AtomicU64,
    /// Health probes asked.
    probes: AtomicU64,
    /// The serving side's end of the wake-up pair (non-blocking).
    ask: UnixStream,
    answers: watch::Sender<Answers>,
}

impl Shared {
    /// Wakes the event loop. A full pair already holds a wake-up: nothing is lost when the
    /// write fails.
    fn wake(&self) {
        let _ = (&self.ask).write(&[1]);
    }
}

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EndpointError {
    /// The listen address is taken or not ours.
    #[error(
        "cannot listen on {addr} for metrics: {source} (change [metrics] listen, or stop what uses the port)"
    )]
    Listen {
        /// `[metrics] listen`.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// Setting up the endpoint's wake-up pair, runtime or thread failed.
    #[error("{what}: {source}")]
    Io {
        /// What was done.
        what: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

/// The event loop's side of the endpoint.
#[derive(Debug)]
pub struct Endpoint {
    wake: UnixStream,
    shared: Arc<Shared>,
}

impl Endpoint {
    /// Binds `addr` and starts the serving thread.
    pub fn start(addr: SocketAddr) -> Result<Endpoint, EndpointError> {
        let listener =
            TcpListener::bind(addr).map_err(|source| EndpointError::Listen { addr, source })?;
        let addr = listener.local_addr().unwrap_or(addr);
        let io = |what| move |source| EndpointError::Io { what, source };
        let (wake, ask) = UnixStream::pair().map_err(io("socketpair"))?;
        wake.set_nonblocking(true)
            .and_then(|()| ask.set_nonblocking(true))
            .and_then(|()| listener.set_nonblocking(true))
            .map_err(io("metrics sockets"))?;
        let shared = Arc::new(Shared {
            scrapes: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            ask,
            answers: watch::Sender::new(Answers::default()),
        });
        serve::start(listener, Arc::clone(&shared)).map_err(io("metrics thread"))?;
        tracing::info!(%addr, "metrics on http://{addr}/metrics, liveness on /healthz");
        Ok(Endpoint { wake, shared })
    }

    /// What the event loop polls: readable when a scrape or a health probe is asked for.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Clears the wake-ups and answers the health probes waiting (the loop turned: this is
    /// called from it). Returns the scrape count to answer with [`Endpoint::answer`] when a
    /// scrape is owed.
    pub fn take_request(&self) -> Option<u64> {
        let mut buf = [0u8; 64];
        while matches!((&self.wake).read(&mut buf), Ok(n) if n > 0) {}
        let probes = self.shared.probes.load(Ordering::Acquire);
        let scrapes = self.shared.scrapes.load(Ordering::Acquire);
        let mut owed = false;
        self.shared.answers.send_if_modified(|a| {
            owed = scrapes > a.scraped;
            let turned = probes > a.turned;
            a.turned = probes;
            turned
        });
        owed.then_some(scrapes)
    }

    /// Hands a rendered scrape to the requests that asked up to `asked`.
    pub fn answer(&self, asked: u64, text: String) {
        self.shared.answers.send_modify(|a| {
            a.scraped = a.scraped.max(asked);
            a.text = Bytes::from(text);
        });
    }
}
