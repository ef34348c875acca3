//! The life of a process's KFD state: created at its first `open(dev/kfd)` (or when a debugger
//! enables it), destroyed at the last close or when the reaper sees the process gone — with its
//! debugging, queues, blocked waits and BOs.

use std::sync::Arc;
use std::time::Duration;

use crate::effects::Effects;
use crate::process;
use crate::state::{Emu, Process, State};

/// How often the reaper looks for vanished processes.
const REAP_PERIOD: Duration = Duration::from_millis(200);

/// The KFD state of `tgid` (started at `started`, from [`process::start_time`]), created if
/// missing (sysfs `proc/<pid>` appears). State left over from an earlier process
/// with the same pid is destroyed first.
pub(crate) fn ensure<'a>(
    emu: &Emu,
    state: &'a mut State,
    tgid: u32,
    started: Option<u64>,
    effects: &mut Effects,
) -> &'a mut Process {
    let stale = state
        .processes
        .get(&tgid)
        .is_some_and(|p| p.start_time.is_some() && started.is_some() && p.start_time != started);
    if stale {
        destroy(emu, state, tgid, effects);
    }
    let n_gpus = emu.topo.gpus.len();
    let pasid = &mut state.next_pasid;
    state.processes.entry(tgid).or_insert_with(|| {
        let p = Process::new(tgid, started, *pasid, n_gpus);
        *pasid = pasid.wrapping_add(1);
        tracing::debug!(tgid, "process created");
        p
    })
}

/// `open(dev/kfd)` by `tgid`.
pub(crate) fn open_kfd(emu: &Emu, tgid: u32) {
    let started = process::start_time(tgid);
    let mut effects = Effects::default();
    {
        let mut st = emu.lock();
        ensure(emu, &mut st, tgid, started, &mut effects).kfd_opens += 1;
    }
    effects.run(emu);
}

/// Last close of one `dev/kfd` handle of `tgid`.
pub(crate) fn release_kfd(emu: &Emu, tgid: u32) {
    let mut effects = Effects::default();
    {
        let mut st = emu.lock();
        let last = match st.processes.get_mut(&tgid) {
            Some(p) => {
                p.kfd_opens = p.kfd_opens.saturating_sub(1);
                p.kfd_opens == 0
            }
            None => false,
        };
        if last {
            destroy(emu, &mut st, tgid, &mut effects);
        }
    }
    effects.run(emu);
}

/// Tears down the KFD state of `tgid`: disables debugging it performs or undergoes
/// (resuming queues), destroys its queues (counted like DESTROY_QUEUE), frees its BOs.
pub(crate) fn destroy(emu: &Emu, state: &mut State, tgid: u32, effects: &mut Effects) {
    if !state.processes.contains_key(&tgid) {
        return;
    }
    let debuggees: Vec<u32> = state
        .processes
        .values()
        .filter(|p| p.debug.is_some_and(|d| d.debugger == Some(tgid)))
        .map(|p| p.tgid)
        .collect();
    for target in debuggees {
        super::detach::disable(emu, state, target, effects);
    }
    if state
        .processes
        .get(&tgid)
        .is_some_and(|p| p.debug.is_some())
    {
        super::detach::disable(emu, state, tgid, effects);
    }
    // Blocked destroyers of this process: their queues go now.
    let mut i = 0;
    while i < state.pending_destroys.len() {
        if state.pending_destroys[i].key.0 == tgid {
            let pd = state.pending_destroys.swap_remove(i);
            effects.replies.push((pd.reply, pd.buf, Err(libc::EINTR)));
        } else {
            i += 1;
        }
    }
    let qids: Vec<u32> = state
        .processes
        .get(&tgid)
        .map(|p| p.queues.keys().copied().collect())
        .unwrap_or_default();
    for qid in qids {
        super::queue::destroy_now(emu, state, (tgid, qid));
    }
    if let Some(mut p) = state.processes.remove(&tgid) {
        crate::events::drop_waits(&mut p);
        emu.kernels.forget(tgid);
        for d in &p.devices {
            for bo in d.bos.values() {
                if bo.backed {
                    emu.bos.remove(bo.mmap_offset);
                }
            }
        }
        tracing::debug!(tgid, "process destroyed");
    }
}

/// Every ~200 ms: destroys the state of processes that are gone and prunes the
/// tid cache.
pub(crate) fn reaper_thread(emu: Arc<Emu>) {
    loop {
        {
            let st = emu.lock();
            let st = emu
                .cp_wake
                .wait_timeout_while(st, REAP_PERIOD, |_| !emu.is_shutdown())
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
            drop(st);
        }
        if emu.is_shutdown() {
            return;
        }
        let procs: Vec<(u32, Option<u64>)> = emu
            .lock()
            .processes
            .values()
            .map(|p| (p.tgid, p.start_time))
            .collect();
        let gone: Vec<u32> = procs
            .into_iter()
            .filter(|(pid, started)| !process::is_alive(*pid, *started))
            .map(|(pid, _)| pid)
            .collect();
        if !gone.is_empty() {
            let mut effects = Effects::default();
            {
                let mut st = emu.lock();
                for tgid in gone {
                    destroy(&emu, &mut st, tgid, &mut effects);
                }
            }
            effects.run(&emu);
        }
        let tids: Vec<u32> = crate::locks::lock(&emu.tgids, "tgid cache")
            .keys()
            .copied()
            .collect();
        let dead: Vec<u32> = tids
            .into_iter()
            .filter(|t| !std::path::Path::new(&format!("/proc/{t}")).exists())
            .collect();
        if !dead.is_empty() {
            let mut cache = crate::locks::lock(&emu.tgids, "tgid cache");
            for t in dead {
                cache.remove(&t);
            }
        }
    }
}
