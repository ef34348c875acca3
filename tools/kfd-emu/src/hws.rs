//! The hardware scheduler (HWS) of each partition, as a driver of the partition model
//! (`gfx-model`): every ioctl that changes queues brackets its changes with [`begin`] and
//! [`commit`], which hands the differences to the model as one runlist update — a device-wide
//! preempt when a queue was mapped before it, exactly as amdkfd's `execute_queues_cpsch`.
//! Residency, oversubscription rotation, CWSR costs and the counters all live in the model.

use gfx_model::Edit;

use crate::config::GpuNode;
use crate::state::{Emu, Mirror, QueueKey, State};

/// The model's key of a queue: owner tgid and queue id packed.
pub(crate) fn model_key(key: QueueKey) -> gfx_model::QueueKey {
    (u64::from(key.0) << 32) | u64::from(key.1)
}

/// The queue of a model key.
pub(crate) fn queue_key(k: gfx_model::QueueKey) -> QueueKey {
    ((k >> 32) as u32, k as u32)
}

/// Model time now: nanoseconds since the emulator started.
pub(crate) fn model_now(emu: &Emu) -> u64 {
    u64::try_from(emu.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// Runs partition `part`'s model up to now and completes the packets that ended.
pub(crate) fn settle(emu: &Emu, st: &mut State, part: usize) {
    let now = model_now(emu);
    st.partitions[part].model.advance_to(now);
    complete_finished(st, part);
}

/// Completes, in client memory, the packets the model of `part` reported ended.
pub(crate) fn complete_finished(st: &mut State, part: usize) {
    for c in st.partitions[part].model.take_completions() {
        crate::completion::complete(st, queue_key(c.queue), c.tag, (c.start_ns, c.end_ns));
    }
}

/// Whether the queue is mapped to an HQD now (active and in the resident window).
pub(crate) fn is_resident(st: &State, part: usize, key: QueueKey) -> bool {
    st.partitions[part].model.is_resident(model_key(key))
}

/// Whether the queue holds context-saved work-groups (it was preempted with waves in flight).
pub(crate) fn has_saved_work(st: &State, part: usize, key: QueueKey) -> bool {
    st.partitions[part]
        .model
        .queue_load(model_key(key))
        .is_some_and(|(_, saved)| saved > 0)
}

/// A runlist change in progress on some partitions.
pub(crate) struct Change {
    parts: Vec<usize>,
    /// Grace period of the preempt (DBG_TRAP SUSPEND_QUEUES gives one), else the default.
    pub grace_ns: Option<u64>,
}

/// Starts a runlist change on `parts`: their models run up to now first, so the change
/// happens at the right model time.
pub(crate) fn begin(emu: &Emu, st: &mut State, parts: &[usize]) -> Change {
    let mut list: Vec<usize> = Vec::new();
    for &p in parts {
        if !list.contains(&p) {
            settle(emu, st, p);
            list.push(p);
        }
    }
    Change {
        parts: list,
        grace_ns: None,
    }
}

/// Finishes a runlist change: one runlist update per partition with every queue difference
/// since the last one, then wakes the CP.
pub(crate) fn commit(emu: &Emu, st: &mut State, change: Change) {
    for part in change.parts {
        settle(emu, st, part);
        let edits = diff(st, part);
        st.partitions[part]
            .model
            .update_runlist(&edits, change.grace_ns);
        complete_finished(st, part);
    }
    emu.cp_wake.notify_all();
}

/// The edits that bring the model's view of partition `part` to the emulator's queues.
fn diff(st: &mut State, part: usize) -> Vec<Edit> {
    // In creation order: the runlist (and so residency) follows it.
    let mut now: Vec<(u64, gfx_model::QueueKey, Mirror)> = st
        .queues_on(part)
        .map(|(key, q)| {
            (
                q.seq,
                model_key(key),
                Mirror {
                    active: q.is_active(),
                    priority: u8::try_from(q.priority.min(15)).unwrap_or(15),
                    cu_mask: q.cu_mask.clone(),
                },
            )
        })
        .collect();
    now.sort_by_key(|(seq, _, _)| *seq);
    let known = &mut st.partitions[part].known;
    let mut edits = Vec::new();
    let mut flips: Vec<(gfx_model::QueueKey, bool)> = Vec::new();
    let gone: Vec<gfx_model::QueueKey> = known
        .keys()
        .filter(|k| !now.iter().any(|(_, n, _)| n == *k))
        .copied()
        .collect();
    for k in gone {
        known.remove(&k);
        edits.push(Edit::Remove(k));
    }
    for (_, k, m) in now {
        match known.get(&k) {
            None => {
                edits.push(Edit::Add {
                    queue: k,
                    priority: m.priority,
                    active: m.active,
                });
                if m.cu_mask.is_some() {
                    edits.push(Edit::SetCuMask(k, m.cu_mask.clone()));
                }
            }
            Some(old) => {
                if old.active != m.active {
                    edits.push(Edit::SetActive(k, m.active));
                    flips.push((k, m.active));
                }
                if old.priority != m.priority {
                    edits.push(Edit::SetPriority(k, m.priority));
                }
                if old.cu_mask != m.cu_mask {
                    edits.push(Edit::SetCuMask(k, m.cu_mask.clone()));
                }
            }
        }
        known.insert(k, m);
    }
    if !flips.is_empty() {
        let now = crate::runnable::monotonic_us();
        for (k, active) in flips {
            if let Some(q) = st.queue_mut(queue_key(k)) {
                q.runnable_log.note(active, now);
            }
        }
    }
    edits
}

/// A DBG_TRAP grace period (units of 1024 GPU clocks; the kernel's packer turns 0 into 1) in
/// nanoseconds at the node's compute clock (`max_engine_clk_fcompute`, MHz).
pub(crate) fn grace_ns(g: &GpuNode, grace_period: u32) -> u64 {
    let mhz = g
        .props
        .get("max_engine_clk_fcompute")
        .copied()
        .filter(|m| *m > 0)
        .unwrap_or(2100);
    u64::from(grace_period.max(1)) * 1024 * 1000 / mhz
}
