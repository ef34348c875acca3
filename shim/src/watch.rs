//! Watches of edge boards (`AgentMsg::Watch`, docs/shim.md "Direct edges"): a thread per
//! watched board blocks on the board's counter (`FUTEX_WAIT`); when a watched slot is busy the
//! process preempts all its queues itself at the watch's level (2: deactivate, 3: suspend; the
//! code of the agent's `Preempt`, `levels/`), and once every watched slot of every board is
//! idle it undoes that by the
//! policy's release rule (`kfdq::policy::release`, the code the agent runs), never changing its
//! level twice within the policy's minimum interval. What it did goes to the agent
//! (`ShimMsg::SelfLevel`, through the control thread).
//!
//! A watch ends with the session, with `AgentMsg::Unwatch`, and while the lease is out (the
//! agent renews it with its messages): then what it applied is undone. Levels 2 and 3 are
//! watched (level 3: the code of the agent's level-3 `Preempt`, `levels::suspend`, with the
//! class's grace period); a watch at level 1 is ignored (the agent's commands apply it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kfdq::policy::release::{CostRelease, Edges};
use kfdq::proto::{AgentMsg, Level, ShimMsg, Target, WatchRelease};

use std::sync::Arc;

use crate::levels::{activate, deactivate, resume, suspend};
use crate::pmutex::{PGuard, PMutex};
use crate::state::STATE;
use crate::targets::queues_of;
use kfdq::kfd::board::{BoardMap, seal_writes, wait, wake};

/// One board's watch, as the agent sent it.
#[derive(Debug, Clone)]
struct Spec {
    slots: Vec<u32>,
    level: Level,
    grace_period: u32,
    release: WatchRelease,
    min_interval: Duration,
}

#[derive(Debug, Default)]
struct Shared {
    specs: BTreeMap<u32, Spec>,
    /// The boards mapped (read-only), replaced by every watch that carries a descriptor (an
    /// agent restarted numbers its boards anew). A watch thread holds its own reference while
    /// it waits: a mapping is unmapped once neither holds it.
    maps: BTreeMap<u32, Arc<BoardMap>>,
    threads: BTreeSet<u32>,
    /// Boards whose watch wants the level now.
    wanting: BTreeSet<u32>,
    /// The level the watches applied.
    applied: Option<Level>,
    last_change: Option<Instant>,
    outbox: Vec<ShimMsg>,
}

static SHARED: PMutex<Shared> = PMutex::new(Shared::EMPTY);

impl Shared {
    const EMPTY: Shared = Shared {
        specs: BTreeMap::new(),
        maps: BTreeMap::new(),
        threads: BTreeSet::new(),
        wanting: BTreeSet::new(),
        applied: None,
        last_change: None,
        outbox: Vec::new(),
    };
}

/// The lease: watches act until this time (ns since [`epoch`]); 0: not leased.
static UNTIL_NS: AtomicU64 = AtomicU64::new(0);

/// A watch undid its level because the lease ran out, and the control thread's lease check
/// has not counted it yet (`lease.rs`: one expiry, whichever of the two comes first).
static LEASE_UNDO: AtomicBool = AtomicBool::new(false);

/// Whether a watch undid its level for a lease that ran out since the last call.
pub fn took_lease_undo() -> bool {
    LEASE_UNDO.swap(false, Ordering::SeqCst)
}

/// Longest wait between two looks (the lease is checked at least this often).
const LOOK_EVERY: Duration = Duration::from_millis(100);

fn epoch() -> Instant {
    static E: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn ns(t: Instant) -> u64 {
    t.saturating_duration_since(epoch()).as_nanos() as u64
}

fn shared() -> PGuard<'static, Shared> {
    SHARED.lock()
}

/// In a fork child, before any of its threads run: the parent's watches, threads and lease are
/// the parent's (a watch thread may have held the lock at the fork).
pub fn reset_after_fork() {
    // SAFETY: called only from the shim's `pthread_atfork` child handler, where the calling
    // thread is the only one.
    unsafe { SHARED.reset_after_fork(Shared::EMPTY) };
    UNTIL_NS.store(0, Ordering::SeqCst);
    LEASE_UNDO.store(false, Ordering::SeqCst);
}

/// The agent renewed the lease (a watch, a renewal, a preempt): watches act until `until`.
pub fn renew(until: Instant) {
    UNTIL_NS.store(ns(until), Ordering::SeqCst);
}

fn leased(now: Instant) -> bool {
    ns(now) < UNTIL_NS.load(Ordering::SeqCst)
}

/// The reports for the agent.
pub fn take_outbox() -> Vec<ShimMsg> {
    std::mem::take(&mut shared().outbox)
}

/// The board messages of the agent. `lease`: the session's lease.
pub fn handle(msg: AgentMsg, lease: Option<Duration>) {
    match msg {
        AgentMsg::BoardWriter { board, slot } => {
            let Some(fd) = crate::fd_stream::take_fd() else {
                crate::log::warn_always(&format!(
                    "edge board {board}: the agent's message came without its descriptor; launches ring the doorbell"
                ));
                return;
            };
            // Mapped, then sealed against every later write: the agent passes a board to
            // watchers only once sealed (nobody but this mapping and the agent's can write it).
            let map = BoardMap::map(&fd, true).and_then(|m| seal_writes(&fd).map(|()| m));
            match map {
                Ok(m) if m.slot(slot).is_some() => {
                    crate::edges::set_writer(m.leak(), slot);
                    shared().outbox.push(ShimMsg::BoardSealed { board });
                    crate::edges::poke_control();
                }
                Ok(_) => crate::log::warn_always(&format!(
                    "edge board {board}: slot {slot} is beyond the board; launches ring the doorbell"
                )),
                Err(e) => crate::log::warn_always(&format!(
                    "edge board {board}: mapping and sealing it failed ({e}); launches ring the doorbell"
                )),
            }
        }
        AgentMsg::Watch {
            board,
            slots,
            level,
            grace_period,
            release,
            min_interval_ns,
        } => {
            let fd = crate::fd_stream::take_fd();
            if let Some(l) = lease {
                renew(Instant::now() + l);
            }
            if !matches!(level, Level::Deactivate | Level::Suspend) {
                crate::log::debug(|| {
                    format!(
                        "edge board {board}: a watch at {level:?} is not done here; the agent's commands apply it"
                    )
                });
                return;
            }
            let mut sh = shared();
            // A descriptor replaces the mapping: the board's number may name another board now
            // (the agent restarted).
            match fd.map(|fd| BoardMap::map(&fd, false)) {
                Some(Ok(m)) => {
                    if let Some(old) = sh.maps.insert(board, Arc::new(m)) {
                        // Its thread looks again, at the new one.
                        wake(old.seq());
                    }
                }
                Some(Err(e)) => {
                    crate::log::warn_always(&format!(
                        "edge board {board}: mapping it failed ({e}); the agent's commands apply the level"
                    ));
                    return;
                }
                None if !sh.maps.contains_key(&board) => {
                    crate::log::warn_always(&format!(
                        "edge board {board}: the watch came without its descriptor; the agent's commands apply the level"
                    ));
                    return;
                }
                None => {}
            }
            sh.specs.insert(
                board,
                Spec {
                    slots,
                    level,
                    grace_period,
                    release: *release,
                    min_interval: Duration::from_nanos(min_interval_ns),
                },
            );
            if sh.threads.insert(board) {
                let spawned = std::thread::Builder::new()
                    .name("kfdq-shim-watch".into())
                    .spawn(move || {
                        let _ = crate::guard::guarded(|| run(board));
                    });
                if spawned.is_err() {
                    sh.threads.remove(&board);
                    sh.specs.remove(&board);
                }
            } else if let Some(m) = sh.maps.get(&board) {
                wake(m.seq());
            }
        }
        AgentMsg::Unwatch { board } => {
            let mut sh = shared();
            sh.specs.remove(&board);
            if let Some(m) = sh.maps.get(&board) {
                wake(m.seq());
            }
        }
        AgentMsg::BoardChanged {} => {
            for m in shared().maps.values() {
                wake(m.seq());
            }
        }
        _ => {}
    }
}

/// The session ended: every watch ends (the control thread releases everything anyway).
pub fn end_session() {
    let mut sh = shared();
    sh.specs.clear();
    sh.wanting.clear();
    sh.applied = None;
    sh.outbox.clear();
    for m in sh.maps.values() {
        wake(m.seq());
    }
    // The next session's watches bring their own descriptors (its agent may number its
    // boards anew); a watch thread keeps its mapping until it ends.
    sh.maps.clear();
    drop(sh);
    UNTIL_NS.store(0, Ordering::SeqCst);
    crate::fd_stream::clear();
}

/// One board's watcher.
fn run(board: u32) {
    // Its own reaction-chain timestamps (`KFDQ_CHAIN_TRACE`): the wake-up that found a busy
    // slot stands for the command's arrival, then the ioctls and the report.
    crate::chain::start();
    // Its wake-up should preempt whatever runs on its CPU (`slice.rs`).
    crate::slice::request_slice(crate::slice::WATCHER_SLICE);
    let mut edges: Option<Edges> = None;
    let mut woke_us = None;
    loop {
        let (spec, map) = {
            let mut sh = shared();
            match (sh.specs.get(&board).cloned(), sh.maps.get(&board).cloned()) {
                (Some(s), Some(m)) => (s, m),
                _ => {
                    // Under the same lock: a new watch of the board starts a new thread (and
                    // brings its descriptor). The mapping goes with the last reference.
                    sh.threads.remove(&board);
                    sh.specs.remove(&board);
                    sh.maps.remove(&board);
                    drop(sh);
                    let _ = settle(board, false, None);
                    return;
                }
            }
        };
        let seen = map.seq().load(Ordering::SeqCst);
        let busy = spec.slots.iter().any(|&i| {
            map.slot(i)
                .is_some_and(|w| kfdq::proto::board::busy(w.load(Ordering::SeqCst)))
        });
        let now = Instant::now();
        let now_ns = ns(now);
        let history = match &spec.release {
            WatchRelease::Cost { history, .. } => *history as usize,
            WatchRelease::Hysteresis { .. } => 1,
        };
        match &mut edges {
            Some(e) => e.observe(now_ns, busy, history),
            None if busy => edges = Some(Edges::busy_at(now_ns)),
            None => {}
        }
        // Idle: held until the release rule's hold has passed since the idle edge.
        let held_for = edges.as_ref().and_then(|e| {
            let idle = e.idle_since()?;
            let hold = hold_ns(&spec.release, e);
            let until = idle.saturating_add(hold);
            (now_ns < until).then(|| Duration::from_nanos(until - now_ns))
        });
        let want = busy || held_for.is_some();
        let deferred = settle(board, want, woke_us);
        crate::chain::flush();
        let timeout = [held_for, deferred, Some(LOOK_EVERY)]
            .into_iter()
            .flatten()
            .min();
        wait(map.seq(), seen, timeout);
        woke_us = crate::chain::on().then(kfdq::chain::now_us);
    }
}

fn hold_ns(release: &WatchRelease, e: &Edges) -> u64 {
    match *release {
        WatchRelease::Hysteresis { hold_ns } => hold_ns,
        WatchRelease::Cost {
            round_trip_ns,
            k,
            epsilon,
            max_hold_ns,
            history,
            min_history,
        } => CostRelease {
            round_trip_ns,
            k,
            epsilon,
            max_hold_ns,
            history,
            min_history,
        }
        .hold_ns(e, round_trip_ns),
    }
}

/// Board `board`'s watch wants the level (or not): applies or undoes it when the watches
/// together change their mind, the lease holds, and the minimum interval has passed since the
/// last change. Returns how long the change waits for the interval. `woke_us`: when the
/// watch thread woke for this look (the chain trace's command arrival).
fn settle(board: u32, want: bool, woke_us: Option<u64>) -> Option<Duration> {
    let mut sh = shared();
    if want {
        sh.wanting.insert(board);
    } else {
        sh.wanting.remove(&board);
    }
    let now = Instant::now();
    // The level to be in: the watches' (their class's) while one wants it and the lease holds.
    let level = sh
        .specs
        .values()
        .map(|s| (s.level, s.grace_period))
        .max_by_key(|(l, _)| *l as u8);
    let should = (!sh.wanting.is_empty() && leased(now))
        .then_some(level)
        .flatten();
    if should.map(|(l, _)| l) == sh.applied {
        return None;
    }
    let interval = sh
        .specs
        .values()
        .map(|s| s.min_interval)
        .max()
        .unwrap_or_default();
    if let Some(t) = sh.last_change
        && now < t + interval
    {
        return Some(t + interval - now);
    }
    if should.is_some() {
        if let Some(t) = woke_us {
            crate::chain::mark_at(kfdq::chain::Stage::CmdRecv, t);
        }
        crate::chain::preempt_started();
    }
    let undo = sh.applied;
    // Undone because the lease ran out (the agent hung), not because the edges went idle.
    let lease_out = should.is_none() && !sh.wanting.is_empty();
    let r = {
        let mut st = STATE.lock();
        if lease_out && st.preempted_anything() {
            LEASE_UNDO.store(true, Ordering::SeqCst);
        }
        let r = queues_of(&st, &Target::All).and_then(|q| {
            // What was applied is undone first (a level changed: its class's was reloaded).
            let undone = match undo {
                Some(Level::Suspend) => resume(&mut st, &q),
                Some(_) => activate(&mut st, &q),
                None => Ok(String::new()),
            };
            match should {
                Some((Level::Suspend, grace)) => undone.and_then(|_| suspend(&mut st, &q, grace)),
                Some(_) => undone.and_then(|_| deactivate(&mut st, &q)),
                None => undone,
            }
        });
        drop(st);
        STATE.notify_all();
        r
    };
    if should.is_some() {
        crate::chain::preempt_done();
        crate::chain::mark(kfdq::chain::Stage::AckSent);
    }
    sh.last_change = Some(now);
    let should = should.map(|(l, _)| l);
    let (ok, detail) = match r {
        Ok(d) => {
            sh.applied = should;
            (true, d)
        }
        Err(e) => {
            // Not applied (or not undone: the shim's release retries own it).
            sh.applied = None;
            (false, e.to_string())
        }
    };
    sh.outbox.push(ShimMsg::SelfLevel {
        board,
        level: should,
        ok,
        detail,
    });
    drop(sh);
    crate::edges::poke_control();
    None
}
