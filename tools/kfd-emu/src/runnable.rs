//! When each queue stopped being runnable (deactivated by UPDATE_QUEUE, suspended by the
//! debugger) and became runnable again, on CLOCK_MONOTONIC: the other end of a controller's
//! reaction chain (`kfdq demo` pairs these times with the latency client's request starts).

use std::collections::VecDeque;

/// How many times of each kind a queue keeps (the latest ones).
pub(crate) const KEPT: usize = 1024;

/// A queue's latest runnable -> not runnable and not runnable -> runnable times, µs.
#[derive(Debug, Default, Clone)]
pub(crate) struct RunnableLog {
    pub stopped_us: VecDeque<f64>,
    pub runnable_us: VecDeque<f64>,
}

impl RunnableLog {
    /// Records that the queue became runnable (`true`) or stopped being runnable at `at_us`.
    pub fn note(&mut self, runnable: bool, at_us: f64) {
        let list = if runnable {
            &mut self.runnable_us
        } else {
            &mut self.stopped_us
        };
        if list.len() == KEPT {
            list.pop_front();
        }
        list.push_back(at_us);
    }
}

/// CLOCK_MONOTONIC now, µs (the clock the workloads print their times on).
pub(crate) fn monotonic_us() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as f64 * 1e6 + t.tv_nsec() as f64 / 1e3)
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_keeps_its_latest_times() {
        let mut log = RunnableLog::default();
        for i in 0..KEPT + 5 {
            log.note(false, i as f64);
        }
        log.note(true, 7.0);
        assert_eq!(log.stopped_us.len(), KEPT);
        assert_eq!(log.stopped_us.front(), Some(&5.0));
        assert_eq!(log.stopped_us.back(), Some(&((KEPT + 4) as f64)));
        assert_eq!(log.runnable_us, [7.0]);
    }
}
