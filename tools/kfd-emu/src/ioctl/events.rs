//! The event ioctls: CREATE_EVENT (with the thunk's event page), DESTROY_EVENT, SET_EVENT,
//! RESET_EVENT and WAIT_EVENTS; what events do is `crate::events`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fuser::ReplyIoctl;
use kfd_sys::{
    KFD_IOC_EVENT_SIGNAL, KFD_SIGNAL_EVENT_LIMIT, kfd_ioctl_create_event_args,
    kfd_ioctl_destroy_event_args, kfd_ioctl_wait_events_args,
};
use libc::{EINVAL, ENOMEM, ENOSPC, ESRCH};

use super::{Ctx, KResult, MAX_ARRAY, load, store};
use crate::abi::{u32_at, u64_at};
use crate::client_mem;
use crate::effects::Effects;
use crate::events::{
    EVENT_DATA_ID, EVENT_DATA_SIZE, answer_interrupted, begin_wait, destroy, gpu_signaled, set,
};
use crate::state::{Event, PendingWait, Process, SignalPage};

/// Slots of the page the kernel allocates itself when the caller passes no event page
/// ("oldest user mode expects 256 event slots").
const KERNEL_PAGE_SLOTS: u32 = 256;
/// First id of events that have no signal slot.
const FIRST_NONSIGNAL_ID: u32 = KFD_SIGNAL_EVENT_LIMIT;
/// `KFD_MMAP_TYPE_EVENTS` (2 << 62), the offset the kernel returns for signal events.
const MMAP_TYPE_EVENTS: u64 = 2 << 62;
/// `KFD_EVENT_TIMEOUT_INFINITE`.
const TIMEOUT_INFINITE: u32 = u32::MAX;

/// The BO named by `handle` as a signal page (`kfd_kmap_event_page`), its slots initialised
/// unsignalled. The slots are written before the state lock is taken (the page is usually a
/// render-node mapping whose writeback FUSE threads serve).
fn prepare_page(ctx: &Ctx<'_>, handle: u64) -> KResult<SignalPage> {
    let (gpu, id) = super::memory::split_handle(ctx, handle)?;
    let (va, size, backed, offset) = {
        let st = ctx.emu.lock();
        let p = st.processes.get(&ctx.tgid).ok_or(ESRCH)?;
        if p.events.page.is_some() {
            return Err(EINVAL);
        }
        let bo = p.devices[gpu].bos.get(&id).ok_or(EINVAL)?;
        (bo.va, bo.size, bo.backed, bo.mmap_offset)
    };
    let slots = u32::try_from(size / 8)
        .unwrap_or(u32::MAX)
        .min(KFD_SIGNAL_EVENT_LIMIT);
    let bytes = vec![0xffu8; slots as usize * 8];
    // The thunk maps the page at its GPU address; a page it has not mapped is written where
    // the render node keeps the BO's bytes.
    if client_mem::write(ctx.tgid, va, &bytes).is_err() && backed {
        ctx.emu.bos.write(offset, &bytes);
    }
    Ok(SignalPage { va, slots })
}

/// The lowest free id in `range`.
fn free_id(events: &BTreeMap<u32, Event>, range: std::ops::Range<u32>) -> Option<u32> {
    range.into_iter().find(|id| !events.contains_key(id))
}

/// AMDKFD_IOC_CREATE_EVENT.
pub(crate) fn create(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let mut a: kfd_ioctl_create_event_args = load(buf);
    let page = match a.event_page_offset {
        0 => None,
        handle => Some(prepare_page(ctx, handle)?),
    };
    let mut st = ctx.emu.lock();
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    if let Some(page) = page {
        if p.events.page.is_some() {
            return Err(EINVAL);
        }
        p.events.page = Some(page);
    }
    let id = if gpu_signaled(a.event_type) {
        let page = *p.events.page.get_or_insert(SignalPage {
            va: 0,
            slots: KERNEL_PAGE_SLOTS,
        });
        // Slot 0 is reserved, so a page of N slots holds N - 1 events.
        if p.events.signal_count + 1 >= page.slots {
            return Err(ENOSPC);
        }
        let id = free_id(&p.events.events, 1..page.slots).ok_or(ENOSPC)?;
        p.events.signal_count += 1;
        a.event_page_offset = MMAP_TYPE_EVENTS;
        a.event_slot_index = id;
        id
    } else {
        a.event_page_offset = 0;
        free_id(&p.events.events, FIRST_NONSIGNAL_ID..u32::MAX).ok_or(ENOMEM)?
    };
    p.events.events.insert(
        id,
        Event {
            kind: a.event_type,
            auto_reset: a.auto_reset != 0,
            signaled: false,
            age: 1,
        },
    );
    a.event_id = id;
    a.event_trigger_data = id;
    store(buf, &a);
    Ok(0)
}

/// The event id of DESTROY/SET/RESET_EVENT (same layout).
fn event_id(buf: &[u8]) -> u32 {
    load::<kfd_ioctl_destroy_event_args>(buf).event_id
}

/// AMDKFD_IOC_DESTROY_EVENT.
pub(crate) fn destroy_ioctl(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    let mut st = ctx.emu.lock();
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    if destroy(p, event_id(buf)) {
        Ok(0)
    } else {
        Err(EINVAL)
    }
}

/// The CPU may set and reset only plain signal events.
fn cpu_event(p: &mut Process, id: u32) -> KResult<&mut Event> {
    match p.events.events.get_mut(&id) {
        Some(ev) if ev.kind == KFD_IOC_EVENT_SIGNAL => Ok(ev),
        _ => Err(EINVAL),
    }
}

/// SET_EVENT (`set`) or RESET_EVENT of a plain signal event of the caller.
fn cpu_set_or_reset(ctx: &Ctx<'_>, buf: &[u8], set_it: bool) -> KResult<i32> {
    let id = event_id(buf);
    let mut st = ctx.emu.lock();
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    let ev = cpu_event(p, id)?;
    if set_it {
        set(p, id);
    } else {
        ev.signaled = false;
    }
    Ok(0)
}

/// AMDKFD_IOC_SET_EVENT.
pub(crate) fn set_ioctl(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    cpu_set_or_reset(ctx, buf, true)
}

/// AMDKFD_IOC_RESET_EVENT.
pub(crate) fn reset_ioctl(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    _: &mut Option<ReplyIoctl>,
    _: &mut Effects,
) -> KResult<i32> {
    cpu_set_or_reset(ctx, buf, false)
}

/// AMDKFD_IOC_WAIT_EVENTS: checks the events once and answers, or holds the reply until the
/// condition holds, an event is destroyed or the timeout passes (the CP thread expires it).
pub(crate) fn wait(
    ctx: &Ctx<'_>,
    buf: &mut [u8],
    reply: &mut Option<ReplyIoctl>,
    effects: &mut Effects,
) -> KResult<i32> {
    let a: kfd_ioctl_wait_events_args = load(buf);
    if a.num_events > MAX_ARRAY {
        return Err(ENOMEM);
    }
    let n = a.num_events as usize;
    let mut data = vec![0u8; n * EVENT_DATA_SIZE as usize];
    client_mem::read(ctx.tgid, a.events_ptr, &mut data)?;
    let entry = |i: usize| i * EVENT_DATA_SIZE as usize;
    let mut st = ctx.emu.lock();
    let interrupted = st.take_interrupt(ctx.unique);
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    let ids: Vec<u32> = (0..n)
        .map(|i| u32_at(&data, entry(i) + EVENT_DATA_ID as usize).unwrap_or(0))
        .collect();
    if ids.iter().any(|id| !p.events.events.contains_key(id)) {
        return Err(EINVAL);
    }
    let mut w_activated = Vec::with_capacity(n);
    let mut w_queued = Vec::with_capacity(n);
    let mut w_age = Vec::with_capacity(n);
    for (i, id) in ids.iter().enumerate() {
        let last_age = u64_at(&data, entry(i)).unwrap_or(0);
        let Some(ev) = p.events.events.get_mut(id) else {
            return Err(EINVAL);
        };
        // init_event_waiter: take the signal (auto-reset consumes it), or see that the age
        // moved since the caller last looked.
        let mut activated = ev.signaled;
        ev.signaled = ev.signaled && !ev.auto_reset;
        let age_enabled = ev.kind == KFD_IOC_EVENT_SIGNAL && last_age != 0;
        if age_enabled && ev.age != last_age {
            activated = true;
        }
        w_activated.push(activated);
        w_queued.push(!activated);
        w_age.push(age_enabled);
    }
    let deadline = match a.timeout {
        TIMEOUT_INFINITE => None,
        ms => Some(Instant::now() + Duration::from_millis(u64::from(ms.min(0x7fff_ffff)))),
    };
    tracing::trace!(
        tgid = ctx.tgid,
        ?ids,
        timeout = a.timeout,
        activated = ?w_activated,
        "WAIT_EVENTS"
    );
    let Some(held) = reply.take() else {
        return Err(EINVAL);
    };
    let w = PendingWait {
        unique: ctx.unique,
        tid: ctx.tid,
        ids,
        activated: w_activated,
        queued: w_queued,
        age_enabled: w_age,
        all: a.wait_for_all != 0,
        deadline,
        events_ptr: a.events_ptr,
        reply: held,
        buf: buf.to_vec(),
        out_len: ctx.out_len,
    };
    if let Some(w) = begin_wait(p, w) {
        if interrupted {
            // The caller got a signal before the wait could block.
            answer_interrupted(p, w);
            return Ok(0);
        }
        p.events.waits.push(w);
        if deadline.is_some() {
            effects.wake_cp = true;
        }
    }
    Ok(0)
}
