//! One dispatch of a trace, as the file states it, and the one meaning of each column: every
//! reader (preempt-lab's model, kfdq demo's request, kfdq-hipwork's spin launches) takes a
//! column's value through the method here that says what it is.

/// Threads per wave on gfx90a and gfx942 (wave64): the unit of `waves_per_wg`.
pub const WAVE_THREADS: u32 = 64;

/// The most wave slots a work-group may occupy: a whole CU of 32 (gfx942 work-groups hold at
/// most 16 waves; more stands for registers or LDS that let fewer work-groups share a CU, as an
/// H100 SM's 2048 threads are 32 such slots: tools/preempt-lab/real-gpu/to_traces.py).
pub const MAX_WAVES_PER_WG: u32 = 32;

/// The most waves a HIP work-group has: 1024 threads (HIP's largest block) of [`WAVE_THREADS`].
pub const HIP_MAX_WAVES: u32 = 1024 / WAVE_THREADS;

/// One dispatch (kernel launch) of a trace: one CSV line or JSON array element, its values as
/// the file gives them, each checked against its rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dispatch {
    /// `workgroups`: work-groups in the grid (at least 1).
    pub workgroups: u64,
    /// `waves_per_wg`: the work-group's wave-slot footprint in waves of [`WAVE_THREADS`]
    /// threads (1..=[`MAX_WAVES_PER_WG`]): its own waves, or more where registers or LDS let
    /// fewer work-groups share a CU.
    pub waves_per_wg: u32,
    /// `wg_us`: the time of one work-group once it has its slots, µs (above 0); with a
    /// [`Footprint`], its time alone on its CU.
    pub wg_us: f64,
    /// `stream`: the HIP stream it was launched on.
    pub stream: u32,
    /// `barrier`: whether the host waits for it (it ends a request).
    pub barrier: bool,
    /// `cu_util` and `dram_bytes`, where the file gives them (both or neither in CSV).
    pub footprint: Option<Footprint>,
}

/// The optional columns: one work-group's use of its CU and of DRAM (gfx-model's contention
/// terms, docs/gfx-model.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Footprint {
    /// `cu_util`: the share of its CU's issue rate one work-group uses alone (0..=1).
    pub cu_util: f64,
    /// `dram_bytes`: the DRAM bytes one work-group moves (at least 0).
    pub dram_bytes: f64,
}

/// A dispatch as a HIP launch runs it (`kfdq demo`'s request, `kfdq-hipwork`): its grid, the
/// waves of its work-group ([`Dispatch::hip_waves`]) and its work-group time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HipLaunch {
    /// Work-groups in the grid.
    pub workgroups: u32,
    /// Waves of [`WAVE_THREADS`] threads per work-group, at most [`HIP_MAX_WAVES`].
    pub waves: u32,
    /// µs of one work-group, as traced.
    pub wg_us: f64,
}

impl HipLaunch {
    /// Its work-group's threads.
    pub fn threads(&self) -> u32 {
        self.waves * WAVE_THREADS
    }
}

impl Dispatch {
    /// One work-group's time in whole nanoseconds (`wg_us` x 1000, rounded, at least 1).
    pub fn wg_ns(&self) -> u64 {
        ((self.wg_us * 1000.0).round() as u64).max(1)
    }

    /// `cu_util` in permille (rounded); 0 without a footprint.
    pub fn cu_util_permille(&self) -> u16 {
        self.footprint
            .map_or(0, |f| (f.cu_util * 1000.0).round() as u16)
    }

    /// `dram_bytes` rounded to whole bytes; 0 without a footprint.
    pub fn dram_bytes(&self) -> u64 {
        self.footprint.map_or(0, |f| f.dram_bytes.round() as u64)
    }

    /// The waves of a HIP work-group that launches this kernel: its footprint, at most
    /// [`HIP_MAX_WAVES`]. A footprint above 16 is registers or LDS holding a whole SM on the
    /// traced GPU; such a kernel runs here as 16 waves, two work-groups to a CU.
    pub fn hip_waves(&self) -> u32 {
        self.waves_per_wg.min(HIP_MAX_WAVES)
    }

    /// The dispatch as a HIP launch; `None` if its grid is more work-groups than a HIP launch
    /// takes (`u32`).
    pub fn hip_launch(&self) -> Option<HipLaunch> {
        Some(HipLaunch {
            workgroups: u32::try_from(self.workgroups).ok()?,
            waves: self.hip_waves(),
            wg_us: self.wg_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(waves: u32, wg_us: f64, footprint: Option<Footprint>) -> Dispatch {
        Dispatch {
            workgroups: 1,
            waves_per_wg: waves,
            wg_us,
            stream: 0,
            barrier: false,
            footprint,
        }
    }

    #[test]
    fn waves_per_wg_is_in_waves_of_64_threads_and_a_hip_work_group_holds_16() {
        // A traced block of 128 threads is 2 waves: 128 threads here, not 2 x 32.
        assert_eq!(
            (
                d(2, 1.0, None).hip_waves(),
                d(2, 1.0, None).hip_launch().unwrap().threads()
            ),
            (2, 128)
        );
        assert_eq!(d(16, 1.0, None).hip_launch().unwrap().threads(), 1024);
        // A footprint of a whole SM (32 slots) launches as HIP's largest work-group.
        assert_eq!(
            (
                d(32, 1.0, None).hip_waves(),
                d(32, 1.0, None).hip_launch().unwrap().threads()
            ),
            (16, 1024)
        );
    }

    #[test]
    fn a_hip_launch_is_the_grid_the_capped_waves_and_the_traced_time() {
        let mut k = d(32, 11.616, None);
        k.workgroups = 37;
        let l = k.hip_launch().unwrap();
        assert_eq!(
            (l.workgroups, l.waves, l.threads(), l.wg_us),
            (37, 16, 1024, 11.616)
        );
        k.workgroups = u64::from(u32::MAX) + 1;
        assert_eq!(k.hip_launch(), None);
    }

    #[test]
    fn wg_us_is_microseconds_and_the_footprint_rounds() {
        assert_eq!(d(1, 1.76, None).wg_ns(), 1760);
        assert_eq!(d(1, 0.0001, None).wg_ns(), 1, "at least 1 ns");
        let f = Some(Footprint {
            cu_util: 0.9353,
            dram_bytes: 10_489_634.6,
        });
        assert_eq!(
            (d(1, 1.0, f).cu_util_permille(), d(1, 1.0, f).dram_bytes()),
            (935, 10_489_635)
        );
        assert_eq!(
            (
                d(1, 1.0, None).cu_util_permille(),
                d(1, 1.0, None).dram_bytes()
            ),
            (0, 0)
        );
    }
}
