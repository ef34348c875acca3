//! KFD events as the kernel's `kfd_events.c` keeps them: signal events with a slot in the
//! process's signal page, set by the CPU (SET_EVENT) or by the CP's end-of-kernel interrupt;
//! auto-reset events consumed by one waiter; event ages (KFD 1.14) so a waiter that arrives
//! after the signal is not lost; and WAIT_EVENTS calls that block (their FUSE reply is held)
//! until their events signal, one of them is destroyed, or their timeout passes.
//!
//! Replies are sent while the state lock is held: a FUSE reply is one write to the FUSE
//! device and never waits for a client or for this lock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fuser::ReplyIoctl;
use kfd_sys::{
    KFD_IOC_EVENT_DEBUG_EVENT, KFD_IOC_EVENT_SIGNAL, KFD_IOC_WAIT_RESULT_COMPLETE,
    KFD_IOC_WAIT_RESULT_FAIL, KFD_IOC_WAIT_RESULT_TIMEOUT, KFD_SIGNAL_EVENT_LIMIT,
    kfd_ioctl_create_event_args, kfd_ioctl_destroy_event_args, kfd_ioctl_wait_events_args,
};
use libc::{EINVAL, ENOMEM, ENOSPC, ESRCH};

use super::{Ctx, KResult, MAX_ARRAY, load, send_reply, store};
use crate::client_mem;
use crate::state::{Effects, Event, PendingWait, Process, SignalPage, State};

/// Value of a signal slot that has not fired (`UNSIGNALED_EVENT_SLOT`).
pub(crate) const UNSIGNALED: u64 = u64::MAX;
/// Bytes of one `struct kfd_event_data` (48: a 32-byte union, the extension pointer, the id).
pub(crate) const EVENT_DATA_SIZE: u64 = size_of::<kfd_sys::kfd_event_data>() as u64;
/// Offset of `event_id` in `struct kfd_event_data`.
pub(crate) const EVENT_DATA_ID: u64 =
    std::mem::offset_of!(kfd_sys::kfd_event_data, event_id) as u64;

/// Whether the GPU can signal events of this type (its slot is in the signal page).
pub(crate) fn gpu_signaled(kind: u32) -> bool {
    kind == KFD_IOC_EVENT_SIGNAL || kind == KFD_IOC_EVENT_DEBUG_EVENT
}

/// The kernel's `set_event`: activates every queued waiter of `id`; the event stays signalled
/// unless it auto-resets and a waiter took the signal; the age advances.
pub(crate) fn set(p: &mut Process, id: u32) {
    let Some(ev) = p.events.events.get_mut(&id) else {
        return;
    };
    let mut woke = false;
    for w in &mut p.events.waits {
        for i in 0..w.ids.len() {
            if w.ids[i] == id && w.queued[i] {
                w.activated[i] = true;
                woke = true;
            }
        }
    }
    ev.signaled = !ev.auto_reset || !woke;
    ev.age = ev.age.wrapping_add(1);
    if ev.age == 0 {
        // Never back to the reserved ages 0 (no tracking) and 1 (new).
        ev.age = 2;
    }
    answer_ready(p);
}

/// What an end-of-kernel (CP) or end-of-copy (SDMA trap) interrupt does for event `id`, as
/// `kfd_signal_event_interrupt` does with a valid event id: the event is set, and its slot in
/// the signal page is to be acknowledged (rewritten as unsignalled): its address is returned,
/// for [`acknowledge`] once the state lock is released.
pub(crate) fn interrupt(p: &mut Process, id: u32) -> Option<(u32, u64)> {
    let kind = p.events.events.get(&id)?.kind;
    if !gpu_signaled(kind) {
        return None;
    }
    set(p, id);
    let page = p.events.page?;
    (id < page.slots && page.va != 0).then(|| (p.tgid, page.va.wrapping_add(u64::from(id) * 8)))
}

/// Writes the unsignalled value to the signal slots interrupts consumed (client memory: never
/// under the state lock).
pub(crate) fn acknowledge(slots: &[(u32, u64)]) {
    for (pid, addr) in slots {
        let _ = client_mem::write_u64(*pid, *addr, UNSIGNALED);
    }
}

/// `test_event_condition` of one waiter.
fn condition(w: &PendingWait) -> u32 {
    let n = w.activated.iter().filter(|a| **a).count();
    if (w.all && n == w.ids.len()) || (!w.all && n > 0) {
        KFD_IOC_WAIT_RESULT_COMPLETE
    } else {
        KFD_IOC_WAIT_RESULT_TIMEOUT
    }
}

/// Writes the signalled events' data back to the caller's array: the current age of every
/// activated signal event whose age the caller tracks (`copy_signaled_event_data`).
fn copy_out(tgid: u32, events: &BTreeMap<u32, Event>, w: &PendingWait) -> i32 {
    for (i, id) in w.ids.iter().enumerate() {
        if !(w.activated[i] && w.age_enabled[i]) {
            continue;
        }
        let Some(ev) = events.get(id) else {
            return libc::EINVAL;
        };
        let at = w.events_ptr.wrapping_add(i as u64 * EVENT_DATA_SIZE);
        if client_mem::write_u64(tgid, at, ev.age).is_err() {
            return libc::EFAULT;
        }
    }
    0
}

/// Finishes a wait: the result goes into the arguments and the held reply is sent.
fn finish(tgid: u32, events: &BTreeMap<u32, Event>, mut w: PendingWait, result: u32) {
    let mut err = 0;
    if result == KFD_IOC_WAIT_RESULT_COMPLETE {
        err = copy_out(tgid, events, &w);
    }
    let mut a: kfd_ioctl_wait_events_args = load(&w.buf);
    a.wait_result = if err != 0 {
        KFD_IOC_WAIT_RESULT_FAIL
    } else {
        result
    };
    store(&mut w.buf, &a);
    let res = if err != 0 { Err(err) } else { Ok(0) };
    send_reply(w.reply, &w.buf[..w.out_len.min(w.buf.len())], res);
}

/// Answers every blocked wait of `p` whose condition now holds.
fn answer_ready(p: &mut Process) {
    let mut i = 0;
    while i < p.events.waits.len() {
        let result = condition(&p.events.waits[i]);
        if result == KFD_IOC_WAIT_RESULT_COMPLETE {
            let w = p.events.waits.swap_remove(i);
            finish(p.tgid, &p.events.events, w, result);
        } else {
            i += 1;
        }
    }
}

/// A new wait: answered at once when its condition holds or it may not block
/// (`timeout == 0`), else held. Returns the wait when it must be held.
pub(crate) fn begin_wait(p: &mut Process, w: PendingWait) -> Option<PendingWait> {
    let result = condition(&w);
    if result == KFD_IOC_WAIT_RESULT_COMPLETE || w.deadline.is_some_and(|d| d <= Instant::now()) {
        finish(p.tgid, &p.events.events, w, result);
        return None;
    }
    Some(w)
}

/// The kernel's `destroy_event`: waiters of the event fail (`EIO`, wait result FAIL).
pub(crate) fn destroy(p: &mut Process, id: u32) -> bool {
    let Some(ev) = p.events.events.remove(&id) else {
        return false;
    };
    if gpu_signaled(ev.kind) {
        p.events.signal_count = p.events.signal_count.saturating_sub(1);
    }
    let mut i = 0;
    while i < p.events.waits.len() {
        if p.events.waits[i].ids.contains(&id) {
            let mut w = p.events.waits.swap_remove(i);
            let mut a: kfd_ioctl_wait_events_args = load(&w.buf);
            a.wait_result = KFD_IOC_WAIT_RESULT_FAIL;
            store(&mut w.buf, &a);
            send_reply(w.reply, &[], Err(libc::EIO));
        } else {
            i += 1;
        }
    }
    true
}

/// Answers the waits whose deadline passed (TIMEOUT) and returns the earliest deadline left.
pub(crate) fn expire(st: &mut State, now: Instant) -> Option<Instant> {
    let mut next: Option<Instant> = None;
    for p in st.processes.values_mut() {
        let mut i = 0;
        while i < p.events.waits.len() {
            match p.events.waits[i].deadline {
                Some(d) if d <= now => {
                    let w = p.events.waits.swap_remove(i);
                    finish(p.tgid, &p.events.events, w, KFD_IOC_WAIT_RESULT_TIMEOUT);
                }
                Some(d) => {
                    next = Some(next.map_or(d, |n| n.min(d)));
                    i += 1;
                }
                None => i += 1,
            }
        }
    }
    next
}

/// The process is going: its blocked waits are answered with `EINTR` (the caller is exiting).
pub(crate) fn drop_waits(p: &mut Process) {
    for w in p.events.waits.drain(..) {
        send_reply(w.reply, &[], Err(libc::EINTR));
    }
}

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
    let gpu = ctx
        .emu
        .topo
        .gpu_index((handle >> 32) as u32)
        .ok_or(EINVAL)?;
    let (va, size, backed, offset) = {
        let st = ctx.emu.lock();
        let p = st.processes.get(&ctx.tgid).ok_or(ESRCH)?;
        if p.events.page.is_some() {
            return Err(EINVAL);
        }
        let bo = p.devices[gpu].bos.get(&(handle as u32)).ok_or(EINVAL)?;
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
    let field = |i: usize, off: usize, len: usize| {
        let at = i * EVENT_DATA_SIZE as usize + off;
        let mut b = [0u8; 8];
        b[..len].copy_from_slice(&data[at..at + len]);
        u64::from_ne_bytes(b)
    };
    let mut st = ctx.emu.lock();
    let p = st.processes.get_mut(&ctx.tgid).ok_or(ESRCH)?;
    let ids: Vec<u32> = (0..n)
        .map(|i| field(i, EVENT_DATA_ID as usize, 4) as u32)
        .collect();
    if ids.iter().any(|id| !p.events.events.contains_key(id)) {
        return Err(EINVAL);
    }
    let mut w_activated = Vec::with_capacity(n);
    let mut w_queued = Vec::with_capacity(n);
    let mut w_age = Vec::with_capacity(n);
    for (i, id) in ids.iter().enumerate() {
        let last_age = field(i, 0, 8);
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
        p.events.waits.push(w);
        if deadline.is_some() {
            effects.wake_cp = true;
        }
    }
    Ok(0)
}
