//! What one AQL packet asks of the partition.

use serde::{Deserialize, Serialize};

use crate::params::WAVE_SIZE;

/// AQL header bit 8: the packet waits for every earlier packet of its queue to complete.
pub const AQL_BARRIER_BIT: u16 = 1 << 8;

/// One packet as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// The caller's name for the packet (kfd-emu: its ring index); echoed in its completion.
    pub tag: u64,
    /// Work-groups to run (0: a packet with no work, such as a barrier-AND).
    pub workgroups: u64,
    /// Waves per work-group.
    pub waves_per_wg: u32,
    /// Execution time of one work-group, in ns.
    pub wg_ns: u64,
    /// Header barrier bit: starts only after every earlier packet of the queue completed.
    /// Without it, a packet starts dispatching once the previous one has launched all its
    /// work-groups, so consecutive dispatches of a queue may overlap.
    pub barrier: bool,
}

impl Dispatch {
    /// From the AQL kernel-dispatch fields: `grid` in work-items and `workgroup` in work-items
    /// per dimension (0 counts as 1), `wg_ns` the time of one work-group.
    pub fn from_aql(
        tag: u64,
        header: u16,
        grid: [u32; 3],
        workgroup: [u16; 3],
        wg_ns: u64,
    ) -> Self {
        let mut workgroups = 1u64;
        let mut threads = 1u64;
        for d in 0..3 {
            let g = u64::from(grid[d].max(1));
            let w = u64::from(workgroup[d].max(1));
            workgroups = workgroups.saturating_mul(g.div_ceil(w));
            threads = threads.saturating_mul(w);
        }
        Dispatch {
            tag,
            workgroups,
            waves_per_wg: u32::try_from(threads.div_ceil(u64::from(WAVE_SIZE))).unwrap_or(u32::MAX),
            wg_ns,
            barrier: header & AQL_BARRIER_BIT != 0,
        }
    }

    /// A packet with no work-groups (barrier-AND, or anything that is not a dispatch).
    pub fn empty(tag: u64, barrier: bool) -> Self {
        Dispatch {
            tag,
            workgroups: 0,
            waves_per_wg: 0,
            wg_ns: 0,
            barrier,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aql_fields_give_workgroups_and_waves() {
        // 1024 x 1 x 1 work-items in groups of 256: 4 work-groups of 4 waves.
        let d = Dispatch::from_aql(7, AQL_BARRIER_BIT | 2, [1024, 1, 1], [256, 1, 1], 5);
        assert_eq!(
            (d.workgroups, d.waves_per_wg, d.barrier, d.tag),
            (4, 4, true, 7)
        );
        // A partial group counts, a 65-thread group needs 2 waves, zeros count as 1.
        let d = Dispatch::from_aql(0, 2, [130, 3, 0], [65, 2, 0], 5);
        assert_eq!((d.workgroups, d.waves_per_wg, d.barrier), (4, 3, false));
    }
}
