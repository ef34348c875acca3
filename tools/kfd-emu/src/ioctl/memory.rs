//! Memory ioctls: ACQUIRE_VM, ALLOC_MEMORY_OF_GPU, FREE_MEMORY_OF_GPU,
//! MAP_MEMORY_TO_GPU, UNMAP_MEMORY_FROM_GPU — per-process, per-GPU VA bookkeeping.

use std::sync::Arc;

use fuser::ReplyIoctl;
use kfd_sys::{
    KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL, KFD_IOC_ALLOC_MEM_FLAGS_GTT,
    KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP, KFD_IOC_ALLOC_MEM_FLAGS_USERPTR,
    KFD_IOC_ALLOC_MEM_FLAGS_VRAM, kfd_ioctl_acquire_vm_args, kfd_ioctl_alloc_memory_of_gpu_args,
    kfd_ioctl_free_memory_of_gpu_args, kfd_ioctl_map_memory_to_gpu_args,
};
use libc::{EBUSY, EFAULT, EINVAL, ENOMEM, ESRCH};

use super::{Ctx, KResult, load, store};
use crate::client_mem;
use crate::effects::Effects;
use crate::kfd_mmap;
use crate::process;
use crate::state::{Backing, Bo, PAGE, State};

/// Render-node mmap offsets stay below the emulator's doorbell mmap type (1 << 62).
const MMAP_OFFSET_LIMIT: u64 = 1 << 62;

/// AMDKFD_IOC_ACQUIRE_VM.
pub(crate) fn acquire_vm(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let emu = ctx.emu;
    let a: kfd_ioctl_acquire_vm_args = load(buf);
    let gpu = emu.topo.gpu_index(a.gpu_id).ok_or(EINVAL)?;
    // The file behind the caller's fd, by device and inode: the same render node seen through
    // a bind mount, a chroot or another mount namespace is still this node.
    let target = process::fd_identity(ctx.tgid, a.drm_fd)?;
    let is_node = match (&target, emu.fuse_dev.get(), emu.render_inos.get()) {
        (Some((dev, ino)), Some(own), Some(inos)) => dev == own && inos.get(gpu) == Some(ino),
        // A kernel without `ino` in fdinfo: the path as the caller sees it must be ours.
        _ => {
            let path = process::fd_target(ctx.tgid, a.drm_fd)?;
            path == emu.root.join(format!(
                "dev/dri/renderD{}",
                emu.topo.gpus[gpu].render_minor
            ))
        }
    };
    let mut st = emu.lock();
    let dev = &mut st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?.devices[gpu];
    if let Some(fd) = dev.drm_fd {
        return if fd == a.drm_fd { Ok(0) } else { Err(EBUSY) };
    }
    if !is_node {
        tracing::debug!(
            ?target,
            "ACQUIRE_VM with a file that is not this GPU's render node"
        );
        return Err(EINVAL);
    }
    dev.drm_fd = Some(a.drm_fd);
    Ok(0)
}

/// AMDKFD_IOC_ALLOC_MEMORY_OF_GPU.
pub(crate) fn alloc(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let emu = ctx.emu;
    let mut a: kfd_ioctl_alloc_memory_of_gpu_args = load(buf);
    let gpu = emu.topo.gpu_index(a.gpu_id).ok_or(EINVAL)?;
    {
        let st = emu.lock();
        let p = st.processes.get(&ctx.tgid).ok_or(ESRCH)?;
        if p.devices[gpu].drm_fd.is_none() {
            return Err(EINVAL);
        }
    }
    if a.size == 0 || a.va_addr % PAGE != 0 {
        return Err(EINVAL);
    }
    // The kernel allocates whole pages: a size that is not a page multiple is rounded up.
    let size = a.size.checked_next_multiple_of(PAGE).ok_or(EINVAL)?;
    let end = a.va_addr.checked_add(size).ok_or(EINVAL)?;
    let kinds = a.flags
        & (KFD_IOC_ALLOC_MEM_FLAGS_VRAM
            | KFD_IOC_ALLOC_MEM_FLAGS_GTT
            | KFD_IOC_ALLOC_MEM_FLAGS_USERPTR
            | KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL
            | KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP);
    if kinds.count_ones() != 1 {
        return Err(EINVAL);
    }
    if kinds == KFD_IOC_ALLOC_MEM_FLAGS_USERPTR {
        if a.mmap_offset != a.va_addr {
            return Err(EINVAL);
        }
        let mut byte = [0u8; 1];
        client_mem::read(ctx.tgid, a.va_addr, &mut byte).map_err(|_| EFAULT)?;
        client_mem::read(ctx.tgid, end - 1, &mut byte).map_err(|_| EFAULT)?;
    }
    let mut guard = emu.lock();
    let st: &mut State = &mut guard;
    let gpu_id = emu.topo.gpus[gpu].gpu_id;
    let next_offset = st.next_mmap_offset;
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    let dev = &mut p.devices[gpu];
    if dev
        .bos
        .values()
        .any(|bo| a.va_addr < bo.va + bo.size && bo.va < end)
    {
        return Err(EINVAL);
    }
    let (mmap_offset, backed) = match kinds {
        KFD_IOC_ALLOC_MEM_FLAGS_USERPTR => (a.va_addr, false),
        KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL => (kfd_mmap::doorbell_offset(gpu_id, 0), false),
        // The MMIO remap page is mapped through /dev/kfd, as the kernel does.
        KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP => (kfd_mmap::mmio_offset(gpu_id), false),
        _ => {
            let after = next_offset
                .checked_add(size)
                .and_then(|e| e.checked_add(PAGE))
                .filter(|e| *e <= MMAP_OFFSET_LIMIT)
                .ok_or(ENOMEM)?;
            st.next_mmap_offset = after;
            (next_offset, true)
        }
    };
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    let dev = &mut p.devices[gpu];
    dev.next_bo_id += 1;
    let id = dev.next_bo_id;
    dev.bos.insert(
        id,
        Bo {
            id,
            va: a.va_addr,
            size,
            mmap_offset,
            backed,
            vram: kinds == KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
            mapped_on: Default::default(),
            queue_refs: 0,
        },
    );
    if backed {
        emu.bos.insert(mmap_offset, Arc::new(Backing::new(size)));
    }
    a.handle = (u64::from(gpu_id) << 32) | u64::from(id);
    a.mmap_offset = mmap_offset;
    store(buf, &a);
    Ok(0)
}

/// Splits a BO handle into (GPU node index, BO id).
pub(super) fn split_handle(ctx: &Ctx<'_>, handle: u64) -> KResult<(usize, u32)> {
    let gpu = ctx
        .emu
        .topo
        .gpu_index((handle >> 32) as u32)
        .ok_or(EINVAL)?;
    Ok((gpu, handle as u32))
}

/// AMDKFD_IOC_FREE_MEMORY_OF_GPU.
pub(crate) fn free(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let a: kfd_ioctl_free_memory_of_gpu_args = load(buf);
    let (gpu, id) = split_handle(ctx, a.handle)?;
    let mut st = ctx.emu.lock();
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    let bo = p.devices[gpu].bos.get(&id).ok_or(EINVAL)?;
    if bo.queue_refs > 0 {
        return Err(EBUSY);
    }
    if let Some(bo) = p.devices[gpu].bos.remove(&id)
        && bo.backed
    {
        ctx.emu.bos.remove(bo.mmap_offset);
    }
    Ok(0)
}

/// MAP (`map == true`) or UNMAP of a BO on a list of GPUs.
fn map_common(ctx: &Ctx<'_>, buf: &mut [u8], map: bool) -> KResult<i32> {
    let mut a: kfd_ioctl_map_memory_to_gpu_args = load(buf);
    if a.n_devices == 0 || a.n_success > a.n_devices {
        return Err(EINVAL);
    }
    if a.n_devices > super::MAX_ARRAY {
        return Err(ENOMEM);
    }
    let ids = client_mem::read_u32s(ctx.tgid, a.device_ids_array_ptr, a.n_devices as usize)?;
    let (gpu, id) = split_handle(ctx, a.handle)?;
    let mut st = ctx.emu.lock();
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    if p.devices[gpu].drm_fd.is_none() {
        return Err(EINVAL);
    }
    let refs = p.devices[gpu].bos.get(&id).ok_or(EINVAL)?.queue_refs;
    if !map && refs > 0 {
        return Err(EBUSY);
    }
    for (i, dev_id) in ids.iter().enumerate().skip(a.n_success as usize) {
        let Some(peer) = ctx.emu.topo.gpu_index(*dev_id) else {
            store(buf, &a);
            return Err(EINVAL);
        };
        if p.devices[peer].drm_fd.is_none() {
            store(buf, &a);
            return Err(EINVAL);
        }
        if let Some(bo) = p.devices[gpu].bos.get_mut(&id) {
            if map {
                bo.mapped_on.insert(peer);
            } else {
                bo.mapped_on.remove(&peer);
            }
        }
        a.n_success = i as u32 + 1;
    }
    store(buf, &a);
    Ok(0)
}

/// AMDKFD_IOC_MAP_MEMORY_TO_GPU.
pub(crate) fn map(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    map_common(ctx, buf, true)
}

/// AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU (same argument layout as MAP).
pub(crate) fn unmap(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    map_common(ctx, buf, false)
}
