//! Busy edges: the launch that makes a queue of a preempting class busy wakes the control
//! thread at once, instead of waiting for the next activity sample (docs/shim.md, "Busy
//! edges").
//!
//! The agent turns reporting on for processes whose class preempts others
//! (`AgentMsg::Edges`); the control thread then passes the process's doorbell to the agent
//! ([`offer`]), which answers `AgentMsg::DoorbellTaken`. Every stream-ordered call, after the
//! real call returned (its packet is in the ring), looks at [`ARMED`]: if no busy report is
//! outstanding it sets it and sends one byte to the doorbell (`send` with `MSG_DONTWAIT |
//! MSG_NOSIGNAL`: one system call on the launch that makes the process busy, none on the
//! launches while it is busy; `EAGAIN` means rings are pending, which is as good). The agent
//! takes the ring as a busy edge of the process's queues and answers `AgentMsg::Rang` on the
//! connection, which wakes the control thread: it samples and reports the current state of
//! every queue after the ring, so an idle edge the agent read before the ring (the two sockets
//! are not ordered against each other) is said again after it. The control thread samples
//! every [`kfdq::proto::BUSY_SAMPLE_PERIOD`] while a queue is busy, and clears [`ARMED`] once
//! every queue is idle — then samples once more, so that a launch which found [`ARMED`] still
//! set just before it was cleared is not lost (both sides use sequentially consistent
//! operations: either the launch sees it cleared and rings, or the second sample sees its
//! packet). A launch before the agent took the doorbell (one round trip after `Edges`) rings
//! nothing: the control thread's next sample reports it.
//!
//! With direct edges (`AgentMsg::BoardWriter`, docs/shim.md "Direct edges"), the launch adds
//! one to the process's slot on its class's edge board (odd: busy), adds one to the board's
//! counter and wakes its waiters (`FUTEX_WAKE`: still one system call): the watchers of the
//! board (the processes it preempts) and this process's relay thread, which rings the doorbell
//! for the launch (the agent keeps hearing every busy edge, off the watchers' path). The control
//! thread sets the slot idle when every queue is, before it clears [`ARMED`], and busy again
//! when a sample finds a queue busy and the slot idle (the agent clears the slot of a process
//! whose reports went stale).

use std::io::IoSlice;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use nix::sys::socket::{
    AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType, sendmsg, socketpair,
};

/// A busy report is outstanding: set by the launch that wakes the control thread, cleared by
/// the control thread when every queue was seen idle.
static ARMED: AtomicBool = AtomicBool::new(false);

/// The control thread's eventfd (-1 until it made one): the watches wake it with their
/// reports ([`poke_control`]).
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// The doorbell the launch rings (-1: none taken in this session).
static BELL: AtomicI32 = AtomicI32::new(-1);

/// The descriptor number the doorbell lives at (-1 until the first offer). Never closed while
/// threads run: a new session's doorbell is `dup3`ed onto it, so a launch that loaded it never
/// writes to a reused descriptor.
static BELL_FD: AtomicI32 = AtomicI32::new(-1);

/// `KFDQ_CHAIN_TRACE`: the launch notes when it rang (the control thread records it).
pub static CHAIN: AtomicBool = AtomicBool::new(false);
static RUNG_AT_US: AtomicU64 = AtomicU64::new(0);

/// After a stream-ordered call of a process that reports edges: rings the doorbell (or flips
/// the board's slot) if no busy report is outstanding.
#[inline(always)]
pub fn launched() {
    if !ARMED.swap(true, Ordering::SeqCst) {
        wake();
    }
}

/// Direct edges: this process's slot on its class's board, and the board's counter (null:
/// none; the counter is stored before the slot, and both point into a mapping never unmapped).
static SLOT: AtomicPtr<AtomicU32> = AtomicPtr::new(std::ptr::null_mut());
static SEQ: AtomicPtr<AtomicU32> = AtomicPtr::new(std::ptr::null_mut());

#[cold]
#[inline(never)]
fn wake() {
    if let Some((slot, seq)) = board() {
        if CHAIN.load(Ordering::Relaxed) {
            RUNG_AT_US.store(kfdq::chain::now_us(), Ordering::Relaxed);
        }
        flip(slot, seq, true);
        return;
    }
    ring();
}

/// The slot and the counter, when the process writes a board.
fn board() -> Option<(&'static AtomicU32, &'static AtomicU32)> {
    let slot = SLOT.load(Ordering::Acquire);
    if slot.is_null() {
        return None;
    }
    let seq = SEQ.load(Ordering::Acquire);
    // SAFETY: both were stored from `BoardMap` words (SEQ first, with Release; read here after
    // SLOT with Acquire, so non-null), in a mapping that is never unmapped.
    Some(unsafe { (&*slot, &*seq) })
}

/// Moves the slot to `busy` (one step of its edge count: odd busy, even idle) unless it is
/// there already or another writer moved it first, then bumps the counter and wakes the board's
/// waiters.
fn flip(slot: &AtomicU32, seq: &AtomicU32, busy: bool) {
    let c = slot.load(Ordering::SeqCst);
    if kfdq::proto::board::busy(c) == busy
        || slot
            .compare_exchange(c, c.wrapping_add(1), Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
    {
        return;
    }
    seq.fetch_add(1, Ordering::SeqCst);
    crate::board_map::wake(seq);
}

/// The control thread: every queue idle; the slot says so (before [`disarm`]).
pub fn board_idle() {
    if let Some((slot, seq)) = board() {
        flip(slot, seq, false);
    }
}

/// The control thread: a queue is busy; the slot says so (the agent may have cleared it).
pub fn board_busy() {
    if let Some((slot, seq)) = board() {
        flip(slot, seq, true);
    }
}

/// `AgentMsg::BoardWriter`: launches write `slot` of `map` from now on; the relay thread rings
/// the doorbell for them.
pub fn set_writer(map: crate::board_map::BoardMap, slot: u32) -> bool {
    let Some(s) = map.slot(slot) else {
        return false;
    };
    SEQ.store(std::ptr::from_ref(map.seq()).cast_mut(), Ordering::Release);
    SLOT.store(std::ptr::from_ref(s).cast_mut(), Ordering::Release);
    start_relay();
    true
}

static RELAY: AtomicBool = AtomicBool::new(false);

/// The relay thread (once per process): rings the doorbell when the slot goes busy, so that
/// the agent hears the edge the launch published on the board.
fn start_relay() {
    if RELAY.swap(true, Ordering::AcqRel) {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("kfdq-shim-relay".into())
        .spawn(|| {
            let mut rung = None;
            loop {
                let Some((slot, seq)) = board() else {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    continue;
                };
                let s = seq.load(Ordering::SeqCst);
                let c = slot.load(Ordering::SeqCst);
                if kfdq::proto::board::busy(c) && rung != Some(c) {
                    rung = Some(c);
                    ring();
                }
                crate::board_map::wait(seq, s, Some(std::time::Duration::from_secs(1)));
            }
        });
}

/// Rings the doorbell (nothing before the agent took it: the next sample reports the edge).
fn ring() {
    let bell = BELL.load(Ordering::Acquire);
    if bell < 0 {
        return;
    }
    if CHAIN.load(Ordering::Relaxed) {
        RUNG_AT_US.store(kfdq::chain::now_us(), Ordering::Relaxed);
    }
    // SAFETY: `bell` is the doorbell's descriptor, never closed while threads run (see
    // [`BELL_FD`]); the buffer is one readable byte of a static. An error (`EAGAIN`: rings are
    // pending; the agent's end closed: the session is ending) needs nothing more.
    let _ = unsafe {
        libc::send(
            bell,
            (&raw const RING).cast(),
            1,
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        )
    };
}

/// The byte a ring sends.
static RING: u8 = 1;

/// When the last ring was sent (µs, CLOCK_MONOTONIC), if the chain trace is on.
pub fn rung_at_us() -> Option<u64> {
    Some(RUNG_AT_US.load(Ordering::Relaxed)).filter(|t| *t != 0)
}

/// Makes a doorbell and sends its agent's end on `conn` with a `ShimMsg::Doorbell` line. It
/// is rung only once the agent says it took it ([`taken`]).
pub fn offer(conn: &std::os::unix::net::UnixStream, line: &[u8]) -> std::io::Result<()> {
    let (mine, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
    )?;
    keep(mine)?;
    let fds = [theirs.as_raw_fd()];
    let sent = sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(line)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    if sent < line.len() {
        // The rest of the line without the descriptor (a short write of a short line).
        std::io::Write::write_all(&mut &*conn, &line[sent..])?;
    }
    Ok(())
}

/// Puts `mine` at [`BELL_FD`]'s number (the first time: takes its number).
fn keep(mine: OwnedFd) -> std::io::Result<()> {
    let at = BELL_FD.load(Ordering::Acquire);
    if at < 0 {
        BELL_FD.store(mine.into_raw_fd(), Ordering::Release);
        return Ok(());
    }
    // SAFETY: both are open descriptors of this process; dup3 replaces `at` atomically (a
    // launch that loaded `at` sends to the old socket or the new one, never to anything
    // else), and `mine` is closed when dropped after.
    let r = unsafe { libc::dup3(mine.as_raw_fd(), at, libc::O_CLOEXEC) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The agent took the doorbell: launches ring it.
pub fn taken() {
    BELL.store(BELL_FD.load(Ordering::Acquire), Ordering::Release);
}

/// The session ended: launches ring nothing until the next session's doorbell is taken.
pub fn session_ended() {
    board_idle();
    SLOT.store(std::ptr::null_mut(), Ordering::Release);
    BELL.store(-1, Ordering::Release);
}

/// The eventfd the control thread polls, made on first use (non-blocking, close-on-exec).
/// `None` if the kernel refused one: the watches' reports then wait for the next sample.
pub fn wake_fd() -> Option<i32> {
    let fd = WAKE.load(Ordering::Acquire);
    if fd >= 0 {
        return Some(fd);
    }
    // SAFETY: eventfd takes no pointers; the flags are valid.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    WAKE.store(fd, Ordering::Release);
    Some(fd)
}

/// Wakes the control thread (a watch has a report for the agent).
pub fn poke_control() {
    let Some(fd) = wake_fd() else { return };
    let one: u64 = 1;
    // SAFETY: `fd` is the control thread's eventfd (never closed); 8 readable bytes on the
    // stack. An error (the counter full) leaves a wake-up pending anyway.
    let _ = unsafe { libc::write(fd, (&raw const one).cast(), 8) };
}

/// Empties the eventfd after a wake-up.
pub fn drain(fd: i32) {
    let mut v: u64 = 0;
    // SAFETY: `fd` is the non-blocking eventfd of [`wake_fd`]; the buffer is 8 writable bytes
    // on the stack. With nothing pending it fails with EAGAIN, which is ignored.
    let _ = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
}

/// Whether a busy report is outstanding.
pub fn armed() -> bool {
    ARMED.load(Ordering::SeqCst)
}

/// Every queue was seen idle: the next launch wakes the control thread again.
pub fn disarm() {
    ARMED.store(false, Ordering::SeqCst);
}

/// A busy queue was seen (by a sample, not a launch): no wake-up needed until it is idle.
pub fn arm() {
    ARMED.store(true, Ordering::SeqCst);
}

/// In a fork child, before any of its threads run: the parent's eventfd is the parent's
/// control thread's; the child's control thread makes its own.
pub fn reset_after_fork() {
    let fd = WAKE.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the child's copy of the parent's eventfd, which nothing in the child uses
        // (the child's control thread has not started); closing it leaves the parent's alone.
        unsafe { libc::close(fd) };
    }
    ARMED.store(false, Ordering::Relaxed);
    BELL.store(-1, Ordering::Relaxed);
    // The parent's slot is the parent's (the relay thread is not the child's either).
    SLOT.store(std::ptr::null_mut(), Ordering::Relaxed);
    RELAY.store(false, Ordering::Relaxed);
    let bell = BELL_FD.swap(-1, Ordering::Relaxed);
    if bell >= 0 {
        // SAFETY: the child's copy of the parent's doorbell, which nothing in the child uses
        // (its control thread has not started, and BELL is off); the parent's stays open.
        unsafe { libc::close(bell) };
    }
}
