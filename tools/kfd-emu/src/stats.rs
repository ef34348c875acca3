//! The HWS model's observable state (`kfd-emu/stats.json` and `MountedEmu::stats`): a snapshot
//! of the emulator's state in the types of `kfd-emu-api`.

pub use kfd_emu_api::{PartitionStats, ProcessStats, QueueStats, Stats};

use crate::state::Emu;

/// Takes a consistent snapshot under the state lock.
pub(crate) fn snapshot(emu: &Emu) -> Stats {
    let st = emu.lock();
    let partitions = emu
        .topo
        .gpus
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let active = st.queues_on(i).filter(|(_, q)| q.is_active()).count() as u32;
            let resident = st
                .queues_on(i)
                .filter(|(k, _)| crate::hws::is_resident(&st, i, *k))
                .count() as u32;
            let m = st.partitions[i].model.stats();
            PartitionStats {
                node: g.node,
                gpu_id: g.gpu_id,
                num_xcc: g.num_xcc,
                num_cp_queues: g.num_cp_queues,
                active_queues: active,
                resident_queues: resident,
                oversubscribed: active > g.num_cp_queues,
                preempts: m.device_preempts,
                runlist_updates: m.runlist_updates,
                rotations: m.rotations,
                waves_saved: m.waves_saved,
                waves_restored: m.waves_restored,
                workgroup_events: m.wg_events,
                resets: st.partitions[i].resets,
            }
        })
        .collect();
    let mut queues = Vec::new();
    let mut processes = Vec::new();
    for (pid, p) in &st.processes {
        for q in p.queues.values() {
            let model_q = st.partitions[q.gpu]
                .model
                .queue_stats(crate::hws::model_key((*pid, q.qid)));
            queues.push(QueueStats {
                pid: *pid,
                queue_id: q.qid,
                gpu_id: emu.topo.gpus[q.gpu].gpu_id,
                queue_type: q.kind.stats_name().to_string(),
                priority: q.priority,
                percentage: q.percentage & 0xff,
                active: q.is_active(),
                suspended: q.suspended,
                resident: crate::hws::is_resident(&st, q.gpu, (*pid, q.qid)),
                cu_mask: q.cu_mask.clone(),
                packets_done: q.packets_done,
                busy_ns: model_q.map_or(0, |s| s.busy_ns),
                workgroups_saved: model_q.map_or(0, |s| s.wgs_saved),
                read_index: q.read_index,
                write_index: q.write_index,
                exception_status: q.exception_status,
                ring_base_address: q.ring_base,
                ring_size: q.ring_size,
                stopped: q.cp_failed,
                stopped_at_us: q.runnable_log.stopped_us.iter().copied().collect(),
                runnable_at_us: q.runnable_log.runnable_us.iter().copied().collect(),
            });
        }
        processes.push(ProcessStats {
            pid: *pid,
            runtime_enabled: p.runtime_enabled,
            debug_enabled: p.debug.is_some(),
            debugger_pid: p.debug.and_then(|d| d.debugger),
            queues: p.queues.len() as u32,
            events: p.events.events.len() as u32,
            blocked_waits: p.events.waits.len() as u32,
            blocked_destroys: st
                .pending_destroys
                .iter()
                .filter(|d| d.key.0 == *pid)
                .count() as u32,
            kfd_opens: p.kfd_opens,
            dispatches_by_kernel: p.kernel_dispatches.clone(),
        });
    }
    drop(st);
    Stats {
        partitions,
        queues,
        processes,
        dead_threads: crate::locks::lock(&emu.dead_threads, "dead threads").clone(),
        fuse_largest_message: emu
            .fuse_largest_message
            .load(std::sync::atomic::Ordering::Relaxed),
        fuse_reader_ioctls: emu.reader_ioctls.load(std::sync::atomic::Ordering::Relaxed),
        fuse_reader_ioctls_passed_on: emu
            .reader_ioctls_passed_on
            .load(std::sync::atomic::Ordering::Relaxed),
        fuse_fast_ioctls: emu.fast_ioctls.load(std::sync::atomic::Ordering::Relaxed),
        fuse_fast_ioctls_passed_on: emu
            .fast_ioctls_passed_on
            .load(std::sync::atomic::Ordering::Relaxed),
    }
}
