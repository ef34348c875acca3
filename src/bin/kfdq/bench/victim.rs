//! Victim-side times: when a preempted queue's own work stops completing, and when it completes
//! again, as the process that owns the queue sees it (the calls' host times say when the caller
//! got control back, not when the victim's work stopped or resumed).
//!
//! A [`Stream`] is a queue running a long series of short dispatches ([`PACKET_NS`] each, the
//! barrier bit set: one completes every [`PACKET_NS`] while the queue runs), all of which
//! decrement one counting signal. A [`Watch`] polls that signal on its own thread and records
//! CLOCK_MONOTONIC at every change. The time to stop is from the preempting call's start to
//! the stream's last completion before it stopped (exact to within one packet: a preempt saves
//! the packet in flight, so the last completion is up to one packet before the preempt); the
//! time to resume is from the resuming call's start to the first completion after it (the
//! device-wide preempt of the reactivation, the restore of the saved waves and the rest of the
//! saved packet).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kfdq::kfd::{GpuId, Kfd, Signal};

use super::R;
use super::probe::{Lane, WAIT};
use super::spin::Spin;
use crate::{CliError, kfd_error};

/// Work-group time of one packet of the stream: the resolution of the time to stop.
pub const PACKET_NS: u64 = 100_000;
/// Packets queued per sample (25.6 ms of work: more than a sample uses while the queue runs;
/// a sample whose stream ran out early is discarded).
const PACKETS: u32 = 256;
/// How long the victim stays stopped before it is resumed (at least; see `hold`).
pub const HOLD: Duration = Duration::from_millis(2);

/// CLOCK_MONOTONIC in ns: the clock both the bench and its level-3 child read.
pub fn mono_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// A queue running [`PACKETS`] packets of `waves` one-wave work-groups, [`PACKET_NS`] each.
#[derive(Debug)]
pub struct Stream<'k> {
    /// The queue (the preempted one).
    pub lane: Lane<'k>,
    /// Decremented by every packet's completion.
    pub progress: Signal<'k>,
}

impl<'k> Stream<'k> {
    /// Queues the packets and waits for the first completion (the stream runs).
    pub fn start(
        kfd: &'k Kfd,
        gpu: GpuId,
        priority: u32,
        spin: Option<&'k Spin<'k>>,
        waves: u32,
    ) -> R<Stream<'k>> {
        let root = kfd.root();
        let mut lane = Lane::new(kfd, gpu, priority, spin)?;
        let progress = Signal::new(kfd, gpu, i64::from(PACKETS))
            .map_err(|e| kfd_error("a signal", root, e))?;
        let packet = lane.packet(waves, PACKET_NS)?.with_signal(&progress);
        for _ in 0..PACKETS {
            lane.queue
                .submit(&packet)
                .map_err(|e| lane.err("submitting the victim's stream", e))?;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            let v = progress
                .value()
                .map_err(|e| kfd_error("reading the victim's signal", root, e))?;
            if v < i64::from(PACKETS) {
                break;
            }
            if Instant::now() > deadline {
                return Err(CliError::Refused(format!(
                    "the victim's stream did not complete a packet within {} s: the partition is stuck",
                    WAIT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
        Ok(Stream { lane, progress })
    }

    /// Waits until the stream ran out (every packet completed and consumed), so that the
    /// queue is destroyed idle: kfd-emu may still publish a busy queue's read index after
    /// DESTROY_QUEUE, into memory a later queue of this process reuses.
    pub fn drain(&self) -> R<()> {
        let gpu = self.lane.queue.gpu();
        let deadline = Instant::now() + WAIT;
        loop {
            let v = self.progress.value().unwrap_or(0);
            let idle = self.lane.queue.read_index().unwrap_or(0)
                >= self.lane.queue.write_index().unwrap_or(0);
            if v <= 0 && idle {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(CliError::Refused(format!(
                    "the victim's stream on {gpu} did not run out within {} s: the partition is stuck",
                    WAIT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// A watcher of a counting signal, shared between its polling thread and the caller.
#[derive(Debug, Default)]
pub struct Watch {
    stop: AtomicBool,
    /// CLOCK_MONOTONIC of the last change seen.
    last_ns: AtomicU64,
    /// The signal reached 0: no change will come.
    ran_out: AtomicBool,
}

impl Watch {
    /// Polls `s` until [`Watch::stop`]; the CLOCK_MONOTONIC time of every change it saw.
    pub fn run(&self, s: &Signal<'_>) -> Vec<u64> {
        self.run_from(s, s.value().unwrap_or(0))
    }

    /// [`Watch::run`] for a signal set to `from` before its work was submitted: a watcher that
    /// starts late (a loaded host) sees what completed meanwhile as one change at its first look,
    /// and a signal already drained as the work having run out, instead of waiting for a change
    /// that already happened.
    pub fn run_from(&self, s: &Signal<'_>, from: i64) -> Vec<u64> {
        let mut seen = from;
        let mut changes = Vec::new();
        let mut spins = 0u32;
        while !self.stop.load(Ordering::Acquire) {
            let v = s.value().unwrap_or(seen);
            if v != seen {
                let t = mono_ns();
                seen = v;
                changes.push(t);
                self.last_ns.store(t, Ordering::Release);
                if v <= 0 {
                    self.ran_out.store(true, Ordering::Release);
                }
            }
            // Poll tightly (the resolution of the times), yielding now and then on a busy host.
            spins = spins.wrapping_add(1);
            if spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        changes
    }

    /// Waits until a change at or after `t_ns` was seen; false when the signal ran out before
    /// it, or after [`WAIT`].
    pub fn wait_change_after(&self, t_ns: u64) -> bool {
        let deadline = Instant::now() + WAIT;
        while self.last_ns.load(Ordering::Acquire) < t_ns {
            if self.ran_out.load(Ordering::Acquire) || Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        true
    }

    /// Ends [`Watch::run`].
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// (time to stop, time to resume), µs, from the changes a [`Watch`] saw and the CLOCK_MONOTONIC
/// starts of the stopping and the resuming call; None when the stream did not run on both sides.
pub fn times(changes: &[u64], stop_call_ns: u64, resume_call_ns: u64) -> Option<(f64, f64)> {
    let last = changes
        .iter()
        .copied()
        .filter(|&t| t < resume_call_ns)
        .max()?;
    let first = changes
        .iter()
        .copied()
        .filter(|&t| t >= resume_call_ns)
        .min()?;
    Some((
        (last as f64 - stop_call_ns as f64) / 1e3,
        (first - resume_call_ns) as f64 / 1e3,
    ))
}

/// Holds the victim stopped for [`HOLD`] and until the partition runs work again (a one-work-
/// group probe on `probe` completed: the device-wide preempt of the stopping call is over), so
/// that the resuming call's cost is measured alone.
pub fn hold(probe: &mut Lane<'_>) -> R<()> {
    let until = Instant::now() + HOLD;
    probe.start(1, 1_000)?;
    probe.finish()?;
    if let Some(left) = until.checked_duration_since(Instant::now()) {
        std::thread::sleep(left);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_take_the_last_completion_before_and_the_first_after() {
        // Completions every 100 µs until 1.25 ms, none while stopped, again from 5.3 ms.
        let changes = [100_000, 200_000, 1_200_000, 5_300_000, 5_400_000];
        let (stop, resume) = times(&changes, 1_000_000, 4_000_000).unwrap();
        assert_eq!((stop, resume), (200.0, 1300.0));
        // A stream that never resumed (or never ran before) gives nothing.
        assert_eq!(times(&changes[..3], 1_000_000, 4_000_000), None);
        assert_eq!(times(&changes[3..], 1_000_000, 4_000_000), None);
    }
}
