//! The metrics endpoint: a thread that answers `GET /metrics` on the configured TCP address
//! with a scrape the event loop renders. The loop never waits on HTTP: the thread asks for a
//! scrape through a socket pair the loop polls, the loop renders it between two wake-ups and
//! hands the text back. A slow or hostile client costs the thread its timeouts, never the
//! agent's latency; a loop that does not answer within [`RENDER_WAIT`] gets the last scrape
//! served again.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use super::metrics::CONTENT_TYPE;

/// How long a scrape waits for the event loop before the previous text is served.
pub const RENDER_WAIT: Duration = Duration::from_secs(2);
/// Per-connection read and write timeout.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// A request head larger than this is refused.
const MAX_HEAD: usize = 8192;

#[derive(Debug, Default)]
struct Scrape {
    /// Scrapes asked for.
    asked: u64,
    /// The scrape `text` answers.
    answered: u64,
    text: String,
}

#[derive(Debug, Default)]
struct Shared {
    scrape: Mutex<Scrape>,
    rendered: Condvar,
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
    /// Setting up the endpoint's wake-up pair or thread failed.
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
            .map_err(io("socketpair"))?;
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("kfdqd-metrics".into())
            .spawn(move || serve(&listener, &ask, &theirs))
            .map_err(io("metrics thread"))?;
        tracing::info!(%addr, "metrics on http://{addr}/metrics");
        Ok(Endpoint { wake, shared })
    }

    /// What the event loop polls: readable when a scrape is asked for.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Clears the wake-ups; true when a scrape is asked for.
    pub fn take_request(&self) -> bool {
        let mut buf = [0u8; 64];
        let mut any = false;
        while let Ok(n) = (&self.wake).read(&mut buf) {
            if n == 0 {
                break;
            }
            any = true;
        }
        any
    }

    /// Hands a rendered scrape to the waiting request(s).
    pub fn answer(&self, text: String) {
        let mut s = self
            .shared
            .scrape
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        s.answered = s.asked;
        s.text = text;
        self.shared.rendered.notify_all();
    }
}

fn serve(listener: &TcpListener, ask: &UnixStream, shared: &Shared) {
    for conn in listener.incoming() {
        match conn {
            Ok(c) => {
                if let Err(e) = handle(c, ask, shared) {
                    tracing::debug!("metrics request: {e}");
                }
            }
            Err(e) => {
                tracing::warn!("metrics endpoint: accept: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

fn handle(mut c: TcpStream, ask: &UnixStream, shared: &Shared) -> std::io::Result<()> {
    c.set_read_timeout(Some(IO_TIMEOUT))?;
    c.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = c.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return respond(
                &mut c,
                "431 Request Header Fields Too Large",
                "text/plain",
                "",
            );
        }
    }
    let line = String::from_utf8_lossy(&head);
    let mut words = line.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET" | "HEAD", "/metrics") => {
            let text = scrape(ask, shared);
            let body = if method == "HEAD" { "" } else { text.as_str() };
            respond(&mut c, "200 OK", CONTENT_TYPE, body)
        }
        ("GET" | "HEAD", "/") => respond(
            &mut c,
            "200 OK",
            "text/plain; charset=utf-8",
            "kfdqd: metrics are at /metrics (Prometheus text format)\n",
        ),
        ("GET" | "HEAD", _) => respond(
            &mut c,
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found: kfdqd serves /metrics\n",
        ),
        _ => respond(
            &mut c,
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET /metrics\n",
        ),
    }
}

/// Asks the event loop for a scrape and waits for it (at most [`RENDER_WAIT`]).
fn scrape(mut ask: &UnixStream, shared: &Shared) -> String {
    let mut s = shared.scrape.lock().unwrap_or_else(PoisonError::into_inner);
    s.asked += 1;
    let want = s.asked;
    // A full pipe already holds a wake-up: nothing is lost when this write fails.
    let _ = ask.write(&[1]);
    let (s, timeout) = shared
        .rendered
        .wait_timeout_while(s, RENDER_WAIT, |s| s.answered < want)
        .unwrap_or_else(PoisonError::into_inner);
    if timeout.timed_out() {
        tracing::warn!(
            "metrics: the event loop did not render a scrape within {RENDER_WAIT:?}; serving the previous one"
        );
    }
    s.text.clone()
}

fn respond(c: &mut TcpStream, status: &str, ctype: &str, body: &str) -> std::io::Result<()> {
    write!(
        c,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    c.flush()
}
