//! The commands the agent sends a shim, built into messages in one place, and the one place
//! that counts what they cost in device-wide preempts.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use crate::ids::{GpuId, QueueId};
use crate::policy::{Run, preempt_cost};
use crate::proto::{AgentMsg, CuMask, Level, Registry, Target};

/// How long preempts count towards the rate `kfdq status` shows.
const RATE_WINDOW: Duration = Duration::from_secs(10);

/// A command for one process, before it has a sequence number.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Command {
    /// Preempt all its queues (or streams, level 1) at this level.
    Preempt(Level),
    /// Release all of them from this level.
    Release(Level),
    /// Level 0: this KFD priority on all its queues.
    SetPriority(u32),
    /// The in-flight window (`None`: unbounded).
    SetWindow(Option<u32>),
    /// These CU masks on these queues (boxed: a command is kept small, 16 bytes, since an
    /// edge decision records 63 of them).
    SetCuMask(Box<CuMaskCmd>),
}

/// CU masks for some queues of a process.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct CuMaskCmd {
    /// The queues that do not have the masks yet.
    pub(super) queues: Vec<QueueId>,
    /// One per partition.
    pub(super) masks: Vec<CuMask>,
}

impl Command {
    /// The message that carries it as command `seq` (`grace_period`: the level-3 grace period
    /// in µs).
    pub(super) fn message(&self, seq: u64, grace_period: u32) -> AgentMsg {
        match self {
            Command::Preempt(level) => AgentMsg::Preempt {
                seq,
                level: *level,
                target: Target::All,
                grace_period,
            },
            Command::Release(level) => AgentMsg::Release {
                seq,
                level: *level,
                target: Target::All,
            },
            Command::SetPriority(priority) => AgentMsg::SetPriority {
                seq,
                target: Target::All,
                priority: *priority,
            },
            Command::SetWindow(dispatches) => AgentMsg::SetWindow {
                seq,
                dispatches: *dispatches,
            },
            Command::SetCuMask(c) => AgentMsg::SetCuMask {
                seq,
                target: Target::Queues(c.queues.clone()),
                masks: c.masks.clone(),
            },
        }
    }

    /// Its level, if it preempts or releases, and whether it preempts.
    pub(super) fn kind(&self) -> (Option<Level>, bool) {
        match self {
            Command::Preempt(l) => (Some(*l), true),
            Command::Release(l) => (Some(*l), false),
            _ => (None, false),
        }
    }

    /// Device-wide preempts it costs on each partition of a process with `reg`, given to `f`
    /// as (partition, count > 0): a level-2/3 command counts only the queues it changes
    /// (those not yet at the level for a preempt, those at it for a release), as the shim
    /// skips the others; each SET_CU_MASK is an UPDATE_QUEUE in amdkfd, one per queue; holds,
    /// priorities and windows cost none here. Allocates nothing (a process has a few queues:
    /// each partition is counted from its first queue on).
    pub(super) fn cost(&self, reg: &Registry, f: impl FnMut(GpuId, u32)) {
        self.cost_of(reg, false, f);
    }

    /// What a process's own watch of an edge board cost when it applied (or undid) this
    /// level (`ShimMsg::SelfLevel`): as [`Command::cost`], every queue of the process counted,
    /// since the watch applies the level to all of them and its report may reach the agent
    /// after the registry already shows them at the level.
    pub(super) fn watch_cost(&self, reg: &Registry, f: impl FnMut(GpuId, u32)) {
        self.cost_of(reg, true, f);
    }

    fn cost_of(&self, reg: &Registry, every_queue: bool, mut f: impl FnMut(GpuId, u32)) {
        let counts: &dyn Fn(&crate::proto::QueueInfo) -> bool = match self {
            Command::Preempt(Level::Hold) | Command::Release(Level::Hold) => return,
            Command::Preempt(_) | Command::Release(_) if every_queue => &|_| true,
            Command::Preempt(Level::Deactivate) => &|q| !q.deactivated,
            Command::Release(Level::Deactivate) => &|q| q.deactivated,
            Command::Preempt(Level::Suspend) => &|q| !q.suspended,
            Command::Release(Level::Suspend) => &|q| q.suspended,
            Command::SetCuMask(c) => &|q| c.queues.contains(&q.queue_id),
            Command::SetPriority(_) | Command::SetWindow(_) => return,
        };
        for (i, q) in reg.queues.iter().enumerate() {
            if reg.queues[..i].iter().any(|o| o.gpu_id == q.gpu_id) {
                continue;
            }
            let n = reg.queues[i..]
                .iter()
                .filter(|o| o.gpu_id == q.gpu_id && counts(o))
                .count() as u32;
            let c = match self {
                Command::Preempt(l) | Command::Release(l) => preempt_cost(Run::Preempted(*l), n),
                _ => n,
            };
            if c > 0 {
                f(q.gpu_id, c);
            }
        }
    }
}

/// Device-wide preempts the agent's commands and the processes' own watches of the edge
/// boards caused: in all, per partition, and over the last [`RATE_WINDOW`] for the rate.
#[derive(Debug, Default)]
pub(super) struct Preempts {
    total: u64,
    per_partition: BTreeMap<GpuId, u64>,
    recent: VecDeque<(Instant, u32)>,
}

impl Preempts {
    /// Counts `c` preempts on partition `gpu` (a command's cost, see [`Command::cost`]), sent
    /// at `now`.
    pub(super) fn count(&mut self, gpu: GpuId, c: u32, now: Instant) {
        *self.per_partition.entry(gpu).or_default() += u64::from(c);
        self.total += u64::from(c);
        self.recent.push_back((now, c));
    }

    /// Forgets what is older than the rate's window.
    pub(super) fn trim(&mut self, now: Instant) {
        while self
            .recent
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > RATE_WINDOW)
        {
            self.recent.pop_front();
        }
    }

    /// All preempts counted.
    pub(super) fn total(&self) -> u64 {
        self.total
    }

    /// Preempts counted on partition `gpu_id`.
    pub(super) fn on_partition(&self, gpu_id: GpuId) -> u64 {
        self.per_partition.get(&gpu_id).copied().unwrap_or(0)
    }

    /// Preempts per second over what is kept (at least 1 s, at most the window).
    pub(super) fn per_s(&self, now: Instant) -> f64 {
        let window = self
            .recent
            .front()
            .map_or(0.0, |(t, _)| now.duration_since(*t).as_secs_f64())
            .clamp(1.0, RATE_WINDOW.as_secs_f64());
        // A fold from +0.0: a float `sum` of nothing is -0.0, which JSON would print as such.
        self.recent
            .iter()
            .fold(0.0, |sum, (_, c)| sum + f64::from(*c))
            / window
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::node::tests::queue;
    use crate::proto::QueueInfo;

    fn cost(c: &Command, reg: &Registry) -> BTreeMap<GpuId, u32> {
        let mut per = BTreeMap::new();
        c.cost(reg, |g, n| {
            assert!(per.insert(g, n).is_none(), "{g} counted twice");
        });
        per
    }

    fn on(gpu_id: u32, q: QueueInfo) -> QueueInfo {
        QueueInfo {
            gpu_id: GpuId(gpu_id),
            ..q
        }
    }

    #[test]
    fn a_command_costs_only_the_queues_it_changes() {
        let reg = Registry {
            queues: vec![
                on(10, queue(1, 7)),
                QueueInfo {
                    deactivated: true,
                    ..on(10, queue(2, 7))
                },
                on(20, queue(3, 7)),
            ],
            ..Registry::default()
        };
        let level2 = cost(&Command::Preempt(Level::Deactivate), &reg);
        assert_eq!(level2, BTreeMap::from([(GpuId(10), 1), (GpuId(20), 1)]));
        let release = cost(&Command::Release(Level::Deactivate), &reg);
        assert_eq!(release, BTreeMap::from([(GpuId(10), 1)]));
        // Level 3: one runlist update per partition, whatever the number of queues.
        let level3 = cost(&Command::Preempt(Level::Suspend), &reg);
        assert_eq!(level3, BTreeMap::from([(GpuId(10), 1), (GpuId(20), 1)]));
        assert!(cost(&Command::Preempt(Level::Hold), &reg).is_empty());
        assert!(cost(&Command::SetPriority(3), &reg).is_empty());
        let cu = Command::SetCuMask(Box::new(CuMaskCmd {
            queues: vec![QueueId(1), QueueId(2)],
            masks: vec![],
        }));
        assert_eq!(cost(&cu, &reg), BTreeMap::from([(GpuId(10), 2)]));
    }

    #[test]
    fn the_rate_covers_the_last_ten_seconds() {
        let t0 = Instant::now();
        let mut p = Preempts::default();
        p.count(GpuId(10), 4, t0);
        p.count(GpuId(20), 1, t0);
        p.count(GpuId(10), 5, t0 + Duration::from_secs(5));
        assert_eq!(
            (
                p.total(),
                p.on_partition(GpuId(10)),
                p.on_partition(GpuId(30))
            ),
            (10, 9, 0)
        );
        assert_eq!(p.per_s(t0 + Duration::from_secs(5)), 2.0);
        p.trim(t0 + Duration::from_secs(12));
        assert_eq!(p.per_s(t0 + Duration::from_secs(12)), 5.0 / 7.0);
        assert_eq!(p.total(), 10);
    }

    #[test]
    fn no_preempts_is_a_rate_of_plus_zero() {
        let r = Preempts::default().per_s(Instant::now());
        assert!(r == 0.0 && r.is_sign_positive(), "{r:?}");
        assert_eq!(serde_json::to_string(&r).unwrap(), "0.0");
    }
}
