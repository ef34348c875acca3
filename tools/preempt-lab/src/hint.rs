//! Request hints (issue 51) in the host model: the latency process says "a request is starting"
//! `hint_lead_ns` before the request's first launch and "it is done" when its last kernel has
//! completed. The shim treats a live hint as the HP queue being busy: the hint raises the busy
//! edge a launch would raise, and the idle edge waits until no hint is live and the queue has
//! drained (the release rule then decides, as for every idle edge).
//!
//! Safety, as the product bounds it: a hint not followed by work (the request's first launch)
//! within `hint_timeout_ns` expires and is counted; once no hint is live and the queue is
//! drained, the shim reports the idle edge. A hint followed by work lives until its request ends.

/// The hints of one latency process: each live hint by its request's arrival (the first
/// launch's time less the launch delay), with the time it expires unless work follows it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Hints {
    /// (request arrival, expiry while no work has followed the hint).
    live: Vec<(u64, Option<u64>)>,
    /// Hints that expired before their work came.
    pub(crate) expired: u64,
}

impl Hints {
    /// A hint for the request arriving at `arrival`, given at `now`, expiring `timeout_ns`
    /// later unless work follows it.
    pub(crate) fn begin(&mut self, arrival: u64, now: u64, timeout_ns: u64) {
        self.live
            .push((arrival, Some(now.saturating_add(timeout_ns))));
    }

    /// The request arriving at `arrival` launched: its hint (if still live) no longer expires.
    pub(crate) fn work(&mut self, arrival: u64) {
        if let Some(h) = self.live.iter_mut().find(|h| h.0 == arrival) {
            h.1 = None;
        }
    }

    /// The request arriving at `arrival` ended: its hint (if still live) ends. Returns whether
    /// one did.
    pub(crate) fn end(&mut self, arrival: u64) -> bool {
        let before = self.live.len();
        self.live.retain(|h| h.0 != arrival);
        self.live.len() != before
    }

    /// The earliest expiry of a hint still waiting for its work.
    pub(crate) fn next_expiry(&self) -> Option<u64> {
        self.live.iter().filter_map(|h| h.1).min()
    }

    /// Expires every hint whose time is up at `now`; returns how many did.
    pub(crate) fn expire(&mut self, now: u64) -> u64 {
        let before = self.live.len();
        self.live.retain(|h| h.1.is_none_or(|e| e > now));
        let n = (before - self.live.len()) as u64;
        self.expired += n;
        n
    }

    /// Some hint is live: the shim holds the HP queue busy.
    pub(crate) fn any(&self) -> bool {
        !self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_expires_unless_work_follows_and_ends_with_its_request() {
        let mut h = Hints::default();
        h.begin(1000, 500, 300);
        h.begin(2000, 1500, 300);
        assert_eq!(h.next_expiry(), Some(800));
        h.work(1000);
        assert_eq!(h.next_expiry(), Some(1800), "work cancels the first expiry");
        assert_eq!(h.expire(1799), 0);
        assert_eq!(h.expire(1800), 1);
        assert_eq!(h.expired, 1);
        assert!(h.any(), "the first request's hint lives until it ends");
        assert!(!h.end(2000), "an expired hint does not end again");
        assert!(h.end(1000));
        assert!(!h.any());
        assert_eq!(h.next_expiry(), None);
    }
}
