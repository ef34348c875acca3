//! Queue ioctls answered by the `/dev/fuse` proxy's reader thread itself.
//!
//! Through the proxy a FUSE request takes two thread hand-offs more than on amdkfd or with fuser
//! reading `/dev/fuse` itself: `kfd-emu-fuse-in` -> socket -> a fuser worker, and its answer ->
//! socket -> `kfd-emu-fuse-out`. For the ioctl a preemption's reaction waits for (UPDATE_QUEUE,
//! the batch queue's deactivation) the reader thread runs the handler itself and writes the
//! answer to `/dev/fuse`, as it answers device-file page I/O (`page_io`).
//!
//! It may do so only because it never waits for anything that can wait for a FUSE request: it is
//! the one reader of `/dev/fuse`, so a wait of it for a thread that waits for a FUSE READ (a
//! thread that touches client memory lying in a device-file mapping) hangs the mount. So
//! (docs/kfd-emulator.md, "The reader thread's ioctls"):
//! * only the ioctls of `ioctl::READER_SAFE`, whose handlers touch no client memory and hold no
//!   request, on a `dev/kfd` handle, restricted (fuser answers an unrestricted one `ENOSYS`);
//! * the handle table and the state lock are taken with `try_lock`: when another thread holds
//!   either, the request goes on to the FUSE workers unchanged (nothing counted or changed yet);
//!   the other locks taken (the tgid cache, the fault table) are leaves, held by nobody across
//!   a wait;
//! * a panic of the handler is caught and answered `EIO`, as fuser answers a dropped reply.
//!
//! DBG_TRAP's SUSPEND_QUEUES and RESUME_QUEUES (level 3's preemption, `ioctl::fast_safe`) touch
//! client memory under the state lock, so a reader does not run them: after the same checks
//! (a restricted ioctl on `dev/kfd`'s inode) the thread hands its reading of `/dev/fuse` to the
//! proxy's other reader thread when that one waits for it, and then, no longer a reader,
//! resolves the handle, runs and answers the request (`crate::handover`); when the other thread
//! is busy the request goes to the workers.
//!
//! Wire facts (`include/uapi/linux/fuse.h`): FUSE_IOCTL is opcode 39; after `struct
//! fuse_in_header` (40 bytes: opcode at byte 4, unique id at 8, node id at 16, pid at 32,
//! `total_extlen` u16 at 36) comes `struct fuse_ioctl_in` (32 bytes: `fh` u64, `flags` u32,
//! `cmd` u32, `arg` u64, `in_size` u32, `out_size` u32), then `in_size` bytes of argument;
//! `FUSE_IOCTL_UNRESTRICTED` is flag bit 1. The answer's bytes are `reply::encode`'s.

use crate::abi::{u16_at, u32_at, u64_at};
use std::sync::atomic::Ordering;

use crate::ioctl::{self, Call, ProxyThread};
use crate::state::Emu;

/// `FUSE_IOCTL`.
const FUSE_IOCTL: u32 = 39;
/// `FUSE_IOCTL_UNRESTRICTED`.
const UNRESTRICTED: u32 = 1 << 1;
/// `sizeof(struct fuse_in_header)`.
const IN_HEADER: usize = 40;
/// `sizeof(struct fuse_ioctl_in)`.
const IOCTL_IN: usize = 32;

/// The fields of a FUSE_IOCTL request the reader looks at.
#[derive(Debug, PartialEq, Eq)]
struct IoctlRequest<'a> {
    unique: u64,
    nodeid: u64,
    /// The calling thread.
    pid: u32,
    fh: u64,
    flags: u32,
    cmd: u32,
    in_data: &'a [u8],
    out_size: u32,
}

impl<'a> IoctlRequest<'a> {
    /// The dispatcher's call for it, on a handle `opener` opened.
    fn call(&self, opener: u32) -> Call<'a> {
        Call {
            unique: self.unique,
            tid: self.pid,
            opener,
            cmd: self.cmd,
            in_data: self.in_data,
            out_size: self.out_size,
        }
    }
}

/// `msg` as a FUSE_IOCTL request; `None` for any other request, one with header extensions, or
/// a short one.
fn parse(msg: &[u8]) -> Option<IoctlRequest<'_>> {
    if u32_at(msg, 4)? != FUSE_IOCTL || u16_at(msg, 36)? != 0 {
        return None;
    }
    let in_size = u32_at(msg, IN_HEADER + 24)? as usize;
    Some(IoctlRequest {
        unique: u64_at(msg, 8)?,
        nodeid: u64_at(msg, 16)?,
        pid: u32_at(msg, 32)?,
        fh: u64_at(msg, IN_HEADER)?,
        flags: u32_at(msg, IN_HEADER + 8)?,
        cmd: u32_at(msg, IN_HEADER + 12)?,
        in_data: msg.get(IN_HEADER + IOCTL_IN..IN_HEADER + IOCTL_IN + in_size)?,
        out_size: u32_at(msg, IN_HEADER + 28)?,
    })
}

/// What the reader did with a request.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It answered: the bytes to write to `/dev/fuse` are in `out`.
    Answered,
    /// It handed the reading role to the other reader thread and then answered as a former
    /// reader: the bytes are in `out`, and the thread waits for the role before it reads again.
    AnsweredAfterHandover,
    /// The FUSE workers serve it (any other request, or a lock was taken, or the other reader
    /// thread was busy).
    PassOn,
}

/// Answers `msg` in `out` when it is an ioctl the reader thread may run and runs now; when it is
/// a level-3 suspend or resume and the other reader thread waits for the role, hands the role
/// over and answers it as a former reader; the FUSE workers serve any other request, and one of
/// those ioctls when the handle table or the state lock is taken, or the other thread is busy.
pub(crate) fn serve(
    emu: &Emu,
    msg: &[u8],
    out: &mut Vec<u8>,
    baton: &crate::handover::Baton,
) -> Outcome {
    let Some(r) = parse(msg) else {
        return Outcome::PassOn;
    };
    if emu.kfd_ino.get() != Some(&r.nodeid) || r.flags & UNRESTRICTED != 0 {
        return Outcome::PassOn;
    }
    let (thread, passed_on) = if ioctl::reader_safe(r.cmd) {
        (ProxyThread::Reader, &emu.reader_ioctls_passed_on)
    } else if ioctl::fast_safe(r.cmd, r.in_data) {
        (ProxyThread::FormerReader, &emu.fast_ioctls_passed_on)
    } else {
        return Outcome::PassOn;
    };
    let pass_on = || {
        passed_on.fetch_add(1, Ordering::Relaxed);
        Outcome::PassOn
    };
    if thread == ProxyThread::FormerReader {
        if !baton.pass() {
            return pass_on();
        }
        // No longer a reader: it may wait for the handle table and the state lock, as a worker.
        match emu.handles.kfd_opener(r.fh) {
            Some(opener) => {
                let ran = ioctl::dispatch_to_bytes(emu, &r.call(opener), thread, out);
                debug_assert!(ran, "only the reader gives up on a taken lock");
            }
            // A handle of dev/kfd's inode is a dev/kfd handle while the kernel holds the file
            // for the ioctl; were it not in the table, fuser's answer (`fs::ioctl`) is ENOTTY.
            None => crate::reply::encode(out, r.unique, &[], Err(libc::ENOTTY)),
        }
        // Counted before the answer, so a caller whose ioctl returned finds it counted.
        emu.fast_ioctls.fetch_add(1, Ordering::Relaxed);
        return Outcome::AnsweredAfterHandover;
    }
    let opener = match emu.handles.try_kfd_opener(r.fh) {
        Some(Some(opener)) => opener,
        // Not a dev/kfd handle (fuser answers as it always did).
        Some(None) => return Outcome::PassOn,
        None => return pass_on(),
    };
    if !ioctl::dispatch_to_bytes(emu, &r.call(opener), thread, out) {
        return pass_on();
    }
    emu.reader_ioctls.fetch_add(1, Ordering::Relaxed);
    Outcome::Answered
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FUSE_IOCTL request as the kernel sends it.
    fn request(opcode: u32, nodeid: u64, flags: u32, data: &[u8], extlen: u16) -> Vec<u8> {
        let mut m = vec![0u8; IN_HEADER + IOCTL_IN];
        m[4..8].copy_from_slice(&opcode.to_ne_bytes());
        m[8..16].copy_from_slice(&77u64.to_ne_bytes());
        m[16..24].copy_from_slice(&nodeid.to_ne_bytes());
        m[32..36].copy_from_slice(&4242u32.to_ne_bytes());
        m[36..38].copy_from_slice(&extlen.to_ne_bytes());
        m[IN_HEADER..IN_HEADER + 8].copy_from_slice(&5u64.to_ne_bytes());
        m[IN_HEADER + 8..IN_HEADER + 12].copy_from_slice(&flags.to_ne_bytes());
        let cmd = kfd_sys::AMDKFD_IOC_UPDATE_QUEUE;
        m[IN_HEADER + 12..IN_HEADER + 16].copy_from_slice(&cmd.to_ne_bytes());
        m[IN_HEADER + 24..IN_HEADER + 28].copy_from_slice(&(data.len() as u32).to_ne_bytes());
        m[IN_HEADER + 28..IN_HEADER + 32].copy_from_slice(&8u32.to_ne_bytes());
        m.extend_from_slice(data);
        let len = m.len() as u32;
        m[..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    #[test]
    fn the_ioctl_fields_are_read_where_the_kernel_puts_them() {
        let m = request(FUSE_IOCTL, 3, 0, &[1, 2, 3], 0);
        let r = parse(&m).unwrap();
        assert_eq!(
            r,
            IoctlRequest {
                unique: 77,
                nodeid: 3,
                pid: 4242,
                fh: 5,
                flags: 0,
                cmd: kfd_sys::AMDKFD_IOC_UPDATE_QUEUE,
                in_data: &[1, 2, 3],
                out_size: 8,
            }
        );
        assert!(parse(&request(15, 3, 0, &[], 0)).is_none(), "a READ");
        assert!(
            parse(&request(FUSE_IOCTL, 3, 0, &[], 8)).is_none(),
            "extensions"
        );
        assert!(parse(&m[..m.len() - 1]).is_none(), "argument cut short");
    }

    #[test]
    fn other_inodes_unknown_handles_and_unrestricted_ioctls_go_to_the_workers() {
        let config = crate::config::EmuConfig::default();
        let topo = crate::config::Topology::build(&config).unwrap();
        let emu = Emu::new(config, topo, std::path::PathBuf::from("/nonexistent"));
        let _ = emu.kfd_ino.set(3);
        let mut out = Vec::new();
        let fast = crate::handover::Baton::alone();
        // Node 4 is not dev/kfd; handle 5 is not in the table; the unrestricted flag.
        assert_eq!(
            serve(&emu, &request(FUSE_IOCTL, 4, 0, &[], 0), &mut out, &fast),
            Outcome::PassOn
        );
        assert_eq!(
            serve(&emu, &request(FUSE_IOCTL, 3, 0, &[], 0), &mut out, &fast),
            Outcome::PassOn
        );
        emu.handles
            .lock()
            .insert(5, crate::handles::Handle::Kfd { tgid: 4242 });
        assert_eq!(
            serve(
                &emu,
                &request(FUSE_IOCTL, 3, UNRESTRICTED, &[], 0),
                &mut out,
                &fast
            ),
            Outcome::PassOn
        );
        assert!(out.is_empty());
        assert_eq!(emu.reader_ioctls.load(Ordering::Relaxed), 0);
    }
}
