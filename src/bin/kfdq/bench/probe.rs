//! Busy work of a known shape on a raw KFD queue (kfdq's own queue layer, `kfdq::kfd`).
//!
//! A [`Lane`] is one queue with profiling on: the packet processor writes each packet's start
//! and end (GPU counter ticks) into its completion signal, so a dispatch's delay is read on the
//! GPU's clock, not the host's. Work is 1-wave work-groups (64 work-items each) of one
//! duration, so a dispatch of `n` work-groups holds exactly `n` wave slots while it runs.
//! Each run is followed by a one-work-group marker packet without the barrier bit: the packet
//! processor starts it once the run launched all its work-groups, so once the marker's signal
//! is 0 the run is on the GPU, which the host waits on instead of a sleep.
//!
//! Durations: the dispatches run kfdq's spin kernel where it ships one for the partition's gfx
//! target (`spin.rs`: an iteration count scaled from a run alone) and also carry the time in the
//! packet's `reserved2`, which kfd-emu takes as the work-group time and hardware ignores. On a
//! real GPU without a spin kernel the busy measurements are skipped ([`WorkSource`]).

use std::time::{Duration, Instant};

use kfdq::kfd::aql::HEADER_BARRIER;
use kfdq::kfd::{DispatchPacket, GpuId, Kfd, Priority, Queue, QueueSpec, Root, Signal};

use super::R;
use super::spin::Spin;
use crate::kfd_error;

/// GPU counter period: the timestamps count at 100 MHz (kfd-emu's counter; gfx9's
/// `GET_CLOCK_COUNTERS` GPU counter).
pub const TICK_NS: u64 = 10;
/// Threads of one work-group: one wave64.
const WG_THREADS: u16 = 64;
/// The kernel object of dispatches without the spin kernel (kfd-emu runs no code).
const KERNEL_OBJECT: u64 = 0x6b66_6471_0000;
/// How long a wait for the GPU may take before the bench gives up.
pub const WAIT: Duration = Duration::from_secs(60);

/// Whether the bench can run work of a known duration on this node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkSource {
    /// kfd-emu (`reserved2` is each work-group's time) or the spin kernel.
    Known,
    /// Real amdkfd and no spin kernel for this target.
    None {
        /// Why, and what to do.
        why: String,
    },
}

impl WorkSource {
    /// kfd-emu serves `kfd-emu/config.json` next to its `/dev/kfd`; elsewhere the spin kernel
    /// must exist for the target.
    pub fn detect(root: &Root, gfx_target: &str, has_spin: bool) -> WorkSource {
        if has_spin || root.path().join("kfd-emu/config.json").exists() {
            WorkSource::Known
        } else {
            WorkSource::None {
                why: format!(
                    "kfdq ships its spin kernel for gfx942 and gfx90a only, not {gfx_target}; measurements that need busy queues of a known shape are skipped. Fix: add the target to scripts/kernels.sh and rebuild, or run the bench on kfd-emu"
                ),
            }
        }
    }
}

/// A queue of known-shape work with its marker and completion signals.
#[derive(Debug)]
pub struct Lane<'k> {
    pub queue: Queue<'k>,
    root: Root,
    marker: Signal<'k>,
    done: Signal<'k>,
    /// When the host saw the last run start (its marker completed).
    pub started_at: Instant,
    spin: Option<&'k Spin<'k>>,
}

impl<'k> Lane<'k> {
    /// A new queue on `gpu` at `priority`, profiling on.
    pub fn new(kfd: &'k Kfd, gpu: GpuId, priority: u32, spin: Option<&'k Spin<'k>>) -> R<Lane<'k>> {
        let root = kfd.root();
        let prio = Priority::new(priority).map_err(|e| kfd_error("a queue priority", root, e))?;
        let mut queue = kfd
            .create_queue(QueueSpec::aql(gpu).priority(prio))
            .map_err(|e| {
                kfd_error(
                    format!("creating a priority-{priority} queue on {gpu}"),
                    root,
                    e,
                )
            })?;
        queue
            .enable_profiling()
            .map_err(|e| kfd_error("enabling the queue's timestamps", root, e))?;
        let marker = Signal::new(kfd, gpu, 0).map_err(|e| kfd_error("a signal", root, e))?;
        let done = Signal::new(kfd, gpu, 0).map_err(|e| kfd_error("a signal", root, e))?;
        Ok(Lane {
            queue,
            root: root.clone(),
            marker,
            done,
            started_at: Instant::now(),
            spin,
        })
    }

    pub fn err(&self, doing: &str, e: kfdq::kfd::Error) -> crate::CliError {
        kfd_error(format!("{doing} ({})", self.queue.id()), &self.root, e)
    }

    /// Submits `wgs` one-wave work-groups of `wg_ns` each, then (with `marker`) a one-work-group
    /// marker without the barrier bit: the packet processor starts it once the dispatch before
    /// it launched all its work-groups, so its completion says the dispatch runs. Does not wait.
    pub fn submit(&mut self, wgs: u32, wg_ns: u64, marker: bool) -> R<()> {
        self.done.set(1).map_err(|e| self.err("a signal", e))?;
        let d = self.packet(wgs, wg_ns)?.with_signal(&self.done);
        if marker {
            self.marker.set(1).map_err(|e| self.err("a signal", e))?;
        }
        self.queue
            .submit(&d)
            .map_err(|e| self.err("submitting", e))?;
        if marker {
            let mut m = self.packet(1, 1)?.with_signal(&self.marker);
            m.header &= !HEADER_BARRIER;
            self.queue
                .submit(&m)
                .map_err(|e| self.err("submitting", e))?;
        }
        Ok(())
    }

    /// A dispatch of `wgs` one-wave work-groups of `wg_ns`: the spin kernel when loaded, and
    /// the time in `reserved2` for kfd-emu.
    pub fn packet(&self, wgs: u32, wg_ns: u64) -> R<DispatchPacket> {
        let grid = wgs * u32::from(WG_THREADS);
        Ok(match self.spin {
            Some(spin) => {
                let mut p = DispatchPacket::new(spin.kernel_object, grid, WG_THREADS)
                    .with_duration_ns(wg_ns);
                p.kernarg_address = spin.kernarg(spin.iterations(wg_ns))?;
                p
            }
            None => DispatchPacket::new(KERNEL_OBJECT, grid, WG_THREADS).with_duration_ns(wg_ns),
        })
    }

    /// Submits a run and waits until it runs (its marker completed).
    pub fn start(&mut self, wgs: u32, wg_ns: u64) -> R<()> {
        self.submit(wgs, wg_ns, true)?;
        wait_zero(
            &self.marker,
            "the marker packet before a dispatch",
            &self.root,
        )?;
        self.started_at = Instant::now();
        Ok(())
    }

    /// Waits for the run to complete; its (start, end) in ns of the GPU clock.
    pub fn finish(&self) -> R<(u64, u64)> {
        wait_zero(&self.done, "a dispatch", &self.root)?;
        let (s, e) = self
            .done
            .timestamps()
            .map_err(|e| self.err("reading timestamps", e))?;
        if e <= s {
            return Err(crate::CliError::Refused(format!(
                "{}'s dispatch completed without timestamps (start {s}, end {e}): the packet processor did not honour AMD_QUEUE_PROPERTIES_ENABLE_PROFILING",
                self.queue.id()
            )));
        }
        Ok((s * TICK_NS, e * TICK_NS))
    }
}

/// Waits until `s` reaches 0 (polling: the bench has no interrupt signal).
pub fn wait_zero(s: &Signal<'_>, what: &str, root: &Root) -> R<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        match s.value() {
            Ok(v) if v <= 0 => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(kfd_error(format!("reading the signal of {what}"), root, e)),
        }
        if Instant::now() > deadline {
            return Err(crate::CliError::Refused(format!(
                "{what} did not complete within {} s: the partition is stuck or far busier than the bench expects",
                WAIT.as_secs()
            )));
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Times `f` on the host clock, µs.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed().as_secs_f64() * 1e6)
}
