//! FUSE_INTERRUPT for held requests. fuser 0.18 answers every FUSE_INTERRUPT itself with
//! `ENOSYS`, after which the kernel sends none again (`fc->no_interrupt`) and a caller whose
//! request the emulator holds (WAIT_EVENTS, a DESTROY_QUEUE blocked on a suspended queue) waits
//! uninterruptibly: SIGINT does nothing, and a crashing process's core dump waits in D state
//! until the request is answered.
//!
//! So when kfd-emu mounts with its own `/dev/fuse` descriptor (as root), fuser gets one end of
//! a `SOCK_SEQPACKET` pair instead (one request or reply per message, as on `/dev/fuse`), and
//! two threads carry the traffic: `kfd-emu-fuse-in` reads `/dev/fuse` and passes every request
//! to fuser except FUSE_INTERRUPT, whose interrupted request id goes to `kfd-emu-interrupts`,
//! which answers the request if the emulator holds it (`ioctl::interrupt`); `kfd-emu-fuse-out`
//! writes fuser's replies to `/dev/fuse`. READs and WRITEs of the device files (page faults and
//! writeback of their mappings) `kfd-emu-fuse-in` answers itself (`crate::page_io`), and so it
//! does UPDATE_QUEUE when the state lock is free (`crate::reader_ioctl`). For DBG_TRAP's
//! SUSPEND_QUEUES and RESUME_QUEUES it hands its reading to a second reader thread
//! (`kfd-emu-fuse-in2`, when that one waits for the role) and runs them itself
//! (`crate::handover`): one of the two reads at a time, and what is said here of
//! `kfd-emu-fuse-in` holds for whichever reads. An interrupt for a request the emulator does not
//! hold needs no reply: the kernel waits for the request's own answer.
//!
//! Facts from the kernel (`include/uapi/linux/fuse.h`, `fs/fuse/dev.c`): a request starts with
//! `struct fuse_in_header` (40 bytes: length, opcode at byte 4, unique id at byte 8, ...);
//! FUSE_INTERRUPT is opcode 36 and carries `struct fuse_interrupt_in` (the interrupted request's
//! unique id, a u64) after the header; the kernel sends it only for a request a reader already
//! took, so the proxy has passed that request on before.
//!
//! **Message size.** A unix socket carries a message in one socket buffer whose linear part is
//! everything past `MAX_SKB_FRAGS` (17) pages (`net/unix/af_unix.c`, `unix_dgram_sendmsg`, which
//! SOCK_SEQPACKET uses); a 1 MiB FUSE write or read reply (the kernel's default `max_pages`
//! limit, 256 pages) needs a physically contiguous order-8 allocation, which fails with
//! `ENOBUFS` once memory is fragmented (a busy machine; `/proc/buddyinfo`). So the session
//! asks the kernel for messages of at most [`MESSAGE_DATA`] bytes of data (`max_write`,
//! `max_readahead`, hence `max_pages`: [`limit_messages`]), whose linear part fits an order-2
//! allocation; and a request that cannot be passed on all the same is answered with `EIO`
//! instead of stopping the mount.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};

use nix::errno::Errno;
use nix::sys::socket::{
    AddressFamily, Shutdown, SockFlag, SockType, setsockopt, shutdown, socketpair, sockopt,
};

use crate::error::EmuError;
use crate::reader_ioctl::Outcome;
use crate::state::Emu;

/// `FUSE_INTERRUPT`.
const FUSE_INTERRUPT: u32 = 36;
/// `FUSE_DESTROY`: ends a fuser event loop (the kernel sends it only for block-device mounts).
const FUSE_DESTROY: u32 = 38;
/// `sizeof(struct fuse_in_header)`.
const IN_HEADER: usize = 40;
/// The largest request (a write of fuser's 16 MiB `max_write`) plus headers, fuser's own read
/// buffer size.
const BUFFER: usize = (16 << 20) + 4096;
/// Most data bytes in one FUSE request or reply (a write's or a read's): 16 pages.
pub(crate) const MESSAGE_DATA: u32 = 64 << 10;
/// `sizeof(struct fuse_out_header)`.
const OUT_HEADER: usize = 16;
/// Send buffer of both socket ends: a message must fit (the kernel doubles the value).
const SOCKET_BUFFER: usize = BUFFER;

fn io(context: &str, e: Errno) -> EmuError {
    EmuError::io(context, std::io::Error::from(e))
}

/// The opcode and, for FUSE_INTERRUPT, the interrupted request's id of a request.
fn interrupted_id(msg: &[u8]) -> Option<u64> {
    let opcode = u32::from_ne_bytes(msg.get(4..8)?.try_into().ok()?);
    if opcode != FUSE_INTERRUPT {
        return None;
    }
    Some(u64::from_ne_bytes(
        msg.get(IN_HEADER..IN_HEADER + 8)?.try_into().ok()?,
    ))
}

/// Asks the kernel for FUSE messages that a unix socket carries without a high-order
/// allocation (module documentation): `max_write` and `max_readahead` of [`MESSAGE_DATA`].
pub(crate) fn limit_messages(config: &mut fuser::KernelConfig) {
    // Either setter fails only for a value above its maximum (16 MiB; the kernel's offer),
    // and then the smaller value it returns is set the next time.
    if let Err(v) = config.set_max_write(MESSAGE_DATA) {
        let _ = config.set_max_write(v);
    }
    if let Err(v) = config.set_max_readahead(MESSAGE_DATA) {
        let _ = config.set_max_readahead(v);
    }
}

/// Notes a message of `n` bytes in the emulator's largest-message statistic.
fn note_size(largest: &AtomicU64, n: usize) {
    largest.fetch_max(n as u64, Ordering::Relaxed);
}

/// The answer `error` (a positive errno) to the request `msg`, `None` for a request shorter
/// than its header.
fn error_reply(msg: &[u8], error: Errno) -> Option<[u8; OUT_HEADER]> {
    let unique = msg.get(8..16)?;
    let mut r = [0u8; OUT_HEADER];
    r[..4].copy_from_slice(&(OUT_HEADER as u32).to_ne_bytes());
    r[4..8].copy_from_slice(&(-(error as i32)).to_ne_bytes());
    r[8..16].copy_from_slice(unique);
    Some(r)
}

/// Starts the proxy threads on `dev` (a mounted `/dev/fuse` descriptor) and returns the
/// descriptor fuser is to serve, and `dev` for as long as the proxy holds it open.
pub(crate) fn start(
    emu: &Arc<Emu>,
    dev: OwnedFd,
    threads: usize,
) -> Result<(OwnedFd, Weak<OwnedFd>), EmuError> {
    let (ours, fusers) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| io("create the FUSE proxy's socket pair", e))?;
    for end in [&ours, &fusers] {
        setsockopt(end, sockopt::SndBufForce, &SOCKET_BUFFER)
            .map_err(|e| io("size the FUSE proxy's socket buffer", e))?;
    }
    let dev = Arc::new(dev);
    let held = Arc::downgrade(&dev);
    let ours = Arc::new(ours);
    let (tx, rx) = mpsc::channel::<u64>();
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map(drop)
            .map_err(|e| EmuError::io("spawn a FUSE proxy thread", e))
    };
    let (first, second) = crate::handover::pair();
    for (name, baton, reading) in [
        ("kfd-emu-fuse-in", first, true),
        ("kfd-emu-fuse-in2", second, false),
    ] {
        let (d, o, e, tx) = (dev.clone(), ours.clone(), emu.clone(), tx.clone());
        spawn(
            name,
            Box::new(move || requests(&e, &d, &o, &tx, &baton, reading, threads)),
        )?;
    }
    drop(tx);
    let e = emu.clone();
    spawn(
        "kfd-emu-fuse-out",
        Box::new(move || replies(&e, &ours, &dev)),
    )?;
    let e = emu.clone();
    spawn(
        "kfd-emu-interrupts",
        Box::new(move || {
            for unique in rx {
                crate::ioctl::interrupt::interrupted(&e, unique);
            }
        }),
    )?;
    Ok((fusers, held))
}

/// A `FUSE_DESTROY` request (header only) with request id `unique`.
fn destroy_request(unique: u64) -> [u8; IN_HEADER] {
    let mut m = [0u8; IN_HEADER];
    m[..4].copy_from_slice(&(IN_HEADER as u32).to_ne_bytes());
    m[4..8].copy_from_slice(&FUSE_DESTROY.to_ne_bytes());
    m[8..16].copy_from_slice(&unique.to_ne_bytes());
    m
}

/// Writes `answer`, a reply a reader thread made itself, to `dev`.
pub(crate) fn write_answer(emu: &Emu, dev: &OwnedFd, answer: &[u8]) {
    note_size(&emu.fuse_largest_message, answer.len());
    match nix::unistd::write(dev, answer) {
        // As for fuser's replies (`replies`).
        Ok(_) | Err(Errno::ENOENT | Errno::ENODEV) => {}
        Err(e) => tracing::warn!("writing a FUSE reply failed ({e})"),
    }
}

/// `/dev/fuse` -> fuser, interrupts aside, until the connection ends; then each of fuser's
/// `threads` event loops gets a FUSE_DESTROY, which ends it. One of the two reader threads
/// runs this at a time: the one `reading` from the start, the other once `baton` hands it the
/// role (`crate::handover`); the thread that sees the connection end returns, and its `baton`
/// dropped, the other's wait ends too.
fn requests(
    emu: &Emu,
    dev: &OwnedFd,
    ours: &OwnedFd,
    interrupts: &mpsc::Sender<u64>,
    baton: &crate::handover::Baton,
    reading: bool,
    threads: usize,
) {
    if !reading && !baton.wait() {
        return;
    }
    let mut buf = vec![0u8; BUFFER];
    let mut answer = Vec::with_capacity(OUT_HEADER + MESSAGE_DATA as usize);
    loop {
        let n = match nix::unistd::read(dev.as_fd(), &mut buf) {
            // The descriptor no longer names the device (`MountedEmu::unmount_for_exit`).
            Ok(0) => break,
            Ok(n) => n,
            // A request that was interrupted before it was read, or no request now.
            Err(Errno::ENOENT | Errno::EINTR | Errno::EAGAIN) => continue,
            Err(e) => {
                if e != Errno::ENODEV {
                    tracing::error!("reading /dev/fuse failed ({e}): the mount stops answering");
                }
                break;
            }
        };
        let msg = &buf[..n];
        note_size(&emu.fuse_largest_message, n);
        if let Some(unique) = interrupted_id(msg) {
            tracing::debug!(unique, "FUSE_INTERRUPT");
            let _ = interrupts.send(unique);
            continue;
        }
        // Page-cache I/O of the device files is answered here, never by a FUSE worker, which
        // may be blocked in a fault on exactly that page (`page_io`); so are the queue ioctls
        // that can run without waiting for anything, and level 3's suspends and resumes go to
        // a level-3 suspend or resume after handing the reading over (`reader_ioctl`).
        if crate::page_io::serve(emu, msg, &mut answer) {
            write_answer(emu, dev, &answer);
            continue;
        }
        match crate::reader_ioctl::serve(emu, msg, &mut answer, baton) {
            Outcome::Answered => {
                write_answer(emu, dev, &answer);
                continue;
            }
            Outcome::AnsweredAfterHandover => {
                write_answer(emu, dev, &answer);
                // The other thread reads now (and, when the connection ends, returns and
                // ends this wait).
                if baton.wait() {
                    continue;
                }
                return;
            }
            Outcome::PassOn => {}
        }
        match nix::unistd::write(ours, msg) {
            Ok(_) => {}
            // The socket could not take this message (no memory for its buffer, or too big):
            // its caller gets EIO, the mount goes on.
            Err(e @ (Errno::ENOBUFS | Errno::ENOMEM | Errno::EMSGSIZE)) => {
                tracing::error!(
                    bytes = n,
                    "passing a FUSE request to the session failed ({e}): answered with EIO"
                );
                if let Some(r) = error_reply(msg, Errno::EIO) {
                    let _ = nix::unistd::write(dev, &r);
                }
            }
            Err(e) => {
                tracing::error!("passing a FUSE request to the session failed ({e})");
                break;
            }
        }
    }
    for i in 0..threads {
        let _ = nix::unistd::write(ours, &destroy_request(u64::MAX - i as u64));
    }
    let _ = shutdown(std::os::fd::AsRawFd::as_raw_fd(ours), Shutdown::Write);
}

/// fuser -> `/dev/fuse` until fuser's end is closed.
fn replies(emu: &Emu, ours: &OwnedFd, dev: &OwnedFd) {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = match nix::unistd::read(ours.as_fd(), &mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        };
        note_size(&emu.fuse_largest_message, n);
        match nix::unistd::write(dev, &buf[..n]) {
            // ENOENT: the request is gone (its caller was killed before the answer); ENODEV:
            // the connection ended (the answers to the proxy's own FUSE_DESTROYs).
            Ok(_) | Err(Errno::ENOENT | Errno::ENODEV) => {}
            Err(e) => tracing::warn!("writing a FUSE reply failed ({e})"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_interrupts_are_taken_out() {
        let mut msg = vec![0u8; IN_HEADER + 8];
        msg[4..8].copy_from_slice(&FUSE_INTERRUPT.to_ne_bytes());
        msg[8..16].copy_from_slice(&(0x1235u64).to_ne_bytes());
        msg[IN_HEADER..].copy_from_slice(&(0x1234u64).to_ne_bytes());
        assert_eq!(interrupted_id(&msg), Some(0x1234));
        msg[4..8].copy_from_slice(&39u32.to_ne_bytes()); // FUSE_IOCTL
        assert_eq!(interrupted_id(&msg), None);
        assert_eq!(interrupted_id(&msg[..6]), None);
    }

    #[test]
    fn an_undeliverable_request_is_answered_with_its_id_and_the_error() {
        let mut msg = vec![0u8; IN_HEADER];
        msg[8..16].copy_from_slice(&(0x77u64).to_ne_bytes());
        let r = error_reply(&msg, Errno::EIO).unwrap();
        assert_eq!(u32::from_ne_bytes(r[..4].try_into().unwrap()), 16);
        assert_eq!(i32::from_ne_bytes(r[4..8].try_into().unwrap()), -libc::EIO);
        assert_eq!(u64::from_ne_bytes(r[8..16].try_into().unwrap()), 0x77);
        assert_eq!(error_reply(&msg[..10], Errno::EIO), None);
    }
}
