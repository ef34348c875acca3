//! `dev/kfd` ioctl dispatch, done like the kernel's `kfd_ioctl()`:
//!
//! * the handler is looked up by `_IOC_NR` only; unknown numbers are `ENOTTY`;
//! * the argument buffer is max(caller size, kernel size) bytes; the caller's bytes are
//!   copied in (FUSE passes `_IOC_SIZE` of the caller's command) and the rest is zero;
//! * after the handler, the caller's size is copied back out when the kernel's own
//!   command has the OUT direction (FUSE copies at most `_IOC_SIZE` of the caller's
//!   command, and only when that command has `_IOC_READ`);
//! * the fd may only be used by the process that opened it (`EBADF` otherwise).
//!
//! One implementation, three ways in: fuser's workers call [`dispatch`] (the answer goes back
//! through fuser's `ReplyIoctl`); the `/dev/fuse` proxy's reader thread (the ioctls of
//! [`READER_SAFE`]) and a reader thread that handed its reading over (DBG_TRAP's
//! SUSPEND_QUEUES and RESUME_QUEUES: [`fast_safe`]) call [`dispatch_to_bytes`] (the answer is
//! written to `/dev/fuse` as the bytes fuser would write: `reply::encode`). All run the same
//! steps ([`run`]); the reader's only difference is that it never waits for the state lock: it
//! takes it with `try_lock` before anything counts or changes, and when another thread holds it
//! the request goes to the workers as any other (`crate::reader_ioctl`, docs/kfd-emulator.md);
//! a former reader waits for it as a worker does (`crate::handover`).

pub(crate) mod debug;
pub(crate) mod detach;
pub(crate) mod device;
pub(crate) mod events;
pub(crate) mod interrupt;
pub(crate) mod lifecycle;
pub(crate) mod memory;
pub(crate) mod queue;

use std::cell::Cell;
use std::sync::MutexGuard;

use crate::faults::Failure;
use fuser::ReplyIoctl;

use crate::effects::Effects;
use crate::process;
use crate::state::{Emu, State};

pub(crate) use crate::abi::{bytes_of, load, store};
pub(crate) use crate::reply::{ENOTSUPP, KResult, send_reply};
use kfd_sys::ioc;

/// Largest user array (entries) an ioctl copies in; the kernel's kmalloc of a bigger
/// one fails with ENOMEM.
pub(crate) const MAX_ARRAY: u32 = 1 << 20;

/// Highest address (exclusive) `access_ok` accepts on x86-64 (`TASK_SIZE_MAX`).
pub(crate) const USER_LIMIT: u64 = 0x7fff_ffff_f000;

/// The kernel's `access_ok(addr, size)`.
pub(crate) fn access_ok(addr: u64, size: u64) -> bool {
    addr.checked_add(size).is_some_and(|end| end <= USER_LIMIT)
}

/// Who is calling and how the reply is shaped.
pub(crate) struct Ctx<'a> {
    pub emu: &'a Emu,
    /// Calling thread (FUSE reports thread ids).
    pub tid: u32,
    pub tgid: u32,
    /// Bytes FUSE copies back to the caller.
    pub out_len: usize,
    /// FUSE request id (a held request is found by it when FUSE_INTERRUPT comes).
    pub unique: u64,
    /// The state lock when the caller took it before the handler ran (the reader thread's
    /// `try_lock`); [`Ctx::lock`] hands it to the handler.
    held: Cell<Option<MutexGuard<'a, State>>>,
    /// Whether the call runs on the proxy's reader thread, which must never wait for the lock.
    on_reader: bool,
}

impl<'a> Ctx<'a> {
    /// The state lock: the one the caller already holds, else waited for. A handler of
    /// [`READER_SAFE`] takes it through here, once; on the reader thread a second take finds it
    /// free or panics (answered `EIO`) rather than wait.
    pub fn lock(&self) -> MutexGuard<'a, State> {
        if let Some(g) = self.held.take() {
            return g;
        }
        if self.on_reader {
            return crate::locks::try_lock(&self.emu.state, "state")
                .expect("a handler on the /dev/fuse reader thread took the state lock twice");
        }
        self.emu.lock()
    }
}

/// One FUSE ioctl request on a `dev/kfd` handle.
pub(crate) struct Call<'a> {
    /// FUSE request id.
    pub unique: u64,
    /// Calling thread (FUSE reports thread ids).
    pub tid: u32,
    /// The process that opened the handle.
    pub opener: u32,
    /// The caller's command.
    pub cmd: u32,
    /// The caller's argument bytes (`_IOC_SIZE` of its command, when it has `_IOC_WRITE`).
    pub in_data: &'a [u8],
    /// Bytes FUSE copies back when the command has `_IOC_READ`.
    pub out_size: u32,
}

/// The ioctls the proxy's reader thread may answer itself: their handlers never hold the
/// request (no `ReplyIoctl` is taken), never touch client memory (no `client_mem`, no `gpu_mem`),
/// take no lock but the state lock, once, through [`Ctx::lock`], and leaf locks (the fault
/// table, the tgid cache), and queue no effects but waking the CP. DBG_TRAP's SUSPEND_QUEUES and
/// RESUME_QUEUES are not among them: they read and write the queue array in client memory while
/// holding the state lock (docs/kfd-emulator.md, "The reader thread's ioctls"); the reader
/// hands its reading over and runs them as a former reader instead ([`fast_safe`]).
const READER_SAFE: [u32; 1] = [kfd_sys::AMDKFD_IOC_UPDATE_QUEUE];

/// Whether the proxy's reader thread may answer `cmd` (by `_IOC_NR`, as dispatch looks it up).
pub(crate) fn reader_safe(cmd: u32) -> bool {
    READER_SAFE.iter().any(|c| ioc::nr(*c) == ioc::nr(cmd))
}

/// DBG_TRAP's operations a reader thread answers after handing its reading over: handlers that
/// never hold the request (so no FUSE_INTERRUPT has anything to end in them) and never wait but
/// for the state lock and client memory, which a thread other than the reader may wait for
/// (docs/kfd-emulator.md, "The reader thread's ioctls").
const FAST_SAFE_OPS: [u32; 2] = [
    kfd_sys::KFD_IOC_DBG_TRAP_SUSPEND_QUEUES,
    kfd_sys::KFD_IOC_DBG_TRAP_RESUME_QUEUES,
];

/// Whether a reader thread hands its reading over to answer `cmd` with argument bytes
/// `in_data`: DBG_TRAP (by `_IOC_NR`) whose `op` is one of [`FAST_SAFE_OPS`].
pub(crate) fn fast_safe(cmd: u32, in_data: &[u8]) -> bool {
    ioc::nr(cmd) == NR_DBG_TRAP
        && crate::abi::u32_at(in_data, DBG_TRAP_OP_AT).is_some_and(|op| FAST_SAFE_OPS.contains(&op))
}

/// Which thread of the `/dev/fuse` proxy answers a call itself.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum ProxyThread {
    /// The thread reading `/dev/fuse` now (`kfd-emu-fuse-in` or `kfd-emu-fuse-in2`): it never
    /// waits for the state lock.
    Reader,
    /// A reader thread that handed its reading of `/dev/fuse` to the other one
    /// (`crate::handover`): it waits for the state lock as a worker does, holds no request.
    FormerReader,
}

/// How a call gets the state lock.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Locking {
    /// When the handler asks, waiting for it (fuser's workers).
    Wait,
    /// Up front, only if no other thread holds it (the reader thread).
    Try,
}

/// A finished call: the answer (argument bytes copied out, result), none when the handler
/// holds the request, and the work to do once it is sent.
struct Done {
    answer: Option<(Vec<u8>, KResult<i32>)>,
    effects: Effects,
}

impl Done {
    fn answer(res: KResult<i32>) -> Done {
        Done {
            answer: Some((Vec::new(), res)),
            effects: Effects::default(),
        }
    }
}

type Handler = fn(&Ctx<'_>, &mut [u8], &mut Option<ReplyIoctl>, &mut Effects) -> KResult<i32>;

const NR_RUNTIME_ENABLE: u32 = ioc::nr(kfd_sys::AMDKFD_IOC_RUNTIME_ENABLE);
const NR_DBG_TRAP: u32 = ioc::nr(kfd_sys::AMDKFD_IOC_DBG_TRAP);
/// Byte offset of `op` in `struct kfd_ioctl_dbg_trap_args` (after `pid`).
const DBG_TRAP_OP_AT: usize = std::mem::offset_of!(kfd_sys::kfd_ioctl_dbg_trap_args, op);

/// The modelled ioctls: the kernel's command and the handler.
const TABLE: [(u32, Handler); 26] = [
    (kfd_sys::AMDKFD_IOC_GET_VERSION, get_version),
    (kfd_sys::AMDKFD_IOC_SET_MEMORY_POLICY, device::memory_policy),
    (
        kfd_sys::AMDKFD_IOC_GET_CLOCK_COUNTERS,
        device::clock_counters,
    ),
    (kfd_sys::AMDKFD_IOC_CREATE_EVENT, events::create),
    (kfd_sys::AMDKFD_IOC_DESTROY_EVENT, events::destroy_ioctl),
    (kfd_sys::AMDKFD_IOC_SET_EVENT, events::set_ioctl),
    (kfd_sys::AMDKFD_IOC_RESET_EVENT, events::reset_ioctl),
    (kfd_sys::AMDKFD_IOC_WAIT_EVENTS, events::wait),
    (
        kfd_sys::AMDKFD_IOC_SET_SCRATCH_BACKING_VA,
        device::scratch_backing,
    ),
    (kfd_sys::AMDKFD_IOC_SET_TRAP_HANDLER, device::trap_handler),
    (device::AMDKFD_IOC_GET_TILE_CONFIG, device::tile_config),
    (
        kfd_sys::AMDKFD_IOC_GET_PROCESS_APERTURES_NEW,
        device::apertures_new,
    ),
    (kfd_sys::AMDKFD_IOC_SET_XNACK_MODE, device::xnack_mode),
    (
        kfd_sys::AMDKFD_IOC_AVAILABLE_MEMORY,
        device::available_memory,
    ),
    (kfd_sys::AMDKFD_IOC_CREATE_QUEUE, queue::create),
    (kfd_sys::AMDKFD_IOC_DESTROY_QUEUE, queue::destroy),
    (kfd_sys::AMDKFD_IOC_UPDATE_QUEUE, queue::update),
    (kfd_sys::AMDKFD_IOC_ACQUIRE_VM, memory::acquire_vm),
    (kfd_sys::AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, memory::alloc),
    (kfd_sys::AMDKFD_IOC_FREE_MEMORY_OF_GPU, memory::free),
    (kfd_sys::AMDKFD_IOC_MAP_MEMORY_TO_GPU, memory::map),
    (kfd_sys::AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, memory::unmap),
    (kfd_sys::AMDKFD_IOC_SET_CU_MASK, queue::set_cu_mask),
    (kfd_sys::AMDKFD_IOC_GET_QUEUE_WAVE_STATE, queue::wave_state),
    (kfd_sys::AMDKFD_IOC_RUNTIME_ENABLE, debug::runtime_enable),
    (kfd_sys::AMDKFD_IOC_DBG_TRAP, debug::dbg_trap),
];

fn lookup(nr: u32, kfd_minor: u32) -> Option<(u32, Handler)> {
    if (nr == NR_RUNTIME_ENABLE || nr == NR_DBG_TRAP) && kfd_minor < 13 {
        return None;
    }
    TABLE.iter().copied().find(|(cmd, _)| ioc::nr(*cmd) == nr)
}

fn get_version(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let v = kfd_sys::kfd_ioctl_get_version_args {
        major_version: kfd_sys::KFD_IOCTL_MAJOR_VERSION,
        minor_version: ctx.emu.config.kfd_minor,
    };
    store(buf, &v);
    Ok(0)
}

/// Handles one ioctl on a `dev/kfd` handle, on a fuser worker.
pub(crate) fn dispatch(emu: &Emu, call: &Call<'_>, reply: ReplyIoctl) {
    let mut reply = Some(reply);
    if let Some(done) = run(emu, call, &mut reply, Locking::Wait) {
        if let (Some((data, res)), Some(reply)) = (done.answer, reply) {
            send_reply(reply, &data, res);
        }
        done.effects.run(emu);
    }
}

/// Handles one ioctl on a thread of the `/dev/fuse` proxy, which writes the answer itself: `out`
/// gets the bytes fuser would write for it (`reply::encode`), then the effects run; a panic of
/// the handler is caught and answered `EIO`, as fuser answers a dropped reply. False, with
/// nothing counted or changed, only on the reader, when another thread holds the state lock
/// (the caller passes the request on to the workers).
pub(crate) fn dispatch_to_bytes(
    emu: &Emu,
    call: &Call<'_>,
    thread: ProxyThread,
    out: &mut Vec<u8>,
) -> bool {
    let locking = match thread {
        ProxyThread::Reader => {
            debug_assert!(reader_safe(call.cmd));
            Locking::Try
        }
        ProxyThread::FormerReader => {
            debug_assert!(fast_safe(call.cmd, call.in_data));
            Locking::Wait
        }
    };
    let mut answered = false;
    let steps = std::panic::AssertUnwindSafe(|| {
        let Some(done) = run(emu, call, &mut None, locking) else {
            return false;
        };
        if let Some((data, res)) = done.answer {
            crate::reply::encode(out, call.unique, &data, res);
            answered = true;
        }
        done.effects.run(emu);
        true
    });
    let ran = match std::panic::catch_unwind(steps) {
        Ok(ran) => ran,
        Err(_) => {
            let cmd = call.cmd;
            tracing::error!(
                cmd,
                ?thread,
                "ioctl handler panicked on a /dev/fuse proxy thread"
            );
            true
        }
    };
    if ran && !answered {
        crate::reply::encode(out, call.unique, &[], Err(libc::EIO));
    }
    ran
}

/// The steps of a call, whichever thread runs it. `None` only with [`Locking::Try`], when
/// another thread holds the state lock; before that point nothing but the tgid cache is
/// touched. A handler may hold the request (take the reply, answered later) only when the
/// caller passes one: the proxy's threads pass none, and their ioctls never hold it.
fn run(
    emu: &Emu,
    call: &Call<'_>,
    reply: &mut Option<ReplyIoctl>,
    locking: Locking,
) -> Option<Done> {
    let (tid, opener, in_data) = (call.tid, call.opener, call.in_data);
    let nr = ioc::nr(call.cmd);
    let may_hold = reply.is_some();
    let tgid = process::tgid_of(emu, tid);
    if tgid != Some(opener) {
        tracing::debug!(tid, opener, nr, "ioctl from another process: EBADF");
        return Some(Done::answer(Err(libc::EBADF)));
    }
    let Some((kcmd, handler)) = lookup(nr, emu.config.kfd_minor) else {
        tracing::debug!(nr, "unknown ioctl: ENOTTY");
        return Some(Done::answer(Err(libc::ENOTTY)));
    };
    let held = match locking {
        Locking::Wait => None,
        Locking::Try => Some(crate::locks::try_lock(&emu.state, "state")?),
    };
    let out_len = if ioc::copies_out(kcmd) {
        call.out_size as usize
    } else {
        0
    };
    let ctx = Ctx {
        emu,
        tid,
        tgid: opener,
        out_len,
        unique: call.unique,
        held: Cell::new(held),
        on_reader: locking == Locking::Try,
    };
    let dbg_op = (nr == NR_DBG_TRAP)
        .then(|| crate::abi::u32_at(in_data, DBG_TRAP_OP_AT))
        .flatten();
    match emu.faults.check(nr, dbg_op) {
        None => {}
        Some(Failure::Errno(errno)) => {
            tracing::debug!(nr, errno, "injected failure");
            return Some(Done::answer(Err(errno)));
        }
        Some(Failure::PreemptTimeout) => {
            // DBG_TRAP preempts its target (`pid` first in its arguments), the others the caller.
            let target = match nr {
                NR_DBG_TRAP => crate::abi::u32_at(in_data, 0).unwrap_or(opener),
                _ => opener,
            };
            crate::reset::preempt_timeout(&mut ctx.lock(), target);
            return Some(Done::answer(Err(libc::ETIME)));
        }
    }
    let len = in_data.len().max(ioc::size(kcmd)).max(out_len);
    let mut buf = vec![0u8; len];
    buf[..in_data.len()].copy_from_slice(in_data);
    let mut effects = Effects::default();
    let res = handler(&ctx, &mut buf, reply, &mut effects);
    // A lock taken up front that the handler did not take (it failed before) is released.
    drop(ctx);
    let held_request = may_hold && reply.is_none();
    match (&res, held_request) {
        (Err(e), false) => tracing::debug!(nr, errno = e, "ioctl failed"),
        (Ok(r), false) => tracing::trace!(nr, ret = r, "ioctl ok"),
        (_, true) => tracing::debug!(nr, "ioctl blocked"),
    }
    buf.truncate(out_len);
    Some(Done {
        answer: (!held_request).then_some((buf, res)),
        effects,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_numbers_and_sizes() {
        assert_eq!(ioc::nr(kfd_sys::AMDKFD_IOC_CREATE_QUEUE), 0x02);
        assert_eq!(ioc::size(kfd_sys::AMDKFD_IOC_CREATE_QUEUE), 96);
        assert!(ioc::copies_out(kfd_sys::AMDKFD_IOC_CREATE_QUEUE));
        assert!(!ioc::copies_out(kfd_sys::AMDKFD_IOC_UPDATE_QUEUE));
        assert!(!ioc::copies_out(kfd_sys::AMDKFD_IOC_SET_CU_MASK));
        assert_eq!(NR_DBG_TRAP, 0x26);
        assert!(lookup(0x27, 17).is_none());
        assert!(lookup(NR_DBG_TRAP, 12).is_none());
        assert!(lookup(NR_DBG_TRAP, 13).is_some());
    }

    #[test]
    fn the_reader_thread_answers_update_queue_only() {
        assert!(reader_safe(kfd_sys::AMDKFD_IOC_UPDATE_QUEUE));
        for cmd in [
            kfd_sys::AMDKFD_IOC_WAIT_EVENTS,
            kfd_sys::AMDKFD_IOC_DESTROY_QUEUE,
            kfd_sys::AMDKFD_IOC_DBG_TRAP,
            kfd_sys::AMDKFD_IOC_SET_CU_MASK,
        ] {
            assert!(!reader_safe(cmd), "{cmd:#x}");
        }
    }

    #[test]
    fn a_former_reader_answers_dbg_trap_suspend_and_resume_only() {
        let args = |op: u32| {
            let mut a = vec![0u8; ioc::size(kfd_sys::AMDKFD_IOC_DBG_TRAP)];
            a[DBG_TRAP_OP_AT..DBG_TRAP_OP_AT + 4].copy_from_slice(&op.to_ne_bytes());
            a
        };
        let dbg = kfd_sys::AMDKFD_IOC_DBG_TRAP;
        assert!(fast_safe(
            dbg,
            &args(kfd_sys::KFD_IOC_DBG_TRAP_SUSPEND_QUEUES)
        ));
        assert!(fast_safe(
            dbg,
            &args(kfd_sys::KFD_IOC_DBG_TRAP_RESUME_QUEUES)
        ));
        for op in [
            kfd_sys::KFD_IOC_DBG_TRAP_ENABLE,
            kfd_sys::KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT,
            kfd_sys::KFD_IOC_DBG_TRAP_DISABLE,
        ] {
            assert!(!fast_safe(dbg, &args(op)), "op {op}");
        }
        assert!(!fast_safe(dbg, &[0, 0, 0]), "no op");
        let update = kfd_sys::AMDKFD_IOC_UPDATE_QUEUE;
        assert!(!fast_safe(
            update,
            &args(kfd_sys::KFD_IOC_DBG_TRAP_SUSPEND_QUEUES)
        ));
    }

    #[test]
    fn access_ok_is_the_user_address_range() {
        assert!(access_ok(0, 4));
        assert!(!access_ok(0x8000_0000_0000, 8));
    }
}
