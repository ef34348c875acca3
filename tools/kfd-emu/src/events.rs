//! KFD events (the kernel's core of them; the ioctls are `ioctl::events`) as the kernel's `kfd_events.c` keeps them: signal events with a slot in the
//! process's signal page, set by the CPU (SET_EVENT) or by the CP's end-of-kernel interrupt;
//! auto-reset events consumed by one waiter; event ages (KFD 1.14) so a waiter that arrives
//! after the signal is not lost; and WAIT_EVENTS calls that block (their FUSE reply is held)
//! until their events signal, one of them is destroyed, or their timeout passes.
//!
//! Replies are sent while the state lock is held: a FUSE reply is one write to the FUSE
//! device and never waits for a client or for this lock.

use std::collections::BTreeMap;
use std::time::Instant;

use kfd_sys::{
    KFD_IOC_EVENT_DEBUG_EVENT, KFD_IOC_EVENT_SIGNAL, KFD_IOC_WAIT_RESULT_COMPLETE,
    KFD_IOC_WAIT_RESULT_FAIL, KFD_IOC_WAIT_RESULT_TIMEOUT, kfd_ioctl_wait_events_args,
};

use crate::abi::{load, store};
use crate::client_mem;
use crate::reply::{ERESTARTSYS, send_reply};
use crate::state::{Event, PendingWait, Process, State};

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

/// Ends a blocked wait whose caller got a signal, as `kfd_wait_on_events` does: `EINTR` with a
/// fatal signal pending; otherwise `ERESTARTSYS` with the remaining timeout written back and the
/// auto-reset events this waiter consumed set again (`free_waiters(..., undo_auto_reset)`).
/// The wait result is FAIL either way.
pub(crate) fn answer_interrupted(p: &mut Process, mut w: PendingWait) {
    let fatal = crate::process::fatal_signal_pending(w.tid);
    let mut a: kfd_ioctl_wait_events_args = load(&w.buf);
    a.wait_result = KFD_IOC_WAIT_RESULT_FAIL;
    if !fatal && let Some(deadline) = w.deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        a.timeout = u32::try_from(left.as_millis()).unwrap_or(u32::MAX - 1);
    }
    store(&mut w.buf, &a);
    tracing::debug!(tgid = p.tgid, tid = w.tid, fatal, "WAIT_EVENTS interrupted");
    let consumed: Vec<u32> = w
        .ids
        .iter()
        .zip(&w.activated)
        .filter(|(id, act)| **act && p.events.events.get(*id).is_some_and(|e| e.auto_reset))
        .map(|(id, _)| *id)
        .collect();
    let res = Err(if fatal { libc::EINTR } else { ERESTARTSYS });
    send_reply(w.reply, &w.buf[..w.out_len.min(w.buf.len())], res);
    if !fatal {
        for id in consumed {
            set(p, id);
        }
    }
}

/// Ends the blocked wait that is FUSE request `unique`, if one is held.
pub(crate) fn interrupt_wait(st: &mut State, unique: u64) -> bool {
    for p in st.processes.values_mut() {
        if let Some(i) = p.events.waits.iter().position(|w| w.unique == unique) {
            let w = p.events.waits.swap_remove(i);
            answer_interrupted(p, w);
            return true;
        }
    }
    false
}

/// The process is going: its blocked waits are answered with `EINTR` (the caller is exiting).
pub(crate) fn drop_waits(p: &mut Process) {
    for w in p.events.waits.drain(..) {
        send_reply(w.reply, &[], Err(libc::EINTR));
    }
}
