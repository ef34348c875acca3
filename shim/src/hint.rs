//! Request hints: `kfdq_request_begin()` / `kfdq_request_end()` (docs/shim.md, "Request
//! hints").
//!
//! An application of a class that preempts others says that a request is starting before its
//! first launch, and that it is done after its last. `begin` raises the same busy edge a launch
//! raises (`edges::launched`: the board slot, the doorbell or the control thread's eventfd), so
//! the batch job is already off when the first kernel arrives. While a hint is open the control
//! thread counts the process as busy: it keeps the board slot busy, samples finely, renews, and
//! tells the agent ([`ShimMsg::Hint`]). `end` of the last open hint wakes the control thread,
//! whose next sample is the idle edge once the queues drained.
//!
//! Bounds: a hint is taken only while an agent allowed it (`AgentMsg::Edges` with
//! `hint_timeout_ms`, sent for classes that preempt others). Open hints with no queue busy for
//! `hint_timeout_ms` (a hint not followed by work, or never ended) expire here, are counted and
//! warned once; the agent enforces the same bound on its own (`src/agent/node/hint.rs`), since a
//! shim can lie.
//!
//! Every entry point is a few atomic operations and at most one system call: safe from any
//! thread, before initialisation, without an agent, and in a fork child.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kfdq::proto::{self, ShimMsg};

/// `kfdq_request_*` return codes (shim/include/kfdq.h, `enum kfdq_status`).
pub const OK: i32 = 0;
/// No agent session: nothing to preempt (no `KFDQ_SOCKET`, the agent unreachable or gone, or
/// the process made no HIP call yet).
pub const NO_AGENT: i32 = -2;
/// The agent does not let this process hint: its class preempts nobody.
pub const NOT_ALLOWED: i32 = -3;
/// `end` with no hint open (never begun, ended already, or expired).
pub const NOT_BEGUN: i32 = -4;
/// [`MAX_OPEN`] hints open already.
pub const TOO_MANY: i32 = -5;

/// Open hints at most (one per request in flight; a server with more than this many requests
/// in flight in one process is busy anyway).
pub const MAX_OPEN: u32 = 1 << 16;

/// [`TIMEOUT_MS`] without a session.
const NO_SESSION: u32 = u32::MAX;

/// The agent's hint bound in ms; 0: a session that does not allow hints; [`NO_SESSION`].
static TIMEOUT_MS: AtomicU32 = AtomicU32::new(NO_SESSION);
/// Hints open (begun and not ended or expired).
static OPEN: AtomicU32 = AtomicU32::new(0);
/// When the current hint-only stretch began (ns on [`clock`]): the begin that opened the first
/// hint, then each sample that found a queue busy (the bound counts from the work's end).
static SINCE_NS: AtomicU64 = AtomicU64::new(0);
/// The expiry's warning (at most once a minute on stderr).
static W_EXPIRED: crate::log::Repeat = crate::log::Repeat::new();
/// Hints this process's shim expired.
static EXPIRED: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds since the first call (a monotonic clock shared by the callers and the control
/// thread).
fn clock() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// `kfdq_request_begin`.
pub fn begin() -> i32 {
    match TIMEOUT_MS.load(Ordering::SeqCst) {
        NO_SESSION => return NO_AGENT,
        0 => return NOT_ALLOWED,
        _ => {}
    }
    loop {
        let n = OPEN.load(Ordering::SeqCst);
        if n >= MAX_OPEN {
            return TOO_MANY;
        }
        if n == 0 {
            // Before the hint is visible: the control thread reads the stretch's start only
            // once it sees a hint open.
            SINCE_NS.store(clock(), Ordering::SeqCst);
        }
        if OPEN
            .compare_exchange(n, n + 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            break;
        }
    }
    // The launch's busy edge. Either it finds no report outstanding and wakes (the board, the
    // doorbell, the control thread), or the control thread is armed and sees the open hint at
    // its next sample, before it could disarm (both sides sequentially consistent, edges.rs).
    crate::edges::launched();
    OK
}

/// `kfdq_request_end`.
pub fn end() -> i32 {
    loop {
        let n = OPEN.load(Ordering::SeqCst);
        if n == 0 {
            return if TIMEOUT_MS.load(Ordering::SeqCst) == NO_SESSION {
                NO_AGENT
            } else {
                NOT_BEGUN
            };
        }
        if OPEN
            .compare_exchange(n, n - 1, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            if n == 1 {
                // The idle edge: the control thread samples now, not at its next period.
                crate::edges::poke_control();
            }
            return OK;
        }
    }
}

/// Whether a hint is open.
pub fn open() -> bool {
    OPEN.load(Ordering::SeqCst) > 0
}

/// Hints this process's shim expired.
pub fn expiries() -> u64 {
    EXPIRED.load(Ordering::Relaxed)
}

/// A session got the agent's welcome: hints are refused until the agent allows them.
pub fn session_started() {
    TIMEOUT_MS.store(0, Ordering::SeqCst);
}

/// `AgentMsg::Edges`: hints allowed with this bound (`None`: refused; open ones end).
pub fn allow(timeout_ms: Option<u32>) {
    let t = timeout_ms.unwrap_or(0).min(NO_SESSION - 1);
    TIMEOUT_MS.store(t, Ordering::SeqCst);
    if t == 0 {
        OPEN.store(0, Ordering::SeqCst);
    }
}

/// The session ended: no agent to hint; open hints end with it.
pub fn session_ended() {
    TIMEOUT_MS.store(NO_SESSION, Ordering::SeqCst);
    OPEN.store(0, Ordering::SeqCst);
}

/// In a fork child, before any of its threads run: the parent's hints and session are the
/// parent's.
pub fn reset_after_fork() {
    TIMEOUT_MS.store(NO_SESSION, Ordering::Relaxed);
    OPEN.store(0, Ordering::Relaxed);
}

/// The control thread's sample: `busy` (a queue is). Expires the open hints whose stretch
/// without work reached the bound; returns whether a hint still holds the process busy.
pub fn tick(busy: bool) -> bool {
    let n = OPEN.load(Ordering::SeqCst);
    if n == 0 {
        return false;
    }
    if busy {
        SINCE_NS.store(clock(), Ordering::SeqCst);
        return true;
    }
    let t = TIMEOUT_MS.load(Ordering::SeqCst);
    if t == 0 || t == NO_SESSION {
        return false;
    }
    let bound = Duration::from_millis(t.into()).as_nanos() as u64;
    if clock().saturating_sub(SINCE_NS.load(Ordering::SeqCst)) < bound {
        return true;
    }
    // Only the hints seen: a begin that raced in keeps its hint (it sees the count it made).
    if OPEN
        .compare_exchange(n, 0, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
    {
        EXPIRED.fetch_add(1, Ordering::Relaxed);
        let w = format!(
            "a request hint was open {t} ms without GPU work (begun and not followed by work, or never ended): it expired and no longer keeps other jobs preempted (each kfdq_request_begin needs a kfdq_request_end; docs/shim.md, \"Request hints\")"
        );
        crate::log::warn_repeating(&W_EXPIRED, &w);
        crate::state::STATE.lock().warn(w);
        return false;
    }
    open()
}

/// What the control thread last told the agent of the hints, and when.
#[derive(Debug)]
pub struct Reporter {
    on: bool,
    expired_seen: u64,
    last: Instant,
}

impl Reporter {
    /// A session's reporter: nothing said yet.
    pub fn new() -> Reporter {
        Reporter {
            on: false,
            expired_seen: expiries(),
            last: Instant::now(),
        }
    }

    /// The message for the agent now, if any: a change, or the renewal of an open hint every
    /// [`proto::BUSY_RENEW_PERIOD`] (the agent takes a silent process as stopped).
    pub fn next(&mut self, now: Instant) -> Option<ShimMsg> {
        let on = open();
        let renew = on && now.duration_since(self.last) >= proto::BUSY_RENEW_PERIOD;
        if on == self.on && !renew {
            return None;
        }
        let e = expiries();
        let expired = !on && e != self.expired_seen;
        self.expired_seen = e;
        self.on = on;
        self.last = now;
        Some(ShimMsg::Hint { on, expired })
    }
}
