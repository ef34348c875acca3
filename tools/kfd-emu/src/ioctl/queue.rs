//! Queue ioctls: CREATE_QUEUE, UPDATE_QUEUE, DESTROY_QUEUE, SET_CU_MASK,
//! GET_QUEUE_WAVE_STATE, with the kernel's validation order and errnos.

use std::collections::BTreeMap;

use fuser::ReplyIoctl;
use kfd_sys::{
    EC_QUEUE_NEW, KFD_MAX_QUEUE_PERCENTAGE, KFD_MAX_QUEUE_PRIORITY, KFD_MIN_QUEUE_RING_SIZE,
    kfd_ec_mask, kfd_ioctl_create_queue_args, kfd_ioctl_destroy_queue_args,
    kfd_ioctl_get_queue_wave_state_args, kfd_ioctl_set_cu_mask_args, kfd_ioctl_update_queue_args,
};
use libc::{EBUSY, EFAULT, EINVAL, ENOMEM, ENOSPC, ESRCH};

use super::{Ctx, ENOTSUPP, KResult, access_ok, load, store};
use crate::client_mem;
use crate::config::GpuNode;
use crate::effects::Effects;
use crate::hws;
use crate::state::{
    BoKey, Emu, PAGE, PendingDestroy, Process, Queue, QueueKey, QueueKind, QueueRefs, State,
};

/// Queues per process per device on GC 9.4.3/9.4.4.
const MAX_QUEUES_PER_DEVICE: usize = 255;
/// Queue ids (and doorbells) per process.
const MAX_QUEUE_IDS: u32 = 1024;
/// Modelled CWSR save-area bytes per saved wave (GET_QUEUE_WAVE_STATE).
const SAVE_BYTES_PER_WAVE: u32 = 0x2000;
/// Control-stack bytes per saved wave on gfx9.
const CTL_BYTES_PER_WAVE: u32 = 8;

/// The kernel's `kfd_queue_buffer_get`: the GPU page of `addr` must be the first page
/// of a mapping on `gpu` that is exactly `expected >> 12` pages long (only the start
/// is checked when that is 0).
fn buffer_get(p: &Process, gpu: usize, addr: u64, expected: u64) -> KResult<BoKey> {
    let (key, bo) = p.mapping_at(gpu, addr).ok_or(EINVAL)?;
    if addr / PAGE != bo.va / PAGE {
        return Err(EINVAL);
    }
    let pages = expected / PAGE;
    if pages != 0 && bo.size / PAGE != pages {
        return Err(EINVAL);
    }
    Ok(key)
}

/// Linux 6.12 `kfd_queue_acquire_buffers`: returns the BOs the queue will reference.
fn acquire_buffers(
    p: &Process,
    gpu: usize,
    node: &GpuNode,
    kind: QueueKind,
    a: &kfd_ioctl_create_queue_args,
    ring_size: u32,
) -> KResult<QueueRefs> {
    let mut refs = QueueRefs::default();
    refs.others
        .push(buffer_get(p, gpu, a.write_pointer_address, PAGE)?);
    refs.others
        .push(buffer_get(p, gpu, a.read_pointer_address, PAGE)?);
    refs.ring = Some(buffer_get(
        p,
        gpu,
        a.ring_base_address,
        u64::from(ring_size),
    )?);
    if !kind.is_compute() {
        return Ok(refs);
    }
    if a.eop_buffer_address != 0 {
        if a.eop_buffer_size != u64::from(node.eop_buffer_size) {
            return Err(EINVAL);
        }
        refs.others
            .push(buffer_get(p, gpu, a.eop_buffer_address, a.eop_buffer_size)?);
    }
    if a.ctl_stack_size != node.sizes.ctl_stack_size {
        return Err(EINVAL);
    }
    if a.ctx_save_restore_size < node.sizes.cwsr_size {
        return Err(EINVAL);
    }
    refs.others.push(buffer_get(
        p,
        gpu,
        a.ctx_save_restore_address,
        node.cwsr_total(a.ctx_save_restore_size),
    )?);
    Ok(refs)
}

fn add_refs(p: &mut Process, refs: &QueueRefs, delta: i32) {
    for key in refs.all() {
        if let Some(bo) = p.bo_mut(key) {
            bo.queue_refs = bo.queue_refs.saturating_add_signed(delta);
        }
    }
}

/// The checks CREATE_QUEUE and UPDATE_QUEUE share, in the kernel's order: percentage (low
/// byte) <= 100, priority <= 15 (`EINVAL`), a non-zero ring base is a user address (`EFAULT`),
/// ring size a power of two or 0 (`EINVAL`). Returns the ring size raised to the 1024 minimum.
fn check_queue_properties(
    percentage: u32,
    priority: u32,
    ring_base: u64,
    ring_size: u32,
) -> KResult<u32> {
    if percentage & 0xff > KFD_MAX_QUEUE_PERCENTAGE {
        return Err(EINVAL);
    }
    if priority > KFD_MAX_QUEUE_PRIORITY {
        return Err(EINVAL);
    }
    if ring_base != 0 && !access_ok(ring_base, 8) {
        return Err(EFAULT);
    }
    if ring_size != 0 && !ring_size.is_power_of_two() {
        return Err(EINVAL);
    }
    Ok(ring_size.max(KFD_MIN_QUEUE_RING_SIZE))
}

/// AMDKFD_IOC_CREATE_QUEUE.
pub(crate) fn create(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    effects: &mut Effects,
) -> KResult<i32> {
    let emu = ctx.emu;
    let mut a: kfd_ioctl_create_queue_args = load(buf);
    // set_queue_properties_from_user
    let ring_size = check_queue_properties(
        a.queue_percentage,
        a.queue_priority,
        a.ring_base_address,
        a.ring_size,
    )?;
    if !access_ok(a.read_pointer_address, 4) || !access_ok(a.write_pointer_address, 4) {
        return Err(EFAULT);
    }
    if a.eop_buffer_address != 0 && !access_ok(a.eop_buffer_address, 4) {
        return Err(EFAULT);
    }
    if a.ctx_save_restore_address != 0 && !access_ok(a.ctx_save_restore_address, 4) {
        return Err(EFAULT);
    }
    let kind = QueueKind::from_user(a.queue_type).ok_or(ENOTSUPP)?;
    // kfd_ioctl_create_queue
    let gpu = emu.topo.gpu_index(a.gpu_id).ok_or(EINVAL)?;
    let node = &emu.topo.gpus[gpu];
    let mut guard = emu.lock();
    let st: &mut State = &mut guard;
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    if p.devices[gpu].drm_fd.is_none() {
        return Err(ESRCH);
    }
    if kind == QueueKind::SdmaByEngId {
        let engines = node.props.get("num_sdma_engines").copied().unwrap_or(0)
            + node
                .props
                .get("num_sdma_xgmi_engines")
                .copied()
                .unwrap_or(0);
        if u64::from(a.sdma_engine_id) >= engines {
            return Err(EINVAL);
        }
    }
    let refs = if emu.config.buffer_checks {
        acquire_buffers(p, gpu, node, kind, &a, ring_size)?
    } else {
        QueueRefs::default()
    };
    // pqm_create_queue
    if p.queue_count_on(gpu) >= MAX_QUEUES_PER_DEVICE {
        return Err(ENOSPC);
    }
    let qid = (0..MAX_QUEUE_IDS)
        .find(|id| !p.queues.contains_key(id))
        .ok_or(ENOMEM)?;
    let doorbell = (0..MAX_QUEUE_IDS)
        .find(|d| !p.devices[gpu].doorbells.contains(d))
        .ok_or(ENOMEM)?;
    p.devices[gpu].doorbells.insert(doorbell);
    add_refs(p, &refs, 1);
    let debug = p.debug;
    let seq = st.next_seq;
    st.next_seq += 1;
    let q = Queue {
        qid,
        gpu,
        kind,
        seq,
        ring_base: a.ring_base_address,
        ring_size,
        wptr_addr: a.write_pointer_address,
        rptr_addr: a.read_pointer_address,
        ctx_addr: a.ctx_save_restore_address,
        ctx_size: a.ctx_save_restore_size,
        percentage: a.queue_percentage,
        priority: a.queue_priority,
        doorbell_index: doorbell,
        suspended: false,
        exception_status: kfd_ec_mask(EC_QUEUE_NEW),
        cu_mask: None,
        refs,
        read_index: 0,
        write_index: 0,
        fetch_index: 0,
        pending: BTreeMap::new(),
        packets_done: 0,
        cp_failed: false,
        runnable_log: Default::default(),
    };
    let active = q.is_active();
    let change = active.then(|| hws::begin(emu, st, &[gpu]));
    if let Some(p) = st.processes.get_mut(&ctx.tgid) {
        p.queues.insert(qid, q);
    }
    if let Some(c) = change {
        hws::commit(emu, st, c);
    }
    if let Some(d) = debug
        && d.exception_enable & kfd_ec_mask(EC_QUEUE_NEW) != 0
    {
        effects.notify.push((d.fd_owner, d.dbg_fd));
    }
    a.queue_id = qid;
    a.doorbell_offset = crate::kfd_mmap::doorbell_offset(node.gpu_id, doorbell);
    store(buf, &a);
    tracing::debug!(
        tgid = ctx.tgid,
        qid,
        gpu_id = node.gpu_id,
        ?kind,
        active,
        "queue created"
    );
    Ok(0)
}

/// AMDKFD_IOC_UPDATE_QUEUE. Answered on the proxy's reader thread as well (`READER_SAFE`): it
/// touches no client memory and takes the state lock once, through `Ctx::lock`.
pub(crate) fn update(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let emu = ctx.emu;
    let a: kfd_ioctl_update_queue_args = load(buf);
    let ring_size = check_queue_properties(
        a.queue_percentage,
        a.queue_priority,
        a.ring_base_address,
        a.ring_size,
    )?;
    let mut guard = ctx.lock();
    let st: &mut State = &mut guard;
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    // pqm_update_queue_properties: an unknown queue is EFAULT in the kernel.
    let q = p.queues.get(&a.queue_id).ok_or(EFAULT)?;
    let gpu = q.gpu;
    let new_ring = if emu.config.buffer_checks && a.ring_base_address != 0 && ring_size != 0 {
        Some(buffer_get(p, gpu, a.ring_base_address, u64::from(ring_size)).map_err(|_| EFAULT)?)
    } else {
        None
    };
    let change = hws::begin(emu, st, &[gpu]);
    let Some(p) = st.processes.get_mut(&ctx.tgid) else {
        return Err(ESRCH);
    };
    let Some(q) = p.queues.get_mut(&a.queue_id) else {
        return Err(EFAULT);
    };
    let old_ring = match new_ring {
        Some(r) => q.refs.ring.replace(r),
        None => None,
    };
    q.ring_base = a.ring_base_address;
    q.ring_size = ring_size;
    // The client may have fixed the memory the CP could not read.
    q.cp_failed = false;
    q.percentage = a.queue_percentage;
    q.priority = a.queue_priority;
    if let Some(r) = new_ring {
        if let Some(bo) = p.bo_mut(r) {
            bo.queue_refs += 1;
        }
        if let Some(bo) = old_ring.and_then(|o| p.bo_mut(o)) {
            bo.queue_refs = bo.queue_refs.saturating_sub(1);
        }
    }
    hws::commit(emu, st, change);
    Ok(0)
}

/// Removes a queue now: runlist update if it was active, BO references and doorbell
/// released. Returns false when there is no such queue.
pub(crate) fn destroy_now(emu: &Emu, st: &mut State, key: QueueKey) -> bool {
    let Some((gpu, active)) = st.queue(key).map(|q| (q.gpu, q.is_active())) else {
        return false;
    };
    let change = active.then(|| hws::begin(emu, st, &[gpu]));
    let Some(p) = st.processes.get_mut(&key.0) else {
        return false;
    };
    let Some(q) = p.queues.remove(&key.1) else {
        return false;
    };
    add_refs(p, &q.refs, -1);
    p.devices[gpu].doorbells.remove(&q.doorbell_index);
    if let Some(c) = change {
        hws::commit(emu, st, c);
    }
    tracing::debug!(tgid = key.0, qid = key.1, "queue destroyed");
    true
}

/// Answers blocked DESTROY_QUEUE calls whose queue is no longer suspended.
pub(crate) fn complete_pending(emu: &Emu, st: &mut State, effects: &mut Effects) {
    let mut i = 0;
    while i < st.pending_destroys.len() {
        let key = st.pending_destroys[i].key;
        let suspended = st.queue(key).map(|q| q.suspended);
        if suspended == Some(true) {
            i += 1;
            continue;
        }
        let pd = st.pending_destroys.swap_remove(i);
        let res = if destroy_now(emu, st, key) {
            Ok(0)
        } else {
            Err(EINVAL)
        };
        let mut data = pd.buf;
        data.truncate(pd.out_len);
        effects.replies.push((pd.reply, data, res));
    }
}

/// AMDKFD_IOC_DESTROY_QUEUE. Blocks (the reply is kept) while the queue is suspended
/// by the debugger.
pub(crate) fn destroy(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    reply: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let emu = ctx.emu;
    let a: kfd_ioctl_destroy_queue_args = load(buf);
    let key = (ctx.tgid, a.queue_id);
    let mut guard = emu.lock();
    let st: &mut State = &mut guard;
    let q = st.queue(key).ok_or(EINVAL)?;
    if q.suspended {
        if st.pending_destroys.iter().any(|pd| pd.key == key) {
            // A second destroy of a queue already being destroyed.
            return Err(EBUSY);
        }
        if st.take_interrupt(ctx.unique) {
            // The caller got a signal before the destroy could block.
            return Err(crate::reply::ERESTARTSYS);
        }
        if let Some(r) = reply.take() {
            st.pending_destroys.push(PendingDestroy {
                key,
                unique: ctx.unique,
                reply: r,
                buf: buf.to_vec(),
                out_len: ctx.out_len,
            });
        }
        return Ok(0);
    }
    destroy_now(emu, st, key);
    Ok(0)
}

/// AMDKFD_IOC_SET_CU_MASK.
pub(crate) fn set_cu_mask(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let emu = ctx.emu;
    let a: kfd_ioctl_set_cu_mask_args = load(buf);
    if a.num_cu_mask == 0 || a.num_cu_mask % 32 != 0 {
        return Err(EINVAL);
    }
    let words = (a.num_cu_mask.min(1024) / 32) as usize;
    let mask = client_mem::read_u32s(ctx.tgid, a.cu_mask_ptr, words)?;
    let mut guard = emu.lock();
    let st: &mut State = &mut guard;
    let key = (ctx.tgid, a.queue_id);
    // pqm_update_mqd: an unknown queue is EFAULT in the kernel.
    let gpu = st.queue(key).ok_or(EFAULT)?.gpu;
    let change = hws::begin(emu, st, &[gpu]);
    if let Some(q) = st.queue_mut(key) {
        q.cu_mask = Some(mask);
    }
    hws::commit(emu, st, change);
    Ok(0)
}

/// AMDKFD_IOC_GET_QUEUE_WAVE_STATE. Model: a queue that had a dispatch in flight when
/// it went inactive reports one saved wave per CU of XCC 0; otherwise nothing saved.
pub(crate) fn wave_state(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let emu = ctx.emu;
    let mut a: kfd_ioctl_get_queue_wave_state_args = load(buf);
    let st = emu.lock();
    // pqm_get_wave_state: an unknown queue is EFAULT in the kernel.
    let q = st.queue((ctx.tgid, a.queue_id)).ok_or(EFAULT)?;
    if !q.kind.is_compute() || q.is_active() {
        return Err(EINVAL);
    }
    let waves = if hws::has_saved_work(&st, q.gpu, (ctx.tgid, a.queue_id)) {
        emu.topo.gpus[q.gpu].cu_per_xcc
    } else {
        0
    };
    a.ctl_stack_used_size = waves * CTL_BYTES_PER_WAVE;
    a.save_area_used_size = waves * SAVE_BYTES_PER_WAVE;
    store(buf, &a);
    Ok(0)
}
