//! A simulation built from its setup: the policy configured, the partition and the jobs
//! placed, the state at time zero.

use std::collections::{BTreeMap, VecDeque};

use gfx_model::{Edit, Partition};
use kfdq::policy::{Policy, Release};

use crate::hint::Hints;
use crate::rng::Rng;
use crate::timeline::Timeline;
use crate::workload::Arrival;

use super::setup::{Control, RunResult, Setup, SetupError};
use super::{DEFAULT_PRIORITY, HP, LP, Sim, rule_priority};

impl<'a> Sim<'a> {
    pub(super) fn new(s: &'a Setup) -> Result<Sim<'a>, SetupError> {
        let mut cfg = s.policy.clone();
        for class in [&s.hp_class, &s.lp_class] {
            if !cfg.classes.iter().any(|c| &c.name == class) {
                let names: Vec<&str> = cfg.classes.iter().map(|c| c.name.as_str()).collect();
                return Err(SetupError::NoClass(class.clone(), names.join(", ")));
            }
        }
        if let Some(hp) = &s.hp
            && matches!(hp.arrival, Arrival::ClosedLoop { .. })
        {
            return Err(SetupError::Arrival(
                "the HP job needs open-loop arrivals (periodic or poisson): its latency is per request".into(),
            ));
        }
        if let Some(lp) = &s.lp
            && !matches!(lp.arrival, Arrival::ClosedLoop { .. })
        {
            return Err(SetupError::Arrival(
                "the LP job needs a closed loop (depth): its throughput is what it completes"
                    .into(),
            ));
        }
        for c in &mut cfg.classes {
            if c.name == s.lp_class {
                c.level = s.control.level();
            }
        }
        if let Control::Level(_) = s.control {
            // The old configuration: the fixed hysteresis (`hysteresis_ns`, 20 ms built in).
            cfg.release = Release::Hysteresis;
        }
        let policy = if s.control.agent() {
            Some(Policy::new(cfg.clone()).map_err(|e| SetupError::Policy(e.to_string()))?)
        } else {
            None
        };
        let (hp_prio, lp_prio) = if s.control.agent() {
            (
                rule_priority(&cfg, &s.hp_class),
                rule_priority(&cfg, &s.lp_class),
            )
        } else {
            (DEFAULT_PRIORITY, DEFAULT_PRIORITY)
        };
        let mut p = Partition::new(s.gpu, s.params);
        p.set_contention(s.contention);
        let mut edits = Vec::new();
        if s.hp.is_some() {
            edits.push(Edit::Add {
                queue: HP,
                priority: hp_prio,
                active: true,
            });
        }
        if s.lp.is_some() {
            edits.push(Edit::Add {
                queue: LP,
                priority: lp_prio,
                active: true,
            });
        }
        p.update_runlist(&edits, None);
        let depth = match s.lp.as_ref().map(|l| l.arrival) {
            Some(Arrival::ClosedLoop { depth }) => depth.max(1),
            _ => 0,
        };
        let window = cfg
            .classes
            .iter()
            .find(|c| c.name == s.lp_class)
            .and_then(|c| c.window)
            .filter(|_| s.control.agent());
        let mut rng = Rng::new(s.seed);
        let next_tick = policy
            .as_ref()
            .map(|_| (rng.next_f64() * s.host.activity_ns as f64) as u64);
        let mut sim = Sim {
            s,
            p,
            policy,
            rng,
            tag: 0,
            next_arrival: None,
            announced: VecDeque::new(),
            lead: if matches!(s.control, Control::Hinted(_)) {
                s.host.hint_lead_ns
            } else {
                0
            },
            hints: Hints::default(),
            next_request: 0,
            arrivals: BTreeMap::new(),
            hp_last: BTreeMap::new(),
            lp_limit: window.map_or(depth, |w| w.min(depth)),
            lp_in_flight: 0,
            lp_next_kernel: 0,
            held: false,
            hold_since: None,
            lp_active: true,
            reaction_from: None,
            hp_busy_since: None,
            hp_busy_ns: 0,
            next_tick,
            seen: (false, false),
            edges: matches!(s.control, Control::Edge(_) | Control::Hinted(_)),
            shim_hp_busy: false,
            fine_sample: None,
            reports: BTreeMap::new(),
            policy_due: None,
            commands: BTreeMap::new(),
            cmd_seq: 0,
            masks: BTreeMap::new(),
            r: RunResult {
                hp_latency_us: Vec::with_capacity(s.requests),
                lp_kernels: 0,
                elapsed_ns: 0,
                device_preempts: 0,
                preempt_latency_us: Vec::new(),
                reaction_us: Vec::new(),
                reactions_missed: 0,
                hp_busy_ns: None,
                completions: 0,
                hints_expired: 0,
                wg_events: 0,
                batch_events: 0,
                timeline: s.timeline.then(Timeline::default),
            },
        };
        sim.next_arrival = sim.gap_ns();
        sim.top_up_lp();
        Ok(sim)
    }
}
