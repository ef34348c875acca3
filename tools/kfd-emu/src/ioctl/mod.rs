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
pub(crate) mod device;
pub(crate) mod events;
pub(crate) mod memory;
pub(crate) mod queue;

use fuser::{Errno, ReplyIoctl};

use crate::process;
use crate::state::{Effects, Emu};

/// The kernel-internal `ENOTSUPP` (not a libc errno; FUSE cannot carry errnos >= 512
/// in its reply header, so it is returned through the ioctl result instead).
pub(crate) const ENOTSUPP: i32 = 524;

/// Result of a handler: the ioctl return value (usually 0) or an errno.
pub(crate) type KResult<T> = Result<T, i32>;

/// Plain-old-data argument structs that may be read from and written to raw bytes.
///
/// # Safety
/// Implementors must be `repr(C)` structs made only of integers (possibly in
/// unions of such structs), so that every byte pattern is a valid value.
pub(crate) unsafe trait Pod: Copy + Default {}

macro_rules! pod {
    ($($t:ty),* $(,)?) => {
        // SAFETY: bindgen-generated repr(C) structs of __u32/__u64 fields only.
        $(unsafe impl Pod for $t {})*
    };
}

pod!(
    kfd_sys::kfd_ioctl_get_version_args,
    kfd_sys::kfd_ioctl_create_queue_args,
    kfd_sys::kfd_ioctl_destroy_queue_args,
    kfd_sys::kfd_ioctl_update_queue_args,
    kfd_sys::kfd_ioctl_set_cu_mask_args,
    kfd_sys::kfd_ioctl_get_queue_wave_state_args,
    kfd_sys::kfd_ioctl_acquire_vm_args,
    kfd_sys::kfd_ioctl_alloc_memory_of_gpu_args,
    kfd_sys::kfd_ioctl_free_memory_of_gpu_args,
    kfd_sys::kfd_ioctl_map_memory_to_gpu_args,
    kfd_sys::kfd_ioctl_unmap_memory_from_gpu_args,
    kfd_sys::kfd_ioctl_runtime_enable_args,
    kfd_sys::kfd_runtime_info,
    kfd_sys::kfd_ioctl_dbg_trap_args,
    kfd_sys::kfd_ioctl_dbg_trap_enable_args,
    kfd_sys::kfd_ioctl_dbg_trap_set_exceptions_enabled_args,
    kfd_sys::kfd_ioctl_dbg_trap_suspend_queues_args,
    kfd_sys::kfd_ioctl_dbg_trap_resume_queues_args,
    kfd_sys::kfd_ioctl_dbg_trap_query_debug_event_args,
    kfd_sys::kfd_ioctl_dbg_trap_queue_snapshot_args,
    kfd_sys::kfd_ioctl_dbg_trap_device_snapshot_args,
    kfd_sys::kfd_queue_snapshot_entry,
    kfd_sys::kfd_process_device_apertures,
    kfd_sys::kfd_ioctl_get_process_apertures_new_args,
    kfd_sys::kfd_ioctl_set_memory_policy_args,
    kfd_sys::kfd_ioctl_get_clock_counters_args,
    kfd_sys::kfd_ioctl_set_scratch_backing_va_args,
    kfd_sys::kfd_ioctl_get_available_memory_args,
    kfd_sys::kfd_ioctl_set_trap_handler_args,
    kfd_sys::kfd_ioctl_set_xnack_mode_args,
    kfd_sys::kfd_ioctl_create_event_args,
    kfd_sys::kfd_ioctl_destroy_event_args,
    kfd_sys::kfd_ioctl_wait_events_args,
);

/// Reads a `T` from the front of `buf` (missing trailing bytes read as zero).
pub(crate) fn load<T: Pod>(buf: &[u8]) -> T {
    let mut v = T::default();
    let n = buf.len().min(size_of::<T>());
    // SAFETY: `v` is a valid T of size_of::<T>() bytes, n <= that size and <= buf.len();
    // T is Pod, so any bytes form a valid value.
    unsafe {
        std::ptr::copy_nonoverlapping(buf.as_ptr(), (&raw mut v).cast::<u8>(), n);
    }
    v
}

/// Writes `v` to the front of `buf` (truncated to `buf.len()`).
pub(crate) fn store<T: Pod>(buf: &mut [u8], v: &T) {
    let n = buf.len().min(size_of::<T>());
    // SAFETY: reads n <= size_of::<T>() bytes of `*v` and writes n <= buf.len() bytes;
    // Pod types have no padding-dependent invariants and the regions do not overlap.
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const *v).cast::<u8>(), buf.as_mut_ptr(), n);
    }
}

/// The bytes of a Pod value.
pub(crate) fn bytes_of<T: Pod>(v: &T) -> Vec<u8> {
    let mut b = vec![0u8; size_of::<T>()];
    store(&mut b, v);
    b
}

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
}

type Handler = fn(&Ctx<'_>, &mut [u8], &mut Option<ReplyIoctl>, &mut Effects) -> KResult<i32>;

const fn ioc_nr(cmd: u32) -> u32 {
    cmd & 0xff
}

const fn ioc_size(cmd: u32) -> usize {
    ((cmd >> 16) & 0x3fff) as usize
}

/// `_IOC_READ` of a command (the kernel copies the arguments back out).
const fn ioc_out(cmd: u32) -> bool {
    (cmd >> 30) & 2 != 0
}

const NR_RUNTIME_ENABLE: u32 = ioc_nr(kfd_sys::AMDKFD_IOC_RUNTIME_ENABLE);
const NR_DBG_TRAP: u32 = ioc_nr(kfd_sys::AMDKFD_IOC_DBG_TRAP);

/// The modelled ioctls: the kernel's command and the handler.
const TABLE: [(u32, Handler); 25] = [
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
    TABLE.iter().copied().find(|(cmd, _)| ioc_nr(*cmd) == nr)
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

/// Sends an ioctl reply: `data` is copied out on success; errnos >= 512 travel in the
/// ioctl result because the FUSE reply header cannot carry them.
pub(crate) fn send_reply(reply: ReplyIoctl, data: &[u8], res: KResult<i32>) {
    match res {
        Ok(ret) => reply.ioctl(ret, data),
        Err(e) if (1..512).contains(&e) => reply.error(Errno::from_i32(e)),
        Err(e) => reply.ioctl(-e.abs(), &[]),
    }
}

/// Handles one ioctl on a `dev/kfd` handle opened by `opener`.
pub(crate) fn dispatch(
    emu: &Emu,
    tid: u32,
    opener: u32,
    cmd: u32,
    in_data: &[u8],
    out_size: u32,
    reply: ReplyIoctl,
) {
    let nr = ioc_nr(cmd);
    let tgid = process::tgid_of(emu, tid);
    if tgid != Some(opener) {
        tracing::debug!(tid, opener, nr, "ioctl from another process: EBADF");
        return send_reply(reply, &[], Err(libc::EBADF));
    }
    let Some((kcmd, handler)) = lookup(nr, emu.config.kfd_minor) else {
        tracing::debug!(nr, "unknown ioctl: ENOTTY");
        return send_reply(reply, &[], Err(libc::ENOTTY));
    };
    let out_len = if ioc_out(kcmd) { out_size as usize } else { 0 };
    let len = in_data.len().max(ioc_size(kcmd)).max(out_len);
    let mut buf = vec![0u8; len];
    buf[..in_data.len()].copy_from_slice(in_data);
    let ctx = Ctx {
        emu,
        tid,
        tgid: opener,
        out_len,
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
        assert_eq!(ioc_nr(kfd_sys::AMDKFD_IOC_CREATE_QUEUE), 0x02);
        assert_eq!(ioc_size(kfd_sys::AMDKFD_IOC_CREATE_QUEUE), 96);
        assert!(ioc_out(kfd_sys::AMDKFD_IOC_CREATE_QUEUE));
        assert!(!ioc_out(kfd_sys::AMDKFD_IOC_UPDATE_QUEUE));
        assert!(!ioc_out(kfd_sys::AMDKFD_IOC_SET_CU_MASK));
        assert_eq!(NR_DBG_TRAP, 0x26);
        assert!(lookup(0x27, 17).is_none());
        assert!(lookup(NR_DBG_TRAP, 12).is_none());
        assert!(lookup(NR_DBG_TRAP, 13).is_some());
    }

    #[test]
    fn load_zero_fills_short_buffers() {
        let full = kfd_sys::kfd_ioctl_create_queue_args {
            ring_size: 4096,
            ctl_stack_size: 7,
            sdma_engine_id: 9,
            ..Default::default()
        };
        let bytes = bytes_of(&full);
        let short: kfd_sys::kfd_ioctl_create_queue_args = load(&bytes[..88]);
        assert_eq!(short.ring_size, 4096);
        assert_eq!(short.ctl_stack_size, 7);
        assert_eq!(short.sdma_engine_id, 0);
        assert!(access_ok(0, 4));
        assert!(!access_ok(0x8000_0000_0000, 8));
    }
}
