//! What the emulator is started with ([`EmuConfig`]): the machine, the kernel it stands for and
//! the model's costs. kfd-emu reads it (`--config FILE`, JSON) and builds its topology from it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{Arbitration, Preset};

/// What the emulator is started with. `Default` is one MI300X in SPX mode on a
/// Linux 6.12+ kernel with KFD 1.17.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmuConfig {
    /// Machine layout (ignored for node properties when `topology_file` is set, except
    /// as the template the file's nodes start from).
    pub preset: Preset,
    /// Number of physical GPUs; each repeats the preset's (or the file's) nodes.
    pub gpus: u32,
    /// TOML topology that overrides the preset when set.
    pub topology_file: Option<PathBuf>,
    /// Minor version GET_VERSION reports; RUNTIME_ENABLE/DBG_TRAP are ENOTTY below 13.
    pub kfd_minor: u32,
    /// `true` = Linux 6.12+: sysfs has `cwsr_size`/`ctl_stack_size` and CREATE_QUEUE
    /// validates the queue buffers; `false` = older kernel.
    pub buffer_checks: bool,
    /// Stall of every queue of a partition per device-wide preempt, in microseconds.
    pub preempt_cost_us: u64,
    /// CWSR cost per wave saved at a device-wide preempt, ns (the model's `save_wave_ns`).
    #[serde(default = "default_wave_ns")]
    pub save_wave_ns: u64,
    /// CWSR cost per wave restored when its queue is mapped again, ns (`restore_wave_ns`).
    #[serde(default = "default_wave_ns")]
    pub restore_wave_ns: u64,
    /// Execution time of one work-group of an AQL dispatch whose `reserved2` is 0, in ns.
    pub default_packet_ns: u64,
    /// Time slice of an oversubscribed partition, in microseconds.
    pub quantum_us: u64,
    /// The kernel programs the per-queue priority (`cp_hqd_queue_priority`), as kernels before
    /// upstream commit 73463e26f7e2 (Linux 7.0) did: the dispatcher then prefers higher queues
    /// strictly. Otherwise only the pipe priority (low / medium / high) arbitrates.
    #[serde(default)]
    pub queue_priority: bool,
    /// Overrides the arbitration the kernel mode implies (experiments: `equal`).
    #[serde(default)]
    pub arbitration: Option<Arbitration>,
    /// Work-group execution time in ns by kernel name, for dispatches of real code objects
    /// (whose packets carry no time); kernels not listed take `default_packet_ns`.
    #[serde(default)]
    pub kernel_wg_ns: BTreeMap<String, u64>,
    /// Work-group execution time by kernel name taken from one of the dispatch's arguments
    /// (a spin kernel's iteration count), for kernels not in `kernel_wg_ns`: the model of a
    /// kernel whose duration its arguments set.
    #[serde(default)]
    pub kernel_wg_time_by_arg: BTreeMap<String, ArgTime>,
    /// Each partition's costs, in topology order, from a calibration file of several
    /// partitions (`--calibration`); empty: every partition takes the costs above.
    #[serde(default)]
    pub partition_costs: Vec<PartitionCosts>,
}

/// A work-group time read from a kernel argument: `value x ps_per_unit` picoseconds, the
/// value being the unsigned 64-bit (or shorter: `size`) argument at byte `offset` of the
/// kernarg segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgTime {
    /// Byte offset of the argument in the kernarg segment.
    pub offset: u32,
    /// Its size in bytes (1 to 8; default 8).
    #[serde(default = "ArgTime::default_size")]
    pub size: u32,
    /// Picoseconds of one work-group per unit of the argument.
    pub ps_per_unit: u64,
}

impl ArgTime {
    fn default_size() -> u32 {
        8
    }

    /// The work-group time in ns for the argument's little-endian `bytes`.
    pub fn wg_ns(&self, bytes: &[u8]) -> u64 {
        let mut v = [0u8; 8];
        let n = bytes.len().min(8);
        v[..n].copy_from_slice(&bytes[..n]);
        let units = u128::from(u64::from_le_bytes(v));
        u64::try_from(units * u128::from(self.ps_per_unit) / 1000).unwrap_or(u64::MAX)
    }
}

/// One partition's measured costs (a calibration's `[[partition]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionCosts {
    /// The model's `preempt_fixed_ns`.
    pub preempt_fixed_ns: u64,
    /// CWSR cost per wave saved, ns.
    pub save_wave_ns: u64,
    /// CWSR cost per wave restored, ns.
    pub restore_wave_ns: u64,
    /// The arbitration.
    pub arbitration: Arbitration,
}

impl EmuConfig {
    /// The kernel release the emulated kernel stands for, as `proc/sys/kernel/osrelease` shows
    /// it: before 6.12 for `--legacy-kernel` (no queue-buffer rules), 6.12 with
    /// `--queue-priority` (queue priority still programmed), else 7.0 (pipe priority only,
    /// upstream 73463e26f7e2).
    pub fn kernel_release(&self) -> &'static str {
        if !self.buffer_checks {
            "6.8.0-kfd-emu"
        } else if self.queue_priority {
            "6.12.0-kfd-emu"
        } else {
            "7.0.0-kfd-emu"
        }
    }

    /// The dispatcher's arbitration: the override, else what the kernel mode implies.
    pub fn effective_arbitration(&self) -> Arbitration {
        self.arbitration
            .unwrap_or(if self.queue_priority || !self.buffer_checks {
                Arbitration::StrictPriority
            } else {
                Arbitration::PipePriority
            })
    }
}

/// The partition model's default per-wave CWSR cost, save and restore (`gfx_model::Params`,
/// docs/gfx-model.md; kfd-emu's unit tests check that the two agree).
pub const MODEL_WAVE_NS: u64 = 20;

fn default_wave_ns() -> u64 {
    MODEL_WAVE_NS
}

impl Default for EmuConfig {
    fn default() -> Self {
        EmuConfig {
            preset: Preset::Mi300xSpx,
            gpus: 1,
            topology_file: None,
            kfd_minor: 17,
            buffer_checks: true,
            preempt_cost_us: 50,
            save_wave_ns: default_wave_ns(),
            restore_wave_ns: default_wave_ns(),
            default_packet_ns: 10_000,
            quantum_us: 10_000,
            queue_priority: false,
            arbitration: None,
            kernel_wg_ns: BTreeMap::new(),
            kernel_wg_time_by_arg: BTreeMap::new(),
            partition_costs: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_argument_sets_the_work_group_time() {
        let a = ArgTime {
            offset: 0,
            size: 8,
            ps_per_unit: 30_476,
        };
        // 65,625 iterations of 30.476 ns: 2 ms.
        assert_eq!(a.wg_ns(&65_625u64.to_le_bytes()), 1_999_987);
        assert_eq!(a.wg_ns(&[]), 0);
        assert_eq!(a.wg_ns(&u64::MAX.to_le_bytes()), u64::MAX);
    }
}
