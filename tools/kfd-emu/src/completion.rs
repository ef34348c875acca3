//! Completing packets: under the state lock a completed packet is counted and queued
//! ([`complete`]); its memory work — the copy a runtime kernel stands for, the completion
//! signal's decrement and interrupt, the read index — is done by the CP thread once the lock is
//! released ([`finish_completed`]).

use crate::blit;
use crate::client_mem;
use crate::events;
use crate::gpu_mem::Vm;
use crate::state::{Emu, Finished, Pending, QueueKey, State};

/// Byte offsets in `amd_signal_t` (ROCr `inc/amd_hsa_signal.h`): the value, the event mailbox
/// pointer, the event id, and the start and end timestamps the CP writes for a queue with
/// profiling enabled.
const SIGNAL_VALUE: u64 = 8;
const SIGNAL_MAILBOX: u64 = 0x10;
const SIGNAL_EVENT_ID: u64 = 0x18;
const SIGNAL_START_TS: u64 = 0x20;
const SIGNAL_END_TS: u64 = 0x28;
/// Bytes of an AQL packet.
const PACKET_SIZE: u64 = 64;
/// An AQL header of type `HSA_PACKET_TYPE_INVALID` (1, bits 0..7), no barrier or fences: what
/// ROCr fills a new ring with.
const HEADER_INVALID: u16 = 1;

/// Completes packet `index` of queue `key`: decrements its completion signal, counts it, and
/// publishes the read index (every packet before it completed). The one place a completion is
/// written to the client. `model_ns` is the packet's (start, end) in model time, which shares
/// the GPU counter's epoch: a profiling queue's timestamps are when the model ran the packet,
/// as the CP writes them when it starts and ends on the GPU, not when the CP thread got to it.
pub(crate) fn complete(st: &mut State, key: QueueKey, index: u64, model_ns: (u64, u64)) {
    let Some(q) = st.queue_mut(key) else {
        return;
    };
    let gpu = q.gpu;
    let slots = u64::from(q.ring_size) / PACKET_SIZE;
    let aql = q.kind == crate::state::QueueKind::ComputeAql;
    let header = (aql && slots > 0).then(|| {
        q.ring_base
            .wrapping_add((index % slots).wrapping_mul(PACKET_SIZE))
    });
    let Some(Pending {
        signal,
        effect,
        start_ts,
    }) = q.pending.remove(&index)
    else {
        return;
    };
    q.packets_done += 1;
    let frontier = q.pending.keys().next().copied().unwrap_or(q.fetch_index);
    let rptr = (frontier > q.read_index).then(|| {
        q.read_index = frontier;
        (q.rptr_addr, frontier)
    });
    let tick = 1_000_000_000 / crate::config::GPU_COUNTER_HZ;
    // A queue that turned profiling on after the packet was fetched gets none (as before).
    let timestamps = start_ts.map(|_| {
        let start = model_ns.0 / tick;
        (start, (model_ns.1 / tick).max(start + 1))
    });
    st.finished.push(Finished {
        key,
        gpu,
        effect,
        signal,
        timestamps,
        rptr,
        header,
    });
}

/// Does the memory work of completed packets, in completion order, without the state lock
/// (client memory may be render-node pages whose faults and writeback are served by FUSE
/// threads that may be waiting for that lock): the copy a runtime kernel stands for, the
/// completion signal's decrement, the read index; then, under the lock, the end-of-kernel
/// interrupts of interrupt signals (their mailbox is set) and the stops of queues whose memory
/// could not be written; then the acknowledgements of the interrupts' signal slots.
pub(crate) fn finish_completed(emu: &Emu) {
    let work = std::mem::take(&mut emu.lock().finished);
    if work.is_empty() {
        return;
    }
    let mut interrupts = Vec::new();
    let mut failed = Vec::new();
    for f in work {
        let pid = f.key.0;
        if let Some(e) = &f.effect {
            let vm = Vm {
                emu,
                tgid: pid,
                gpu: f.gpu,
            };
            if let Err(errno) = blit::perform(&vm, e) {
                tracing::warn!(
                    ?e,
                    errno,
                    "a runtime copy kernel's memory could not be reached"
                );
            }
        }
        if f.signal != 0 {
            if let Some((start, end)) = f.timestamps {
                // The CP writes the packet's timestamps (GPU counter ticks) before the signal's
                // value: the runtime reads them once the signal completes (ROCr's
                // hsa_amd_profiling_get_dispatch_time, HIP's event timing). The end is after the
                // start even when both fall in one counter tick.
                let _ = client_mem::write_u64(pid, f.signal.wrapping_add(SIGNAL_START_TS), start);
                let _ = client_mem::write_u64(pid, f.signal.wrapping_add(SIGNAL_END_TS), end);
            }
            if let Some(id) = complete_signal(pid, f.signal) {
                interrupts.push((pid, id));
            }
        }
        // The packet processor sets a consumed packet's header to INVALID before the read
        // index frees its slot: a producer reserves a slot (bumps the write index) before it
        // writes the packet, header last, so a slot of the ring's previous lap that still
        // looked valid would be run again, and the new packet never (its completion signal
        // never decremented: rocblas-bench's start-up, docs/real-rocm.md).
        if let Some(at) = f.header {
            let _ = client_mem::write(pid, at, &HEADER_INVALID.to_ne_bytes());
        }
        if let Some((addr, value)) = f.rptr
            && client_mem::write_u64(pid, addr, value).is_err()
        {
            failed.push(f.key);
        }
    }
    let mut acks = Vec::new();
    {
        let mut st = emu.lock();
        for key in failed {
            if let Some(q) = st.queue_mut(key) {
                q.cp_failed = true;
            }
        }
        for (pid, id) in interrupts {
            if let Some(p) = st.processes.get_mut(&pid)
                && let Some(slot) = events::interrupt(p, id)
            {
                acks.push(slot);
            }
        }
    }
    events::acknowledge(&acks);
}

/// Decrements a completion signal; for an interrupt signal (its event mailbox is set) writes
/// the event id to the mailbox and returns the id (the interrupt to raise).
///
/// Not atomic, unlike the hardware's decrement: client memory is reached only through
/// `process_vm_readv`/`writev`, which have no read-modify-write (docs/kfd-emulator.md, "What is
/// not modelled"). Decrements never race each other (this one CP thread does them all); a client
/// store between the read and the write is lost.
fn complete_signal(pid: u32, signal: u64) -> Option<u32> {
    let at = signal.wrapping_add(SIGNAL_VALUE);
    if let Ok(v) = client_mem::read_u64(pid, at) {
        let _ = client_mem::write_u64(pid, at, (v as i64).wrapping_sub(1) as u64);
    }
    let mailbox = client_mem::read_u64(pid, signal.wrapping_add(SIGNAL_MAILBOX)).ok()?;
    if mailbox == 0 {
        return None;
    }
    let id = client_mem::read_u32s(pid, signal.wrapping_add(SIGNAL_EVENT_ID), 1).ok()?[0];
    let _ = client_mem::write_u64(pid, mailbox, u64::from(id));
    Some(id)
}
