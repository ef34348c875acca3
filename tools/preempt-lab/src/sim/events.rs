//! The event loop in virtual time: requests arriving and launching, kernels completing,
//! the LP job kept full, the shim's samples of the HP queue.

use gfx_model::Dispatch;

use crate::workload::Arrival;

use super::{HP, LP, Sim, footprint};

impl Sim<'_> {
    pub(super) fn gap_ns(&mut self) -> Option<u64> {
        match self.s.hp.as_ref()?.arrival {
            Arrival::Periodic { rate } => Some((1e9 / rate) as u64),
            Arrival::Poisson { rate } => Some(self.rng.exp_ns(1e9 / rate)),
            Arrival::ClosedLoop { .. } => None,
        }
    }

    pub(super) fn dispatch(&mut self, k: crate::workload::Kernel) -> Dispatch {
        self.tag += 1;
        Dispatch {
            tag: self.tag,
            workgroups: k.workgroups,
            waves_per_wg: k.waves_per_wg,
            wg_ns: k.wg_ns,
            barrier: true,
        }
    }

    pub(super) fn top_up_lp(&mut self) {
        let Some(lp) = self.s.lp.as_ref() else {
            return;
        };
        while !self.held && self.lp_in_flight < self.lp_limit {
            let k = lp.kernels[self.lp_next_kernel % lp.kernels.len()];
            self.lp_next_kernel += 1;
            let d = self.dispatch(k);
            self.p.submit_with(LP, d, footprint(&k));
            self.lp_in_flight += 1;
        }
    }

    pub(super) fn hp_done(&self) -> bool {
        match self.s.hp {
            Some(_) => self.r.hp_latency_us.len() >= self.s.requests,
            None => self.p.now() >= self.s.duration_ns,
        }
    }

    pub(super) fn run(&mut self) {
        let preempts_before = self.p.stats().device_preempts;
        while !self.hp_done() {
            let submit_at = self.arrivals.keys().next().copied();
            let candidates = [
                self.next_arrival.map(|a| a.saturating_sub(self.lead)),
                self.announced.front().copied(),
                self.hints.next_expiry(),
                submit_at,
                self.next_tick,
                self.fine_sample,
                self.reports.keys().next().map(|k| k.0),
                self.policy_due,
                self.commands.keys().next().map(|k| k.0),
                self.p.next_event(),
                self.s.hp.is_none().then_some(self.s.duration_ns),
            ];
            let Some(t) = candidates.into_iter().flatten().min() else {
                break;
            };
            let t = t.max(self.p.now());
            self.p.advance_to(t);
            self.completions(t);
            // Events due at or before `t` (the partition's clock can be ahead of one: a runlist
            // update moves it).
            let due = |e: Option<u64>| e.filter(|&e| e <= t);
            if let Some(a) = self
                .next_arrival
                .filter(|a| a.saturating_sub(self.lead) <= t)
            {
                // Announced: a hinted request's hint comes now, `lead` before it arrives.
                self.announced.push_back(a);
                if self.lead > 0 {
                    self.hints.begin(a, t, self.s.host.hint_timeout_ns);
                    self.raise_busy(t);
                }
                self.next_arrival = self.gap_ns().map(|g| a + g.max(1));
            }
            while let Some(&a) = self.announced.front() {
                if a > t {
                    break;
                }
                self.announced.pop_front();
                self.arrivals.insert(a + self.s.host.launch_ns, a);
            }
            if due(self.hints.next_expiry()).is_some() {
                self.r.hints_expired += self.hints.expire(t);
                self.idle_unless_busy(t);
            }
            while let Some((&at, &arrival)) = self.arrivals.iter().next() {
                if at > t {
                    break;
                }
                self.arrivals.remove(&at);
                self.submit_request(arrival);
            }
            while let Some(entry) = self.commands.first_entry() {
                if entry.key().0 > t {
                    break;
                }
                let cmd = entry.remove();
                self.apply(t, cmd);
            }
            if due(self.fine_sample).is_some() {
                self.fine_sample_hp(t);
            }
            let mut news = false;
            while let Some(entry) = self.reports.first_entry() {
                if entry.key().0 > t {
                    break;
                }
                let busy = entry.remove();
                news |= busy != self.seen.0;
                self.seen.0 = busy;
            }
            if let Some(tick) = due(self.next_tick) {
                self.next_tick = Some(tick + self.s.host.activity_ns);
                // Edge configurations sample the LP queue only; the HP queue reports its edges.
                let hp = if self.edges {
                    self.seen.0
                } else {
                    self.p.pending_packets(HP) > 0
                };
                let now = (hp, self.p.pending_packets(LP) > 0);
                news |= now != self.seen;
                self.seen = now;
            }
            if news || self.policy_due.is_some_and(|d| d <= t) {
                self.decide(t);
            }
        }
        self.r.elapsed_ns = self.p.now();
        if let Some(since) = self.hp_busy_since {
            self.hp_busy_ns += self.r.elapsed_ns.saturating_sub(since);
        }
        self.r.hp_busy_ns = self.s.hp.is_some().then_some(self.hp_busy_ns);
        self.r.device_preempts = self.p.stats().device_preempts - preempts_before;
        let stats = self.p.stats();
        self.r.wg_events = stats.wg_events;
        self.r.batch_events = stats.batch_events;
        if let Some(tl) = self.r.timeline.as_mut() {
            tl.end_ns = self.r.elapsed_ns;
        }
    }

    pub(super) fn submit_request(&mut self, arrival: u64) {
        let Some(hp) = self.s.hp.as_ref() else {
            return;
        };
        let range = hp.request(self.next_request);
        self.next_request += 1;
        let t = self.p.now();
        if self.p.pending_packets(HP) == 0 {
            self.hp_busy_since = Some(t);
            if self.lp_on_gpu() && self.reaction_from.is_none() {
                self.reaction_from = Some(t);
            }
        }
        self.hints.work(arrival);
        if self.edges {
            self.raise_busy(t);
        }
        if let Some(tl) = self.r.timeline.as_mut() {
            tl.hp_launch_ns.push(t);
        }
        for i in range {
            let k = hp.kernels[i];
            let d = self.dispatch(k);
            self.p.submit_with(HP, d, footprint(&k));
        }
        self.hp_last.insert(self.tag, arrival);
    }

    /// The launch (or hint) that makes the shim's HP queue busy reports it; fine sampling
    /// starts.
    pub(super) fn raise_busy(&mut self, t: u64) {
        if !self.shim_hp_busy {
            self.shim_hp_busy = true;
            self.report(t + self.s.host.edge_ns, true);
            self.fine_sample = Some(t + self.s.host.busy_sample_ns.max(1));
        }
    }

    /// A hint ended or expired: with no hint live and the HP queue drained, the shim reports
    /// the idle edge now rather than at its next sample.
    pub(super) fn idle_unless_busy(&mut self, t: u64) {
        if self.shim_hp_busy && !self.hints.any() && self.p.pending_packets(HP) == 0 {
            self.shim_hp_busy = false;
            self.fine_sample = None;
            self.report(t + self.s.host.edge_ns, false);
        }
    }

    /// The shim's fine sample of a busy HP queue: drained (and no hint live) -> the idle edge
    /// is reported.
    pub(super) fn fine_sample_hp(&mut self, t: u64) {
        self.idle_unless_busy(t);
        if self.shim_hp_busy {
            self.fine_sample = Some(t + self.s.host.busy_sample_ns.max(1));
        }
    }
}
