//! The SDMA engines: they consume the rings of SDMA user queues (queue types SDMA,
//! SDMA_XGMI and SDMA_BY_ENG_ID) in the packet format of SDMA 4.x (gfx9, the layout ROCr's
//! `BlitSdmaV4` writes) and really move bytes in client memory.
//!
//! * The ring's read and write pointers are 64-bit byte offsets that only grow (the ring
//!   position is the offset modulo the ring size); the engine publishes its read pointer at
//!   the queue's `read_pointer_address` after each batch.
//! * Packets: NOP, COPY_LINEAR (count = bytes - 1), WRITE_LINEAR, FENCE (32-bit write),
//!   TRAP (raises the end-of-copy interrupt for its 28-bit context, an event id),
//!   POLL_REGMEM (a memory poll stalls the queue until the condition holds; register polls
//!   such as the HDP flush complete at once), ATOMIC (ADD64, what ROCr uses to decrement a
//!   completion signal), CONST_FILL, TIMESTAMP and SRBM_WRITE (ignored).
//! * Any other packet stops the queue (as a hung engine would) and is logged.
//! * Copies take no model time: SDMA engines are not part of the partition model.
//!
//! Rings are read, packets executed and the read pointer published without the state lock;
//! what happened is applied under the lock afterwards (counters, stops, interrupts).

use crate::gpu_mem::Vm;
use crate::state::{Emu, QueueKey, State};

const OP_NOP: u32 = 0;
const OP_COPY: u32 = 1;
const OP_WRITE: u32 = 2;
const OP_FENCE: u32 = 5;
const OP_TRAP: u32 = 6;
const OP_POLL_REGMEM: u32 = 8;
const OP_ATOMIC: u32 = 10;
const OP_CONST_FILL: u32 = 11;
const OP_TIMESTAMP: u32 = 13;
const OP_SRBM_WRITE: u32 = 14;
const SUB_COPY_LINEAR: u32 = 0;
const ATOMIC_ADD64: u32 = 47;
/// Bytes of ring one batch reads at most.
const BATCH_BYTES: u64 = 64 << 10;

/// One SDMA queue the engine serves this round (read under the lock).
pub(crate) struct Job {
    key: QueueKey,
    gpu: usize,
    ring_base: u64,
    ring_size: u64,
    wptr_addr: u64,
    rptr_addr: u64,
    next: u64,
}

/// What one batch did.
pub(crate) struct Done {
    key: QueueKey,
    next: u64,
    packets: u64,
    traps: Vec<u32>,
    failed: bool,
}

/// The SDMA queues that may have work.
pub(crate) fn collect(st: &State) -> Vec<Job> {
    let mut jobs = Vec::new();
    for (tgid, p) in &st.processes {
        for (qid, q) in &p.queues {
            if q.kind.is_compute() || !q.is_active() || q.cp_failed {
                continue;
            }
            jobs.push(Job {
                key: (*tgid, *qid),
                gpu: q.gpu,
                ring_base: q.ring_base,
                ring_size: u64::from(q.ring_size).max(4),
                wptr_addr: q.wptr_addr,
                rptr_addr: q.rptr_addr,
                next: q.fetch_index,
            });
        }
    }
    jobs
}

/// The dwords of the ring between byte offsets `from` and `to` (wrapping at the ring's end).
fn read_ring(vm: &Vm<'_>, job: &Job, from: u64, to: u64) -> Result<Vec<u32>, i32> {
    let mut bytes = vec![0u8; (to - from) as usize];
    let mut done = 0u64;
    while done < to - from {
        let pos = (from + done) % job.ring_size;
        let n = (job.ring_size - pos).min(to - from - done);
        let out = &mut bytes[done as usize..(done + n) as usize];
        vm.read(job.ring_base + pos, out)?;
        done += n;
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn addr(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

/// Length in dwords of the packet starting with `d[0]`, `None` for an unknown packet.
fn packet_len(d: &[u32]) -> Option<usize> {
    let (op, sub) = (d[0] & 0xff, (d[0] >> 8) & 0xff);
    Some(match op {
        OP_NOP => 1 + ((d[0] >> 16) & 0x3fff) as usize,
        OP_COPY if sub == SUB_COPY_LINEAR => 7,
        OP_WRITE => 4 + (*d.get(3)? & 0xfffff) as usize + 1,
        OP_FENCE => 4,
        OP_TRAP => 2,
        OP_POLL_REGMEM => 6,
        OP_ATOMIC => 8,
        OP_CONST_FILL => 5,
        OP_TIMESTAMP | OP_SRBM_WRITE => 3,
        _ => return None,
    })
}

/// Whether a POLL_REGMEM condition holds: `func` compares `(mem & mask)` with `value`.
fn poll_holds(func: u32, masked: u32, value: u32) -> bool {
    match func {
        0 => true,
        1 => masked < value,
        2 => masked <= value,
        3 => masked == value,
        4 => masked != value,
        5 => masked >= value,
        6 => masked > value,
        _ => false,
    }
}

/// Executes one complete packet `d`. `Ok(false)` when it must be retried later (a poll whose
/// condition does not hold yet).
fn execute(vm: &Vm<'_>, d: &[u32], traps: &mut Vec<u32>) -> Result<bool, i32> {
    match d[0] & 0xff {
        OP_COPY => {
            let bytes = u64::from(d[1] & 0x3fff_ffff) + 1;
            vm.copy(addr(d[3], d[4]), addr(d[5], d[6]), bytes)?;
        }
        OP_WRITE => {
            let data: Vec<u8> = d[4..].iter().flat_map(|w| w.to_ne_bytes()).collect();
            vm.write(addr(d[1], d[2]), &data)?;
        }
        OP_FENCE => vm.write(addr(d[1], d[2]), &d[3].to_ne_bytes())?,
        OP_TRAP => traps.push(d[1] & 0x0fff_ffff),
        // A memory poll (bit 31); register polls (the HDP flush) complete at once.
        OP_POLL_REGMEM if d[0] >> 31 == 1 => {
            let mut b = [0u8; 4];
            vm.read(addr(d[1], d[2]), &mut b)?;
            let masked = u32::from_ne_bytes(b) & d[4];
            if !poll_holds((d[0] >> 28) & 7, masked, d[3]) {
                return Ok(false);
            }
        }
        OP_ATOMIC => {
            let op = d[0] >> 25;
            if op != ATOMIC_ADD64 {
                tracing::warn!(op, "SDMA atomic operation not modelled: queue stopped");
                return Err(libc::EINVAL);
            }
            let at = addr(d[1], d[2]);
            let mut b = [0u8; 8];
            vm.read(at, &mut b)?;
            let v = u64::from_ne_bytes(b).wrapping_add(addr(d[3], d[4]));
            vm.write(at, &v.to_ne_bytes())?;
        }
        OP_CONST_FILL => {
            let bytes = u64::from(d[4] & 0x3fff_ffff) + 1;
            let pattern = d[3].to_ne_bytes();
            // fillsize 2: the 32-bit data repeated; otherwise its low byte.
            let pattern: &[u8] = if d[0] >> 30 == 2 {
                &pattern
            } else {
                &pattern[..1]
            };
            vm.fill(addr(d[1], d[2]), bytes, pattern)?;
        }
        OP_TIMESTAMP if (d[0] >> 8) & 0xff != 0 => {
            let ticks = vm.emu.gpu_counter();
            vm.write(addr(d[1], d[2]), &ticks.to_ne_bytes())?;
        }
        _ => {}
    }
    Ok(true)
}

/// Runs the packets of one queue between its processed offset and its write pointer (at most
/// `BATCH_BYTES`), stopping at a poll that does not hold.
pub(crate) fn run(emu: &Emu, job: &Job) -> Done {
    let mut done = Done {
        key: job.key,
        next: job.next,
        packets: 0,
        traps: Vec::new(),
        failed: false,
    };
    let vm = Vm {
        emu,
        tgid: job.key.0,
        gpu: job.gpu,
    };
    let mut b = [0u8; 8];
    if vm.read(job.wptr_addr, &mut b).is_err() {
        done.failed = true;
        return done;
    }
    let wptr = u64::from_ne_bytes(b);
    if wptr <= job.next {
        return done;
    }
    let end = wptr.min(job.next + BATCH_BYTES.min(job.ring_size));
    let Ok(dw) = read_ring(&vm, job, job.next, end) else {
        done.failed = true;
        return done;
    };
    let mut i = 0usize;
    while i < dw.len() {
        let Some(len) = packet_len(&dw[i..]) else {
            tracing::warn!(header = dw[i], "SDMA packet not modelled: queue stopped");
            done.failed = true;
            break;
        };
        if i + len > dw.len() {
            // The rest of the packet is beyond this batch.
            break;
        }
        match execute(&vm, &dw[i..i + len], &mut done.traps) {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => {
                done.failed = true;
                break;
            }
        }
        i += len;
        done.packets += 1;
        done.next = job.next + (i as u64) * 4;
    }
    if done.next != job.next
        && crate::client_mem::write_u64(job.key.0, job.rptr_addr, done.next).is_err()
    {
        done.failed = true;
    }
    done
}

/// Applies what the batches did: counters, stopped queues, interrupts. Returns whether a queue
/// progressed, and the signal slots to acknowledge once the lock is released.
pub(crate) fn apply(st: &mut State, results: Vec<Done>) -> (bool, Vec<(u32, u64)>) {
    let mut progressed = false;
    let mut acks = Vec::new();
    for d in results {
        let Some(q) = st.queue_mut(d.key) else {
            continue;
        };
        if d.next != q.fetch_index {
            progressed = true;
            q.fetch_index = d.next;
            q.read_index = d.next;
            q.packets_done += d.packets;
        }
        if d.failed {
            q.cp_failed = true;
        }
        if let Some(p) = st.processes.get_mut(&d.key.0) {
            acks.extend(
                d.traps
                    .into_iter()
                    .filter_map(|id| crate::events::interrupt(p, id)),
            );
        }
    }
    (progressed, acks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_lengths_and_polls() {
        assert_eq!(packet_len(&[OP_COPY, 0, 0, 0, 0, 0, 0]), Some(7));
        assert_eq!(packet_len(&[OP_NOP | (3 << 16)]), Some(4));
        assert_eq!(packet_len(&[OP_WRITE, 0, 0, 1, 7, 8]), Some(6));
        assert_eq!(packet_len(&[OP_COPY | (4 << 8)]), None);
        assert_eq!(packet_len(&[0x3f]), None);
        assert!(poll_holds(3, 5, 5));
        assert!(!poll_holds(3, 4, 5));
        assert!(poll_holds(6, 1, 0));
        assert!(!poll_holds(7, 1, 0));
    }
}
