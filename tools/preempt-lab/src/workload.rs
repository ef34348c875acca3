//! Workloads: what a job submits (its kernels' shapes) and when (its arrival process).
//!
//! The built-in shapes are named guesses shaped after the workloads of docs/experiments.md;
//! no public source gives per-kernel work-group counts and times for them on gfx942, so each
//! is documented with its reasoning there, and the scenarios sweep the batch job's work-group
//! time, the parameter the results depend on most.

use serde::Serialize;

/// One kernel launch: a dispatch of `workgroups` work-groups of `waves_per_wg` waves, each
/// running `wg_ns` once it has its wave slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Kernel {
    /// Work-groups in the grid.
    pub workgroups: u64,
    /// Waves per work-group (256 threads = 4 waves of 64), or the wave slots one occupies where
    /// registers or LDS let fewer work-groups share a CU.
    pub waves_per_wg: u32,
    /// Time of one work-group (alone on its CU, where the trace gives `cu_util`).
    pub wg_ns: u64,
    /// Share of its CU's issue rate one work-group uses, permille (0: not given; gfx-model's
    /// `Footprint`).
    #[serde(skip_serializing_if = "is_zero")]
    pub cu_util_permille: u16,
    /// DRAM bytes one work-group moves (0: not given).
    #[serde(skip_serializing_if = "is_zero")]
    pub dram_bytes: u64,
}

fn is_zero<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// A built-in shape: the kernels of one request (latency-critical jobs) or one iteration
/// (batch jobs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Shape {
    /// ResNet-18 inference at batch 1: 60 dispatches (about 20 convolutions with their
    /// normalisation, activation and pooling kernels) x 64 work-groups x 40 µs: 2.4 ms alone,
    /// the field's 2.65 ms less host overhead.
    Resnet18,
    /// ResNet-50 training at batch 1024: one convolution as GEMM tiles per iteration, 20480
    /// work-groups; the work-group time is the main unknown (`lp_wg_us`, swept).
    Resnet50Batch,
    /// BERT-base inference, sequence 128: 12 layers x 6 kernels x 96 work-groups x 25 µs
    /// (about 1.7 ms alone).
    Bert,
    /// One LLM decode step: 32 layers x 4 kernels x 32 work-groups x 15 µs (about 1.9 ms per
    /// token), 16 tokens per request.
    LlmDecode,
    /// `kfdq demo`'s latency client (kfdq-latency): 4 dispatches x 80 work-groups x 2 ms per
    /// request, 8 ms alone (docs/demo.md).
    DemoRequest,
    /// `kfdq demo`'s batch job (kfdq-flood): dispatches of 2560 work-groups x 20 ms, 80 ms
    /// alone (four rounds of an MI308X partition's wave slots).
    DemoBatch,
    /// ResNet-152 inference at batch 8 (XSched's MI50 experiment, docs/experiments.md): 515
    /// dispatches (155 convolutions, their batch norms and ReLUs, 50 additions, pooling, the
    /// classifier: PyTorch eager) x 600 work-groups x 4 waves (one full round of an MI50's 60
    /// CUs x 40 slots) x 56 µs: 28.8 ms alone on an MI50, the artifact's 29.2 ms P99 alone.
    Resnet152B8,
    /// The dispatches of a user's trace file (`--hp-trace`, `--lp-trace`; [`crate::trace`]).
    Trace,
    /// A user's command run by `preempt-lab run` (`--hp-command`, `--lp-command`): its kernels
    /// are whatever it launches, so it has none here.
    External,
}

/// A workload shape name [`Shape::parse`] does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error(
    "unknown workload shape {0:?}: use one of {known}",
    known = Shape::ALL.map(Shape::name).join(", ")
)]
pub struct UnknownShape(pub String);

impl Shape {
    /// Every built-in shape (with kernels of its own), for `--help` and listings.
    pub const ALL: [Shape; 7] = [
        Shape::Resnet18,
        Shape::Resnet50Batch,
        Shape::Bert,
        Shape::LlmDecode,
        Shape::DemoRequest,
        Shape::DemoBatch,
        Shape::Resnet152B8,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Resnet18 => "resnet18",
            Shape::Resnet50Batch => "resnet50-batch",
            Shape::Bert => "bert",
            Shape::LlmDecode => "llm-decode",
            Shape::DemoRequest => "demo-request",
            Shape::DemoBatch => "demo-batch",
            Shape::Resnet152B8 => "resnet152-b8",
            Shape::Trace => "trace",
            Shape::External => "external",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<Shape, UnknownShape> {
        Shape::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| UnknownShape(s.into()))
    }

    /// The kernels of one request or iteration; `wg_us` overrides the work-group time.
    pub fn kernels(self, wg_us: Option<f64>) -> Vec<Kernel> {
        let k = |n: usize, workgroups: u64, default_us: f64| {
            let wg_ns = (wg_us.unwrap_or(default_us) * 1000.0) as u64;
            vec![
                Kernel {
                    workgroups,
                    waves_per_wg: 4,
                    wg_ns,
                    cu_util_permille: 0,
                    dram_bytes: 0,
                };
                n
            ]
        };
        match self {
            Shape::Resnet18 => k(60, 64, 40.0),
            Shape::Resnet50Batch => k(1, 20_480, 1000.0),
            Shape::Bert => k(72, 96, 25.0),
            Shape::LlmDecode => k(32 * 4 * 16, 32, 15.0),
            Shape::DemoRequest => k(4, 80, 2000.0),
            Shape::DemoBatch => k(1, 2560, 20_000.0),
            Shape::Resnet152B8 => k(515, 600, 56.0),
            Shape::Trace | Shape::External => Vec::new(),
        }
    }
}

/// When a job submits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Arrival {
    /// One request every `1 / rate` seconds (open loop).
    Periodic {
        /// Requests per second.
        rate: f64,
    },
    /// Requests at exponentially distributed gaps with mean `1 / rate` (open loop).
    Poisson {
        /// Requests per second.
        rate: f64,
    },
    /// Keeps `depth` kernels queued, submitting one as one completes (a training loop that
    /// runs ahead of the GPU, as PyTorch does).
    ClosedLoop {
        /// Kernels kept in flight.
        depth: u32,
    },
}

impl std::fmt::Display for Arrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrival::Periodic { rate } => write!(f, "periodic {rate}/s"),
            Arrival::Poisson { rate } => write!(f, "poisson {rate}/s"),
            Arrival::ClosedLoop { depth } => write!(f, "closed loop, {depth} in flight"),
        }
    }
}

/// A job: a shape and an arrival process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Workload {
    /// The shape.
    pub shape: Shape,
    /// Its kernels: one request's (built-in shapes), or every dispatch of a trace file in order.
    pub kernels: Vec<Kernel>,
    /// When it submits.
    pub arrival: Arrival,
    /// The trace file the kernels came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// Where each request ends in `kernels` (exclusive), from a trace file; empty: one request
    /// of every kernel. A latency-critical job submits request `i mod n` as its `i`-th; a batch
    /// job cycles through the kernels regardless.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub request_ends: Vec<usize>,
}

impl Workload {
    /// A workload of `shape` (work-group time overridden by `wg_us`) arriving as `arrival`.
    pub fn new(shape: Shape, wg_us: Option<f64>, arrival: Arrival) -> Workload {
        Workload {
            shape,
            kernels: shape.kernels(wg_us),
            arrival,
            trace: None,
            request_ends: Vec::new(),
        }
    }

    /// The kernels (indices into `kernels`) of the `i`-th request.
    pub fn request(&self, i: usize) -> std::ops::Range<usize> {
        if self.request_ends.is_empty() {
            return 0..self.kernels.len();
        }
        let n = i % self.request_ends.len();
        let start = if n == 0 { 0 } else { self.request_ends[n - 1] };
        start..self.request_ends[n]
    }

    /// Its name in reports: the shape, or the trace file.
    pub fn name(&self) -> String {
        match &self.trace {
            Some(f) => format!("trace {f}"),
            None => self.shape.name().into(),
        }
    }

    /// A user's command (`preempt-lab run`) arriving as `arrival`: no kernels of its own here.
    pub fn external(arrival: Arrival) -> Workload {
        Workload {
            shape: Shape::External,
            kernels: Vec::new(),
            arrival,
            trace: None,
            request_ends: Vec::new(),
        }
    }

    /// Time of one request or iteration alone on `slots` wave slots (each kernel in
    /// ceil(waves / slots) rounds of its work-group time), in ns.
    pub fn alone_ns(&self, slots: u64) -> u64 {
        self.kernels
            .iter()
            .map(|k| {
                let waves = k.workgroups * u64::from(k.waves_per_wg);
                waves.div_ceil(slots.max(1)) * k.wg_ns
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_resnet18_is_the_fields_request() {
        for s in Shape::ALL {
            assert_eq!(Shape::parse(s.name()), Ok(s));
        }
        assert!(
            Shape::parse("vgg")
                .unwrap_err()
                .to_string()
                .contains("resnet18")
        );
        let w = Workload::new(Shape::Resnet18, None, Arrival::Poisson { rate: 20.0 });
        // 64 x 4 waves fit in one round of 80 CUs x 32 slots: 60 x 40 µs.
        assert_eq!(w.alone_ns(80 * 32), 2_400_000);
        let lp = Workload::new(
            Shape::Resnet50Batch,
            Some(250.0),
            Arrival::ClosedLoop { depth: 8 },
        );
        assert_eq!(lp.kernels[0].wg_ns, 250_000);
        // 81920 waves on 2560 slots: 32 rounds.
        assert_eq!(lp.alone_ns(2560), 32 * 250_000);
        // kfdq demo's workloads: 8 ms a request, 80 ms a batch dispatch (docs/demo.md).
        let hp = Workload::new(Shape::DemoRequest, None, Arrival::Periodic { rate: 15.0 });
        assert_eq!(hp.alone_ns(2560), 8_000_000);
        let lp = Workload::new(Shape::DemoBatch, None, Arrival::ClosedLoop { depth: 4 });
        assert_eq!(lp.alone_ns(2560), 80_000_000);
        assert!(Shape::parse("external").is_err());
    }
}
