//! `dev/kfd` ioctl dispatch, done like the kernel's `kfd_ioctl()`:
//!
//! * the handler is looked up by `_IOC_NR` only; unknown numbers are `ENOTTY`;
//! * the argument buffer is max(caller size, kernel size) bytes; the caller's bytes are
//!   copied in (FUSE passes `_IOC_SIZE` of the caller's command) and the rest is zero;
//! * after the handler, the caller's size is copied back out when the kernel's own
//!   command has the OUT direction (FUSE copies at most `_IOC_SIZE` of the caller's
//!   command, and only when that command has `_IOC_READ`);
//! * the fd may only be used by the process that opened it (`EBADF` otherwise).

pub(crate) mod debug;
pub(crate) mod detach;
pub(crate) mod device;
pub(crate) mod events;
pub(crate) mod interrupt;
pub(crate) mod lifecycle;
pub(crate) mod memory;
pub(crate) mod queue;

use crate::faults::Failure;
use fuser::ReplyIoctl;

use crate::effects::Effects;
use crate::process;
use crate::state::Emu;

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
}

type Handler = fn(&Ctx<'_>, &mut [u8], &mut Option<ReplyIoctl>, &mut Effects) -> KResult<i32>;

const NR_RUNTIME_ENABLE: u32 = ioc::nr(kfd_sys::AMDKFD_IOC_RUNTIME_ENABLE);
const NR_DBG_TRAP: u32 = ioc::nr(kfd_sys::AMDKFD_IOC_DBG_TRAP);

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

/// Handles one ioctl on a `dev/kfd` handle opened by `opener`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dispatch(
    emu: &Emu,
    unique: u64,
    tid: u32,
    opener: u32,
    cmd: u32,
    in_data: &[u8],
    out_size: u32,
    reply: ReplyIoctl,
) {
    let nr = ioc::nr(cmd);
    let tgid = process::tgid_of(emu, tid);
    if tgid != Some(opener) {
        tracing::debug!(tid, opener, nr, "ioctl from another process: EBADF");
        return send_reply(reply, &[], Err(libc::EBADF));
    }
    let Some((kcmd, handler)) = lookup(nr, emu.config.kfd_minor) else {
        tracing::debug!(nr, "unknown ioctl: ENOTTY");
        return send_reply(reply, &[], Err(libc::ENOTTY));
    };
    let dbg_op = (nr == NR_DBG_TRAP)
        .then(|| crate::abi::u32_at(in_data, 4))
        .flatten();
    match emu.faults.check(nr, dbg_op) {
        None => {}
        Some(Failure::Errno(errno)) => {
            tracing::debug!(nr, errno, "injected failure");
            return send_reply(reply, &[], Err(errno));
        }
        Some(Failure::PreemptTimeout) => {
            // DBG_TRAP preempts its target (`pid` first in its arguments), the others the caller.
            let target = match nr {
                NR_DBG_TRAP => crate::abi::u32_at(in_data, 0).unwrap_or(opener),
                _ => opener,
            };
            crate::reset::preempt_timeout(emu, target);
            return send_reply(reply, &[], Err(libc::ETIME));
        }
    }
    let out_len = if ioc::copies_out(kcmd) {
        out_size as usize
    } else {
        0
    };
    let len = in_data.len().max(ioc::size(kcmd)).max(out_len);
    let mut buf = vec![0u8; len];
    buf[..in_data.len()].copy_from_slice(in_data);
    let ctx = Ctx {
        emu,
        tid,
        tgid: opener,
        out_len,
        unique,
    };
    let mut reply = Some(reply);
    let mut effects = Effects::default();
    let res = handler(&ctx, &mut buf, &mut reply, &mut effects);
    match (&res, reply.is_some()) {
        (Err(e), true) => tracing::debug!(nr, errno = e, "ioctl failed"),
        (Ok(r), true) => tracing::trace!(nr, ret = r, "ioctl ok"),
        (_, false) => tracing::debug!(nr, "ioctl blocked"),
    }
    if let Some(reply) = reply {
        send_reply(reply, &buf[..out_len], res);
    }
    effects.run(emu);
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
    fn access_ok_is_the_user_address_range() {
        assert!(access_ok(0, 4));
        assert!(!access_ok(0x8000_0000_0000, 8));
    }
}
