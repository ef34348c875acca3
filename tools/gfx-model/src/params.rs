//! The partition's shape (from the topology) and the model's parameters (named guesses where no
//! public source pins a value down; `docs/gfx-model.md` gives each one's reason and sensitivity).

use serde::{Deserialize, Serialize};

/// Wave width of gfx9 compute (wave64).
pub const WAVE_SIZE: u32 = 64;

/// What the topology says about one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shape {
    /// XCCs of the partition (`num_xcc`).
    pub num_xcc: u32,
    /// CUs per XCC (`simd_count / simd_per_cu / num_xcc`).
    pub cus_per_xcc: u32,
    /// Wave slots per CU (`max_waves_per_simd x simd_per_cu`).
    pub waves_per_cu: u32,
    /// Active queues the hardware scheduler keeps resident (`num_cp_queues`); beyond that it
    /// time-slices the runlist.
    pub resident_queues: u32,
}

impl Shape {
    /// CUs of the partition.
    pub fn cus(&self) -> u32 {
        self.num_xcc * self.cus_per_xcc
    }

    /// The emulator's MI308X preset: 4 XCCs x 20 CUs, 8 waves per SIMD x 4 SIMDs, 24 HQDs.
    pub fn mi308x() -> Shape {
        Shape {
            num_xcc: 4,
            cus_per_xcc: 20,
            waves_per_cu: 32,
            resident_queues: 24,
        }
    }
}

/// How the dispatcher chooses among resident queues (the emulator's configuration names it too,
/// so it lives in `kfd-emu-api`).
pub use kfd_emu_api::Arbitration;

/// The pipe priority band of a KFD queue priority (`pipe_priority_map` in amdkfd's
/// `kfd_mqd_manager.c`): 0 low (0-6), 1 medium (7-10), 2 high (11-15).
pub fn pipe_band(priority: u8) -> u8 {
    match priority {
        0..=6 => 0,
        7..=10 => 1,
        _ => 2,
    }
}

/// The model's parameters. Each default is a named guess; see `docs/gfx-model.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Params {
    /// Dispatcher arbitration.
    pub arbitration: Arbitration,
    /// Execution time of one work-group whose packet gives none (kfd-emu: `reserved2` 0).
    pub default_wg_ns: u64,
    /// Fixed cost of a device-wide preempt: unmap every queue of the partition and map the new
    /// runlist (UNMAP_QUEUES + MAP_PROCESS/MAP_QUEUES through the HIQ). Dispatch stalls meanwhile.
    pub preempt_fixed_ns: u64,
    /// CWSR cost per wave saved at a preempt (its registers and LDS written to the save area).
    pub save_wave_ns: u64,
    /// CWSR cost per wave restored when its queue is mapped again.
    pub restore_wave_ns: u64,
    /// Grace period of a preempt whose caller gives none (UPDATE_QUEUE uses the firmware's
    /// default): waves that end within it finish instead of being saved.
    pub default_grace_ns: u64,
    /// Time slice of an oversubscribed runlist (more active queues than resident slots).
    pub quantum_ns: u64,
    /// Occupancy limit: wave slots per CU a work-group may use when LDS or VGPRs, not wave
    /// slots, bound residency (None: the wave slots of the shape).
    pub waves_per_cu_limit: Option<u32>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            arbitration: Arbitration::PipePriority,
            default_wg_ns: 10_000,
            preempt_fixed_ns: 50_000,
            save_wave_ns: 20,
            restore_wave_ns: 20,
            default_grace_ns: 0,
            quantum_ns: 10_000_000,
            waves_per_cu_limit: None,
        }
    }
}
