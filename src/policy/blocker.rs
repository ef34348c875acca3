//! What stands in a process's way, per partition it has queues on: the class above it that
//! blocks it ([`Policy::blocker`]) and its CU masks.

use std::collections::BTreeMap;

use super::Level;
use super::decide::{Policy, Reason, preempt_cost};
use super::level::Run;
use super::obs::{PartitionObs, ProcessObs, queues_on};
use super::release::Release;
use super::rules::ClassRule;
use crate::ids::GpuId;

impl Policy {
    /// Why `p` (process `i` of the observation, class `rule`, preempted at `level`; `one`: where
    /// its queues are, if on one partition) must be preempted now, if it must: the
    /// highest class above it busy on a partition it has queues on, else, while it is preempted,
    /// the class above it whose release hold there runs out last, with the time it runs out.
    /// A hold keeps a preempted process preempted (its restore is not paid for a short gap) but
    /// never preempts one that runs (a newcomer, one the starvation guard let run, one released
    /// outside the policy, [`Policy::released_outside`]); only a busy higher class does.
    pub(super) fn blocker(
        &self,
        i: usize,
        p: &ProcessObs,
        one: Option<(GpuId, u32)>,
        rule: &ClassRule,
        level: Level,
        now: u64,
    ) -> Option<(Reason, Option<u64>)> {
        let mut busy: Option<u8> = None;
        let mut held: Option<(u64, u8)> = None;
        for (&(gpu, rank), e) in &self.edges {
            if rank <= rule.rank {
                continue;
            }
            let queues = queues_on(p, one, gpu);
            if queues == 0 {
                continue;
            }
            let Some(idle) = e.idle_since() else {
                busy = busy.max(Some(rank));
                continue;
            };
            let hold = match &self.config.release {
                Release::Hysteresis => self.config.hysteresis_ns,
                Release::Cost(c) => {
                    let preempts = preempt_cost(Run::Preempted(level), queues);
                    c.hold_ns(e, c.round_trip_ns.saturating_mul(u64::from(preempts)))
                }
            };
            let until = idle.saturating_add(hold);
            if now < until && held.is_none_or(|h| (until, rank) > h) {
                held = Some((until, rank));
            }
        }
        let name = |rank: u8| -> std::sync::Arc<str> {
            self.names
                .iter()
                .find(|(r, _)| *r == rank)
                .map_or_else(|| format!("rank {rank}").into(), |(_, n)| n.clone())
        };
        match (busy, held) {
            (Some(rank), _) => Some((Reason::HigherClassBusy(name(rank)), None)),
            (None, Some((until, rank))) if self.procs.run_of(p.pid, i) != Run::Running => {
                Some((Reason::Hysteresis(name(rank)), Some(until)))
            }
            (None, _) => None,
        }
    }

    /// The CU masks of a process whose class has a CU share: classes with a share get
    /// consecutive CU ranges, highest rank first.
    pub(super) fn cu_masks(
        &self,
        rule: &ClassRule,
        parts: &[PartitionObs],
        p: &ProcessObs,
    ) -> BTreeMap<GpuId, Vec<u32>> {
        let mut out = BTreeMap::new();
        if rule.cu_share_permille.is_none() {
            return out;
        }
        let mut shared: Vec<&ClassRule> = self
            .config
            .classes
            .iter()
            .filter(|c| c.cu_share_permille.is_some())
            .collect();
        shared.sort_by_key(|c| std::cmp::Reverse(c.rank));
        for part in parts {
            if !p.queues.iter().any(|q| q.gpu_id == part.gpu_id) {
                continue;
            }
            let cus = part.cus;
            let mut start = 0u32;
            for c in &shared {
                let n = (u64::from(cus) * u64::from(c.cu_share_permille.unwrap_or(0)) / 1000).max(1)
                    as u32;
                if c.rank == rule.rank {
                    let end = (start + n).min(cus);
                    let mut words = vec![0u32; cus.div_ceil(32) as usize];
                    for cu in start..end {
                        words[(cu / 32) as usize] |= 1 << (cu % 32);
                    }
                    out.insert(part.gpu_id, words);
                    break;
                }
                start = (start + n).min(cus.saturating_sub(1));
            }
        }
        out
    }
}
