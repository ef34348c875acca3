//! Per-device process ioctls the runtime calls at start-up: GET_PROCESS_APERTURES_NEW,
//! SET_MEMORY_POLICY, GET_CLOCK_COUNTERS, SET_SCRATCH_BACKING_VA, SET_TRAP_HANDLER,
//! AVAILABLE_MEMORY and SET_XNACK_MODE, with the kernel's values for gfx9 and its errnos.

use fuser::ReplyIoctl;
use kfd_sys::{
    KFD_IOC_CACHE_POLICY_COHERENT, KFD_IOC_CACHE_POLICY_NONCOHERENT,
    kfd_ioctl_get_available_memory_args, kfd_ioctl_get_clock_counters_args,
    kfd_ioctl_get_process_apertures_new_args, kfd_ioctl_set_memory_policy_args,
    kfd_ioctl_set_scratch_backing_va_args, kfd_ioctl_set_trap_handler_args,
    kfd_ioctl_set_xnack_mode_args, kfd_process_device_apertures,
};
use libc::{EBUSY, EFAULT, EINVAL, ESRCH};

use super::{Ctx, KResult, bytes_of, load, store};
use crate::client_mem;
use crate::effects::Effects;

/// gfx9 apertures (`kfd_init_apertures_v9`): LDS and scratch are 4 GiB windows at
/// 1 << 48 and 2 << 48; the GPUVM range is the 47-bit user VA above the first 64 KiB.
const LDS_BASE: u64 = 1 << 48;
const SCRATCH_BASE: u64 = 2 << 48;
const APERTURE_LIMIT_LOW: u64 = 0xffff_ffff;
const GPUVM_BASE: u64 = 1 << 16;
const GPUVM_LIMIT: u64 = (1 << 47) - 1;

fn apertures(gpu_id: u32) -> kfd_process_device_apertures {
    kfd_process_device_apertures {
        lds_base: LDS_BASE,
        lds_limit: LDS_BASE | APERTURE_LIMIT_LOW,
        scratch_base: SCRATCH_BASE,
        scratch_limit: SCRATCH_BASE | APERTURE_LIMIT_LOW,
        gpuvm_base: GPUVM_BASE,
        gpuvm_limit: GPUVM_LIMIT,
        gpu_id,
        pad: 0,
    }
}

/// AMDKFD_IOC_GET_PROCESS_APERTURES_NEW: with `num_of_nodes == 0` the number of devices of
/// the process; otherwise up to that many entries, and the number written.
pub(crate) fn apertures_new(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let mut a: kfd_ioctl_get_process_apertures_new_args = load(buf);
    let gpus = &ctx.emu.topo.gpus;
    let count = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
    if a.num_of_nodes == 0 {
        a.num_of_nodes = count;
        store(buf, &a);
        return Ok(0);
    }
    let n = a.num_of_nodes.min(count) as usize;
    let bytes: Vec<u8> = gpus[..n]
        .iter()
        .flat_map(|g| bytes_of(&apertures(g.gpu_id)))
        .collect();
    client_mem::write(ctx.tgid, a.kfd_process_device_apertures_ptr, &bytes)?;
    a.num_of_nodes = n as u32;
    store(buf, &a);
    Ok(0)
}

/// The node index of a `gpu_id`, `EINVAL` when no node has it.
fn gpu(ctx: &Ctx<'_>, gpu_id: u32) -> KResult<usize> {
    ctx.emu.topo.gpu_index(gpu_id).ok_or(EINVAL)
}

/// AMDKFD_IOC_SET_MEMORY_POLICY: both policies must be COHERENT or NONCOHERENT. The emulated
/// caches are always coherent, so the policy is checked and not kept.
pub(crate) fn memory_policy(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let a: kfd_ioctl_set_memory_policy_args = load(buf);
    let valid =
        |p: u32| p == KFD_IOC_CACHE_POLICY_COHERENT || p == KFD_IOC_CACHE_POLICY_NONCOHERENT;
    if !valid(a.default_policy) || !valid(a.alternate_policy) {
        return Err(EINVAL);
    }
    gpu(ctx, a.gpu_id)?;
    Ok(0)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::from_raw(clock))
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

/// AMDKFD_IOC_GET_CLOCK_COUNTERS: the GPU counter (0 for an unknown `gpu_id`, as the kernel
/// does), CLOCK_MONOTONIC_RAW and CLOCK_BOOTTIME in ns, and their 1 GHz frequency.
pub(crate) fn clock_counters(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let mut a: kfd_ioctl_get_clock_counters_args = load(buf);
    a.gpu_clock_counter = if ctx.emu.topo.gpu_index(a.gpu_id).is_some() {
        ctx.emu.gpu_counter()
    } else {
        0
    };
    a.cpu_clock_counter = clock_ns(libc::CLOCK_MONOTONIC_RAW);
    a.system_clock_counter = clock_ns(libc::CLOCK_BOOTTIME);
    a.system_clock_freq = 1_000_000_000;
    store(buf, &a);
    Ok(0)
}

/// AMDKFD_IOC_SET_SCRATCH_BACKING_VA: with the HWS the kernel only records the address for the
/// process's queues; so does the emulator (scratch is not modelled).
pub(crate) fn scratch_backing(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let a: kfd_ioctl_set_scratch_backing_va_args = load(buf);
    gpu(ctx, a.gpu_id)?;
    ctx.emu.lock().processes.get(&ctx.tgid).ok_or(ESRCH)?;
    Ok(0)
}

/// `struct kfd_ioctl_get_tile_config_args` (`linux/kfd_ioctl.h`).
type TileConfigArgs = kfd_sys::kfd_ioctl_get_tile_config_args;

/// `AMDKFD_IOC_GET_TILE_CONFIG`: `AMDKFD_IOWR(0x12, struct kfd_ioctl_get_tile_config_args)`.
pub(crate) const AMDKFD_IOC_GET_TILE_CONFIG: u32 = kfd_sys::ioc::request(
    kfd_sys::ioc::READ | kfd_sys::ioc::WRITE,
    kfd_sys::ioc::KFD_TYPE,
    0x12,
    size_of::<TileConfigArgs>(),
);

/// `GB_ADDR_CONFIG` as amdgpu sets it for GC 9.4.1 and 9.4.2 (`gfx_v9_0_gpu_early_init`: the
/// register with 0x22014042 forced into the fields it sets; the register's other bits are 0 here).
const GB_ADDR_CONFIG: u32 = 0x2201_4042;
/// `ARRAY_SIZE(adev->gfx.config.tile_mode_array)` and `macrotile_mode_array` (amdgpu_gfx.h):
/// the counts `amdgpu_amdkfd_get_tile_config` reports; gfx9 leaves both arrays zero.
const TILE_CONFIGS: u32 = 32;
const MACRO_TILE_CONFIGS: u32 = 16;

/// AMDKFD_IOC_GET_TILE_CONFIG (`kfd_ioctl_get_tile_config`): the device's `gb_addr_config`,
/// `num_banks` and `num_ranks` (0: not set from gfx9 on), and up to the caller's counts of the
/// tile and macro-tile mode arrays (zeros on gfx9), the counts cut to the kernel's. ROCr's image
/// manager asks for it when the image extension starts (`ImageManagerKv::Initialize` asserts
/// that it succeeds), on gfx90a during HIP start-up.
pub(crate) fn tile_config(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let mut a: TileConfigArgs = load(buf);
    gpu(ctx, a.gpu_id)?;
    ctx.emu.lock().processes.get(&ctx.tgid).ok_or(EINVAL)?;
    a.gb_addr_config = GB_ADDR_CONFIG;
    a.num_banks = 0;
    a.num_ranks = 0;
    a.num_tile_configs = a.num_tile_configs.min(TILE_CONFIGS);
    let zeros = vec![0u8; 4 * a.num_tile_configs as usize];
    if client_mem::write(ctx.tgid, a.tile_config_ptr, &zeros).is_err() {
        a.num_tile_configs = 0;
        store(buf, &a);
        return Err(EFAULT);
    }
    a.num_macro_tile_configs = a.num_macro_tile_configs.min(MACRO_TILE_CONFIGS);
    let zeros = vec![0u8; 4 * a.num_macro_tile_configs as usize];
    if client_mem::write(ctx.tgid, a.macro_tile_config_ptr, &zeros).is_err() {
        a.num_macro_tile_configs = 0;
        store(buf, &a);
        return Err(EFAULT);
    }
    store(buf, &a);
    Ok(0)
}

/// AMDKFD_IOC_SET_TRAP_HANDLER: the kernel stores the trap handler's code and buffer addresses
/// for the process's queues on the device (`kfd_process_set_trap_handler`); the emulator runs
/// no code, so it checks the device and accepts.
pub(crate) fn trap_handler(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let a: kfd_ioctl_set_trap_handler_args = load(buf);
    gpu(ctx, a.gpu_id)?;
    ctx.emu.lock().processes.get(&ctx.tgid).ok_or(ESRCH)?;
    Ok(0)
}

/// AMDKFD_IOC_AVAILABLE_MEMORY: the node's VRAM (`local_mem_size`) less what every process
/// has allocated in VRAM on it.
pub(crate) fn available_memory(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let mut a: kfd_ioctl_get_available_memory_args = load(buf);
    let g = gpu(ctx, a.gpu_id)?;
    let total = ctx.emu.topo.gpus[g].vram_bytes();
    let used = ctx.emu.lock().bo_bytes(g, true);
    a.available = total.saturating_sub(used);
    store(buf, &a);
    Ok(0)
}

/// AMDKFD_IOC_SET_XNACK_MODE: a negative value queries the mode; otherwise the mode is set,
/// which is refused (`EBUSY`) while the process has queues. gfx942 supports both modes.
pub(crate) fn xnack_mode(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let mut a: kfd_ioctl_set_xnack_mode_args = load(buf);
    let mut st = ctx.emu.lock();
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    if a.xnack_enabled < 0 {
        a.xnack_enabled = i32::from(p.xnack);
        store(buf, &a);
        return Ok(0);
    }
    let want = a.xnack_enabled != 0;
    if want != p.xnack && !p.queues.is_empty() {
        return Err(EBUSY);
    }
    p.xnack = want;
    Ok(0)
}
