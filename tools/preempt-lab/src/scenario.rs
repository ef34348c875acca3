//! Scenarios: a pair of workloads and the configurations to compare, run over seeds. Every
//! configuration of a seed shares that seed's arrivals, so the ratios compare like with like.

use gfx_model::{Contention, Params, Shape as GpuShape};
use kfdq::policy::{ClassRule, PolicyConfig, Release};
use kfdq::proto::Level;
use serde::Serialize;

use std::path::Path;

use crate::sim::{Control, HostParams, Setup};
use crate::trace::{self, Trace, TraceError};
use crate::workload::{Arrival, Shape, Workload};

/// Built-in scenario names.
pub const SCENARIOS: [&str; 5] = ["field", "field-synthetic", "decode", "demo", "xsched-mi50"];

/// Every configuration a scenario compares, in table order: the sampled levels (kfdq before
/// issue 27) next to the edge-driven ones with the release rule, and level 2 with request hints
/// (issue 51).
pub const CONTROLS: [Control; 9] = [
    Control::Native,
    Control::PriorityOnly,
    Control::Level(Level::Hold),
    Control::Level(Level::Deactivate),
    Control::Level(Level::Suspend),
    Control::Edge(Level::Hold),
    Control::Edge(Level::Deactivate),
    Control::Edge(Level::Suspend),
    Control::Hinted(Level::Deactivate),
];

/// The loaded-latency cap the contention terms take unless told otherwise: the value
/// `preempt-lab validate` fits on the H100's bandwidth-loop split (docs/experiments.md).
pub const LATENCY_CAP_PERMILLE: u32 = 4500;

/// MI300X's DRAM bandwidth, 5.3 TB/s (AMD's data sheet), in bytes per µs: the measured-shape
/// scenarios' contention terms.
pub const MI300X_DRAM_BYTES_PER_US: u64 = 5_300_000;

/// The measured traces the built-in scenarios run (tools/preempt-lab/examples/traces, measured
/// on an H100: docs/experiments.md, "The model against an H100"), built into the binary.
const RESNET18_B1: (&str, &str) = (
    "examples/traces/h100-resnet18-b1.csv",
    include_str!("../examples/traces/h100-resnet18-b1.csv"),
);
const LLM_DECODE: (&str, &str) = (
    "examples/traces/h100-llm-decode.csv",
    include_str!("../examples/traces/h100-llm-decode.csv"),
);
const RESNET50_TRAIN: (&str, &str) = (
    "examples/traces/h100-resnet50-train.csv",
    include_str!("../examples/traces/h100-resnet50-train.csv"),
);

/// A built-in trace as a job arriving as `arrival`.
fn builtin_trace((name, text): (&str, &str), arrival: Arrival) -> Workload {
    let t = Trace::from_csv(name, text)
        .unwrap_or_else(|e| panic!("the built-in trace {name} does not parse: {e}"));
    trace::workload(&t, name, arrival)
}

/// A configuration name [`parse_control`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error(
    "unknown configuration {0:?}: use native, priority, l1, l2, l3 (sampled, fixed hysteresis), l1e, l2e, l3e (edges, release rule) or l1h, l2h, l3h (edges and request hints)"
)]
pub struct UnknownControl(pub String);

/// A scenario name [`Scenario::named`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error(
    "unknown scenario {0:?}: built-in scenarios are {known}",
    known = SCENARIOS.join(", ")
)]
pub struct UnknownScenario(pub String);

/// Parses a configuration name (`native`, `priority`, `l1`..`l3`, `l1e`..`l3e`, `l1h`..`l3h`).
pub fn parse_control(s: &str) -> Result<Control, UnknownControl> {
    match s.trim().to_ascii_lowercase().as_str() {
        "native" => Ok(Control::Native),
        "priority" => Ok(Control::PriorityOnly),
        "l1" | "1" | "hold" => Ok(Control::Level(Level::Hold)),
        "l2" | "2" | "deactivate" => Ok(Control::Level(Level::Deactivate)),
        "l3" | "3" | "suspend" => Ok(Control::Level(Level::Suspend)),
        "l1e" => Ok(Control::Edge(Level::Hold)),
        "l2e" => Ok(Control::Edge(Level::Deactivate)),
        "l3e" => Ok(Control::Edge(Level::Suspend)),
        "l1h" => Ok(Control::Hinted(Level::Hold)),
        "l2h" => Ok(Control::Hinted(Level::Deactivate)),
        "l3h" => Ok(Control::Hinted(Level::Suspend)),
        other => Err(UnknownControl(other.into())),
    }
}

/// What a scenario runs: two jobs, the classes, and the model's parameters.
#[derive(Debug, Clone, Serialize)]
pub struct Scenario {
    /// Its name.
    pub name: String,
    /// The latency-critical job.
    pub hp: Workload,
    /// The batch job.
    pub lp: Workload,
    /// HP requests per run.
    pub requests: usize,
    /// Seeds (one run per configuration and seed).
    pub seeds: Vec<u64>,
    /// Configurations compared.
    pub controls: Vec<Control>,
    /// The classes (`[[class]]` of a kfdq.toml, or kfdq's built-in ones).
    #[serde(skip)]
    pub policy: PolicyConfig,
    /// Where the classes came from.
    pub classes_from: String,
    /// The HP job's class.
    pub hp_class: String,
    /// The LP job's class.
    pub lp_class: String,
    /// Level-3 grace period (1K GPU clocks).
    pub grace_period: u32,
    /// The partition.
    pub gpu: GpuShape,
    /// The partition model's parameters.
    pub params: Params,
    /// The model's contention terms (shared CUs and DRAM; docs/gfx-model.md), if on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contention: Option<Contention>,
    /// The host model.
    pub host: HostParams,
}

impl Scenario {
    /// The field's scenario on measured shapes (issue 51): ResNet-18 batch-1 inference as
    /// traced on an H100 (145 kernels, 0.56 ms alone here) at 20 requests/s (Poisson) next to
    /// ResNet-50 training as traced (11,182 kernels per iteration, a closed loop 8 deep), with
    /// the contention terms at MI300X's 5.3 TB/s and the direct path's measured host side
    /// ([`HostParams::direct`]); otherwise as [`Scenario::field_synthetic`].
    pub fn field() -> Scenario {
        let mut sc = Scenario::field_synthetic(1000.0);
        sc.name = "field".into();
        sc.hp = builtin_trace(RESNET18_B1, sc.hp.arrival);
        sc.lp = builtin_trace(RESNET50_TRAIN, sc.lp.arrival);
        sc.contention = Some(Contention {
            dram_bytes_per_us: MI300X_DRAM_BYTES_PER_US,
            latency_cap_permille: LATENCY_CAP_PERMILLE,
        });
        sc.host = HostParams::direct();
        sc
    }

    /// [`Scenario::field`] with an LLM's decode step as the request (the H100 trace: 208
    /// kernels of a 16-layer, d 2048 transformer at batch 1) against the same training job.
    pub fn decode() -> Scenario {
        let mut sc = Scenario::field();
        sc.name = "decode".into();
        sc.hp = builtin_trace(LLM_DECODE, sc.hp.arrival);
        sc
    }

    /// The field's scenario with synthetic shapes (docs/experiments.md; `field` before issue
    /// 51): ResNet-18-like requests at 20/s (Poisson) next to a ResNet-50-batch-like closed
    /// loop 8 deep, on an MI308X partition, with kfdq's built-in `latency` and `batch` classes;
    /// `lp_wg_us` is the batch work-group time.
    pub fn field_synthetic(lp_wg_us: f64) -> Scenario {
        Scenario {
            name: "field-synthetic".into(),
            hp: Workload::new(Shape::Resnet18, None, Arrival::Poisson { rate: 20.0 }),
            lp: Workload::new(
                Shape::Resnet50Batch,
                Some(lp_wg_us),
                Arrival::ClosedLoop { depth: 8 },
            ),
            requests: 200,
            seeds: (1..=5).collect(),
            controls: CONTROLS.to_vec(),
            policy: PolicyConfig::builtin(),
            classes_from: "kfdq's built-in classes".into(),
            hp_class: "latency".into(),
            lp_class: "batch".into(),
            grace_period: 0,
            gpu: GpuShape::mi308x(),
            params: Params::default(),
            contention: None,
            host: HostParams::default(),
        }
    }

    /// `kfdq demo`'s scenario (docs/demo.md), for setting `sim` beside `preempt-lab run`: its
    /// latency client (4 dispatches x 80 work-groups x 2 ms, periodic 15/s) next to its batch
    /// job (2560 work-groups x `lp_wg_us`, default 20 ms, 4 in flight) on an MI308X
    /// partition, with the classes the demo gives kfdqd ([`demo_policy`]).
    pub fn demo(lp_wg_us: Option<f64>) -> Scenario {
        Scenario {
            name: "demo".into(),
            hp: Workload::new(Shape::DemoRequest, None, Arrival::Periodic { rate: 15.0 }),
            lp: Workload::new(Shape::DemoBatch, lp_wg_us, Arrival::ClosedLoop { depth: 4 }),
            requests: 60,
            policy: demo_policy(),
            classes_from: "kfdq demo's classes".into(),
            ..Scenario::field_synthetic(1000.0)
        }
    }

    /// XSched's AMD experiment (OSDI '25 artifact, `hip/fig7`, docs/experiments.md): two
    /// PyTorch ResNet-152 batch-8 inference processes on an MI50, the foreground one at 7
    /// requests/s (one request, then a sleep to keep the rate: periodic), the background one
    /// back to back (a closed loop). kfdq's classes and levels stand where XSched's fixed
    /// priority (level 1) stood; `lp_wg_us` is unused (the background job is the same model).
    pub fn xsched_mi50() -> Scenario {
        let mut sc = Scenario::field_synthetic(1000.0);
        sc.name = "xsched-mi50".into();
        sc.hp = Workload::new(Shape::Resnet152B8, None, Arrival::Periodic { rate: 7.0 });
        sc.lp = Workload::new(Shape::Resnet152B8, None, Arrival::ClosedLoop { depth: 8 });
        sc.gpu = mi50();
        sc
    }

    /// What it runs, for report titles: the jobs, their arrivals, requests x seeds, classes.
    pub fn describe(&self) -> String {
        format!(
            "HP {} ({}), LP {} ({}), {} requests x {} seeds; classes: {} ({} / {})",
            self.hp.name(),
            self.hp.arrival,
            self.lp.name(),
            self.lp.arrival,
            self.requests,
            self.seeds.len(),
            self.classes_from,
            self.hp_class,
            self.lp_class
        )
    }

    /// A built-in scenario by name; `lp_wg_us` overrides the batch work-group time of a
    /// built-in batch shape (field-synthetic, demo; the traced batch jobs of field and decode
    /// and xsched-mi50's, the foreground's model, have their own).
    pub fn named(name: &str, lp_wg_us: Option<f64>) -> Result<Scenario, UnknownScenario> {
        match name {
            "field" => Ok(Scenario::field()),
            "field-synthetic" => Ok(Scenario::field_synthetic(lp_wg_us.unwrap_or(1000.0))),
            "decode" => Ok(Scenario::decode()),
            "demo" => Ok(Scenario::demo(lp_wg_us)),
            "xsched-mi50" => Ok(Scenario::xsched_mi50()),
            other => Err(UnknownScenario(other.into())),
        }
    }

    /// One run's setup: `control` with seed `seed`, with the HP and/or LP job.
    pub fn setup(&self, control: Control, seed: u64, hp: bool, lp: bool) -> Setup {
        let duration = (self.requests as f64 / hp_rate(&self.hp) * 1e9) as u64;
        Setup {
            hp: hp.then(|| self.hp.clone()),
            lp: lp.then(|| self.lp.clone()),
            control,
            policy: self.policy.clone(),
            hp_class: self.hp_class.clone(),
            lp_class: self.lp_class.clone(),
            grace_period: self.grace_period,
            gpu: self.gpu,
            params: self.params,
            contention: self.contention,
            host: self.host,
            requests: self.requests,
            duration_ns: duration,
            seed,
            timeline: false,
        }
    }
}

/// The classes `kfdq demo` writes into kfdqd's configuration (src/bin/kfdq/demo,
/// `agent_config`): `latency` rank 2 priority 13, never preempted; `batch` rank 0 priority 3,
/// its level set by each configuration, no window and no starvation guard; the fixed 20 ms
/// hysteresis (`hysteresis_ms = 20`), 1 ms between device-wide preempts.
pub fn demo_policy() -> PolicyConfig {
    let class = |name: &str, rank, priority| ClassRule {
        name: name.into(),
        rank,
        priority,
        level: None,
        starvation: None,
        cu_share_permille: None,
        window: None,
        hw_queues: None,
        hint_timeout_ms: None,
    };
    PolicyConfig {
        classes: vec![class("latency", 2, 13), class("batch", 0, 3)],
        release: Release::Hysteresis,
        hysteresis_ns: 20_000_000,
        min_preempt_interval_ns: 1_000_000,
    }
}

/// An AMD Instinct MI50 (gfx906) as the topology reports it: one XCC of 60 CUs, 10 waves per
/// SIMD x 4 SIMDs; 24 HQDs, amdkfd's count for gfx9 (irrelevant with two queues).
pub fn mi50() -> GpuShape {
    GpuShape {
        num_xcc: 1,
        cus_per_xcc: 60,
        waves_per_cu: 40,
        resident_queues: 24,
    }
}

fn hp_rate(w: &Workload) -> f64 {
    match w.arrival {
        Arrival::Periodic { rate } | Arrival::Poisson { rate } => rate,
        Arrival::ClosedLoop { .. } => 1.0,
    }
}

impl Scenario {
    /// Replaces the HP and/or LP job by the dispatches of trace files (their arrival processes
    /// stay).
    pub fn apply_traces(&mut self, hp: Option<&Path>, lp: Option<&Path>) -> Result<(), TraceError> {
        if let Some(p) = hp {
            self.hp = trace::workload(&Trace::load(p)?, &p.display().to_string(), self.hp.arrival);
        }
        if let Some(p) = lp {
            self.lp = trace::workload(&Trace::load(p)?, &p.display().to_string(), self.lp.arrival);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_parse() {
        assert_eq!(parse_control("L2"), Ok(Control::Level(Level::Deactivate)));
        assert_eq!(parse_control("priority"), Ok(Control::PriorityOnly));
        assert!(parse_control("l4").unwrap_err().to_string().contains("l3e"));
        assert_eq!(parse_control("l2e"), Ok(Control::Edge(Level::Deactivate)));
        assert!(
            Scenario::named("nope", None)
                .unwrap_err()
                .to_string()
                .contains("field, field-synthetic, decode, demo, xsched-mi50")
        );
        assert!(demo_policy().validate().is_ok());
        let d = Scenario::named("demo", None).unwrap();
        assert_eq!(d.lp.kernels[0].wg_ns, 20_000_000);
        assert_eq!(
            Scenario::named("field-synthetic", None).unwrap().lp.kernels[0].wg_ns,
            1_000_000
        );
        // The measured shapes: the traces' kernels, built in, with MI300X's bandwidth and the
        // direct path's host side.
        let f = Scenario::named("field", None).unwrap();
        assert_eq!((f.hp.kernels.len(), f.lp.kernels.len()), (145, 11182));
        assert_eq!(f.hp.shape, Shape::Trace);
        assert_eq!(f.contention.unwrap().dram_bytes_per_us, 5_300_000);
        assert_eq!(
            (f.host.edge_ns, f.host.decision_ns, f.host.command_ns),
            (72_000, 0, 30_000)
        );
        let d = Scenario::named("decode", None).unwrap();
        assert_eq!((d.hp.kernels.len(), d.lp.kernels.len()), (208, 11182));
        assert_eq!(parse_control("l2h"), Ok(Control::Hinted(Level::Deactivate)));
        // XSched's MI50 setup: one request of ResNet-152 batch 8 alone is the artifact's
        // 29.2 ms P99 within 2 % (515 rounds of 56 µs on 60 CUs x 40 slots).
        let x = Scenario::named("xsched-mi50", None).unwrap();
        assert_eq!(x.gpu.cus() * x.gpu.waves_per_cu, 2400);
        assert_eq!(x.hp.alone_ns(2400), 515 * 56_000);
        assert_eq!(x.hp.arrival, Arrival::Periodic { rate: 7.0 });
        assert_eq!(x.lp.kernels, x.hp.kernels);
    }
}
