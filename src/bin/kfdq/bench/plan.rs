//! One partition's measurement plan: its shape, the work sizes, and the bystander's baseline.

use std::cell::Cell;
use std::time::Instant;

use kfdq::kfd::{GpuId, Kfd};

use super::R;
use super::probe::Lane;
use super::samples::Samples;
use super::spin::Spin;

/// Work sizes and the partition they run on.
#[derive(Debug)]
pub struct Plan<'k> {
    pub kfd: &'k Kfd,
    pub gpu: GpuId,
    /// The spin kernel, where kfdq ships one for the target.
    pub spin: Option<&'k Spin<'k>>,
    /// Priority of every queue but the arbitration's (7: the default band, CS_MEDIUM).
    pub priority: u32,
    /// Samples per measurement.
    pub repeat: u32,
    /// Wave slots of the partition (CUs x waves per CU).
    pub slots: u32,
    /// Work-group time of the bystander's dispatch, ns: it must span a call and its stall.
    pub window_ns: u64,
    /// Waves (one per work-group) of the bystander's dispatch.
    pub bystander_wgs: u32,
    /// Waves of the busy queue that is preempted: two or more counts, for the per-wave fit.
    pub victim_waves: Vec<u32>,
    /// The bystander's duration alone (p50), ns; stalls are measured against it.
    pub baseline_ns: Cell<f64>,
    /// Print progress on stderr.
    pub quiet: bool,
    /// Bystander-side samples discarded: the host's call returned too late in the window.
    pub discarded_late: Cell<u32>,
    /// Victim-side tries discarded: the preempted queue's stream did not complete on both
    /// sides of the preempt in time.
    pub discarded_victim: Cell<u32>,
}

impl<'k> Plan<'k> {
    /// The plan for a partition of `slots` wave slots.
    pub fn new(
        kfd: &'k Kfd,
        gpu: GpuId,
        spin: Option<&'k Spin<'k>>,
        slots: u32,
        repeat: u32,
        window_ms: u64,
        quiet: bool,
    ) -> Plan<'k> {
        let bystander_wgs = (slots / 16).clamp(1, 32);
        let room = slots.saturating_sub(bystander_wgs + 1);
        let mut victim_waves = vec![(room / 4).max(1), (room * 3 / 4).max(2)];
        victim_waves.dedup();
        Plan {
            kfd,
            gpu,
            spin,
            priority: 7,
            repeat: repeat.max(1),
            slots,
            window_ns: window_ms.max(1) * 1_000_000,
            bystander_wgs,
            victim_waves,
            baseline_ns: Cell::new(0.0),
            quiet,
            discarded_late: Cell::new(0),
            discarded_victim: Cell::new(0),
        }
    }

    /// Takes `--repeat` victim-side samples at every wave count: `sample(w)` measures one and
    /// gives the times until the stream stopped and resumed completing (`rows`: their row
    /// names), or `None` when its stream did not complete on both sides of the preempt (a
    /// loaded host that saw no completion in time). Such a try is discarded and tried again, up
    /// to three times `--repeat` tries in all.
    pub fn victim_samples(
        &self,
        label: &str,
        rows: (&'static str, &'static str),
        out: &mut Samples,
        mut sample: impl FnMut(u32) -> R<Option<(f64, f64)>>,
    ) -> R<()> {
        for &w in &self.victim_waves {
            let mut got = 0;
            for i in 0..self.repeat.saturating_mul(3) {
                if got == self.repeat {
                    break;
                }
                self.progress(&format!(
                    "{label}, the victim's side, {w} waves: sample {}/{} (try {})",
                    got + 1,
                    self.repeat,
                    i + 1
                ));
                match sample(w)? {
                    Some((stop, resume)) => {
                        out.call(rows.0, w, stop);
                        out.call(rows.1, w, resume);
                        got += 1;
                    }
                    None => self.discarded_victim.set(self.discarded_victim.get() + 1),
                }
            }
        }
        Ok(())
    }

    /// Work-group time of a preempted busy queue: it must still run after every sample.
    pub fn victim_wg_ns(&self) -> u64 {
        self.window_ns * 20
    }

    /// Waits for the bystander's dispatch and returns its delay against the baseline, ns; None
    /// (the sample is discarded) when the host's call ended too late to be sure the bystander
    /// was still running (`called` is when it returned: the host was descheduled for most of
    /// the window).
    pub fn stall(&self, bystander: &Lane<'_>, called: Instant) -> R<Option<f64>> {
        let (s, e) = bystander.finish()?;
        let late = called.duration_since(bystander.started_at).as_nanos() as f64
            > self.window_ns as f64 * 0.8;
        if late {
            self.discarded_late.set(self.discarded_late.get() + 1);
            return Ok(None);
        }
        Ok(Some((e - s) as f64 - self.baseline_ns.get()))
    }

    /// Measures the bystander alone (`repeat` times) and keeps the median as the baseline.
    pub fn measure_baseline(&self, bystander: &mut Lane<'_>) -> R<Vec<f64>> {
        let mut alone = Vec::new();
        for _ in 0..self.repeat {
            bystander.start(self.bystander_wgs, self.window_ns)?;
            let (s, e) = bystander.finish()?;
            alone.push((e - s) as f64);
        }
        let mut sorted = alone.clone();
        sorted.sort_by(f64::total_cmp);
        self.baseline_ns.set(sorted[(sorted.len() - 1) / 2]);
        Ok(alone)
    }

    /// Sets the spin kernel's nanoseconds per iteration from one work-group alone (kfd-emu:
    /// from `reserved2`, so 1 ns per iteration).
    pub fn calibrate_spin(&self) -> R<()> {
        let Some(spin) = self.spin else {
            return Ok(());
        };
        const ITERATIONS: u64 = 1 << 16;
        spin.ns_per_iteration.set(1.0);
        let mut lane = Lane::new(self.kfd, self.gpu, self.priority, self.spin)?;
        lane.start(1, ITERATIONS)?;
        let (s, e) = lane.finish()?;
        spin.ns_per_iteration
            .set((e - s) as f64 / ITERATIONS as f64);
        Ok(())
    }

    /// A progress line on stderr.
    pub fn progress(&self, what: &str) {
        if !self.quiet {
            eprintln!("kfdq bench: {}: {what}", self.gpu);
        }
    }
}
