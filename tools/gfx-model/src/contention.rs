//! What co-running work costs a work-group (optional; [`crate::Partition::set_contention`]):
//! the CU it shares and the partition's DRAM.
//!
//! Each dispatch may say what one of its work-groups uses ([`Footprint`]): its share of a CU's
//! issue rate when alone on it, and the DRAM bytes it moves. A work-group's time is then its
//! time alone on a CU (the dispatch's `wg_ns`) times
//!
//! * the **CU factor** `max(1, L)`, `L` the summed `cu_util` of every work-group on its CU (its
//!   own included): work-groups that together ask more than the CU issues share it; and
//! * the **memory factor** `max(D/B, (1-m) Λ(ρ)) / max(m, 1-m)`. A work-group's time has a
//!   bandwidth part and a latency part, in the proportion `m : 1-m`, where `m` is how
//!   bandwidth-bound its kernel is alone on the whole partition (its work-groups' demand over the
//!   bandwidth `B`, at most 1). The bandwidth part stretches with all running work's DRAM demand
//!   `D` over `B` (and shrinks when the kernel runs narrower than alone: a streaming kernel on
//!   fewer CUs gets more bandwidth per work-group); the latency part stretches with the
//!   loaded-latency factor `Λ(ρ) = min(cap, 1/(1-ρ))` of the other queues' demand
//!   `ρ = (D - Dq)/B` (the M/M/1 queue's waiting time). Alone on the whole partition both parts
//!   fit in the work-group's own time: the factor is 1.
//!
//! The factors are fixed when the work-group starts, from what runs once the dispatch pass that
//! starts it is over: the work-groups one pass starts for one packet (same size, same time) get
//! one time, from the mean `L` over their CUs. That keeps the per-work-group stepping and the
//! batched one equal (tests/batching.rs) and costs one pass over a batch's CUs. Later arrivals
//! do not slow work already running (named as a limit in docs/gfx-model.md). Everything is
//! integer arithmetic in permille: deterministic.

use serde::{Deserialize, Serialize};

/// What one work-group of a dispatch uses; the default (zeros) uses nothing that is shared.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// Share of its CU's issue rate one work-group uses when alone on it, permille (1000: a
    /// whole CU).
    pub cu_util_permille: u16,
    /// DRAM bytes one work-group moves.
    pub dram_bytes: u64,
}

/// The partition's shared resources. Each value is named in docs/gfx-model.md with its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Contention {
    /// DRAM bandwidth of the partition, bytes per µs (= MB/s; 3_000_000 is 3 TB/s).
    pub dram_bytes_per_us: u64,
    /// The loaded-latency factor's ceiling, permille (the M/M/1 curve's value at saturation).
    pub latency_cap_permille: u32,
}

impl Contention {
    /// A work-group's DRAM demand, bytes per µs, from its bytes and its time alone.
    pub(crate) fn demand(fp: Footprint, ns: u64) -> u64 {
        if fp.dram_bytes == 0 {
            return 0;
        }
        let d = u128::from(fp.dram_bytes) * 1000 / u128::from(ns.max(1));
        u64::try_from(d).unwrap_or(u64::MAX)
    }

    /// How bandwidth-bound a kernel is alone, permille: `live` of its work-groups at `demand`
    /// each, over the bandwidth (at most 1000).
    pub(crate) fn own_share(&self, demand: u64, live: u64) -> u32 {
        let d = u128::from(demand) * u128::from(live) * 1000;
        (d / u128::from(self.dram_bytes_per_us.max(1))).min(1000) as u32
    }

    /// The memory factor, permille, of a work-group whose queue asks `own` of the `total` DRAM
    /// demand (bytes per µs) and whose kernel is `share` bandwidth-bound alone.
    pub(crate) fn memory_factor(&self, total: u64, own: u64, share: u32) -> u64 {
        let b = u128::from(self.dram_bytes_per_us.max(1));
        let demand = u64::try_from(u128::from(total) * 1000 / b).unwrap_or(u64::MAX);
        let rho = (u128::from(total.saturating_sub(own)) * 1000 / b) as u64;
        let cap = u64::from(self.latency_cap_permille.max(1000));
        // 1/(1-rho) reaches the cap at rho = 1 - 1/cap.
        let loaded = if rho >= 1000 - 1_000_000 / cap {
            cap
        } else {
            1_000_000 / (1000 - rho)
        };
        let m = u64::from(share.min(1000));
        let latency = (1000 - m) * loaded / 1000;
        demand.max(latency).saturating_mul(1000) / m.max(1000 - m)
    }
}

/// The CU factor, permille, of a mean CU load `load` (permille).
pub(crate) fn cu_factor(load: u64) -> u64 {
    load.max(1000)
}

/// `ns` scaled by a factor in permille, rounded up, at least 1.
pub(crate) fn scaled(ns: u64, factor: u64) -> u64 {
    let t = (u128::from(ns) * u128::from(factor)).div_ceil(1000);
    u64::try_from(t).unwrap_or(u64::MAX).max(1)
}

/// Time left of `left` scaled ns at `factor`, back in unscaled ns (rounded up, at least 1).
pub(crate) fn unscaled(left: u64, factor: u64) -> u64 {
    let t = (u128::from(left) * 1000).div_ceil(u128::from(factor.max(1)));
    u64::try_from(t).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H100: Contention = Contention {
        dram_bytes_per_us: 3_000_000,
        latency_cap_permille: 3000,
    };

    #[test]
    fn memory_factor_shares_bandwidth_and_loads_latency() {
        // Alone: nothing else asks, no factor, however much it asks itself.
        assert_eq!(H100.memory_factor(3_000_000, 3_000_000, 1000), 1000);
        assert_eq!(H100.memory_factor(100_000, 100_000, 30), 1000);
        // Two streaming kernels that each fill the bandwidth: each gets half.
        assert_eq!(H100.memory_factor(6_000_000, 3_000_000, 1000), 2000);
        // A latency-bound kernel next to a streaming one: the loaded latency, capped.
        assert_eq!(H100.memory_factor(3_100_000, 100_000, 0), 3000);
        // A third of the bandwidth used by others: 1/(1-1/3) = 1.5, weighted by 1 - share.
        assert_eq!(H100.memory_factor(1_000_000 + 1, 1, 0), 1499);
        assert_eq!(H100.memory_factor(1_000_000 + 1, 1, 500), 1498);
        // A streaming kernel alone on half the CUs asks half the bandwidth: twice as fast a
        // work-group, its kernel as fast as on all of them.
        assert_eq!(H100.memory_factor(1_500_000, 1_500_000, 1000), 500);
        // Demand and share.
        let fp = Footprint {
            cu_util_permille: 0,
            dram_bytes: 12_000,
        };
        assert_eq!(Contention::demand(fp, 8_000), 1_500);
        assert_eq!(H100.own_share(1_500, 2_000), 1000);
        assert_eq!(H100.own_share(1_500, 200), 100);
        assert_eq!(Contention::demand(Footprint::default(), 8_000), 0);
    }

    #[test]
    fn scaling_round_trips_and_rounds_up() {
        assert_eq!(scaled(1000, 1000), 1000);
        assert_eq!(scaled(3, 1500), 5);
        assert_eq!(scaled(0, 1000), 1);
        assert_eq!(unscaled(1500, 1500), 1000);
        assert_eq!(unscaled(7, 1000), 7);
        assert_eq!(cu_factor(400), 1000);
        assert_eq!(cu_factor(2680), 2680);
    }
}
