//! Debugger API: RUNTIME_ENABLE and DBG_TRAP (KFD >= 1.13), with the kernel's
//! permission model: a process may debug itself; another process only from the thread
//! that is its ptrace tracer.

use fuser::ReplyIoctl;
use kfd_sys::{
    DEBUG_RUNTIME_STATE_DISABLED, DEBUG_RUNTIME_STATE_ENABLED, EC_QUEUE_NEW,
    KFD_DBG_QUEUE_ERROR_MASK, KFD_DBG_QUEUE_INVALID_MASK,
    KFD_IOC_DBG_TRAP_CLEAR_NODE_ADDRESS_WATCH, KFD_IOC_DBG_TRAP_DISABLE, KFD_IOC_DBG_TRAP_ENABLE,
    KFD_IOC_DBG_TRAP_GET_DEVICE_SNAPSHOT, KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT,
    KFD_IOC_DBG_TRAP_QUERY_DEBUG_EVENT, KFD_IOC_DBG_TRAP_QUERY_EXCEPTION_INFO,
    KFD_IOC_DBG_TRAP_RESUME_QUEUES, KFD_IOC_DBG_TRAP_SEND_RUNTIME_EVENT,
    KFD_IOC_DBG_TRAP_SET_EXCEPTIONS_ENABLED, KFD_IOC_DBG_TRAP_SET_FLAGS,
    KFD_IOC_DBG_TRAP_SET_NODE_ADDRESS_WATCH, KFD_IOC_DBG_TRAP_SET_WAVE_LAUNCH_MODE,
    KFD_IOC_DBG_TRAP_SET_WAVE_LAUNCH_OVERRIDE, KFD_IOC_DBG_TRAP_SUSPEND_QUEUES,
    KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK, KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK, kfd_ec_mask,
    kfd_ioctl_dbg_trap_args, kfd_ioctl_dbg_trap_device_snapshot_args,
    kfd_ioctl_dbg_trap_enable_args, kfd_ioctl_dbg_trap_query_debug_event_args,
    kfd_ioctl_dbg_trap_queue_snapshot_args, kfd_ioctl_dbg_trap_resume_queues_args,
    kfd_ioctl_dbg_trap_set_exceptions_enabled_args, kfd_ioctl_dbg_trap_suspend_queues_args,
    kfd_ioctl_runtime_enable_args, kfd_queue_snapshot_entry, kfd_runtime_info,
};
use libc::{EAGAIN, EALREADY, EBUSY, EEXIST, EINVAL, ENOMEM, EPERM, ESRCH};
use std::mem::offset_of;

use super::detach::disable;
use super::{Ctx, KResult, bytes_of, load, store};
use crate::abi::u32_at;
use crate::client_mem;
use crate::effects::Effects;
use crate::hws;
use crate::process;
use crate::state::{DebugLink, Emu, QueueKey, State};

// `kfd_ioctl_dbg_trap_args` is `pid`, `op` and a union of the operations' arguments. The union's
// members differ in size, so kfd-sys gives the struct no byte conversions: its fields are read at
// their offsets, and each operation's arguments from the union's bytes.
const PID_AT: usize = offset_of!(kfd_ioctl_dbg_trap_args, pid);
const OP_AT: usize = offset_of!(kfd_ioctl_dbg_trap_args, op);
const UNION_AT: usize = offset_of!(kfd_ioctl_dbg_trap_args, __bindgen_anon_1);

/// AMDKFD_IOC_RUNTIME_ENABLE: enable (mode_mask bit 0) or disable the runtime.
pub(crate) fn runtime_enable(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let a: kfd_ioctl_runtime_enable_args = load(buf);
    let mut st = ctx.emu.lock();
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    if a.mode_mask & KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK != 0 {
        if p.runtime_enabled {
            return Err(EBUSY);
        }
        if !p.queues.is_empty() {
            return Err(EEXIST);
        }
        p.runtime_enabled = true;
        p.r_debug = a.r_debug;
        p.ttmp_setup = a.mode_mask & KFD_RUNTIME_ENABLE_MODE_TTMP_SAVE_MASK != 0;
    } else {
        p.runtime_enabled = false;
    }
    Ok(0)
}

/// Ops that need the target runtime-enabled (else EPERM).
fn needs_runtime(op: u32) -> bool {
    matches!(
        op,
        KFD_IOC_DBG_TRAP_SET_WAVE_LAUNCH_OVERRIDE
            | KFD_IOC_DBG_TRAP_SET_WAVE_LAUNCH_MODE
            | KFD_IOC_DBG_TRAP_SUSPEND_QUEUES
            | KFD_IOC_DBG_TRAP_RESUME_QUEUES
            | KFD_IOC_DBG_TRAP_SET_NODE_ADDRESS_WATCH
            | KFD_IOC_DBG_TRAP_CLEAR_NODE_ADDRESS_WATCH
            | KFD_IOC_DBG_TRAP_SET_FLAGS
    )
}

/// AMDKFD_IOC_DBG_TRAP.
pub(crate) fn dbg_trap(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    effects: &mut Effects,
) -> KResult<i32> {
    let emu = ctx.emu;
    let pid = u32_at(buf, PID_AT).unwrap_or(0);
    let op = u32_at(buf, OP_AT).unwrap_or(0);
    if pid == 0 {
        return Err(ESRCH);
    }
    // The caller's own process (its group leader's id, the usual target) needs no lookup: the
    // dispatcher found the calling thread in that group.
    let target = if pid == ctx.tgid {
        ctx.tgid
    } else {
        process::tgid_of(emu, pid).ok_or(ESRCH)?
    };
    let is_self = target == ctx.tgid;
    // The caller is in this ioctl, so it is alive: the /proc reads are for other targets
    // (each costs tens of µs, on the path of every level-3 suspend and resume).
    if !is_self && !process::is_alive(target, None) {
        return Err(ESRCH);
    }
    let traced_by_caller = !is_self && process::tracer_of(target) == Some(ctx.tid);
    let started = if op == KFD_IOC_DBG_TRAP_ENABLE && traced_by_caller {
        process::start_time(target)
    } else {
        None
    };
    let mut guard = emu.lock();
    let st: &mut State = &mut guard;
    if op == KFD_IOC_DBG_TRAP_ENABLE && traced_by_caller {
        super::lifecycle::ensure(emu, st, target, started, effects);
    }
    let p = st.processes.get(&target).ok_or(ESRCH)?;
    if !is_self && op != KFD_IOC_DBG_TRAP_DISABLE && !traced_by_caller {
        return Err(EPERM);
    }
    if op != KFD_IOC_DBG_TRAP_ENABLE && p.debug.is_none() {
        return Err(EINVAL);
    }
    if needs_runtime(op) && !p.runtime_enabled {
        return Err(EPERM);
    }
    // The dispatcher hands every handler at least the kernel's argument size, but this one slices
    // past the header itself, so it checks that it is there rather than trusting its caller.
    let Some(u) = buf.get_mut(UNION_AT..) else {
        return Err(EINVAL);
    };
    match op {
        KFD_IOC_DBG_TRAP_ENABLE => enable(ctx, st, target, is_self, u),
        KFD_IOC_DBG_TRAP_DISABLE => {
            disable(emu, st, target, effects);
            Ok(0)
        }
        KFD_IOC_DBG_TRAP_SET_EXCEPTIONS_ENABLED => {
            let s: kfd_ioctl_dbg_trap_set_exceptions_enabled_args = load(u);
            if let Some(d) = st.processes.get_mut(&target).and_then(|p| p.debug.as_mut()) {
                d.exception_enable = s.exception_mask;
            }
            Ok(0)
        }
        KFD_IOC_DBG_TRAP_SUSPEND_QUEUES => suspend(ctx, st, target, u),
        KFD_IOC_DBG_TRAP_RESUME_QUEUES => resume(ctx, st, target, u, effects),
        KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT => queue_snapshot(ctx, st, target, u),
        KFD_IOC_DBG_TRAP_QUERY_DEBUG_EVENT => query_debug_event(emu, st, target, u),
        KFD_IOC_DBG_TRAP_GET_DEVICE_SNAPSHOT => {
            let mut s: kfd_ioctl_dbg_trap_device_snapshot_args = load(u);
            s.num_devices = emu.topo.gpus.len() as u32;
            store(u, &s);
            Ok(0)
        }
        KFD_IOC_DBG_TRAP_SEND_RUNTIME_EVENT
        | KFD_IOC_DBG_TRAP_SET_WAVE_LAUNCH_OVERRIDE
        | KFD_IOC_DBG_TRAP_SET_WAVE_LAUNCH_MODE
        | KFD_IOC_DBG_TRAP_SET_NODE_ADDRESS_WATCH
        | KFD_IOC_DBG_TRAP_CLEAR_NODE_ADDRESS_WATCH
        | KFD_IOC_DBG_TRAP_SET_FLAGS
        | KFD_IOC_DBG_TRAP_QUERY_EXCEPTION_INFO => Ok(0),
        _ => Err(EINVAL),
    }
}

/// DBG_TRAP ENABLE.
fn enable(ctx: &Ctx<'_>, st: &mut State, target: u32, is_self: bool, u: &mut [u8]) -> KResult<i32> {
    let mut e: kfd_ioctl_dbg_trap_enable_args = load(u);
    let p = st.processes.get_mut(&target).ok_or(ESRCH)?;
    if p.debug.is_some() {
        return Err(EALREADY);
    }
    process::fd_target(ctx.tgid, e.dbg_fd)?;
    let info = kfd_runtime_info {
        r_debug: p.r_debug,
        runtime_state: if p.runtime_enabled {
            DEBUG_RUNTIME_STATE_ENABLED
        } else {
            DEBUG_RUNTIME_STATE_DISABLED
        },
        ttmp_setup: u32::from(p.ttmp_setup),
    };
    let bytes = bytes_of(&info);
    let n = (e.rinfo_size as usize).min(bytes.len());
    client_mem::write(ctx.tgid, e.rinfo_ptr, &bytes[..n])?;
    p.debug = Some(DebugLink {
        debugger: (!is_self).then_some(ctx.tgid),
        fd_owner: ctx.tgid,
        dbg_fd: e.dbg_fd,
        exception_enable: e.exception_mask,
    });
    e.rinfo_size = bytes.len() as u32;
    store(u, &e);
    tracing::debug!(target, debugger = ctx.tgid, "debug trap enabled");
    Ok(0)
}

/// Queue id of an array entry (flag bits stripped).
fn entry_id(raw: u32) -> u32 {
    raw & !(KFD_DBG_QUEUE_INVALID_MASK | KFD_DBG_QUEUE_ERROR_MASK)
}

/// DBG_TRAP SUSPEND_QUEUES: returns the number of queues newly suspended.
fn suspend(ctx: &Ctx<'_>, st: &mut State, target: u32, u: &mut [u8]) -> KResult<i32> {
    let s: kfd_ioctl_dbg_trap_suspend_queues_args = load(u);
    if s.num_queues > super::MAX_ARRAY {
        return Err(ENOMEM);
    }
    let ids = client_mem::read_u32s(ctx.tgid, s.queue_array_ptr, s.num_queues as usize)?;
    let new_mask = kfd_ec_mask(EC_QUEUE_NEW);
    let being_destroyed: Vec<QueueKey> = st.pending_destroys.iter().map(|pd| pd.key).collect();
    let mut out = Vec::with_capacity(ids.len());
    let mut todo: Vec<(QueueKey, usize)> = Vec::new();
    for raw in &ids {
        let id = entry_id(*raw);
        let key = (target, id);
        match st.queue(key) {
            None => out.push(id | KFD_DBG_QUEUE_INVALID_MASK),
            Some(q) if q.suspended || todo.iter().any(|(k, _)| *k == key) => out.push(id),
            Some(q) if q.exception_status & new_mask != 0 || being_destroyed.contains(&key) => {
                out.push(id | KFD_DBG_QUEUE_INVALID_MASK)
            }
            Some(q) => {
                todo.push((key, q.gpu));
                out.push(id);
            }
        }
    }
    if !todo.is_empty() {
        let parts: Vec<usize> = todo.iter().map(|(_, g)| *g).collect();
        let mut change = hws::begin(ctx.emu, st, &parts);
        // The waves get the caller's grace period before they are saved.
        change.grace_ns = Some(hws::grace_ns(&ctx.emu.topo.gpus[parts[0]], s.grace_period));
        for (key, _) in &todo {
            if let Some(q) = st.queue_mut(*key) {
                q.suspended = true;
                q.exception_status &= !s.exception_mask;
            }
        }
        hws::commit(ctx.emu, st, change);
    }
    client_mem::write_u32s(ctx.tgid, s.queue_array_ptr, &out)?;
    Ok(todo.len() as i32)
}

/// DBG_TRAP RESUME_QUEUES: returns the number of queues resumed.
fn resume(
    ctx: &Ctx<'_>,
    st: &mut State,
    target: u32,
    u: &mut [u8],
    effects: &mut Effects,
) -> KResult<i32> {
    let r: kfd_ioctl_dbg_trap_resume_queues_args = load(u);
    if r.num_queues > super::MAX_ARRAY {
        return Err(ENOMEM);
    }
    let ids = client_mem::read_u32s(ctx.tgid, r.queue_array_ptr, r.num_queues as usize)?;
    let mut out = Vec::with_capacity(ids.len());
    let mut todo: Vec<(QueueKey, usize)> = Vec::new();
    for raw in &ids {
        let id = entry_id(*raw);
        let key = (target, id);
        match st.queue(key) {
            None => out.push(id | KFD_DBG_QUEUE_INVALID_MASK),
            Some(q) => {
                if q.suspended && !todo.iter().any(|(k, _)| *k == key) {
                    todo.push((key, q.gpu));
                }
                out.push(id);
            }
        }
    }
    if !todo.is_empty() {
        let parts: Vec<usize> = todo.iter().map(|(_, g)| *g).collect();
        let change = hws::begin(ctx.emu, st, &parts);
        for (key, _) in &todo {
            super::detach::resume_one(st, *key);
        }
        hws::commit(ctx.emu, st, change);
        super::queue::complete_pending(ctx.emu, st, effects);
    }
    client_mem::write_u32s(ctx.tgid, r.queue_array_ptr, &out)?;
    Ok(todo.len() as i32)
}

/// DBG_TRAP GET_QUEUE_SNAPSHOT.
fn queue_snapshot(ctx: &Ctx<'_>, st: &mut State, target: u32, u: &mut [u8]) -> KResult<i32> {
    let mut s: kfd_ioctl_dbg_trap_queue_snapshot_args = load(u);
    let entry_size = (s.entry_size as usize).min(size_of::<kfd_queue_snapshot_entry>());
    let emu = ctx.emu;
    let p = st.processes.get_mut(&target).ok_or(ESRCH)?;
    let mut out = Vec::new();
    let total = p.queues.len();
    for q in p.queues.values().take(s.num_queues as usize) {
        let e = kfd_queue_snapshot_entry {
            exception_status: q.exception_status,
            ring_base_address: q.ring_base,
            write_pointer_address: q.wptr_addr,
            read_pointer_address: q.rptr_addr,
            ctx_save_restore_address: q.ctx_addr,
            queue_id: q.qid,
            gpu_id: emu.topo.gpus[q.gpu].gpu_id,
            ring_size: q.ring_size,
            queue_type: q.kind.user_type(),
            ctx_save_restore_area_size: q.ctx_size,
            ..Default::default()
        };
        out.extend_from_slice(&bytes_of(&e)[..entry_size]);
    }
    client_mem::write(ctx.tgid, s.snapshot_buf_ptr, &out)?;
    for q in p.queues.values_mut() {
        q.exception_status &= !s.exception_mask;
    }
    s.num_queues = total as u32;
    s.entry_size = entry_size as u32;
    store(u, &s);
    Ok(0)
}

/// DBG_TRAP QUERY_DEBUG_EVENT (queue events only): the first queue with a pending
/// subscribed exception, else EAGAIN.
fn query_debug_event(emu: &Emu, st: &mut State, target: u32, u: &mut [u8]) -> KResult<i32> {
    let mut qe: kfd_ioctl_dbg_trap_query_debug_event_args = load(u);
    let p = st.processes.get_mut(&target).ok_or(ESRCH)?;
    let enabled = p.debug.map_or(0, |d| d.exception_enable);
    let clear = qe.exception_mask;
    for q in p.queues.values_mut() {
        if q.exception_status & enabled != 0 {
            qe.exception_mask = q.exception_status;
            qe.queue_id = q.qid;
            qe.gpu_id = emu.topo.gpus[q.gpu].gpu_id;
            q.exception_status &= !clear;
            store(u, &qe);
            return Ok(0);
        }
    }
    Err(EAGAIN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{EmuConfig, Topology};

    /// A DBG_TRAP argument shorter than its `pid`/`op` header (only the pid: op reads as 0,
    /// ENABLE) reaches the union's slice; it is refused, not a panic of the FUSE thread.
    #[test]
    fn a_short_argument_is_refused_not_sliced_past_its_end() {
        let config = EmuConfig::default();
        let topo = Topology::build(&config).unwrap();
        let emu = Emu::new(config, topo, std::path::PathBuf::from("/nonexistent"));
        let me = std::process::id();
        let mut effects = Effects::default();
        super::super::lifecycle::ensure(
            &emu,
            &mut emu.lock(),
            me,
            process::start_time(me),
            &mut effects,
        );
        let ctx = Ctx {
            emu: &emu,
            tid: me,
            tgid: me,
            out_len: 0,
            unique: 0,
            held: Default::default(),
            on_reader: false,
        };
        let mut short = me.to_ne_bytes().to_vec();
        let r = dbg_trap(&ctx, &mut short, &mut None, &mut effects);
        assert_eq!(r, Err(EINVAL));
    }
}
