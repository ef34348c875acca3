//! What `kfdq bench` prints: per partition a table of measurements (p50, p99, spread), the
//! CWSR fit and the arbitration verdict, and what the node could not give with its fix.

use serde::Serialize;

use super::arbitration::ArbitrationResult;
use super::samples::Samples;
use super::stats::{Fit, Summary};
use crate::table::Table;

/// The measurements, in the order printed: (name, clock, what it is).
pub const MEASUREMENTS: &[(&str, &str, &str)] = &[
    (
        "bystander_alone",
        "gpu",
        "the bystander dispatch alone (the baseline of every stall)",
    ),
    (
        "l2_idle_deactivate_call",
        "host",
        "level 2, idle queue: UPDATE_QUEUE to inactive, call",
    ),
    (
        "l2_idle_deactivate_stall",
        "gpu",
        "level 2, idle queue: bystander stall (one device-wide preempt)",
    ),
    (
        "l2_idle_activate_call",
        "host",
        "level 2, idle queue: UPDATE_QUEUE to active, call",
    ),
    (
        "l2_idle_activate_stall",
        "gpu",
        "level 2, idle queue: bystander stall at reactivation",
    ),
    (
        "l2_busy_deactivate_call",
        "host",
        "level 2, busy queue: UPDATE_QUEUE to inactive, call",
    ),
    (
        "l2_busy_deactivate_stall",
        "gpu",
        "level 2, busy queue: stall until its waves are saved",
    ),
    (
        "l2_busy_activate_call",
        "host",
        "level 2, busy queue: UPDATE_QUEUE to active, call",
    ),
    (
        "l2_busy_activate_stall",
        "gpu",
        "level 2, busy queue: stall until its waves are restored",
    ),
    (
        "l2_victim_stop",
        "host",
        "level 2, the victim's side: UPDATE_QUEUE to inactive -> its work's last completion",
    ),
    (
        "l2_victim_resume",
        "host",
        "level 2, the victim's side: UPDATE_QUEUE to active -> its work completes again",
    ),
    (
        "l3_suspend_call",
        "host",
        "level 3: DBG_TRAP SUSPEND_QUEUES on a busy child, call (returns quiesced)",
    ),
    (
        "l3_suspend_stall",
        "gpu",
        "level 3: stall until the child's waves are saved",
    ),
    (
        "l3_resume_call",
        "host",
        "level 3: DBG_TRAP RESUME_QUEUES, call",
    ),
    (
        "l3_resume_stall",
        "gpu",
        "level 3: stall until the child's waves are restored",
    ),
    (
        "l3_victim_stop",
        "host",
        "level 3, the victim's side: SUSPEND_QUEUES -> the child's work's last completion",
    ),
    (
        "l3_victim_resume",
        "host",
        "level 3, the victim's side: RESUME_QUEUES -> the child's work completes again",
    ),
    (
        "agent_reaction",
        "host",
        "through the agent: latency launch -> the batch job's last completion (it stopped)",
    ),
    (
        "agent_release",
        "host",
        "through the agent: latency work ended -> the batch job completes again",
    ),
    (
        "agent_reaction_hip",
        "host",
        "through the agent, HIP helpers: hipModuleLaunchKernel (a launch edge) -> the batch job's last completion",
    ),
    (
        "agent_release_hip",
        "host",
        "through the agent, HIP helpers: latency work ended -> the batch job completes again",
    ),
];

/// A measurement the node could not give: why, and what to change.
#[derive(Debug, Clone, Serialize)]
pub struct Unavailable {
    /// What was not measured.
    pub measurement: String,
    /// Why.
    pub why: String,
    /// What to change.
    pub fix: String,
}

impl Unavailable {
    pub fn new(measurement: &str, why: impl Into<String>, fix: impl Into<String>) -> Unavailable {
        Unavailable {
            measurement: measurement.into(),
            why: why.into(),
            fix: fix.into(),
        }
    }
}

/// One measurement's samples, µs.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: &'static str,
    /// `host` (CLOCK_MONOTONIC around the call) or `gpu` (the packet processor's timestamps).
    pub clock: &'static str,
    pub what: &'static str,
    /// Waves of the busy queue preempted (None: an idle queue, or no busy queue).
    pub busy_waves: Option<u32>,
    pub us: Summary,
}

/// One partition's results.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionReport {
    pub gpu_id: u32,
    pub gfx_target: String,
    pub cus: u32,
    pub wave_slots: u32,
    /// Waves of the bystander dispatch.
    pub bystander_waves: u32,
    /// Wave counts of the preempted busy queue.
    pub victim_waves: Vec<u32>,
    pub samples_per_measurement: u32,
    /// The spin kernel's time per iteration from its run alone (None: no spin kernel for the
    /// target; kfd-emu times work by `reserved2`, so 1).
    pub spin_ns_per_iteration: Option<f64>,
    /// Samples discarded, both sides (`discarded_late` + `discarded_victim`).
    pub discarded_samples: u32,
    /// Bystander-side samples discarded: the host's call returned after 80 % of the
    /// bystander's window.
    pub discarded_late: u32,
    /// Victim-side tries discarded: the preempted queue's stream did not complete on both
    /// sides of the preempt in time (each tried again, up to 3 x `--repeat` tries).
    pub discarded_victim: u32,
    pub rows: Vec<Row>,
    /// `stall = fixed + save x saved waves + restore x restored waves` over every stall.
    pub fit: Option<Fit>,
    pub arbitration: Option<ArbitrationResult>,
    /// The agent's level for class batch when the reaction chain was measured.
    pub agent_level: Option<kfdq::policy::Level>,
    /// The runtime of the reaction chain's helpers (`hip` or `raw`) when it was measured.
    pub agent_runtime: Option<&'static str>,
    pub unavailable: Vec<Unavailable>,
}

/// The rows of `samples`, in [`MEASUREMENTS`] order.
pub fn rows(samples: &Samples) -> Vec<Row> {
    MEASUREMENTS
        .iter()
        .flat_map(|&(name, clock, what)| {
            let calls = samples
                .calls
                .iter()
                .filter(move |((n, _), _)| *n == name)
                .map(|((_, w), v)| (*w, v.clone()));
            let stalls = samples
                .stalls
                .iter()
                .filter(move |((n, _), _)| *n == name)
                .map(|((_, w), v)| (*w, v.iter().map(|s| s.stall_ns / 1e3).collect::<Vec<_>>()));
            calls.chain(stalls).filter_map(move |(w, us)| {
                Some(Row {
                    name,
                    clock,
                    what,
                    busy_waves: (w > 0).then_some(w),
                    us: Summary::of(&us)?,
                })
            })
        })
        .collect()
}

/// Whether `r` measures the reaction chain through the agent (the only rows of
/// `--reaction-only`).
fn through_agent(r: &Row) -> bool {
    r.name.starts_with("agent_")
}

/// A level in words.
fn level_words(l: kfdq::policy::Level) -> &'static str {
    match l {
        kfdq::policy::Level::Hold => "level 1 (hold)",
        kfdq::policy::Level::Deactivate => "level 2 (deactivate)",
        kfdq::policy::Level::Suspend => "level 3 (suspend)",
    }
}

/// The report of one partition as text.
pub fn render(p: &PartitionReport) -> String {
    let shape = format!(
        "gpu {} ({}, {} CUs, {} wave slots)",
        p.gpu_id, p.gfx_target, p.cus, p.wave_slots
    );
    // A header only for what was measured: `--reaction-only` placed no bystander and no busy
    // queue of the partition's own.
    let mut out = if p.rows.iter().all(through_agent) {
        format!(
            "{shape}: the reaction chain through the agent only, {} samples each\n\n",
            p.samples_per_measurement
        )
    } else {
        format!(
            "{shape}: bystander {} waves, busy queues of {:?} waves, {} samples each\n\n",
            p.bystander_waves, p.victim_waves, p.samples_per_measurement
        )
    };
    let mut t = Table::new(&[
        "MEASUREMENT",
        ">WAVES",
        "CLOCK",
        ">P50_US",
        ">P99_US",
        ">SPREAD_US",
        ">N",
    ]);
    let mut short = false;
    for r in &p.rows {
        let asked = p.samples_per_measurement as usize;
        let n = if r.us.n < asked {
            short = true;
            format!("{} of {asked}*", r.us.n)
        } else {
            r.us.n.to_string()
        };
        t.row(vec![
            r.what.to_string(),
            r.busy_waves.map_or("-".into(), |w| w.to_string()),
            r.clock.to_string(),
            format!("{:.1}", r.us.p50),
            format!("{:.1}", r.us.p99),
            format!("{:.1}", r.us.spread),
            n,
        ]);
    }
    out.push_str(&t.render());
    if short {
        out.push_str(&format!(
            "(* fewer samples than the {} asked: the rest were discarded or did not complete; its P99 is its largest sample, and one sample gives no spread: raise --repeat)\n",
            p.samples_per_measurement
        ));
    }
    if p.discarded_late > 0 {
        out.push_str(&format!(
            "({} bystander-side samples discarded: the host's call returned after 80 % of the bystander's window; a busy host, or raise --window-ms)\n",
            p.discarded_late
        ));
    }
    if p.discarded_victim > 0 {
        out.push_str(&format!(
            "({} victim-side tries discarded: the preempted queue's work did not complete on both sides of the preempt in time, each tried again up to 3 x --repeat tries; a busy host: measure on an idle one)\n",
            p.discarded_victim
        ));
    }
    if let Some(f) = &p.fit {
        out.push_str(&format!(
            "\nCWSR fit over {} stalls at {} wave counts (stall = fixed + save x saved + restore x restored):\n  preempt_fixed_ns {:.0} ± {:.0}, save_wave_ns {:.1} ± {:.1}, restore_wave_ns {:.1} ± {:.1} (rms residual {:.0} ns)\n",
            f.samples, f.wave_counts, f.fixed_ns, f.fixed_error_ns, f.save_wave_ns, f.save_error_ns,
            f.restore_wave_ns, f.restore_error_ns, f.rms_residual_ns
        ));
    }
    if let Some(a) = &p.arbitration {
        out.push_str(&format!(
            "\narbitration: {} (high/low finish ratio across bands p50 {:.2}, inside a band p50 {:.2}; 0.5 = the higher queue first, 1 = shared; {} races discarded)\n",
            a.verdict, a.across_bands.p50, a.inside_band.p50, a.discarded
        ));
    }
    // Only where the chain gave samples.
    if let (Some(level), Some(runtime), true) = (
        p.agent_level,
        p.agent_runtime,
        p.rows.iter().any(through_agent),
    ) {
        out.push_str(&format!(
            "\nreaction chain: the agent's class batch at {}, helpers on the {runtime} runtime\n",
            level_words(level)
        ));
    }
    for u in &p.unavailable {
        out.push_str(&format!(
            "\nnot measured: {}: {}\n  fix: {}\n",
            u.measurement, u.why, u.fix
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &'static str, n: usize) -> Row {
        let (_, clock, what) = *MEASUREMENTS.iter().find(|m| m.0 == name).unwrap();
        Row {
            name,
            clock,
            what,
            busy_waves: None,
            us: Summary::of(&vec![10.0; n]).unwrap(),
        }
    }

    fn report(rows: Vec<Row>, late: u32, victim: u32) -> PartitionReport {
        PartitionReport {
            gpu_id: 1,
            gfx_target: "gfx942".into(),
            cus: 80,
            wave_slots: 2560,
            bystander_waves: 32,
            victim_waves: vec![10, 30],
            samples_per_measurement: 5,
            spin_ns_per_iteration: None,
            discarded_samples: late + victim,
            discarded_late: late,
            discarded_victim: victim,
            rows,
            fit: None,
            arbitration: None,
            agent_level: Some(kfdq::policy::Level::Deactivate),
            agent_runtime: Some("raw"),
            unavailable: vec![],
        }
    }

    #[test]
    fn discards_are_told_by_side_and_a_short_row_is_marked() {
        let text = render(&report(
            vec![row("bystander_alone", 5), row("l2_victim_stop", 1)],
            0,
            14,
        ));
        assert!(text.contains("14 victim-side tries discarded"), "{text}");
        assert!(!text.contains("--window-ms"), "{text}");
        assert!(text.contains("1 of 5*"), "{text}");
        assert!(text.contains("fewer samples than the 5 asked"), "{text}");
        let text = render(&report(vec![row("bystander_alone", 5)], 3, 0));
        assert!(
            text.contains("3 bystander-side samples discarded"),
            "{text}"
        );
        assert!(text.contains("--window-ms"), "{text}");
        assert!(!text.contains("victim-side"), "{text}");
        assert!(!text.contains('*'), "{text}");
    }

    #[test]
    fn the_reaction_chain_alone_is_said_as_such() {
        let text = render(&report(vec![row("agent_reaction", 5)], 0, 0));
        assert!(
            text.contains("the reaction chain through the agent only"),
            "{text}"
        );
        assert!(!text.contains("bystander"), "{text}");
        assert!(
            text.contains("class batch at level 2 (deactivate)"),
            "{text}"
        );
        // No chain samples: no line about the chain's class.
        let mut r = report(vec![row("bystander_alone", 5)], 0, 0);
        r.rows.push(row("l2_idle_deactivate_call", 5));
        let text = render(&r);
        assert!(!text.contains("reaction chain"), "{text}");
        assert!(text.contains("bystander 32 waves"), "{text}");
    }
}
