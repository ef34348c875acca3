//! Waiting on conditions instead of sleeping for a fixed time: a condition is polled until it
//! holds, with a deadline generous enough for a busy 2-core machine, and a timeout fails the
//! test naming what never happened.

use std::time::{Duration, Instant};

/// How long [`wait_for`] waits before it fails the test.
pub const WAIT_LIMIT: Duration = Duration::from_secs(30);

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(2);

/// Polls `cond` until it holds; fails the test naming `what` after [`WAIT_LIMIT`].
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    if !wait_until(WAIT_LIMIT, &mut cond) {
        panic!("timed out after {WAIT_LIMIT:?} waiting for {what}");
    }
}

/// Polls `cond` until it holds (`true`) or `timeout` passes (`false`).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Calls `step` until it succeeds or `limit` passes, the interval growing from [`POLL`] to
/// 50 ms; the last failure after the deadline.
fn poll_growing<T, E>(limit: Duration, mut step: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let deadline = Instant::now() + limit;
    let mut poll = POLL;
    loop {
        let failed = match step() {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            return Err(failed);
        }
        std::thread::sleep(poll);
        poll = (poll * 2).min(Duration::from_millis(50));
    }
}

/// Polls `f` until it returns a value and returns it; fails the test naming `what` after
/// `limit`. The poll interval grows from [`POLL`] to 50 ms, for conditions that cost a request
/// (an HTTP scrape, a query).
pub fn wait_value<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    poll_growing(limit, || f().ok_or(()))
        .unwrap_or_else(|()| panic!("timed out after {limit:?} waiting for {what}"))
}

/// Reads a state with `get` until `cond` holds on it and returns it; fails the test naming
/// `what` and showing the last state after `limit`. For states that cost a request, the poll
/// interval grows like [`wait_value`]'s.
pub fn wait_state<S: std::fmt::Debug>(
    what: &str,
    limit: Duration,
    mut get: impl FnMut() -> S,
    mut cond: impl FnMut(&S) -> bool,
) -> S {
    poll_growing(limit, || {
        let s = get();
        if cond(&s) { Ok(s) } else { Err(s) }
    })
    .unwrap_or_else(|s| panic!("timed out after {limit:?} waiting for {what}; last state:\n{s:#?}"))
}
