//! Direct edges (`[agent] direct_edges`, docs/agent.md "Direct edges"): the agent hands out the
//! edge boards (`crate::proto::board`) and stays their authority.
//!
//! * **Writers**: a process whose busy edges are on (its class preempts others) gets its own
//!   board and a writable descriptor ([`AgentMsg::BoardWriter`]); its board is watched once it
//!   sealed it (`ShimMsg::BoardSealed`, checked by the server). It keeps the board until it goes,
//!   its class preempts nobody any more, or it is caught forging (its slot busy for long while
//!   it reports nothing busy: [`Out::CheckSlot`]). When it goes, or its busy reports go stale
//!   (stopped while busy), the agent clears its slot and tells the watchers to look again.
//! * **Watchers**: after each full decision, a process whose class is preempted at level 2 or 3
//!   watches, read-only, the board of each writer of a class that preempts it on its
//!   partitions ([`AgentMsg::Watch`], with the policy's release rule
//!   and minimum interval) — unless the policy would not preempt it on an edge now (a
//!   starvation or residency guard, a manual preemption, a failed level): then it is told to
//!   stop ([`AgentMsg::Unwatch`]). The same at level 3; level 1 keeps the agent's commands.
//! * **The agent's view**: a watcher reports what it applied ([`ShimMsg::SelfLevel`]); the
//!   reconcile step sends no preempt a watch is about to apply (unless none came within
//!   [`SELF_GRACE`]) and no release of a level a watch applied ([`self_handles`]).
//!
//! [`ShimMsg::SelfLevel`]: crate::proto::ShimMsg::SelfLevel

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::command::Command;
use super::process::Proc;
use super::why::Why;
use super::{NodeState, Out};
use crate::ids::{GpuId, Pid};
use crate::policy::{Reason, Release, Run, preempt_cost};
use crate::proto::control::Control;
use crate::proto::{AgentMsg, Level, WatchRelease};

/// How long the agent waits for a watch's own preempt, when every busy process that preempts
/// the watcher writes a slot it watches, before it sends the preempt itself (the watch thread
/// failed or is starved). An edge the watch cannot see (a writer without a slot, or not yet in
/// its list) gets the agent's preempt at once. Not a measured number: a report later than this
/// on a loaded 2-vCPU host (scheduling delays of 10-20 ms seen under a parallel build) is taken
/// as lost; half of the stale-report bound (`crate::proto::BUSY_STALE`), so a lost watch costs
/// less than a stopped writer does.
pub(super) const SELF_GRACE: Duration = Duration::from_millis(50);

/// Whether a watch applies `level` (levels 2 and 3; level 1 keeps the agent's commands).
fn watched(level: Level) -> bool {
    matches!(level, Level::Deactivate | Level::Suspend)
}

/// The level `p`'s watches apply (all of them its class's).
fn watch_level(p: &Proc) -> Option<Level> {
    p.watches.values().find_map(|m| match m {
        AgentMsg::Watch { level, .. } => Some(*level),
        _ => None,
    })
}

/// The boards: one per writer, numbered in order (never reused while the agent runs), each
/// with its writer, the class it writes for, and whether the writer sealed it (only a sealed
/// board is watched: `crate::agent::board`).
#[derive(Debug, Default)]
pub(super) struct Direct {
    next: u32,
    boards: BTreeMap<u32, Board>,
    /// Writers whose slot was cleared because their reports went stale.
    stale_cleared: BTreeSet<Pid>,
    /// A slot said busy while its writer was believed idle: look at it again then.
    pub(super) revisit: Option<Instant>,
    /// Processes given watches by the last `direct_watches` (an upper bound: one that left
    /// since still counts).
    pub(super) watchers: usize,
}

/// One writer's board.
#[derive(Debug)]
struct Board {
    class: String,
    sealed: bool,
}

/// Whether the reconcile step leaves `p`'s run state to its watch: `Some(retry)` when it
/// sends nothing (decide again at `retry`, when the grace for the watch's own preempt ends),
/// `None` when it goes on as without direct edges.
pub(super) fn self_handles(
    p: &mut Proc,
    want: Run,
    why: &Why,
    now: Instant,
) -> Option<Option<Instant>> {
    match (p.applied, want) {
        (Run::Running, Run::Preempted(l)) if Some(l) == watch_level(p) => {
            match why {
                Why::Policy(Reason::HigherClassBusy(_)) if p.watch_covers => {
                    let since = *p.awaiting_self.get_or_insert(now);
                    if now < since + SELF_GRACE {
                        return Some(Some(since + SELF_GRACE));
                    }
                    // The watch did not apply it: the agent does.
                    p.awaiting_self = None;
                    p.warn(format!(
                        "its watch of the edge board did not deactivate it within {} ms; the agent did",
                        SELF_GRACE.as_millis()
                    ));
                    None
                }
                // Its watch released it by the release rule: the agent's own hold is the same
                // rule a little later, and does not preempt it again for it.
                Why::Policy(Reason::Hysteresis(_)) => Some(None),
                _ => None,
            }
        }
        // Its watch undoes what it applied (by the release rule, or when told to stop).
        (Run::Preempted(l), Run::Running) if watched(l) && p.self_applied => Some(None),
        _ => {
            if p.awaiting_self.is_some() {
                p.awaiting_self = None;
            }
            None
        }
    }
}

impl NodeState {
    /// Marks each watcher whose watches see every busy process that preempts it
    /// ([`Proc::watch_covers`]), before its reconcile step.
    pub(super) fn direct_cover(&mut self) {
        // Only a process with watches reads its mark (`self_handles`): without any (no
        // class's level is watched, or none was sent yet) there is nothing to mark, and an
        // edge decision walks no process here. Watches change in `direct_watches` alone.
        if !self.cfg.direct_edges || self.direct.watchers == 0 {
            return;
        }
        let rank = |p: &Proc| self.cfg.policy.class(p.class()).map(|c| c.rank);
        // Each busy process: its class's rank, its slot, its partitions.
        type Busy = (Option<u8>, Option<(u32, u32)>, BTreeSet<GpuId>);
        let busy: Vec<Busy> = self
            .procs
            .values()
            .filter(|w| w.any_busy() && !w.stale)
            .map(|w| (rank(w), w.writer, partitions(w)))
            .collect();
        let covers: Vec<bool> = self
            .procs
            .values()
            .map(|p| {
                if p.watches.is_empty() {
                    return false;
                }
                let (mine, r) = (partitions(p), rank(p));
                busy.iter()
                    .filter(|(wr, _, gpus)| *wr > r && !gpus.is_disjoint(&mine))
                    .all(|(_, slot, _)| {
                        slot.is_some_and(|(b, s)| {
                            p.watches.get(&b).is_some_and(|m| {
                                    matches!(m, AgentMsg::Watch { slots, .. } if slots.contains(&s))
                                })
                        })
                    })
            })
            .collect();
        for (p, c) in self.procs.values_mut().zip(covers) {
            if p.watch_covers != c {
                p.watch_covers = c;
            }
        }
    }

    /// Boards for the writers (processes whose busy edges are on), the slots of writers whose
    /// reports went stale cleared, and each sealed writer's slot looked at
    /// ([`Out::CheckSlot`]: a slot busy for long while its writer reports no busy queue is
    /// forged). A writer whose class no longer preempts anyone (or whose edges went off, or
    /// who was caught forging) loses its board: nobody watches it any more. Part of the full
    /// decision, after the edges.
    pub(super) fn direct_writers(&mut self, out: &mut Vec<Out>) {
        let mut cleared: Vec<u32> = Vec::new();
        for (pid, p) in &mut self.procs {
            if p.via != Control::Shim {
                continue;
            }
            let eligible = self.cfg.direct_edges && p.edges_sent == Some(true) && !p.forged;
            if let Some((board, slot)) = p.writer {
                let b = self.direct.boards.get(&board);
                if !eligible || b.is_none_or(|b| b.class != p.class()) {
                    out.push(Out::ClearSlot { board, slot });
                    out.push(Out::DropBoard { board });
                    self.direct.boards.remove(&board);
                    self.direct.stale_cleared.remove(pid);
                    p.writer = None;
                    cleared.push(board);
                    continue;
                }
                // Stale, or busy by a request hint the agent expired (hint.rs).
                let off = p.stale || p.hint.expired();
                if off && self.direct.stale_cleared.insert(*pid) {
                    self.counters.direct_cleared += 1;
                    out.push(Out::ClearSlot { board, slot });
                    cleared.push(board);
                } else if !off {
                    self.direct.stale_cleared.remove(pid);
                }
                if b.is_some_and(|b| b.sealed) && !p.stale {
                    out.push(Out::CheckSlot {
                        pid: *pid,
                        board,
                        slot,
                        idle: !p.any_busy(),
                    });
                }
                continue;
            }
            if !eligible {
                continue;
            }
            let board = self.direct.next;
            self.direct.next = self.direct.next.wrapping_add(1);
            self.direct.boards.insert(
                board,
                Board {
                    class: p.class().to_owned(),
                    sealed: false,
                },
            );
            p.writer = Some((board, 0));
            out.push(Out::ShimBoard {
                conn: p.conn,
                msg: AgentMsg::BoardWriter { board, slot: 0 },
                board,
                writable: true,
            });
        }
        for board in cleared {
            self.board_changed(board, out);
        }
    }

    /// The writer `p` went away: its slot is cleared and its board dropped, its watchers look
    /// again.
    pub(super) fn direct_gone(&mut self, pid: Pid, p: &Proc, out: &mut Vec<Out>) {
        self.direct.stale_cleared.remove(&pid);
        let Some((board, slot)) = p.writer else {
            return;
        };
        if p.any_busy() && !p.stale {
            self.counters.direct_cleared += 1;
        }
        out.push(Out::ClearSlot { board, slot });
        out.push(Out::DropBoard { board });
        self.direct.boards.remove(&board);
        self.board_changed(board, out);
    }

    /// `pid` sealed its board against writes (`ShimMsg::BoardSealed`, the seal checked by the
    /// server): watchers may have it from the next full decision. Returns whether one is due.
    pub(super) fn board_sealed(&mut self, pid: Pid, board: u32) -> bool {
        let Some(p) = self.procs.get(&pid) else {
            return false;
        };
        if p.writer.map(|(b, _)| b) != Some(board) {
            return false;
        }
        let Some(b) = self.direct.boards.get_mut(&board) else {
            return false;
        };
        b.sealed = true;
        self.full_due = true;
        true
    }

    /// What the server found at an [`Out::CheckSlot`]: `Some(at)`: look again at `at`;
    /// `cleared`: the slot was forged and is cleared now.
    pub fn slot_checked(&mut self, pid: Pid, again: Option<Instant>, cleared: bool) {
        if let Some(at) = again {
            self.direct.revisit = Some(self.direct.revisit.map_or(at, |r| r.min(at)));
        }
        if !cleared {
            return;
        }
        self.counters.direct_forged += 1;
        self.full_due = true;
        if let Some(p) = self.procs.get_mut(&pid) {
            p.forged = true;
            let w = format!(
                "its edge board slot said busy for {} ms while it reported no busy queue (forged, or its shim is broken): the agent cleared it, and its edges take the agent's path from now on",
                crate::agent::board::FORGED_AFTER.as_millis()
            );
            tracing::warn!(pid = %pid, "{w}");
            p.warn(w);
        }
    }

    /// A slot's second look is due: the next decision is the full one.
    pub(super) fn direct_revisit(&mut self, now: Instant) {
        if self.direct.revisit.is_some_and(|r| r <= now) {
            self.direct.revisit = None;
            self.full_due = true;
        }
    }

    fn board_changed(&self, board: u32, out: &mut Vec<Out>) {
        for w in self.procs.values() {
            if w.watches.contains_key(&board) {
                out.push(Out::Shim(w.conn, AgentMsg::BoardChanged {}));
            }
        }
    }

    /// The watches every process should have after the full decision, sent where they
    /// changed.
    pub(super) fn direct_watches(&mut self, out: &mut Vec<Out>) {
        // The writers of sealed boards: (pid, board, slot, partitions).
        let writers: Vec<Writer> = self
            .procs
            .iter()
            .filter_map(|(pid, p)| {
                let (board, slot) = p.writer?;
                let b = self.direct.boards.get(&board)?;
                (b.sealed && b.class == p.class()).then(|| Writer {
                    pid: *pid,
                    board,
                    slot,
                    class: b.class.clone(),
                    gpus: partitions(p),
                })
            })
            .collect();
        let mut watchers = 0;
        for (pid, p) in &mut self.procs {
            let wanted = wanted_watches(&self.cfg, &writers, *pid, p);
            let Some(wanted) = wanted else {
                // The policy waits for its minimum interval: the watches stay as they are.
                watchers += usize::from(!p.watches.is_empty());
                continue;
            };
            watchers += usize::from(!wanted.is_empty());
            for (board, msg) in &wanted {
                if p.watches.get(board) != Some(msg) {
                    self.counters.direct_subscriptions += 1;
                    out.push(Out::ShimBoard {
                        conn: p.conn,
                        msg: msg.clone(),
                        board: *board,
                        writable: false,
                    });
                }
            }
            for board in p.watches.keys() {
                if !wanted.contains_key(board) {
                    out.push(Out::Shim(p.conn, AgentMsg::Unwatch { board: *board }));
                }
            }
            p.watches = wanted;
        }
        self.direct.watchers = watchers;
    }

    /// A watcher applied or undid its level (`ShimMsg::SelfLevel`). Returns whether a decision
    /// is due.
    pub(super) fn self_level(
        &mut self,
        pid: Pid,
        level: Option<Level>,
        ok: bool,
        detail: String,
        now: Instant,
    ) -> bool {
        let now_ns = self.now_ns(now);
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        match (level, ok) {
            (Some(l), true) => {
                if p.applied != Run::Preempted(l) {
                    p.applied = Run::Preempted(l);
                    // Counted as the agent's own preempt is (`count_sent`): for the process,
                    // its class, and the device-wide preempts it cost.
                    p.preemptions += 1;
                    self.rec.preempted(p.class(), l);
                    let preempts = &mut self.preempts;
                    Command::Preempt(l).watch_cost(&p.registry, |gpu, c| {
                        preempts.count(gpu, c, now);
                    });
                }
                p.self_applied = true;
                p.awaiting_self = None;
                // Its own preemption counts toward its starvation guard.
                self.policy.preempted_outside(pid, now_ns);
                // As a preempt sent now: the registries before it do not show the level yet
                // (no preempt again for them).
                p.preempt_gen = p.registry_gen;
                self.counters.direct_preempts += 1;
                // The full decision looks at the writers' slots: one the agent believes idle
                // that preempted this watcher is forged (`direct_writers`, `Out::CheckSlot`).
                self.full_due = true;
            }
            (None, true) => {
                if p.self_applied {
                    p.self_applied = false;
                    if let Run::Preempted(l) = p.applied {
                        let preempts = &mut self.preempts;
                        Command::Release(l).watch_cost(&p.registry, |gpu, c| {
                            preempts.count(gpu, c, now);
                        });
                    }
                    p.applied = Run::Running;
                    self.counters.direct_releases += 1;
                }
                self.policy.released_itself(pid);
            }
            (l, false) => {
                self.counters.command_failures += 1;
                p.warn(format!("its watch of the edge board failed: {detail}"));
                if let Some(l) = l {
                    // Not retried for a while, and no watch meanwhile (see `wanted_watches`).
                    p.failed = Some((l, now));
                }
                self.full_due = true;
            }
        }
        self.account(now);
        true
    }
}

/// The partitions `p` has queues on.
fn partitions(p: &Proc) -> BTreeSet<GpuId> {
    p.registry.queues.iter().map(|q| q.gpu_id).collect()
}

/// The watches `p` should have; `None`: keep what it has (the policy waits for its minimum
/// interval).
/// A writer whose sealed board watchers may watch.
struct Writer {
    pid: Pid,
    board: u32,
    slot: u32,
    class: String,
    gpus: BTreeSet<GpuId>,
}

fn wanted_watches(
    cfg: &crate::agent::AgentConfig,
    writers: &[Writer],
    pid: Pid,
    p: &Proc,
) -> Option<BTreeMap<u32, AgentMsg>> {
    let none = Some(BTreeMap::new());
    if !cfg.direct_edges
        || p.via != Control::Shim
        || p.leaving
        || p.manual.is_some()
        || p.failed.is_some()
    {
        return none;
    }
    match &p.why {
        Some(Why::Policy(Reason::RateLimited)) => return None,
        Some(Why::Policy(Reason::Free | Reason::HigherClassBusy(_) | Reason::Hysteresis(_))) => {}
        _ => return none,
    }
    let Some(rule) = cfg.policy.class(p.class()) else {
        return none;
    };
    let Some(level) = rule.level.filter(|l| watched(*l)) else {
        return none;
    };
    let mine = partitions(p);
    let first = p.first_gpu();
    let queues = p
        .registry
        .queues
        .iter()
        .filter(|q| q.gpu_id == first)
        .count() as u32;
    let release = Box::new(match &cfg.policy.release {
        Release::Hysteresis => WatchRelease::Hysteresis {
            hold_ns: cfg.policy.hysteresis_ns,
        },
        Release::Cost(c) => WatchRelease::Cost {
            round_trip_ns: c
                .round_trip_ns
                .saturating_mul(u64::from(preempt_cost(Run::Preempted(level), queues))),
            k: c.k,
            epsilon: c.epsilon,
            max_hold_ns: c.max_hold_ns,
            history: c.history,
            min_history: c.min_history,
        },
    });
    let mut wanted = BTreeMap::new();
    for w in writers {
        let preempts = cfg
            .policy
            .class(&w.class)
            .is_some_and(|c| c.rank > rule.rank);
        if !preempts || w.pid == pid || w.gpus.is_disjoint(&mine) {
            continue;
        }
        wanted.insert(
            w.board,
            AgentMsg::Watch {
                board: w.board,
                slots: vec![w.slot],
                level,
                grace_period: cfg.grace_period,
                release: release.clone(),
                min_interval_ns: cfg.policy.min_preempt_interval_ns,
            },
        );
    }
    Some(wanted)
}
