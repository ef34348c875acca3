//! The command processor: reads the AQL rings in client memory, hands each packet to its
//! partition's model at the time it is seen, and completes packets (completion signal, read
//! index) when the model says they ended.
//!
//! Doorbell writes land in a mapped page the emulator cannot observe, so the CP polls the
//! write indexes of active queues: every `POLL` while a queue has packets in flight, backing
//! off to `IDLE_POLL_MAX` while all are idle. Between polls it sleeps until the models' next
//! event, so completions are written when model time passes their end. With no active AQL
//! queue it sleeps until a runlist change wakes it.
//!
//! Client memory is read without the state lock; what was read is applied under the lock
//! after re-checking the queue, so nothing is written for a queue that was destroyed or
//! deactivated meanwhile.

use std::sync::Arc;
use std::time::Duration;

use gfx_model::Dispatch;

use crate::abi;
use crate::blit;
use crate::client_mem;
use crate::code_object::Kernel;
use crate::completion;
use crate::events;
use crate::gpu_mem::Vm;
use crate::hws;
use crate::sdma;
use crate::state::{Emu, KernelEffect, Pending, QueueKey, State};

/// AQL packet types (low byte of the 16-bit header).
const PKT_INVALID: u8 = 1;
const PKT_KERNEL_DISPATCH: u8 = 2;
/// AQL packet size in bytes.
const PKT_SIZE: u64 = 64;
/// Packets fetched per queue per poll.
const FETCH_MAX: u64 = 64;
/// Poll period while a queue has packets in flight.
const POLL: Duration = Duration::from_micros(200);
/// Longest poll period while every active queue is idle (doubles from `POLL` per idle poll).
const IDLE_POLL_MAX: Duration = Duration::from_micros(1600);
/// Longest sleep with no active queue (a runlist change wakes the CP earlier).
const IDLE_SLEEP: Duration = Duration::from_secs(1);

/// One queue the CP reads this round.
struct Job {
    key: QueueKey,
    gpu: usize,
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
    packets: Vec<FetchedPacket>,
    /// GPU counter at the fetch when the queue has profiling enabled.
    profiling_ts: Option<u64>,
}

/// `amd_queue_t.queue_properties` relative to `read_dispatch_id`, the read pointer the runtime
/// gives CREATE_QUEUE (byte 180 and 128 of ROCr's `inc/amd_hsa_queue.h`), and its
/// `AMD_QUEUE_PROPERTIES_ENABLE_PROFILING` bit: with it set the CP writes every packet's start
/// and end timestamps to its completion signal.
const QUEUE_PROPERTIES_FROM_RPTR: u64 = 180 - 128;
const QUEUE_PROPERTIES_ENABLE_PROFILING: u32 = 1 << 3;

/// One packet read from a ring, with its kernel when the dispatch's code object was readable.
struct FetchedPacket {
    index: u64,
    bytes: [u8; 64],
    kernel: Option<Arc<Kernel>>,
    effect: Option<KernelEffect>,
    /// The work-group time one of its arguments set (`kernel_wg_time_by_arg`).
    arg_wg_ns: Option<u64>,
}

fn collect_jobs(state: &State) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (tgid, p) in &state.processes {
        for (qid, q) in &p.queues {
            if !q.fetchable() {
                continue;
            }
            jobs.push(Job {
                key: (*tgid, *qid),
                gpu: q.gpu,
                wptr_addr: q.wptr_addr,
                rptr_addr: q.rptr_addr,
                ring_base: q.ring_base,
                slots: (u64::from(q.ring_size) / PKT_SIZE).max(1),
                next_fetch: q.fetch_index,
            });
        }
    }
    jobs
}

// Fields of a 64-byte AQL packet (offsets are constants inside it).
fn packet_u16(p: &[u8; 64], at: usize) -> u16 {
    abi::u16_at(p, at).unwrap_or(0)
}

fn packet_u32(p: &[u8; 64], at: usize) -> u32 {
    abi::u32_at(p, at).unwrap_or(0)
}

fn packet_u64(p: &[u8; 64], at: usize) -> u64 {
    abi::u64_at(p, at).unwrap_or(0)
}

/// The model's view of an AQL packet: a kernel dispatch's grid, work-group size and
/// per-work-group time (`reserved2`, 0 = the configured default); anything else runs no
/// work-groups. The header's barrier bit carries over.
fn to_dispatch(emu: &Emu, index: u64, fp: &FetchedPacket) -> Dispatch {
    let (p, kernel) = (&fp.bytes, fp.kernel.as_deref());
    let header = packet_u16(p, 0);
    if (header & 0xff) as u8 != PKT_KERNEL_DISPATCH {
        return Dispatch::empty(index, header & gfx_model::AQL_BARRIER_BIT != 0);
    }
    // A real code object's packet carries no time (reserved2 is 0): use the kernel's time from
    // the configuration when it is listed, else the time its argument set.
    let mut wg_ns = packet_u64(p, 48);
    if wg_ns == 0 {
        if let Some(ns) = kernel.and_then(|k| emu.config.kernel_wg_ns.get(&k.name)) {
            wg_ns = *ns;
        } else if let Some(ns) = fp.arg_wg_ns {
            wg_ns = ns;
        }
    }
    Dispatch::from_aql(
        index,
        header,
        [packet_u32(p, 12), packet_u32(p, 16), packet_u32(p, 20)],
        [packet_u16(p, 4), packet_u16(p, 6), packet_u16(p, 8)],
        wg_ns,
    )
}

/// Reads the write index and up to `FETCH_MAX` packets (stopping at an INVALID header); also
/// touches the pages the completion will write, so the writes done later under the lock do
/// not fault through FUSE.
fn fetch(emu: &Emu, job: &Job) -> Fetched {
    let pid = job.key.0;
    let wptr = client_mem::read_u64(pid, job.wptr_addr);
    let mut packets = Vec::new();
    let mut profiling_ts = None;
    if let Ok(w) = wptr {
        let _ = client_mem::read_u64(pid, job.rptr_addr);
        let props = client_mem::read_u32s(
            pid,
            job.rptr_addr.wrapping_add(QUEUE_PROPERTIES_FROM_RPTR),
            1,
        );
        if props.is_ok_and(|v| v[0] & QUEUE_PROPERTIES_ENABLE_PROFILING != 0) {
            profiling_ts = Some(emu.gpu_counter());
        }
        let end = w.min(job.next_fetch.saturating_add(FETCH_MAX));
        let mut idx = job.next_fetch;
        while idx < end {
            let addr = job.ring_base.wrapping_add((idx % job.slots) * PKT_SIZE);
            let mut p = [0u8; 64];
            if client_mem::read(pid, addr, &mut p).is_err() || p[0] == PKT_INVALID {
                break;
            }
            let signal = packet_u64(&p, 56);
            if signal != 0 {
                let _ = client_mem::read_u64(pid, signal.wrapping_add(8));
            }
            let (kernel, effect, arg_wg_ns) = if p[0] == PKT_KERNEL_DISPATCH {
                identify(emu, job, &p)
            } else {
                (None, None, None)
            };
            packets.push(FetchedPacket {
                index: idx,
                bytes: p,
                kernel,
                effect,
                arg_wg_ns,
            });
            idx += 1;
        }
    }
    Fetched {
        key: job.key,
        wptr,
        packets,
        profiling_ts,
    }
}

/// What [`identify`] found: the kernel, its effect on memory, the work-group time its
/// argument set.
type Identified = (Option<Arc<Kernel>>, Option<KernelEffect>, Option<u64>);

/// The kernel a dispatch runs (from its loaded code object), what it does to memory when it is
/// one of the runtime's copy kernels, and its work-group time when the configuration models it
/// by an argument (`kernel_wg_time_by_arg`).
fn identify(emu: &Emu, job: &Job, p: &[u8; 64]) -> Identified {
    let vm = Vm {
        emu,
        tgid: job.key.0,
        gpu: job.gpu,
    };
    let Some(kernel) = emu.kernels.lookup(&vm, packet_u64(p, 32)) else {
        // Not in an ELF code object: perhaps one of ROCr's own blit kernels.
        let mut kernarg = [0u8; blit::ROCR_KERNARG_LEN];
        let effect = vm
            .read(packet_u64(p, 40), &mut kernarg)
            .is_ok()
            .then(|| blit::rocr_effect(&kernarg, packet_u32(p, 12), packet_u16(p, 4)))
            .flatten();
        tracing::debug!(
            kernel_object = packet_u64(p, 32),
            grid = packet_u32(p, 12),
            wg = packet_u16(p, 4),
            ?effect,
            "dispatch of a kernel outside an ELF code object"
        );
        return (None, effect, None);
    };
    let arg_wg_ns = emu
        .config
        .kernel_wg_time_by_arg
        .get(&kernel.name)
        .and_then(|a| {
            let mut v = vec![0u8; a.size.clamp(1, 8) as usize];
            let at = packet_u64(p, 40).wrapping_add(u64::from(a.offset));
            vm.read(at, &mut v).is_ok().then(|| a.wg_ns(&v))
        });
    let len = blit::kernarg_len(&kernel);
    let mut kernarg = vec![0u8; len];
    let effect = if len > 0 && vm.read(packet_u64(p, 40), &mut kernarg).is_ok() {
        blit::effect(&kernel, &kernarg)
    } else {
        None
    };
    (Some(kernel), effect, arg_wg_ns)
}

/// Hands what was fetched to the models (at the current model time) for queues that are still
/// active. Returns whether any new packet was seen.
fn apply(emu: &Emu, state: &mut State, fetched: Vec<Fetched>) -> bool {
    let mut seen = false;
    for f in fetched {
        let Some(q) = state.queue_mut(f.key) else {
            continue;
        };
        if !q.fetchable() {
            continue;
        }
        let wptr = match f.wptr {
            Ok(w) => w,
            Err(_) => {
                q.cp_failed = true;
                continue;
            }
        };
        q.write_index = wptr;
        let gpu = q.gpu;
        let mut new = Vec::new();
        let mut names = Vec::new();
        for fp in f.packets {
            if fp.index != q.fetch_index {
                continue;
            }
            if let Some(k) = &fp.kernel {
                names.push(k.name.clone());
            }
            let dispatch = to_dispatch(emu, fp.index, &fp);
            q.pending.insert(
                fp.index,
                Pending {
                    signal: packet_u64(&fp.bytes, 56),
                    effect: fp.effect,
                    start_ts: f.profiling_ts,
                },
            );
            q.fetch_index += 1;
            new.push(dispatch);
        }
        if new.is_empty() {
            continue;
        }
        seen = true;
        if let Some(p) = state.processes.get_mut(&f.key.0) {
            for name in names {
                *p.kernel_dispatches.entry(name).or_insert(0) += 1;
            }
        }
        hws::settle(emu, state, gpu);
        let model = &mut state.partitions[gpu].model;
        for d in new {
            model.submit(hws::model_key(f.key), d);
        }
        hws::complete_finished(state, gpu);
    }
    seen
}

fn settle_all(emu: &Emu, st: &mut State) {
    for part in 0..st.partitions.len() {
        hws::settle(emu, st, part);
    }
}

/// Time until the earliest model event of any partition.
fn until_next_event(emu: &Emu, st: &State) -> Option<Duration> {
    let now = hws::model_now(emu);
    st.partitions
        .iter()
        .filter_map(|p| p.model.next_event())
        .min()
        .map(|t| Duration::from_nanos(t.saturating_sub(now)))
}

/// Answers the WAIT_EVENTS calls whose timeout passed; time until the next one expires.
fn until_deadline(st: &mut State) -> Duration {
    let now = std::time::Instant::now();
    events::expire(st, now).map_or(IDLE_SLEEP, |d| d.saturating_duration_since(now))
}

fn has_in_flight(st: &State) -> bool {
    st.processes
        .values()
        .flat_map(|p| p.queues.values())
        .any(|q| q.fetchable() && !q.pending.is_empty())
}

/// The CP thread (see the module docs for its timing).
pub(crate) fn cp_thread(emu: Arc<Emu>) {
    let mut idle_polls: u32 = 0;
    loop {
        // Completions found by anyone (this thread, or an ioctl's runlist change) get their
        // memory work done here, without the lock.
        completion::finish_completed(&emu);
        let (jobs, sdma_jobs) = {
            let mut st = emu.lock();
            loop {
                if emu.is_shutdown() {
                    return;
                }
                settle_all(&emu, &mut st);
                if !st.finished.is_empty() {
                    break (Vec::new(), Vec::new());
                }
                let deadline = until_deadline(&mut st);
                let jobs = collect_jobs(&st);
                let sdma_jobs = sdma::collect(&st);
                if !jobs.is_empty() || !sdma_jobs.is_empty() {
                    break (jobs, sdma_jobs);
                }
                let wait = until_next_event(&emu, &st)
                    .map_or(IDLE_SLEEP, |d| d.min(IDLE_SLEEP))
                    .min(deadline);
                st = emu.wait_cp(st, wait).0;
            }
        };
        if jobs.is_empty() && sdma_jobs.is_empty() {
            continue;
        }
        let fetched: Vec<Fetched> = jobs.iter().map(|j| fetch(&emu, j)).collect();
        let copied: Vec<sdma::Done> = sdma_jobs.iter().map(|j| sdma::run(&emu, j)).collect();
        let mut st = emu.lock();
        if emu.is_shutdown() {
            return;
        }
        settle_all(&emu, &mut st);
        let seen = apply(&emu, &mut st, fetched);
        let (copying, acks) = sdma::apply(&mut st, copied);
        idle_polls = if seen || copying || has_in_flight(&st) {
            0
        } else {
            idle_polls.saturating_add(1)
        };
        let poll = (POLL * 2u32.pow(idle_polls.min(3))).min(IDLE_POLL_MAX);
        let mut wait = until_next_event(&emu, &st)
            .map_or(poll, |d| d.min(poll))
            .min(until_deadline(&mut st));
        if !st.finished.is_empty() || !acks.is_empty() {
            wait = Duration::ZERO;
        }
        let woken = if wait.is_zero() {
            drop(st);
            false
        } else {
            let (guard, woken) = emu.wait_cp(st, wait);
            drop(guard);
            woken
        };
        if woken {
            // A runlist change: poll at full rate again.
            idle_polls = 0;
        }
        events::acknowledge(&acks);
    }
}
