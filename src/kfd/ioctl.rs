//! Every amdkfd ioctl kfdq issues: the request number, one private unsafe helper (nix's
//! ioctl macros on the kfd-sys constant), and one public wrapper that turns the errno into a
//! typed [`IoctlError`] naming the kernel rule.
//!
//! Wrappers take a [`BorrowedFd`] so that both [`super::Kfd`] and code that observes another
//! component's `/dev/kfd` fd (the launch shim) use the same path. Wrappers whose argument
//! carries pointers the kernel dereferences or keeps are `unsafe fn` with a `# Safety` section.
//!
//! # Kernel side
//!
//! Every request enters amdkfd at `kfd_ioctl()` (`drivers/gpu/drm/amd/amdkfd/kfd_chardev.c`),
//! which looks the handler up by request number in its table `amdkfd_ioctls[]`, copies in the
//! caller's struct size (zero-filling the rest), calls the handler and copies the struct back.
//! The request numbers and argument structs are those of `include/uapi/linux/kfd_ioctl.h`
//! (bound by kfd-sys); facts the code relies on are in `docs/kernel-interface.md`.
//!
//! | wrapper | request (`kfd_ioctl.h`) | handler (`kfd_chardev.c`) |
//! |---|---|---|
//! | [`get_version`] | `AMDKFD_IOC_GET_VERSION` | `kfd_ioctl_get_version` |
//! | [`create_queue`] | `AMDKFD_IOC_CREATE_QUEUE` | `kfd_ioctl_create_queue` |
//! | [`destroy_queue`] | `AMDKFD_IOC_DESTROY_QUEUE` | `kfd_ioctl_destroy_queue` |
//! | [`update_queue`] | `AMDKFD_IOC_UPDATE_QUEUE` | `kfd_ioctl_update_queue` |
//! | [`acquire_vm`] | `AMDKFD_IOC_ACQUIRE_VM` | `kfd_ioctl_acquire_vm` |
//! | [`alloc_memory_of_gpu`] | `AMDKFD_IOC_ALLOC_MEMORY_OF_GPU` | `kfd_ioctl_alloc_memory_of_gpu` |
//! | [`free_memory_of_gpu`] | `AMDKFD_IOC_FREE_MEMORY_OF_GPU` | `kfd_ioctl_free_memory_of_gpu` |
//! | [`map_memory_to_gpu`] | `AMDKFD_IOC_MAP_MEMORY_TO_GPU` | `kfd_ioctl_map_memory_to_gpu` |
//! | [`unmap_memory_from_gpu`] | `AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU` | `kfd_ioctl_unmap_memory_from_gpu` |
//! | [`set_cu_mask`] | `AMDKFD_IOC_SET_CU_MASK` | `kfd_ioctl_set_cu_mask` |
//! | [`get_queue_wave_state`] | `AMDKFD_IOC_GET_QUEUE_WAVE_STATE` | `kfd_ioctl_get_queue_wave_state` |
//! | [`runtime_enable`] | `AMDKFD_IOC_RUNTIME_ENABLE` | `kfd_ioctl_runtime_enable` |
//! | [`dbg_trap`] | `AMDKFD_IOC_DBG_TRAP` | `kfd_ioctl_set_debug_trap` |
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};

use kfd_sys as sys;
use nix::errno::Errno;

use super::error::{IoctlContext, IoctlError, KfdIoctl, Result};
use super::ids::{GpuId, QueueId};

// One helper per request; the request numbers come from kfd-sys (bindgen expands AMDKFD_IO*),
// and kfd-sys's tests check each against nix's own encoding.
/// The private unsafe helpers, one per request.
mod raw {
    use kfd_sys as sys;

    nix::ioctl_read_bad!(
        get_version,
        sys::AMDKFD_IOC_GET_VERSION,
        sys::kfd_ioctl_get_version_args
    );
    nix::ioctl_readwrite_bad!(
        create_queue,
        sys::AMDKFD_IOC_CREATE_QUEUE,
        sys::kfd_ioctl_create_queue_args
    );
    nix::ioctl_readwrite_bad!(
        destroy_queue,
        sys::AMDKFD_IOC_DESTROY_QUEUE,
        sys::kfd_ioctl_destroy_queue_args
    );
    nix::ioctl_write_ptr_bad!(
        update_queue,
        sys::AMDKFD_IOC_UPDATE_QUEUE,
        sys::kfd_ioctl_update_queue_args
    );
    nix::ioctl_write_ptr_bad!(
        acquire_vm,
        sys::AMDKFD_IOC_ACQUIRE_VM,
        sys::kfd_ioctl_acquire_vm_args
    );
    nix::ioctl_readwrite_bad!(
        alloc_memory_of_gpu,
        sys::AMDKFD_IOC_ALLOC_MEMORY_OF_GPU,
        sys::kfd_ioctl_alloc_memory_of_gpu_args
    );
    nix::ioctl_write_ptr_bad!(
        free_memory_of_gpu,
        sys::AMDKFD_IOC_FREE_MEMORY_OF_GPU,
        sys::kfd_ioctl_free_memory_of_gpu_args
    );
    nix::ioctl_readwrite_bad!(
        map_memory_to_gpu,
        sys::AMDKFD_IOC_MAP_MEMORY_TO_GPU,
        sys::kfd_ioctl_map_memory_to_gpu_args
    );
    nix::ioctl_readwrite_bad!(
        unmap_memory_from_gpu,
        sys::AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU,
        sys::kfd_ioctl_unmap_memory_from_gpu_args
    );
    nix::ioctl_write_ptr_bad!(
        set_cu_mask,
        sys::AMDKFD_IOC_SET_CU_MASK,
        sys::kfd_ioctl_set_cu_mask_args
    );
    nix::ioctl_readwrite_bad!(
        get_queue_wave_state,
        sys::AMDKFD_IOC_GET_QUEUE_WAVE_STATE,
        sys::kfd_ioctl_get_queue_wave_state_args
    );
    nix::ioctl_readwrite_bad!(
        runtime_enable,
        sys::AMDKFD_IOC_RUNTIME_ENABLE,
        sys::kfd_ioctl_runtime_enable_args
    );
    nix::ioctl_readwrite_bad!(
        dbg_trap,
        sys::AMDKFD_IOC_DBG_TRAP,
        sys::kfd_ioctl_dbg_trap_args
    );
}

fn check(ioctl: KfdIoctl, context: IoctlContext, r: nix::Result<i32>) -> Result<i32> {
    r.map_err(|errno: Errno| {
        IoctlError {
            ioctl,
            errno,
            context,
        }
        .into()
    })
}

fn gpu(g: u32) -> IoctlContext {
    IoctlContext {
        gpu: Some(GpuId(g)),
        ..Default::default()
    }
}

fn queue(q: u32) -> IoctlContext {
    IoctlContext {
        queue: Some(QueueId(q)),
        ..Default::default()
    }
}

/// `ioctl(kfd, AMDKFD_IOC_GET_VERSION)` — the interface version (major, minor).
///
/// Kernel: `kfd_ioctl_get_version` (`kfd_chardev.c`), reached as `AMDKFD_IOC_GET_VERSION` with
/// `struct kfd_ioctl_get_version_args` (`kfd_ioctl.h`).
///
/// # Example
///
/// ```no_run
/// use std::os::fd::AsFd;
///
/// let kfd = std::fs::OpenOptions::new().read(true).write(true).open("/dev/kfd")?;
/// let (major, minor) = kfdq::kfd::ioctl::get_version(kfd.as_fd())?;
/// assert_eq!(major, 1, "amdkfd's major version is 1 (minor {minor})");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[doc(alias = "AMDKFD_IOC_GET_VERSION")]
pub fn get_version(fd: BorrowedFd<'_>) -> Result<(u32, u32)> {
    let mut args = sys::kfd_ioctl_get_version_args::default();
    // SAFETY: read-only request into a correctly sized, owned struct.
    let r = unsafe { raw::get_version(fd.as_raw_fd(), &mut args) };
    check(KfdIoctl::GetVersion, IoctlContext::default(), r)?;
    Ok((args.major_version, args.minor_version))
}

/// `ioctl(kfd, AMDKFD_IOC_CREATE_QUEUE)` — creates a user-mode queue; fills `queue_id` and
/// `doorbell_offset`.
///
/// Kernel: `kfd_ioctl_create_queue` (`kfd_chardev.c`), reached as `AMDKFD_IOC_CREATE_QUEUE` with
/// `struct kfd_ioctl_create_queue_args` (`kfd_ioctl.h`). The handler checks the arguments
/// (`set_queue_properties_from_user`) and creates the queue through `pqm_create_queue`
/// (`kfd_process_queue_manager.c`). [`super::Kfd::create_queue`] builds the buffers the kernel's
/// rules ask for.
///
/// # Safety
/// Every address in `args` (ring, read/write pointers, EOP, CWSR) must stay valid, mapped to
/// the GPU, and unused by anything else until the queue is destroyed: the GPU reads and
/// writes them for the queue's lifetime.
#[doc(alias = "AMDKFD_IOC_CREATE_QUEUE")]
pub unsafe fn create_queue(
    fd: BorrowedFd<'_>,
    args: &mut sys::kfd_ioctl_create_queue_args,
) -> Result<()> {
    let ctx = gpu(args.gpu_id);
    // SAFETY: the struct is the kernel's layout; the caller upholds the buffer contract.
    let r = unsafe { raw::create_queue(fd.as_raw_fd(), args) };
    check(KfdIoctl::CreateQueue, ctx, r).map(drop)
}

/// `ioctl(kfd, AMDKFD_IOC_DESTROY_QUEUE)` — destroys a queue of the calling process.
///
/// Blocks while a debugger holds the queue suspended.
///
/// Kernel: `kfd_ioctl_destroy_queue` (`kfd_chardev.c`), reached as `AMDKFD_IOC_DESTROY_QUEUE` with
/// `struct kfd_ioctl_destroy_queue_args` (`kfd_ioctl.h`).
#[doc(alias = "AMDKFD_IOC_DESTROY_QUEUE")]
pub fn destroy_queue(fd: BorrowedFd<'_>, queue_id: QueueId) -> Result<()> {
    let mut args = sys::kfd_ioctl_destroy_queue_args {
        queue_id: queue_id.0,
        ..Default::default()
    };
    // SAFETY: plain-value argument struct owned by this frame.
    let r = unsafe { raw::destroy_queue(fd.as_raw_fd(), &mut args) };
    check(KfdIoctl::DestroyQueue, queue(queue_id.0), r).map(drop)
}

/// `ioctl(kfd, AMDKFD_IOC_UPDATE_QUEUE)` — sets ring, percentage and priority of a queue.
///
/// Every call is a device-wide preempt of the partition's runlist (`execute_queues_cpsch`,
/// `kfd_device_queue_manager.c`; docs/kernel-interface.md §2).
///
/// Kernel: `kfd_ioctl_update_queue` (`kfd_chardev.c`), reached as `AMDKFD_IOC_UPDATE_QUEUE` with
/// `struct kfd_ioctl_update_queue_args` (`kfd_ioctl.h`).
///
/// # Safety
/// The call points the queue's ring at `ring_base_address`/`ring_size`: from then on the GPU
/// reads packets there for the queue's lifetime, as after [`create_queue`]. That memory must be
/// mapped to the GPU and stay owned by the queue until it is destroyed or updated again (passing
/// the queue's current ring back, as a priority or percentage change does, satisfies this).
/// Kernels before 6.12 do not check the address against the process's buffers at all.
#[doc(alias = "AMDKFD_IOC_UPDATE_QUEUE")]
pub unsafe fn update_queue(
    fd: BorrowedFd<'_>,
    args: &sys::kfd_ioctl_update_queue_args,
) -> Result<()> {
    // SAFETY: write-only request from a correctly sized struct; the ring it names is the
    // caller's responsibility (this function's contract).
    let r = unsafe { raw::update_queue(fd.as_raw_fd(), args) };
    check(KfdIoctl::UpdateQueue, queue(args.queue_id), r).map(drop)
}

/// `ioctl(kfd, AMDKFD_IOC_ACQUIRE_VM)` — binds the process's GPU VM of `gpu_id` to a render node fd.
///
/// Kernel: `kfd_ioctl_acquire_vm` (`kfd_chardev.c`), reached as `AMDKFD_IOC_ACQUIRE_VM` with
/// `struct kfd_ioctl_acquire_vm_args` (`kfd_ioctl.h`).
#[doc(alias = "AMDKFD_IOC_ACQUIRE_VM")]
pub fn acquire_vm(fd: BorrowedFd<'_>, drm_fd: BorrowedFd<'_>, gpu_id: GpuId) -> Result<()> {
    let args = sys::kfd_ioctl_acquire_vm_args {
        drm_fd: drm_fd.as_raw_fd() as u32,
        gpu_id: gpu_id.0,
    };
    // SAFETY: write-only request with plain values.
    let r = unsafe { raw::acquire_vm(fd.as_raw_fd(), &args) };
    check(KfdIoctl::AcquireVm, gpu(gpu_id.0), r).map(drop)
}

/// `ioctl(kfd, AMDKFD_IOC_ALLOC_MEMORY_OF_GPU)` — allocates a buffer object; fills `handle` and
/// (for VRAM/GTT) `mmap_offset`.
///
/// Kernel: `kfd_ioctl_alloc_memory_of_gpu` (`kfd_chardev.c`), reached as
/// `AMDKFD_IOC_ALLOC_MEMORY_OF_GPU` with `struct kfd_ioctl_alloc_memory_of_gpu_args`
/// (`kfd_ioctl.h`).
///
/// # Safety
/// For USERPTR allocations `mmap_offset` is a CPU address the GPU will access until the
/// buffer is freed; that memory must stay mapped and owned by the caller until then.
#[doc(alias = "AMDKFD_IOC_ALLOC_MEMORY_OF_GPU")]
pub unsafe fn alloc_memory_of_gpu(
    fd: BorrowedFd<'_>,
    args: &mut sys::kfd_ioctl_alloc_memory_of_gpu_args,
) -> Result<()> {
    let ctx = gpu(args.gpu_id);
    // SAFETY: kernel layout; the caller upholds the userptr contract.
    let r = unsafe { raw::alloc_memory_of_gpu(fd.as_raw_fd(), args) };
    check(KfdIoctl::AllocMemoryOfGpu, ctx, r).map(drop)
}

/// `ioctl(kfd, AMDKFD_IOC_FREE_MEMORY_OF_GPU)` — frees a buffer object.
///
/// Kernel: `kfd_ioctl_free_memory_of_gpu` (`kfd_chardev.c`), reached as
/// `AMDKFD_IOC_FREE_MEMORY_OF_GPU` with `struct kfd_ioctl_free_memory_of_gpu_args` (`kfd_ioctl.h`).
#[doc(alias = "AMDKFD_IOC_FREE_MEMORY_OF_GPU")]
pub fn free_memory_of_gpu(fd: BorrowedFd<'_>, handle: u64) -> Result<()> {
    let args = sys::kfd_ioctl_free_memory_of_gpu_args { handle };
    // SAFETY: write-only request with a plain handle value.
    let r = unsafe { raw::free_memory_of_gpu(fd.as_raw_fd(), &args) };
    check(KfdIoctl::FreeMemoryOfGpu, gpu((handle >> 32) as u32), r).map(drop)
}

fn map_args(handle: u64, gpus: &[u32]) -> sys::kfd_ioctl_map_memory_to_gpu_args {
    sys::kfd_ioctl_map_memory_to_gpu_args {
        handle,
        device_ids_array_ptr: gpus.as_ptr() as u64,
        n_devices: gpus.len() as u32,
        n_success: 0,
    }
}

/// `ioctl(kfd, AMDKFD_IOC_MAP_MEMORY_TO_GPU)` — maps a buffer into the GPU VMs of `gpus`;
/// returns how many succeeded.
///
/// Kernel: `kfd_ioctl_map_memory_to_gpu` (`kfd_chardev.c`), reached as
/// `AMDKFD_IOC_MAP_MEMORY_TO_GPU` with `struct kfd_ioctl_map_memory_to_gpu_args` (`kfd_ioctl.h`).
#[doc(alias = "AMDKFD_IOC_MAP_MEMORY_TO_GPU")]
pub fn map_memory_to_gpu(fd: BorrowedFd<'_>, handle: u64, gpus: &[GpuId]) -> Result<u32> {
    let ids: Vec<u32> = gpus.iter().map(|g| g.0).collect();
    let mut args = map_args(handle, &ids);
    // SAFETY: `device_ids_array_ptr` points at `ids`, alive for the whole call; the kernel only
    // reads it during the call.
    let r = unsafe { raw::map_memory_to_gpu(fd.as_raw_fd(), &mut args) };
    check(KfdIoctl::MapMemoryToGpu, gpu((handle >> 32) as u32), r)?;
    Ok(args.n_success)
}

/// `ioctl(kfd, AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU)` — unmaps a buffer from the GPU VMs of `gpus`.
///
/// Kernel: `kfd_ioctl_unmap_memory_from_gpu` (`kfd_chardev.c`), reached as
/// `AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU` with `struct kfd_ioctl_unmap_memory_from_gpu_args`
/// (`kfd_ioctl.h`).
#[doc(alias = "AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU")]
pub fn unmap_memory_from_gpu(fd: BorrowedFd<'_>, handle: u64, gpus: &[GpuId]) -> Result<u32> {
    let ids: Vec<u32> = gpus.iter().map(|g| g.0).collect();
    let m = map_args(handle, &ids);
    let mut args = sys::kfd_ioctl_unmap_memory_from_gpu_args {
        handle: m.handle,
        device_ids_array_ptr: m.device_ids_array_ptr,
        n_devices: m.n_devices,
        n_success: 0,
    };
    // SAFETY: as for map: the id array outlives the call and is only read.
    let r = unsafe { raw::unmap_memory_from_gpu(fd.as_raw_fd(), &mut args) };
    check(KfdIoctl::UnmapMemoryFromGpu, gpu((handle >> 32) as u32), r)?;
    Ok(args.n_success)
}

/// `ioctl(kfd, AMDKFD_IOC_SET_CU_MASK)` — restricts a queue to the CUs in `words`
/// (`32 * words.len()` bits).
///
/// Kernel: `kfd_ioctl_set_cu_mask` (`kfd_chardev.c`), reached as `AMDKFD_IOC_SET_CU_MASK` with
/// `struct kfd_ioctl_set_cu_mask_args` (`kfd_ioctl.h`).
#[doc(alias = "AMDKFD_IOC_SET_CU_MASK")]
pub fn set_cu_mask(fd: BorrowedFd<'_>, queue_id: QueueId, words: &[u32]) -> Result<()> {
    let args = sys::kfd_ioctl_set_cu_mask_args {
        queue_id: queue_id.0,
        num_cu_mask: (words.len() * 32) as u32,
        cu_mask_ptr: words.as_ptr() as u64,
    };
    // SAFETY: `cu_mask_ptr` points at `words`, alive and only read during the call.
    let r = unsafe { raw::set_cu_mask(fd.as_raw_fd(), &args) };
    check(KfdIoctl::SetCuMask, queue(queue_id.0), r).map(drop)
}

/// `ioctl(kfd, AMDKFD_IOC_GET_QUEUE_WAVE_STATE)` — copies the control stack of an inactive
/// compute queue to `ctl_stack_address`; returns (control-stack bytes used, save-area bytes used).
///
/// Kernel: `kfd_ioctl_get_queue_wave_state` (`kfd_chardev.c`), reached as
/// `AMDKFD_IOC_GET_QUEUE_WAVE_STATE` with `struct kfd_ioctl_get_queue_wave_state_args`
/// (`kfd_ioctl.h`).
///
/// # Safety
/// `ctl_stack_address` must point at writable memory of at least the queue's per-XCC
/// control-stack size times its XCC count (the queue's CWSR area qualifies).
#[doc(alias = "AMDKFD_IOC_GET_QUEUE_WAVE_STATE")]
pub unsafe fn get_queue_wave_state(
    fd: BorrowedFd<'_>,
    queue_id: QueueId,
    ctl_stack_address: u64,
) -> Result<(u32, u32)> {
    let mut args = sys::kfd_ioctl_get_queue_wave_state_args {
        ctl_stack_address,
        queue_id: queue_id.0,
        ..Default::default()
    };
    // SAFETY: the caller guarantees the destination; the struct is ours.
    let r = unsafe { raw::get_queue_wave_state(fd.as_raw_fd(), &mut args) };
    check(KfdIoctl::GetQueueWaveState, queue(queue_id.0), r)?;
    Ok((args.ctl_stack_used_size, args.save_area_used_size))
}

/// `ioctl(kfd, AMDKFD_IOC_RUNTIME_ENABLE)` — enables (mode bit 0 set) or disables (bit 0 clear)
/// the debug runtime of the calling process; returns the capabilities mask.
///
/// Must precede the process's first queue (`EEXIST` otherwise).
///
/// Kernel: `kfd_ioctl_runtime_enable` (`kfd_chardev.c`), reached as `AMDKFD_IOC_RUNTIME_ENABLE`
/// with `struct kfd_ioctl_runtime_enable_args` (`kfd_ioctl.h`). The handler calls `runtime_enable`
/// or `runtime_disable` (both in `kfd_chardev.c`) by `KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK`.
#[doc(alias = "AMDKFD_IOC_RUNTIME_ENABLE")]
pub fn runtime_enable(fd: BorrowedFd<'_>, r_debug: u64, mode_mask: u32) -> Result<u32> {
    let mut args = sys::kfd_ioctl_runtime_enable_args {
        r_debug,
        mode_mask,
        capabilities_mask: 0,
    };
    // SAFETY: r_debug is only recorded by the kernel and handed to a debugger, never dereferenced
    // on our behalf; the struct is ours.
    let r = unsafe { raw::runtime_enable(fd.as_raw_fd(), &mut args) };
    check(KfdIoctl::RuntimeEnable, IoctlContext::default(), r)?;
    Ok(args.capabilities_mask)
}

/// `ioctl(kfd, AMDKFD_IOC_DBG_TRAP)` — one debugger operation; returns the ioctl's value
/// (SUSPEND/RESUME: number of queues changed).
///
/// Kernel: `kfd_ioctl_set_debug_trap` (`kfd_chardev.c`), reached as `AMDKFD_IOC_DBG_TRAP` with
/// `struct kfd_ioctl_dbg_trap_args` (`kfd_ioctl.h`). The handler resolves `args.pid` (another
/// process only for its ptrace tracer) and dispatches on `args.op` (`KFD_IOC_DBG_TRAP_*`); the
/// operations kfdq uses are wrapped with their kernel functions in [`super::debug`].
///
/// # Safety
/// Every pointer in the op's union member (`rinfo_ptr`, `queue_array_ptr`, `snapshot_buf_ptr`,
/// ...) must point at memory of the size the op's count fields state, writable where the
/// kernel writes back, for the duration of the call.
#[doc(alias = "AMDKFD_IOC_DBG_TRAP")]
pub unsafe fn dbg_trap(fd: BorrowedFd<'_>, args: &mut sys::kfd_ioctl_dbg_trap_args) -> Result<i32> {
    let ctx = IoctlContext {
        pid: Some(args.pid),
        dbg_op: Some(args.op),
        ..Default::default()
    };
    // SAFETY: the caller upholds the pointer contract of the op.
    let r = unsafe { raw::dbg_trap(fd.as_raw_fd(), args) };
    check(KfdIoctl::DbgTrap, ctx, r)
}
