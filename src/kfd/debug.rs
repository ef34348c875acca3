//! The debugger API (KFD >= 1.13): RUNTIME_ENABLE and DBG_TRAP enable / disable / queue
//! snapshot / suspend / resume.
//!
//! A process may debug itself (pid == its own pid) with no ptrace; another process only as its
//! ptrace tracer, from the tracing thread, and SUSPEND/RESUME need the target runtime-enabled.
//! A freshly created queue carries `EC_QUEUE_NEW` and cannot be suspended until a snapshot
//! clears it ([`Kfd::queue_snapshot`] with [`EXCEPTION_QUEUE_NEW`]).
//!
//! In the kernel every operation here is `AMDKFD_IOC_DBG_TRAP` (or `AMDKFD_IOC_RUNTIME_ENABLE`),
//! handled by `kfd_ioctl_set_debug_trap` (`kfd_ioctl_runtime_enable`) in
//! `drivers/gpu/drm/amd/amdkfd/kfd_chardev.c`, which dispatches on the `KFD_IOC_DBG_TRAP_*` op of
//! `include/uapi/linux/kfd_ioctl.h`; each function below names the kernel function its op
//! reaches.
//!
//! # Example
//!
//! A process suspending and resuming its own queues, as the shim does at level 3:
//!
//! ```no_run
//! use kfdq::kfd::{EXCEPTION_QUEUE_NEW, Kfd, Priority, QueueSpec, Root, debug};
//!
//! let kfd = Kfd::open(&Root::from_env())?;
//! let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).expect("a GPU");
//! let me = std::process::id();
//! kfd.runtime_enable(0, false)?; // before the process's first queue
//! let _attachment = kfd.dbg_enable(me, 0)?; // itself: no ptrace needed
//! let q = kfd.create_queue(QueueSpec::aql(gpu).priority(Priority::LOW))?;
//! kfd.queue_snapshot(me, EXCEPTION_QUEUE_NEW)?; // clears EC_QUEUE_NEW on the new queue
//! let (suspended, _) = kfd.suspend_queues(me, &[q.id()], debug::GRACE_IMMEDIATE)?;
//! assert_eq!(suspended, 1);
//! kfd.resume_queues(me, &[q.id()])?;
//! # Ok::<(), kfdq::kfd::Error>(())
//! ```
#![allow(unsafe_code)]

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use kfd_sys as sys;
use serde::Serialize;

use super::device::Kfd;
use super::error::{Error, Result};
use super::ids::{GpuId, QueueId};
use super::ioctl;

/// Exception mask bit of `EC_QUEUE_NEW`.
pub const EXCEPTION_QUEUE_NEW: u64 = sys::kfd_ec_mask(sys::EC_QUEUE_NEW as u32);

/// Grace period in units of 1K GPU clocks: the kernel substitutes 1 for 0 (0 means "infinite"
/// to the CP), so this is "save the waves at once".
pub const GRACE_IMMEDIATE: u32 = 0;

/// Runtime info the kernel copies out on ENABLE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RuntimeInfo {
    /// `r_debug` address the target registered with RUNTIME_ENABLE.
    pub r_debug: u64,
    /// `DEBUG_RUNTIME_STATE_*`.
    pub runtime_state: u32,
    /// TTMP setup flag.
    pub ttmp_setup: u32,
}

impl RuntimeInfo {
    /// True when the target called RUNTIME_ENABLE.
    pub fn runtime_enabled(&self) -> bool {
        self.runtime_state != sys::DEBUG_RUNTIME_STATE_DISABLED as u32
    }
}

/// What SUSPEND/RESUME did to one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueStatus {
    /// Changed (or already in the requested state).
    Ok,
    /// Missing, new (EC_QUEUE_NEW not cleared) or being destroyed.
    Invalid,
    /// The hardware failed to preempt or restore it.
    Error,
}

/// One entry of GET_QUEUE_SNAPSHOT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct QueueSnapshot {
    /// Queue id.
    pub queue_id: QueueId,
    /// GPU.
    pub gpu_id: GpuId,
    /// Raised exceptions (before the requested bits were cleared).
    pub exception_status: u64,
    /// Ring address.
    pub ring_base_address: u64,
    /// Write index address.
    pub write_pointer_address: u64,
    /// Read index address.
    pub read_pointer_address: u64,
    /// CWSR area address.
    pub ctx_save_restore_address: u64,
    /// Ring bytes.
    pub ring_size: u32,
    /// Kernel queue type.
    pub queue_type: u32,
}

/// A debugger attachment made with [`Kfd::dbg_enable`]; holds the read end of the pipe KFD
/// writes a byte to when a subscribed exception is raised.
#[derive(Debug)]
pub struct DebugAttachment {
    /// Target pid.
    pub pid: u32,
    /// Runtime info copied out by ENABLE.
    pub runtime: RuntimeInfo,
    events: OwnedFd,
    _write_end: OwnedFd,
}

impl DebugAttachment {
    /// The event pipe's read end (readable when KFD raised a subscribed exception).
    pub fn events(&self) -> BorrowedFd<'_> {
        self.events.as_fd()
    }
}

fn trap_args(pid: u32, op: u32) -> sys::kfd_ioctl_dbg_trap_args {
    sys::kfd_ioctl_dbg_trap_args {
        pid,
        op,
        __bindgen_anon_1: Default::default(),
    }
}

fn statuses(ids: &[u32]) -> Vec<QueueStatus> {
    ids.iter()
        .map(|raw| {
            if raw & sys::KFD_DBG_QUEUE_INVALID_MASK as u32 != 0 {
                QueueStatus::Invalid
            } else if raw & sys::KFD_DBG_QUEUE_ERROR_MASK as u32 != 0 {
                QueueStatus::Error
            } else {
                QueueStatus::Ok
            }
        })
        .collect()
}

/// RUNTIME_ENABLE on the process owning `fd` (enable = `mode_mask` bit 0). Returns the
/// capabilities mask.
///
/// Kernel: `kfd_ioctl_runtime_enable` -> `runtime_enable` (`kfd_chardev.c`); see
/// [`ioctl::runtime_enable`].
pub fn runtime_enable(fd: BorrowedFd<'_>, r_debug: u64, ttmp_save: bool) -> Result<u32> {
    let mut mode = sys::KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK as u32;
    if ttmp_save {
        mode |= sys::KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK as u32;
    }
    ioctl::runtime_enable(fd, r_debug, mode)
}

/// DBG_TRAP SUSPEND_QUEUES on `pid`'s `queues` with `grace_period` (1K-clock units), clearing
/// `clear_exceptions` on the suspended ones. Returns (newly suspended count, status per queue).
///
/// Kernel: `kfd_ioctl_set_debug_trap` (`kfd_chardev.c`), op `KFD_IOC_DBG_TRAP_SUSPEND_QUEUES`,
/// -> `suspend_queues` (`kfd_device_queue_manager.c`). Takes the fd of any process: the shim
/// passes the runtime's own `/dev/kfd` fd.
///
/// # Example
///
/// ```no_run
/// use std::os::fd::AsFd;
/// use kfdq::kfd::{Kfd, QueueId, Root, debug};
///
/// let kfd = Kfd::open(&Root::from_env())?;
/// let me = std::process::id();
/// let queues = [QueueId(0), QueueId(1)];
/// let (n, status) = debug::suspend_queues(kfd.as_fd(), me, &queues, debug::GRACE_IMMEDIATE, 0)?;
/// println!("{n} suspended: {status:?}");
/// # Ok::<(), kfdq::kfd::Error>(())
/// ```
pub fn suspend_queues(
    fd: BorrowedFd<'_>,
    pid: u32,
    queues: &[QueueId],
    grace_period: u32,
    clear_exceptions: u64,
) -> Result<(u32, Vec<QueueStatus>)> {
    let mut ids: Vec<u32> = queues.iter().map(|q| q.0).collect();
    let mut args = trap_args(pid, sys::KFD_IOC_DBG_TRAP_SUSPEND_QUEUES as u32);
    args.__bindgen_anon_1.suspend_queues = sys::kfd_ioctl_dbg_trap_suspend_queues_args {
        exception_mask: clear_exceptions,
        queue_array_ptr: ids.as_mut_ptr() as u64,
        num_queues: ids.len() as u32,
        grace_period,
    };
    // SAFETY: the id array is alive, writable and `num_queues` long for the whole call.
    let n = unsafe { ioctl::dbg_trap(fd, &mut args)? };
    Ok((n.max(0) as u32, statuses(&ids)))
}

/// DBG_TRAP RESUME_QUEUES on `pid`'s `queues`. Returns (resumed count, status per queue).
///
/// Kernel: `kfd_ioctl_set_debug_trap` (`kfd_chardev.c`), op `KFD_IOC_DBG_TRAP_RESUME_QUEUES`,
/// -> `resume_queues` (`kfd_device_queue_manager.c`).
pub fn resume_queues(
    fd: BorrowedFd<'_>,
    pid: u32,
    queues: &[QueueId],
) -> Result<(u32, Vec<QueueStatus>)> {
    let mut ids: Vec<u32> = queues.iter().map(|q| q.0).collect();
    let mut args = trap_args(pid, sys::KFD_IOC_DBG_TRAP_RESUME_QUEUES as u32);
    args.__bindgen_anon_1.resume_queues = sys::kfd_ioctl_dbg_trap_resume_queues_args {
        queue_array_ptr: ids.as_mut_ptr() as u64,
        num_queues: ids.len() as u32,
        pad: 0,
    };
    // SAFETY: as for suspend.
    let n = unsafe { ioctl::dbg_trap(fd, &mut args)? };
    Ok((n.max(0) as u32, statuses(&ids)))
}

fn snapshot_call(
    fd: BorrowedFd<'_>,
    pid: u32,
    clear: u64,
    buf: &mut [sys::kfd_queue_snapshot_entry],
) -> Result<usize> {
    let mut args = trap_args(pid, sys::KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT as u32);
    args.__bindgen_anon_1.queue_snapshot = sys::kfd_ioctl_dbg_trap_queue_snapshot_args {
        exception_mask: clear,
        snapshot_buf_ptr: buf.as_mut_ptr() as u64,
        num_queues: buf.len() as u32,
        entry_size: std::mem::size_of::<sys::kfd_queue_snapshot_entry>() as u32,
    };
    // SAFETY: `buf` holds `num_queues` entries of `entry_size` bytes, writable for the call.
    unsafe { ioctl::dbg_trap(fd, &mut args)? };
    // SAFETY: this is the union member set above, which the kernel updates in place.
    Ok(unsafe { args.__bindgen_anon_1.queue_snapshot }.num_queues as usize)
}

/// DBG_TRAP GET_QUEUE_SNAPSHOT on `pid`, clearing `clear_exceptions` on every queue.
///
/// Kernel: `kfd_ioctl_set_debug_trap` (`kfd_chardev.c`), op
/// `KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT`, -> `pqm_get_queue_snapshot`
/// (`kfd_process_queue_manager.c`). Called twice: once to size, once to fetch.
pub fn queue_snapshot(
    fd: BorrowedFd<'_>,
    pid: u32,
    clear_exceptions: u64,
) -> Result<Vec<QueueSnapshot>> {
    // Two-call sizing: learn the count, then fetch; retry if queues appeared meanwhile.
    let mut total = snapshot_call(fd, pid, 0, &mut [])?;
    loop {
        let mut buf = vec![sys::kfd_queue_snapshot_entry::default(); total.max(1)];
        let now = snapshot_call(fd, pid, clear_exceptions, &mut buf)?;
        if now <= buf.len() {
            buf.truncate(now);
            return Ok(buf
                .into_iter()
                .map(|e| QueueSnapshot {
                    queue_id: QueueId(e.queue_id),
                    gpu_id: GpuId(e.gpu_id),
                    exception_status: e.exception_status,
                    ring_base_address: e.ring_base_address,
                    write_pointer_address: e.write_pointer_address,
                    read_pointer_address: e.read_pointer_address,
                    ctx_save_restore_address: e.ctx_save_restore_address,
                    ring_size: e.ring_size,
                    queue_type: e.queue_type,
                })
                .collect());
        }
        total = now;
    }
}

/// DBG_TRAP ENABLE on `pid` (the process owning `fd` itself, or one whose ptrace tracer the
/// calling thread is), subscribing to `exceptions`. Creates the event pipe KFD writes to; the
/// returned attachment keeps both ends open.
///
/// Kernel: `kfd_ioctl_set_debug_trap` (`kfd_chardev.c`), op `KFD_IOC_DBG_TRAP_ENABLE`, ->
/// `kfd_dbg_trap_enable` (`kfd_debug.c`); for a ptraced target that has no KFD process yet the
/// handler creates one (`kfd_create_process`).
pub fn dbg_enable(fd: BorrowedFd<'_>, pid: u32, exceptions: u64) -> Result<DebugAttachment> {
    let (read, write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
            .map_err(|e| Error::io("pipe2", e.into()))?;
    let mut info = sys::kfd_runtime_info::default();
    let mut args = trap_args(pid, sys::KFD_IOC_DBG_TRAP_ENABLE as u32);
    args.__bindgen_anon_1.enable = sys::kfd_ioctl_dbg_trap_enable_args {
        exception_mask: exceptions,
        rinfo_ptr: &mut info as *mut _ as u64,
        rinfo_size: std::mem::size_of::<sys::kfd_runtime_info>() as u32,
        dbg_fd: write.as_raw_fd() as u32,
    };
    // SAFETY: `info` is writable and `rinfo_size` bytes long for the call; `dbg_fd` is our pipe.
    unsafe { ioctl::dbg_trap(fd, &mut args)? };
    Ok(DebugAttachment {
        pid,
        runtime: RuntimeInfo {
            r_debug: info.r_debug,
            runtime_state: info.runtime_state,
            ttmp_setup: info.ttmp_setup,
        },
        events: read,
        _write_end: write,
    })
}

impl Kfd {
    /// RUNTIME_ENABLE for this process. Must precede its first queue.
    pub fn runtime_enable(&self, r_debug: u64, ttmp_save: bool) -> Result<u32> {
        self.require_debugger_api("RUNTIME_ENABLE")?;
        runtime_enable(self.as_fd(), r_debug, ttmp_save)
    }

    /// RUNTIME_ENABLE with mode 0: disables the debug runtime of this process.
    pub fn runtime_disable(&self) -> Result<()> {
        self.require_debugger_api("RUNTIME_ENABLE")?;
        ioctl::runtime_enable(self.as_fd(), 0, 0).map(drop)
    }

    /// DBG_TRAP ENABLE on `pid` (this process, or one we trace); see [`dbg_enable`].
    pub fn dbg_enable(&self, pid: u32, exceptions: u64) -> Result<DebugAttachment> {
        self.require_debugger_api("DBG_TRAP")?;
        dbg_enable(self.as_fd(), pid, exceptions)
    }

    /// DBG_TRAP DISABLE on `pid`: resumes everything it suspended and detaches.
    ///
    /// Kernel: `kfd_ioctl_set_debug_trap` (`kfd_chardev.c`), op `KFD_IOC_DBG_TRAP_DISABLE`, ->
    /// `kfd_dbg_trap_disable` (`kfd_debug.c`).
    pub fn dbg_disable(&self, pid: u32) -> Result<()> {
        self.require_debugger_api("DBG_TRAP")?;
        let mut args = trap_args(pid, sys::KFD_IOC_DBG_TRAP_DISABLE as u32);
        // SAFETY: DISABLE carries no pointers.
        unsafe { ioctl::dbg_trap(self.as_fd(), &mut args) }.map(drop)
    }

    /// DBG_TRAP GET_QUEUE_SNAPSHOT on `pid`; clears `clear_exceptions` (e.g.
    /// [`EXCEPTION_QUEUE_NEW`]) on every queue. See [`queue_snapshot`].
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kfdq::kfd::{EXCEPTION_QUEUE_NEW, Kfd, Root};
    ///
    /// let kfd = Kfd::open(&Root::from_env())?;
    /// let me = std::process::id();
    /// for q in kfd.queue_snapshot(me, EXCEPTION_QUEUE_NEW)? {
    ///     println!("{} on {}: ring {:#x}", q.queue_id, q.gpu_id, q.ring_base_address);
    /// }
    /// # Ok::<(), kfdq::kfd::Error>(())
    /// ```
    pub fn queue_snapshot(&self, pid: u32, clear_exceptions: u64) -> Result<Vec<QueueSnapshot>> {
        self.require_debugger_api("DBG_TRAP")?;
        queue_snapshot(self.as_fd(), pid, clear_exceptions)
    }

    /// DBG_TRAP SUSPEND_QUEUES; see [`suspend_queues`].
    pub fn suspend_queues(
        &self,
        pid: u32,
        queues: &[QueueId],
        grace_period: u32,
    ) -> Result<(u32, Vec<QueueStatus>)> {
        self.require_debugger_api("DBG_TRAP")?;
        suspend_queues(self.as_fd(), pid, queues, grace_period, 0)
    }

    /// DBG_TRAP RESUME_QUEUES; see [`resume_queues`].
    pub fn resume_queues(&self, pid: u32, queues: &[QueueId]) -> Result<(u32, Vec<QueueStatus>)> {
        self.require_debugger_api("DBG_TRAP")?;
        resume_queues(self.as_fd(), pid, queues)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_new_mask_is_bit_30() {
        assert_eq!(EXCEPTION_QUEUE_NEW, 0x4000_0000);
        assert_eq!(
            sys::KFD_DBG_QUEUE_ERROR_MASK as u32 | sys::KFD_DBG_QUEUE_INVALID_MASK as u32,
            0xC000_0000
        );
    }

    #[test]
    fn status_bits_decode() {
        let raw = [3, 4 | (1 << 31), 5 | (1 << 30)];
        assert_eq!(
            statuses(&raw),
            vec![QueueStatus::Ok, QueueStatus::Invalid, QueueStatus::Error]
        );
    }
}
