//! The serving thread: a single-threaded tokio runtime that accepts connections under the caps
//! (`limits.rs`) and serves each in a task of its own with hyper's HTTP/1 server, so requests
//! are handled concurrently and a slow client delays nobody else. Each connection has
//! [`HEAD_DEADLINE`] to send its request head and [`CONNECTION_DEADLINE`] for the whole
//! exchange (head, the wait for the event loop, the response); then it is closed. One request
//! per connection (no keep-alive): a held connection costs a slot for one deadline at most.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::limits::{Full as CapFull, Limits};
use super::{Answers, HEALTH_WAIT, RENDER_WAIT, Shared};
use crate::agent::metrics::CONTENT_TYPE as METRICS_TYPE;

/// How long a client has to send its request head.
pub const HEAD_DEADLINE: Duration = Duration::from_secs(5);
/// How long a connection lives, whatever it does: the head, the scrape ([`RENDER_WAIT`] at
/// most) and the response. Prometheus's default scrape timeout is 10 s.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);
/// A request head larger than this is refused (431).
const MAX_HEAD: usize = 16 * 1024;
/// After `accept` failed (out of descriptors, most likely), the next try waits this long.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// Refused connections are logged at most this often (with their count).
const REFUSED_LOG: Duration = Duration::from_secs(60);

/// Starts the thread serving `listener` (non-blocking already).
pub(super) fn start(listener: std::net::TcpListener, shared: Arc<Shared>) -> std::io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    std::thread::Builder::new()
        .name("kfdqd-metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                match TcpListener::from_std(listener) {
                    Ok(l) => accept(l, shared).await,
                    Err(e) => tracing::error!("metrics endpoint: {e}; metrics are not served"),
                }
            })
        })?;
    Ok(())
}

async fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let limits = Limits::default();
    let mut refused = 0u64;
    let mut logged: Option<Instant> = None;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("metrics endpoint: accept: {e}");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        let slot = match limits.take(peer.ip()) {
            Ok(s) => s,
            Err(why) => {
                refused += 1;
                if logged.is_none_or(|t| t.elapsed() >= REFUSED_LOG) {
                    logged = Some(Instant::now());
                    tracing::warn!(
                        client = %peer.ip(),
                        "metrics endpoint: connection closed unserved: {} ({refused} so far)",
                        match why {
                            CapFull::Total => "the endpoint holds its most connections",
                            CapFull::Client => "this client holds its most connections",
                        }
                    );
                }
                continue;
            }
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let _slot = slot;
            connection(stream, peer, shared).await;
        });
    }
}

async fn connection(stream: tokio::net::TcpStream, peer: SocketAddr, shared: Arc<Shared>) {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEAD_DEADLINE)
        .keep_alive(false)
        .max_buf_size(MAX_HEAD);
    let conn = http.serve_connection(
        TokioIo::new(stream),
        service_fn(move |req| {
            let shared = Arc::clone(&shared);
            async move { Ok::<_, Infallible>(route(&req, &shared).await) }
        }),
    );
    match tokio::time::timeout(CONNECTION_DEADLINE, conn).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(client = %peer, "metrics request: {e}"),
        Err(_) => tracing::debug!(
            client = %peer,
            "metrics request: closed after {CONNECTION_DEADLINE:?}"
        ),
    }
}

async fn route(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET /metrics\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let mut r = Response::new(Full::new(scrape(shared).await));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_TYPE));
            r
        }
        "/healthz" => match turn(shared).await {
            Some(ms) => text(
                StatusCode::OK,
                format!("ok: kfdqd's event loop turned {ms} ms after this probe asked\n"),
            ),
            None => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "kfdqd's event loop did not turn within {HEALTH_WAIT:?}: it is stuck (restart kfdqd)\n"
                ),
            ),
        },
        "/" => text(
            StatusCode::OK,
            "kfdqd: metrics are at /metrics (Prometheus text format), liveness at /healthz\n",
        ),
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: kfdqd serves /metrics and /healthz\n",
        ),
    }
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Asks the event loop for a scrape and waits for it (at most [`RENDER_WAIT`]); the previous
/// one when it does not come.
async fn scrape(shared: &Shared) -> Bytes {
    if !ask(shared, &shared.scrapes, RENDER_WAIT, |a| a.scraped).await {
        tracing::warn!(
            "metrics: the event loop did not render a scrape within {RENDER_WAIT:?}; serving the previous one"
        );
    }
    shared.answers.borrow().text.clone()
}

/// Asks the event loop to turn; the milliseconds it took, or `None` after [`HEALTH_WAIT`].
async fn turn(shared: &Shared) -> Option<u128> {
    let asked = Instant::now();
    if ask(shared, &shared.probes, HEALTH_WAIT, |a| a.turned).await {
        return Some(asked.elapsed().as_millis());
    }
    tracing::warn!("liveness: the event loop did not turn within {HEALTH_WAIT:?} of a probe");
    None
}

/// Counts a request in `asked`, wakes the event loop and waits at most `limit` for the count
/// `answered` reads to reach it; true when it did.
async fn ask(
    shared: &Shared,
    asked: &AtomicU64,
    limit: Duration,
    answered: fn(&Answers) -> u64,
) -> bool {
    let want = asked.fetch_add(1, Ordering::AcqRel) + 1;
    let mut rx = shared.answers.subscribe();
    shared.wake();
    matches!(
        tokio::time::timeout(limit, rx.wait_for(|a| answered(a) >= want)).await,
        Ok(Ok(_))
    )
}
