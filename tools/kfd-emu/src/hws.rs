//! The hardware scheduler (HWS) model of each partition and the CP thread that
//! executes AQL packets.
//!
//! Model:
//! * The runlist of a partition is its active queues in creation order. The first
//!   `num_cp_queues` are resident; beyond that the partition is oversubscribed and the
//!   resident window rotates every `quantum_us`.
//! * Every runlist change (see `begin`/`commit`) counts `runlist_updates`; if the
//!   partition had an active queue just before, it also counts a device-wide preempt
//!   and stalls every queue of the partition for `preempt_cost_us`.
//! * Resident, active AQL queues progress concurrently; each runs its packets one at
//!   a time for the packet's modelled duration. Time earned before a preempt is kept
//!   ("banked"); a queue that goes inactive keeps its in-flight packet's remaining
//!   time frozen.
//! * The CP thread reads the write index and packets with `process_vm_readv` without
//!   the state lock, then re-checks the queue under the lock before completing packets
//!   (signal decrement and read-index store), so nothing is written for a queue after
//!   it was destroyed or deactivated.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::client_mem;
use crate::state::{Emu, Inflight, QueueKey, State};

/// AQL packet types (low byte of the 16-bit header).
const PKT_INVALID: u8 = 1;
const PKT_KERNEL_DISPATCH: u8 = 2;
/// AQL packet size in bytes.
const PKT_SIZE: u64 = 64;
/// Packets fetched per queue per CP poll.
const FETCH_MAX: u64 = 16;
/// CP poll period while a queue has work.
const POLL: Duration = Duration::from_micros(200);
/// Longest CP poll period while runnable queues are all idle (the period doubles from
/// `POLL` on every idle poll and drops back to `POLL` as soon as work is seen).
const IDLE_POLL_MAX: Duration = Duration::from_micros(1600);

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Number of active queues on a partition.
pub(crate) fn active_count(state: &State, part: usize) -> usize {
    state.queues_on(part).filter(|(_, q)| q.is_active()).count()
}

/// Credits run time earned up to `now` to every runnable queue of `part`.
fn settle(state: &mut State, part: usize, now: Instant) {
    let stall = state.partitions[part].stall_until;
    for key in state.keys_on(part) {
        if let Some(q) = state.queue_mut(key)
            && q.runnable()
        {
            // Only a queue with known pending work earns time; an idle queue earns none, so a
            // packet submitted later is never credited with time from before it arrived.
            if q.has_known_work() {
                let start = q.accounted_until.max(stall);
                q.banked_ns = q
                    .banked_ns
                    .saturating_add(nanos(now.saturating_duration_since(start)));
            }
            q.accounted_until = now;
        }
    }
}

/// Recomputes which active queues of `part` are resident.
fn recompute_residency(emu: &Emu, state: &mut State, part: usize, now: Instant) {
    let cap = emu.topo.gpus[part].num_cp_queues as usize;
    let mut runlist: Vec<(u64, QueueKey)> = state
        .queues_on(part)
        .filter(|(_, q)| q.is_active())
        .map(|(k, q)| (q.seq, k))
        .collect();
    runlist.sort_unstable();
    let n = runlist.len();
    let pstate = &mut state.partitions[part];
    if n <= cap {
        pstate.rotation = 0;
    } else {
        pstate.rotation %= n;
    }
    let start = pstate.rotation;
    let mut resident: HashMap<QueueKey, bool> = HashMap::new();
    for (i, (_, key)) in runlist.iter().enumerate() {
        let pos = (i + n - start) % n.max(1);
        resident.insert(*key, pos < cap);
    }
    for key in state.keys_on(part) {
        if let Some(q) = state.queue_mut(key) {
            let now_resident = resident.get(&key).copied().unwrap_or(false);
            if now_resident && !q.resident {
                q.accounted_until = now;
            }
            q.resident = now_resident;
            if !q.runnable() {
                q.banked_ns = 0;
                q.accounted_until = now;
            }
        }
    }
}

/// A runlist change in progress: which partitions, and whether each had a runlist
/// mapped (an active queue) before the change.
pub(crate) struct Change {
    parts: Vec<(usize, bool)>,
    now: Instant,
}

/// Starts a runlist change on `parts`: settles their queues' run time.
pub(crate) fn begin(state: &mut State, parts: &[usize]) -> Change {
    let now = Instant::now();
    let mut list: Vec<(usize, bool)> = Vec::new();
    for &p in parts {
        if list.iter().any(|(q, _)| *q == p) {
            continue;
        }
        settle(state, p, now);
        list.push((p, active_count(state, p) > 0));
    }
    Change { parts: list, now }
}

/// Finishes a runlist change: counts the runlist update and (if a runlist was mapped)
/// the device-wide preempt, stalls the partition, recomputes residency.
pub(crate) fn commit(emu: &Emu, state: &mut State, change: Change) {
    let now = change.now;
    let cost = Duration::from_micros(emu.config.preempt_cost_us);
    for (part, had_active) in change.parts {
        {
            let ps = &mut state.partitions[part];
            ps.runlist_updates += 1;
            if had_active {
                ps.preempts += 1;
                ps.stall_until = ps.stall_until.max(now + cost);
            }
        }
        let cap = emu.topo.gpus[part].num_cp_queues as usize;
        if active_count(state, part) > cap && !had_active {
            state.partitions[part].last_rotation = now;
        }
        recompute_residency(emu, state, part, now);
    }
    emu.cp_wake.notify_all();
}

/// Records, when a queue goes inactive, whether a dispatch was in flight (its waves
/// would be CWSR-saved).
pub(crate) fn note_deactivation(state: &mut State, key: QueueKey) {
    if let Some(q) = state.queue_mut(key) {
        q.saved_waves = q.inflight.is_some_and(|i| i.dispatch && i.remaining_ns > 0);
    }
}

/// Clears the saved-waves flag when a queue becomes active again (waves restored).
pub(crate) fn note_activation(state: &mut State, key: QueueKey) {
    if let Some(q) = state.queue_mut(key) {
        q.saved_waves = false;
    }
}

/// One queue the CP polls this round.
struct Job {
    key: QueueKey,
    wptr_addr: u64,
    rptr_addr: u64,
    ring_base: u64,
    slots: u64,
    next_fetch: u64,
}

/// What the CP read for a job without the lock.
struct Fetched {
    key: QueueKey,
    wptr: Result<u64, i32>,
    packets: Vec<(u64, [u8; 64])>,
}

fn rotate_partitions(emu: &Emu, state: &mut State, now: Instant) -> bool {
    let quantum = Duration::from_micros(emu.config.quantum_us.max(1));
    let mut oversubscribed = false;
    for part in 0..state.partitions.len() {
        let cap = emu.topo.gpus[part].num_cp_queues as usize;
        let n = active_count(state, part);
        if n <= cap {
            continue;
        }
        oversubscribed = true;
        if now.saturating_duration_since(state.partitions[part].last_rotation) >= quantum {
            settle(state, part, now);
            let ps = &mut state.partitions[part];
            ps.rotation = (ps.rotation + cap) % n;
            ps.last_rotation = now;
            recompute_residency(emu, state, part, now);
        }
    }
    oversubscribed
}

fn collect_jobs(state: &State) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (tgid, p) in &state.processes {
        for (qid, q) in &p.queues {
            if !q.runnable() {
                continue;
            }
            jobs.push(Job {
                key: (*tgid, *qid),
                wptr_addr: q.wptr_addr,
                rptr_addr: q.rptr_addr,
                ring_base: q.ring_base,
                slots: (u64::from(q.ring_size) / PKT_SIZE).max(1),
                next_fetch: q.inflight.map_or(q.read_index, |i| i.index + 1),
            });
        }
    }
    jobs
}

fn header_type(p: &[u8; 64]) -> u8 {
    p[0]
}

fn packet_u64(p: &[u8; 64], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&p[at..at + 8]);
    u64::from_ne_bytes(b)
}

/// Reads the write index and up to `FETCH_MAX` packets (stopping at an INVALID
/// header); also touches the pages the completion will write, so the writes done
/// later under the lock do not fault through FUSE.
fn fetch(job: &Job) -> Fetched {
    let pid = job.key.0;
    let wptr = client_mem::read_u64(pid, job.wptr_addr);
    let mut packets = Vec::new();
    if let Ok(w) = wptr {
        let _ = client_mem::read_u64(pid, job.rptr_addr);
        let end = w.min(job.next_fetch.saturating_add(FETCH_MAX));
        let mut idx = job.next_fetch;
        while idx < end {
            let addr = job.ring_base.wrapping_add((idx % job.slots) * PKT_SIZE);
            let mut p = [0u8; 64];
            if client_mem::read(pid, addr, &mut p).is_err() || header_type(&p) == PKT_INVALID {
                break;
            }
            let signal = packet_u64(&p, 56);
            if signal != 0 {
                let _ = client_mem::read_u64(pid, signal.wrapping_add(8));
            }
            packets.push((idx, p));
            idx += 1;
        }
    }
    Fetched {
        key: job.key,
        wptr,
        packets,
    }
}

/// Completes a packet: decrements its completion signal and publishes the read index.
fn complete(pid: u32, rptr_addr: u64, inflight: Inflight) -> Result<(), i32> {
    if inflight.signal != 0 {
        let at = inflight.signal.wrapping_add(8);
        if let Ok(v) = client_mem::read_u64(pid, at) {
            let _ = client_mem::write_u64(pid, at, (v as i64).wrapping_sub(1) as u64);
        }
    }
    client_mem::write_u64(pid, rptr_addr, inflight.index + 1)
}

/// Applies what was fetched to the queues that are still runnable. Returns whether
/// any of them still has work (a packet in flight or pending).
fn apply(emu: &Emu, state: &mut State, fetched: Vec<Fetched>, now: Instant) -> bool {
    let default_ns = emu.config.default_packet_ns;
    let mut busy = false;
    for f in fetched {
        let Some(stall) = state
            .queue(f.key)
            .map(|q| state.partitions[q.gpu].stall_until)
        else {
            continue;
        };
        let Some(q) = state.queue_mut(f.key) else {
            continue;
        };
        if !q.runnable() {
            continue;
        }
        let wptr = match f.wptr {
            Ok(w) => w,
            Err(_) => {
                q.cp_failed = true;
                continue;
            }
        };
        // Work that appeared on an idle queue starts when the CP sees it, not at the last poll:
        // the modelled duration is then a lower bound on submit-to-completion time.
        let start = if q.has_known_work() {
            q.accounted_until.max(stall)
        } else {
            now.max(stall)
        };
        q.write_index = wptr;
        let mut budget = q
            .banked_ns
            .saturating_add(nanos(now.saturating_duration_since(start)));
        q.banked_ns = 0;
        q.accounted_until = now;
        let packets: HashMap<u64, [u8; 64]> = f.packets.into_iter().collect();
        loop {
            let inflight = match q.inflight {
                Some(i) => i,
                None => {
                    let Some(p) = packets.get(&q.read_index) else {
                        // Nothing fetched for the next index: keep the time if work is
                        // known to be pending, else the queue idles.
                        if q.read_index < wptr {
                            q.banked_ns = budget;
                        }
                        break;
                    };
                    let duration = match header_type(p) {
                        PKT_KERNEL_DISPATCH => match packet_u64(p, 48) {
                            0 => default_ns,
                            ns => ns,
                        },
                        _ => 0,
                    };
                    let i = Inflight {
                        index: q.read_index,
                        remaining_ns: duration,
                        dispatch: header_type(p) == PKT_KERNEL_DISPATCH,
                        signal: packet_u64(p, 56),
                    };
                    q.inflight = Some(i);
                    i
                }
            };
            if inflight.remaining_ns > budget {
                if let Some(i) = q.inflight.as_mut() {
                    i.remaining_ns -= budget;
                }
                break;
            }
            budget -= inflight.remaining_ns;
            if complete(f.key.0, q.rptr_addr, inflight).is_err() {
                q.cp_failed = true;
                break;
            }
            q.inflight = None;
            q.read_index = inflight.index + 1;
            q.packets_done += 1;
        }
        busy |= !q.cp_failed && (q.inflight.is_some() || q.read_index < wptr);
    }
    busy
}

/// The CP thread: polls client memory every ~200 µs while a runnable AQL queue has
/// work (backing off to `IDLE_POLL_MAX` while they are all idle), sleeps on
/// `Emu::cp_wake` when no AQL queue is runnable.
pub(crate) fn cp_thread(emu: Arc<Emu>) {
    let mut idle_polls: u32 = 0;
    loop {
        let jobs = {
            let mut st = emu.lock();
            loop {
                if emu.is_shutdown() {
                    return;
                }
                let now = Instant::now();
                let oversubscribed = rotate_partitions(&emu, &mut st, now);
                let jobs = collect_jobs(&st);
                if !jobs.is_empty() {
                    break jobs;
                }
                let wait = if oversubscribed {
                    Duration::from_micros(emu.config.quantum_us.max(200))
                } else {
                    Duration::from_secs(1)
                };
                st = emu
                    .cp_wake
                    .wait_timeout(st, wait)
                    .expect("kfd-emu state mutex poisoned")
                    .0;
            }
        };
        let fetched: Vec<Fetched> = jobs.iter().map(fetch).collect();
        let mut st = emu.lock();
        if emu.is_shutdown() {
            return;
        }
        let busy = apply(&emu, &mut st, fetched, Instant::now());
        idle_polls = if busy {
            0
        } else {
            idle_polls.saturating_add(1)
        };
        let period = (POLL * 2u32.pow(idle_polls.min(3))).min(IDLE_POLL_MAX);
        let (st, waited) = emu
            .cp_wake
            .wait_timeout(st, period)
            .expect("kfd-emu state mutex poisoned");
        if !waited.timed_out() {
            // A runlist change: poll at full rate again.
            idle_polls = 0;
        }
        drop(st);
    }
}
