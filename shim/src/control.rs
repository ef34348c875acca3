//! The control thread and the preemption levels the shim executes on its own process.
//!
//! * Level 0: UPDATE_QUEUE with a new priority (agent's `SetPriority`).
//! * Level 1: hold / release streams (launches and other stream-ordered calls wait in the
//!   wrappers).
//! * Level 2: UPDATE_QUEUE percentage 0 / restore, same ring, size and priority; one call per
//!   queue, issued back to back per GPU.
//! * Level 3: DBG_TRAP on this process itself: ENABLE once (with a pipe), GET_QUEUE_SNAPSHOT to
//!   clear `EC_QUEUE_NEW`, SUSPEND_QUEUES with the grace period, RESUME_QUEUES.
//!
//! The thread connects to `KFDQ_SOCKET` (if set), checks that the listener belongs to a uid it
//! trusts (`kfdq::proto::peer`; otherwise one warning and no control, ever), and speaks
//! `kfdq::proto`; when the agent goes
//! away (EOF, error, overlong line) everything is released (fail open) and it reconnects with
//! backoff. It also samples queue activity every activity period (`KFDQ_ACTIVITY_US`, default 2 ms)
//! and publishes the registry as JSON for
//! `kfdq ps`.

use std::io::{BufReader, Write};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kfd_sys as sys;
use kfdq::kfd::debug::{QueueStatus, dbg_enable, queue_snapshot, resume_queues, suspend_queues};
use kfdq::kfd::{EXCEPTION_QUEUE_NEW, QueueId};
use kfdq::policy::class::KFD_PRIORITY_MAX;
use kfdq::proto::peer::{AgentTrust, peer_cred};
use kfdq::proto::{self, AgentMsg, DecodeError, Level, LineReader, ShimMsg, Target};

use crate::hook::with_bypass;
use crate::launch::guarded;
use crate::log::Repeat;
use crate::state::{F_DISABLED, FLAGS, STATE, State, UNCLAIMED_GRACE};

/// Set once the control thread runs in this process (reset in a fork child).
pub static STARTED: AtomicBool = AtomicBool::new(false);
/// Set by the exit handler: stop publishing.
pub static EXITING: AtomicBool = AtomicBool::new(false);
/// Pid whose registry file this process wrote (0 = none).
pub static WROTE_PID: AtomicU32 = AtomicU32::new(0);

/// Starts the control thread once per process.
pub fn start() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("kfdq-shim-ctl".into())
        .spawn(|| {
            guarded(main);
        });
    if let Err(e) = spawned {
        crate::log::warn_always(&format!(
            "cannot start the control thread ({e}); static priorities only"
        ));
    }
}

fn pid() -> u32 {
    std::process::id()
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
    let cfg = crate::init::config();
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
                            crate::log::warn_always(&why);
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

/// Checks the kernel's credentials of the listening peer before a single byte is exchanged.
fn trusted(s: &UnixStream, trust: &AgentTrust, path: &Path) -> Result<(), String> {
    let shown = path.display().to_string();
    let cred = peer_cred(s).map_err(|e| {
        format!("refusing the agent at {shown}: its credentials cannot be read ({e}); running uncontrolled")
    })?;
    trust.check(&cred, &shown)
}

/// Why a session ended.
#[derive(Debug)]
enum End {
    /// The agent closed an established session.
    Closed,
    /// The agent refused this process.
    Refused(String),
    /// It ended before the agent's welcome (closed at once, garbage, silence).
    BeforeWelcome(String),
    /// An established session failed.
    Error(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Closed => f.write_str("closed by the agent"),
            End::Refused(r) => write!(f, "refused by the agent: {r}"),
            End::BeforeWelcome(e) | End::Error(e) => f.write_str(e),
        }
    }
}

fn release_everything(why: &str) {
    let mut st = STATE.lock();
    let errors = fail_open(&mut st);
    drop(st);
    STATE.notify_all();
    crate::log::debug(|| format!("{why}: released everything"));
    for e in errors {
        crate::log::warn_always(&format!("{why}; releasing: {e}"));
    }
}

fn send(w: &mut UnixStream, msg: &ShimMsg) -> Result<(), End> {
    w.write_all(&proto::encode(msg))
        .map_err(|e| End::Error(format!("write: {e}")))
}

fn session(stream: UnixStream, last_published: &mut u64, watch: &mut UnclaimedWatch) -> End {
    let cfg = crate::init::config();
    let mut w = match stream.try_clone() {
        Ok(w) => w,
        Err(e) => return End::Error(format!("socket: {e}")),
    };
    let _ = w.set_write_timeout(Some(Duration::from_secs(2)));
    let (class, priority) = {
        let st = STATE.lock();
        (st.class.clone(), st.policy.forced)
    };
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    if let Err(e) = send(
        &mut w,
        &ShimMsg::Hello {
            version: proto::VERSION,
            pid: pid(),
            exe,
            class,
            priority,
        },
    ) {
        return End::BeforeWelcome(format!("did not take this process's hello ({e})"));
    }
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let fd = stream.as_raw_fd();
    let mut reader = LineReader::new(BufReader::new(stream));
    match reader.next::<AgentMsg>() {
        Ok(AgentMsg::Welcome { .. }) => {}
        Ok(AgentMsg::Refused { reason }) => {
            crate::log::warn_always(&format!("the agent refused this process: {reason}"));
            return End::Refused(reason);
        }
        Ok(other) => {
            return End::BeforeWelcome(format!(
                "answered hello with {other:?} instead of a welcome"
            ));
        }
        Err(DecodeError::Closed) => {
            return End::BeforeWelcome("closed the connection without answering hello".into());
        }
        Err(e) => return End::BeforeWelcome(format!("did not answer hello with a welcome ({e})")),
    }
    let _ = reader.get_ref().get_ref().set_read_timeout(None);
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
    let mut sent_gen = 0u64;
    loop {
        if EXITING.load(Ordering::Relaxed) || FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0 {
            return End::Error("shim stopped controlling".into());
        }
        let readable =
            !reader.get_ref().buffer().is_empty() || poll_readable(fd, cfg.activity_period);
        if readable {
            match reader.next::<AgentMsg>() {
                Ok(msg) => {
                    let replies = guarded(|| handle(msg)).unwrap_or_default();
                    for r in replies {
                        if let Err(e) = send(&mut w, &r) {
                            return e;
                        }
                    }
                }
                Err(DecodeError::Malformed(m)) => crate::log::warn_repeating(
                    &W_MALFORMED,
                    &format!("ignoring a malformed message from the agent: {m}"),
                ),
                Err(DecodeError::Closed) => return End::Closed,
                Err(e) => return End::Error(format!("protocol error: {e}")),
            }
        }
        for (queue_id, busy) in sample_activity(watch) {
            if let Err(e) = send(&mut w, &ShimMsg::Activity { queue_id, busy }) {
                return e;
            }
        }
        let (gen_now, reg) = {
            let st = STATE.lock();
            (
                st.generation,
                (st.generation != sent_gen).then(|| st.to_proto(pid())),
            )
        };
        if let Some(reg) = reg {
            if let Err(e) = send(&mut w, &ShimMsg::Registry(reg)) {
                return e;
            }
            sent_gen = gen_now;
        }
        publish_file(last_published);
    }
}

fn poll_readable(fd: i32, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // Sub-millisecond periods need ppoll's timespec (poll's milliseconds would round 500 µs to
    // a busy loop).
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: one valid pollfd and timespec on the stack; `fd` is the open socket owned by the
    // session's reader; a null signal mask pointer leaves the mask unchanged.
    let n = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    n > 0 && p.revents != 0
}

/// Busy (write index > read index) transitions since the last sample (and the unclaimed-work
/// check of this tick).
fn sample_activity(watch: &mut UnclaimedWatch) -> Vec<(u32, bool)> {
    let mut st = STATE.lock();
    // The same tick looks for work that no stream claims, under the same lock.
    watch.check(&mut st, Instant::now());
    let mut out = Vec::new();
    for q in st.queues.iter_mut().filter(|q| !q.dying) {
        let (w, r) = q.indices();
        let busy = w > r;
        if busy != q.busy {
            q.busy = busy;
            out.push((q.id, busy));
        }
    }
    out
}

/// Answers one agent message.
fn handle(msg: AgentMsg) -> Vec<ShimMsg> {
    let ack = |seq: u64, r: Result<String, String>| match r {
        Ok(detail) => ShimMsg::Ack {
            seq,
            ok: true,
            detail,
        },
        Err(detail) => ShimMsg::Ack {
            seq,
            ok: false,
            detail,
        },
    };
    crate::log::debug(|| format!("agent: {msg:?}"));
    let mut st = STATE.lock();
    let out = match msg {
        AgentMsg::Welcome { .. } => vec![],
        AgentMsg::Refused { reason } => {
            crate::log::warn_always(&format!("the agent refused this process: {reason}"));
            vec![]
        }
        AgentMsg::SetCuMask { seq, target, masks } => {
            vec![ack(seq, set_cu_masks(&mut st, &target, &masks))]
        }
        AgentMsg::Error { detail } => {
            crate::log::debug(|| format!("the agent could not take a message: {detail}"));
            vec![]
        }
        AgentMsg::SetWindow { seq, dispatches } => vec![ack(seq, set_window(&mut st, dispatches))],
        AgentMsg::Query { seq } => vec![
            ShimMsg::Registry(st.to_proto(pid())),
            ack(seq, Ok("registry sent".into())),
        ],
        AgentMsg::SetPriority {
            seq,
            target,
            priority,
        } => vec![ack(seq, set_priority(&mut st, &target, priority))],
        AgentMsg::Preempt {
            seq,
            level,
            target,
            grace_period,
        } => {
            let r = match level {
                Level::Hold => streams_of(&st, &target)
                    .map(|s| hold(&mut st, &s, matches!(target, Target::All))),
                Level::Deactivate => queues_of(&st, &target).and_then(|q| deactivate(&mut st, &q)),
                Level::Suspend => {
                    queues_of(&st, &target).and_then(|q| suspend(&mut st, &q, grace_period))
                }
            };
            vec![ack(seq, r)]
        }
        AgentMsg::Release { seq, level, target } => {
            let r = match level {
                Level::Hold => streams_of(&st, &target)
                    .map(|s| release(&mut st, &s, matches!(target, Target::All))),
                Level::Deactivate => queues_of(&st, &target).and_then(|q| activate(&mut st, &q)),
                Level::Suspend => queues_of(&st, &target).and_then(|q| resume(&mut st, &q)),
            };
            vec![ack(seq, r)]
        }
    };
    drop(st);
    STATE.notify_all();
    out
}

/// Stream ids a target names (level 1).
fn streams_of(st: &State, t: &Target) -> Result<Vec<u64>, String> {
    match t {
        Target::All => Ok(st.streams.iter().map(|s| s.id).collect()),
        Target::Streams(ids) => {
            let unknown: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|i| st.stream(*i).is_none())
                .collect();
            if unknown.is_empty() {
                Ok(ids.clone())
            } else {
                Err(format!(
                    "no stream {unknown:?} in this process (see the registry for stream ids)"
                ))
            }
        }
        Target::Queues(qs) => {
            let unknown: Vec<u32> = qs
                .iter()
                .copied()
                .filter(|q| st.queue(*q).is_none())
                .collect();
            if !unknown.is_empty() {
                return Err(format!("no KFD queue {unknown:?} in this process"));
            }
            Ok(st
                .streams
                .iter()
                .filter(|s| s.queue.is_some_and(|q| qs.contains(&q)))
                .map(|s| s.id)
                .collect())
        }
    }
}

/// Queue ids a target names (levels 0, 2, 3).
fn queues_of(st: &State, t: &Target) -> Result<Vec<u32>, String> {
    match t {
        Target::All => Ok(st
            .queues
            .iter()
            .filter(|q| !q.dying)
            .map(|q| q.id)
            .collect()),
        Target::Queues(qs) => {
            let unknown: Vec<u32> = qs
                .iter()
                .copied()
                .filter(|q| st.queue(*q).is_none())
                .collect();
            if unknown.is_empty() {
                Ok(qs.clone())
            } else {
                Err(format!("no KFD queue {unknown:?} in this process"))
            }
        }
        Target::Streams(ids) => {
            let mut out = Vec::new();
            for id in ids {
                match st.stream(*id) {
                    None => return Err(format!("no stream {id} in this process")),
                    Some(s) => match s.queue {
                        None => {
                            return Err(format!(
                                "stream {id} has no KFD queue yet (it has not launched any work); levels 2 and 3 act on queues"
                            ));
                        }
                        Some(q) => {
                            if !out.contains(&q) {
                                out.push(q);
                            }
                        }
                    },
                }
            }
            Ok(out)
        }
    }
}

fn hold(st: &mut State, sids: &[u64], all: bool) -> String {
    for s in st.streams.iter_mut().filter(|s| sids.contains(&s.id)) {
        s.held = true;
    }
    if all {
        st.hold_new = true;
    }
    st.changed();
    st.refresh_flags();
    format!(
        "level 1: holding launches and stream-ordered work of stream(s) {sids:?}{}",
        if all {
            " and of streams created from now on"
        } else {
            ""
        }
    )
}

fn release(st: &mut State, sids: &[u64], all: bool) -> String {
    for s in st.streams.iter_mut().filter(|s| sids.contains(&s.id)) {
        s.held = false;
    }
    if all {
        st.hold_new = false;
    }
    st.changed();
    st.refresh_flags();
    format!("level 1: released stream(s) {sids:?}")
}

fn kfd_fd(st: &State) -> Result<BorrowedFd<'static>, String> {
    if st.kfd_fd < 0 {
        return Err("no KFD queue observed yet (the runtime has not created one), so there is no /dev/kfd fd to act on".into());
    }
    // SAFETY: the runtime's /dev/kfd fd, open for as long as its queues exist (queues are
    // destroyed, and the registry emptied, before the runtime closes it); only borrowed here.
    Ok(unsafe { BorrowedFd::borrow_raw(st.kfd_fd) })
}

fn update(
    fd: BorrowedFd<'_>,
    q: &crate::state::Queue,
    percentage: u32,
    priority: u32,
) -> Result<(), String> {
    let args = sys::kfd_ioctl_update_queue_args {
        ring_base_address: q.ring_base,
        queue_id: q.id,
        ring_size: q.ring_size,
        queue_percentage: percentage,
        queue_priority: priority,
    };
    // SAFETY: ring base and size are the ones the runtime created the queue with (recorded
    // from its CREATE_QUEUE and from every UPDATE_QUEUE it made since), so the GPU keeps reading
    // the runtime's own ring; only percentage and priority change.
    with_bypass(|| unsafe { kfdq::kfd::ioctl::update_queue(fd, &args) })
        .map_err(|e| format!("queue {}: {e}", q.id))
}

/// Queue ids sorted by GPU (stable), so the calls for one partition go back to back.
fn by_gpu(st: &State, qids: &[u32]) -> Vec<u32> {
    let mut v: Vec<(u32, u32)> = qids
        .iter()
        .filter_map(|id| st.queue(*id).map(|q| (q.gpu_id, q.id)))
        .collect();
    v.sort_by_key(|(g, _)| *g);
    v.into_iter().map(|(_, id)| id).collect()
}

fn set_priority(st: &mut State, t: &Target, priority: u32) -> Result<String, String> {
    if priority > KFD_PRIORITY_MAX {
        return Err(format!(
            "queue priority {priority} is out of range 0..={KFD_PRIORITY_MAX}"
        ));
    }
    let qids = queues_of(st, t)?;
    let fd = kfd_fd(st)?;
    let mut errs = Vec::new();
    for id in by_gpu(st, &qids) {
        let Some(q) = st.queue_mut(id) else { continue };
        let pct = if q.deactivated {
            q.runtime_percentage & !0xff
        } else {
            q.runtime_percentage
        };
        match update(fd, q, pct, priority) {
            Ok(()) => {
                q.override_priority = Some(priority);
                q.effective = priority;
            }
            Err(e) => errs.push(e),
        }
    }
    st.changed();
    if errs.is_empty() {
        Ok(format!("level 0: queue(s) {qids:?} at priority {priority}"))
    } else {
        Err(format!("UPDATE_QUEUE failed: {}", errs.join("; ")))
    }
}

/// SET_CU_MASK on the queues `t` names, each with its partition's mask.
fn set_cu_masks(
    st: &mut State,
    t: &Target,
    masks: &[kfdq::proto::CuMask],
) -> Result<String, String> {
    let qids = queues_of(st, t)?;
    let fd = kfd_fd(st)?;
    let mut done = Vec::new();
    let mut errs = Vec::new();
    for id in by_gpu(st, &qids) {
        let Some(q) = st.queue(id) else { continue };
        let Some(m) = masks.iter().find(|m| m.gpu_id == q.gpu_id) else {
            continue;
        };
        match with_bypass(|| kfdq::kfd::ioctl::set_cu_mask(fd, QueueId(id), &m.words)) {
            Ok(()) => done.push(id),
            Err(e) => errs.push(format!("queue {id}: {e}")),
        }
    }
    if errs.is_empty() {
        Ok(format!("CU masks set on queue(s) {done:?}"))
    } else {
        Err(format!(
            "SET_CU_MASK failed: {}; set on {done:?}",
            errs.join("; ")
        ))
    }
}

/// Level 2 on `qids`.
/// The agent's in-flight window for this process (a class setting).
fn set_window(st: &mut State, dispatches: Option<u32>) -> Result<String, String> {
    if let Some(w) = dispatches
        && !(1..=proto::MAX_WINDOW).contains(&w)
    {
        return Err(format!(
            "window {w} is out of range 1..={} (omit it for an unbounded window)",
            proto::MAX_WINDOW
        ));
    }
    let prev = crate::window::set(dispatches);
    st.refresh_flags();
    st.changed();
    let show = |w: Option<u32>| w.map_or_else(|| "unbounded".to_string(), |w| w.to_string());
    Ok(format!(
        "in-flight window {} (was {})",
        show(dispatches),
        show(prev)
    ))
}

pub fn deactivate(st: &mut State, qids: &[u32]) -> Result<String, String> {
    let fd = kfd_fd(st)?;
    set_level2(st, fd, qids, true)
        .map(|done| format!("level 2: deactivated queue(s) {done:?} (UPDATE_QUEUE percentage 0)"))
        .map_err(|(errs, done)| {
            format!("level 2 (UPDATE_QUEUE percentage 0) failed: {errs}; deactivated {done:?}")
        })
}

/// Undoes level 2 on `qids`: the runtime's own percentage comes back.
pub fn activate(st: &mut State, qids: &[u32]) -> Result<String, String> {
    let fd = kfd_fd(st)?;
    set_level2(st, fd, qids, false)
        .map(|done| format!("level 2: reactivated queue(s) {done:?}"))
        .map_err(|(errs, done)| format!("level 2 release failed: {errs}; reactivated {done:?}"))
}

/// UPDATE_QUEUE on each of `qids` (grouped by GPU) that is not already in the requested state:
/// percentage 0 (keeping the runtime's `pm4_target_xcc` bits) when `deactivate`, else the
/// runtime's own percentage; always the managed priority. Returns the queues changed, or the
/// joined errors and the queues changed anyway.
fn set_level2(
    st: &mut State,
    fd: BorrowedFd<'_>,
    qids: &[u32],
    deactivate: bool,
) -> Result<Vec<u32>, (String, Vec<u32>)> {
    let mut done = Vec::new();
    let mut errs = Vec::new();
    for id in by_gpu(st, qids) {
        let Some(q) = st.queue_mut(id) else { continue };
        if q.deactivated == deactivate || (deactivate && q.dying) {
            continue;
        }
        let percentage = if deactivate {
            q.runtime_percentage & !0xff
        } else {
            q.runtime_percentage
        };
        match update(fd, q, percentage, q.effective) {
            Ok(()) => {
                q.deactivated = deactivate;
                done.push(id);
            }
            Err(e) => errs.push(e),
        }
    }
    st.changed();
    if errs.is_empty() {
        Ok(done)
    } else {
        Err((errs.join("; "), done))
    }
}

/// DBG_TRAP ENABLE on this process, once.
fn ensure_debug(st: &mut State, fd: BorrowedFd<'_>) -> Result<(), String> {
    if st.debug.is_none() {
        let att = with_bypass(|| dbg_enable(fd, pid(), 0)).map_err(|e| {
            format!(
                "level 3 needs DBG_TRAP ENABLE on this process (KFD >= 1.13, RUNTIME_ENABLE done by the runtime before its first queue, no other debugger attached): {e}"
            )
        })?;
        crate::log::debug(|| {
            format!(
                "DBG_TRAP ENABLE on self (runtime state {})",
                att.runtime.runtime_state
            )
        });
        st.debug = Some(att);
    }
    Ok(())
}

fn status_errors(ids: &[u32], statuses: &[QueueStatus]) -> Vec<String> {
    ids.iter()
        .zip(statuses)
        .filter_map(|(id, s)| match s {
            QueueStatus::Ok => None,
            QueueStatus::Invalid => Some(format!("queue {id}: KFD refused it (missing, still carrying EC_QUEUE_NEW, or being destroyed)")),
            QueueStatus::Error => Some(format!("queue {id}: the hardware failed to preempt or restore it")),
        })
        .collect()
}

/// Records what SUSPEND/RESUME_QUEUES did to each of `todo` (`suspended` is the state a queue
/// reported `Ok` is now in) and turns the other statuses into one error naming `op`.
fn record_level3(
    st: &mut State,
    todo: &[u32],
    statuses: &[QueueStatus],
    suspended: bool,
    op: &str,
) -> Result<(), String> {
    for (id, s) in todo.iter().zip(statuses) {
        if *s == QueueStatus::Ok
            && let Some(q) = st.queue_mut(*id)
        {
            q.suspended = suspended;
        }
    }
    st.changed();
    let errs = status_errors(todo, statuses);
    if errs.is_empty() {
        Ok(())
    } else {
        Err(format!("level 3: {op}: {}", errs.join("; ")))
    }
}

/// Level 3 on `qids`.
pub fn suspend(st: &mut State, qids: &[u32], grace_period: u32) -> Result<String, String> {
    let fd = kfd_fd(st)?;
    ensure_debug(st, fd)?;
    let todo: Vec<u32> = qids
        .iter()
        .copied()
        .filter(|id| st.queue(*id).is_some_and(|q| !q.suspended && !q.dying))
        .collect();
    if todo.is_empty() {
        return Ok(format!("level 3: queue(s) {qids:?} already suspended"));
    }
    // Freshly created queues carry EC_QUEUE_NEW and cannot be suspended until it is cleared.
    with_bypass(|| queue_snapshot(fd, pid(), EXCEPTION_QUEUE_NEW))
        .map_err(|e| format!("level 3: GET_QUEUE_SNAPSHOT (clearing EC_QUEUE_NEW): {e}"))?;
    let ids: Vec<QueueId> = todo.iter().map(|q| QueueId(*q)).collect();
    let (_, statuses) = with_bypass(|| suspend_queues(fd, pid(), &ids, grace_period, 0))
        .map_err(|e| format!("level 3: SUSPEND_QUEUES: {e}"))?;
    record_level3(st, &todo, &statuses, true, "SUSPEND_QUEUES").map(|()| {
        format!("level 3: suspended queue(s) {todo:?} (DBG_TRAP SUSPEND_QUEUES, grace period {grace_period})")
    })
}

/// Undoes level 3 on `qids`.
pub fn resume(st: &mut State, qids: &[u32]) -> Result<String, String> {
    let todo: Vec<u32> = qids
        .iter()
        .copied()
        .filter(|id| st.queue(*id).is_some_and(|q| q.suspended))
        .collect();
    if todo.is_empty() {
        return Ok(format!("level 3: queue(s) {qids:?} not suspended"));
    }
    let fd = kfd_fd(st)?;
    let ids: Vec<QueueId> = todo.iter().map(|q| QueueId(*q)).collect();
    let (_, statuses) = with_bypass(|| resume_queues(fd, pid(), &ids))
        .map_err(|e| format!("level 3: RESUME_QUEUES: {e}"))?;
    record_level3(st, &todo, &statuses, false, "RESUME_QUEUES")
        .map(|()| format!("level 3: resumed queue(s) {todo:?}"))
}

/// Fail open: releases every hold, reactivates every deactivated queue, resumes every
/// suspended one. Returns what failed.
pub fn fail_open(st: &mut State) -> Vec<String> {
    let mut errors = Vec::new();
    let all: Vec<u64> = st.streams.iter().map(|s| s.id).collect();
    release(st, &all, true);
    let suspended: Vec<u32> = st
        .queues
        .iter()
        .filter(|q| q.suspended)
        .map(|q| q.id)
        .collect();
    if !suspended.is_empty()
        && let Err(e) = resume(st, &suspended)
    {
        errors.push(e);
    }
    let deactivated: Vec<u32> = st
        .queues
        .iter()
        .filter(|q| q.deactivated)
        .map(|q| q.id)
        .collect();
    if !deactivated.is_empty()
        && let Err(e) = activate(st, &deactivated)
    {
        errors.push(e);
    }
    // The agent's window goes with it: back to the process's own (KFDQ_WINDOW, else none).
    if crate::window::get() != crate::init::config().window {
        crate::window::set(crate::init::config().window);
        st.refresh_flags();
        st.changed();
    }
    errors
}

/// Where the registry is published: `$KFDQ_STATE_DIR`, else `/run/kfdq` when it can be
/// created and written, else `/tmp/kfdq-<uid>`.
pub fn state_dir() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let usable = |d: &Path| std::fs::create_dir_all(d).is_ok() && writable(d);
        // An explicit directory is used or nothing; the defaults are tried in order.
        match proto::state::state_dir_override() {
            Some(d) => {
                let ok = usable(&d);
                if !ok {
                    crate::log::warn_always(&format!(
                        "KFDQ_STATE_DIR={} cannot be created or written: this process's registry is not published, \
                         so `kfdq ps` shows its queues without streams or class; control by the agent still works. \
                         Fix: make the directory writable for uid {}, or unset KFDQ_STATE_DIR (default /run/kfdq, else /tmp/kfdq-<uid>)",
                        d.display(),
                        crate::sys::effective_uid()
                    ));
                }
                ok.then_some(d)
            }
            None => proto::state::default_state_dirs()
                .into_iter()
                .find(|d| usable(d)),
        }
    })
    .as_deref()
}

fn writable(d: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(d.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Writes `shim-<pid>.json` when the registry changed since `last`.
fn publish_file(last: &mut u64) {
    if EXITING.load(Ordering::Relaxed) {
        return;
    }
    let (gen_now, reg) = {
        let st = STATE.lock();
        if st.generation == *last {
            return;
        }
        (st.generation, st.to_proto(pid()))
    };
    let Some(dir) = state_dir() else { return };
    let name = proto::state::registry_file_name(pid());
    let tmp = dir.join(format!(".{name}.tmp"));
    let Ok(json) = serde_json::to_vec_pretty(&reg) else {
        return;
    };
    if std::fs::write(&tmp, json).is_ok() && std::fs::rename(&tmp, dir.join(&name)).is_ok() {
        WROTE_PID.store(pid(), Ordering::Relaxed);
        *last = gen_now;
    }
}

/// Exit handler: removes this process's registry file (best effort).
pub fn remove_registry_file() {
    EXITING.store(true, Ordering::Relaxed);
    let me = pid();
    if WROTE_PID.load(Ordering::Relaxed) == me
        && let Some(dir) = state_dir()
    {
        let _ = std::fs::remove_file(dir.join(proto::state::registry_file_name(me)));
    }
}
