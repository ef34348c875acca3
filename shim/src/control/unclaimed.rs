//! The watch for queues with work that no stream claims: when the control thread looks.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::state::{State, UNCLAIMED_GRACE};

/// When to look for queues with work that no stream claims ([`State::check_unclaimed`]): every
/// [`UNCLAIMED_GRACE`] while one is watched or for [`WATCH_AFTER_CREATE`] after a queue was
/// created (work follows creation), otherwise at the agent's ticks or the registry's changes
/// only — without an agent the thread still sleeps when nothing happens.
#[derive(Default)]
pub(super) struct UnclaimedWatch {
    created_seen: u64,
    until: Option<Instant>,
    watching: bool,
}

/// How long after a queue's creation its first work is watched for.
const WATCH_AFTER_CREATE: Duration = Duration::from_secs(10);

impl UnclaimedWatch {
    pub(super) fn check(&mut self, st: &mut State, now: Instant) {
        let created = crate::state::QUEUES_CREATED.load(Ordering::Relaxed);
        if created != self.created_seen {
            self.created_seen = created;
            self.until = Some(now + WATCH_AFTER_CREATE);
        }
        self.watching = st.check_unclaimed(now);
    }

    pub(super) fn timeout(&self, now: Instant) -> Duration {
        if self.watching || self.until.is_some_and(|u| now < u) {
            UNCLAIMED_GRACE
        } else {
            Duration::from_secs(60)
        }
    }
}
