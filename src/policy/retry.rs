//! Releases the kernel refused, owed until they hold.
//!
//! A release (level 2's reactivation, level 3's RESUME_QUEUES) that fails — an agent's release,
//! a fail-open after the agent went away, a lease that ran out — leaves a queue preempted that
//! nobody wants preempted. Neither the shim nor the agent's tracer forgets it: the queue is owed
//! a release, tried again with backoff ([`RETRY_FIRST`] doubling up to [`RETRY_MAX`]) until the
//! kernel takes it, or until the queue is preempted again at that level on purpose (then nothing
//! is owed). Their alarm: a log line and a warning when a release first fails, a log line when it
//! holds, and the registry's `release_failures` counter (the agent's `kfdq status` and metrics).
//!
//! Pure bookkeeping: the caller makes the calls and says what happened.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The first retry comes this long after a failed release: long enough for a kernel that
/// refused with EBUSY/EAGAIN (a runlist update in progress) to be done, short against the
/// lease (a starving queue is what the lease exists to end).
pub const RETRY_FIRST: Duration = Duration::from_millis(10);

/// Retries back off to one per this long: a kernel that keeps refusing (a GPU in reset) is
/// asked once a second, not flooded; the queue is released within a second of the kernel
/// taking calls again.
pub const RETRY_MAX: Duration = Duration::from_secs(1);

/// The releases owed and when to try them again.
#[derive(Debug, Default)]
pub struct Owed {
    /// Queues to reactivate (level 2).
    pub activate: BTreeSet<u32>,
    /// Queues to resume (level 3).
    pub resume: BTreeSet<u32>,
    /// Failed attempts in the current episode (since nothing was owed).
    pub attempts: u32,
    /// When to try again (`None`: nothing owed).
    pub next: Option<Instant>,
    /// Releases of a queue the kernel refused, in all (the registry's `release_failures`).
    pub failures: u64,
}

impl Owed {
    /// Empty (`const`: the shim's registry is a static).
    pub const fn new() -> Owed {
        Owed {
            activate: BTreeSet::new(),
            resume: BTreeSet::new(),
            attempts: 0,
            next: None,
            failures: 0,
        }
    }

    /// A release of `queue` failed (`level3`: a resume): owed, first retry scheduled.
    /// Returns whether this starts an episode (nothing was owed before).
    pub fn failed(&mut self, queue: u32, level3: bool, now: Instant) -> bool {
        self.failures += 1;
        let first = self.is_empty();
        if level3 {
            self.resume.insert(queue);
        } else {
            self.activate.insert(queue);
        }
        if self.next.is_none() {
            self.next = Some(now + RETRY_FIRST);
        }
        first
    }

    /// `queue` was released, or preempted again at that level (the agent wants it so now):
    /// nothing owed for it. Returns whether this ended an episode (something was owed, now
    /// nothing), with the attempts it took.
    pub fn settled(&mut self, queue: u32, level3: bool) -> Option<u32> {
        let was = !self.is_empty();
        if level3 {
            self.resume.remove(&queue);
        } else {
            self.activate.remove(&queue);
        }
        if was && self.is_empty() {
            let attempts = std::mem::take(&mut self.attempts);
            self.next = None;
            return Some(attempts);
        }
        None
    }

    /// Whether nothing is owed.
    pub fn is_empty(&self) -> bool {
        self.activate.is_empty() && self.resume.is_empty()
    }

    /// Whether a retry is due at `now`.
    pub fn due(&self, now: Instant) -> bool {
        self.next.is_some_and(|n| now >= n)
    }

    /// How long the control thread may sleep before the next retry (`None`: none owed).
    pub fn wait(&self, now: Instant) -> Option<Duration> {
        self.next.map(|n| n.saturating_duration_since(now))
    }

    /// A retry ran and something is still owed: the next one after the backoff.
    pub fn retried(&mut self, now: Instant) {
        if self.is_empty() {
            self.next = None;
            return;
        }
        self.attempts = self.attempts.saturating_add(1);
        self.next = Some(now + backoff(self.attempts));
    }

    /// Forgets queues that left the registry.
    pub fn retain(&mut self, exists: impl Fn(u32) -> bool) {
        self.activate.retain(|q| exists(*q));
        self.resume.retain(|q| exists(*q));
        if self.is_empty() {
            self.next = None;
            self.attempts = 0;
        }
    }
}

/// The wait after the `attempts`-th failed retry: [`RETRY_FIRST`] doubled, at most
/// [`RETRY_MAX`].
pub fn backoff(attempts: u32) -> Duration {
    RETRY_FIRST
        .saturating_mul(1u32 << attempts.min(16))
        .min(RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_its_cap() {
        assert_eq!(backoff(0), RETRY_FIRST);
        assert_eq!(backoff(1), RETRY_FIRST * 2);
        assert_eq!(backoff(3), RETRY_FIRST * 8);
        assert_eq!(backoff(7), RETRY_MAX);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
    }

    #[test]
    fn an_episode_runs_from_the_first_failure_to_the_last_release() {
        let t0 = Instant::now();
        let mut o = Owed::new();
        assert!(o.failed(1, false, t0), "starts an episode");
        assert!(!o.failed(2, true, t0));
        assert!(!o.due(t0));
        assert!(o.due(t0 + RETRY_FIRST));
        o.retried(t0 + RETRY_FIRST);
        assert_eq!(o.wait(t0 + RETRY_FIRST), Some(backoff(1)));
        assert_eq!(o.settled(1, false), None, "queue 2 still owed");
        assert_eq!(o.settled(2, true), Some(1), "one retry before it held");
        assert!(o.is_empty() && o.next.is_none() && o.attempts == 0);
        assert_eq!(o.failures, 2);
        o.failed(3, false, t0);
        o.retain(|q| q != 3);
        assert!(
            o.is_empty() && o.next.is_none(),
            "a destroyed queue is owed nothing"
        );
    }
}
