//! What the workloads launch: the spin kernel (`kernels/spin.hip`) in the shapes of measured
//! traces, or the demo's synthetic shapes.
//!
//! A trace kernel (`tools/preempt-lab/examples/traces/*.csv`, read by kfdq-trace: work-groups,
//! a work-group's wave-slot footprint in waves of 64 threads, µs per work-group on an H100)
//! becomes one launch of the spin kernel with the same work-groups, the HIP work-group of that
//! footprint (`HipLaunch::threads`: 64 threads a wave, at most 1024) and an iteration count
//! for its work-group time times the `--scale` factor (default
//! [`kfdq_trace::EMULATOR_TIME_SCALE`], which says why). The count is the kernel's only
//! argument: on a GPU the kernel takes its own time for it (the GPU's clock: each iteration is
//! one `s_sleep 1`), on kfd-emu the model's ([`SPIN_PS_PER_ITERATION`] per iteration, which the
//! demo gives the emulator as `--kernel-times`' `work_group_time_by_arg`).

use kfdq::reaction::SPIN_PS_PER_ITERATION;
use kfdq_trace::{Trace, WAVE_THREADS};

/// HIP's largest work-group.
const MAX_THREADS: u32 = 1024;

/// One launch of the spin kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    pub groups: u32,
    pub threads: u32,
    pub iterations: u64,
}

impl Launch {
    /// A launch whose work-groups last `wg_ns` in the model.
    fn timed(groups: u32, threads: u32, wg_ns: f64) -> Launch {
        Launch {
            groups: groups.max(1),
            threads: threads.clamp(1, MAX_THREADS),
            iterations: ((wg_ns * 1000.0 / SPIN_PS_PER_ITERATION as f64).round() as u64).max(1),
        }
    }
}

/// The request shape the demo asks for (`$KFDQ_DEMO_SHAPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// The demo's synthetic shapes (docs/demo.md, "What runs").
    Synthetic,
    /// The measured traces: a ResNet-18 inference request, a ResNet-50 training step.
    Resnet18,
}

impl Shape {
    /// `$KFDQ_DEMO_SHAPE`'s value; unset: the traces.
    pub fn parse(v: Option<&str>) -> Result<Shape, String> {
        match v {
            None | Some("resnet18") => Ok(Shape::Resnet18),
            Some("synthetic") => Ok(Shape::Synthetic),
            Some(o) => Err(format!(
                "KFDQ_DEMO_SHAPE={o:?}: expected synthetic or resnet18 (docs/demo.md)"
            )),
        }
    }
}

const RESNET18: (&str, &str) = (
    "tools/preempt-lab/examples/traces/h100-resnet18-b1.csv",
    include_str!("../../preempt-lab/examples/traces/h100-resnet18-b1.csv"),
);
const RESNET50_TRAIN: (&str, &str) = (
    "tools/preempt-lab/examples/traces/h100-resnet50-train.csv",
    include_str!("../../preempt-lab/examples/traces/h100-resnet50-train.csv"),
);

/// The launches of the trace `text` (the file `name`): its kernels in order, each work-group
/// time scaled by `scale`.
pub fn from_trace(name: &str, text: &str, scale: f64) -> Result<Vec<Launch>, String> {
    let launches = Trace::from_csv(name, text)
        .and_then(|t| t.hip_launches(name))
        .map_err(|e| e.to_string())?;
    Ok(launches
        .iter()
        .map(|l| Launch::timed(l.workgroups, l.threads(), l.wg_us * 1000.0 * scale))
        .collect())
}

/// The request the demo gives its workloads in `$KFDQ_DEMO_KERNELS`
/// (`WGS:WAVES:WG_US,...`: work-groups, wave64 waves per work-group, µs per work-group as the
/// emulator runs it; `kfdq demo`'s `shape::kernels_arg`), so that the real-runtime client runs
/// the very request the fakehip one does, with the demo's one scale factor.
pub fn from_kernels_arg(text: &str) -> Result<Vec<Launch>, String> {
    let bad = |k: &str| format!("$KFDQ_DEMO_KERNELS: `{k}` is not WGS:WAVES:WG_US (docs/demo.md)");
    let out = text
        .split(',')
        .map(|k| {
            let f: Vec<&str> = k.trim().split(':').collect();
            let [wgs, waves, wg_us] = f.as_slice() else {
                return Err(bad(k));
            };
            let wgs: u32 = wgs.parse().map_err(|_| bad(k))?;
            let waves: u32 = waves.parse().map_err(|_| bad(k))?;
            let wg_us: f64 = wg_us
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| bad(k))?;
            Ok(Launch::timed(
                wgs,
                waves.saturating_mul(WAVE_THREADS),
                wg_us * 1000.0,
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(out)
}

/// One latency request.
pub fn request(shape: Shape, scale: f64) -> Vec<Launch> {
    match shape {
        // 4 dispatches x 80 work-groups x 4 waves x 2 ms: the demo's kfdq-latency.
        Shape::Synthetic => vec![Launch::timed(80, 256, 2e6); 4],
        Shape::Resnet18 => {
            from_trace(RESNET18.0, RESNET18.1, scale).expect("the committed trace parses")
        }
    }
}

/// The batch job's stream of kernels (repeated), and how many make one unit of work
/// (`done` line).
pub fn batch(shape: Shape, scale: f64) -> (Vec<Launch>, usize) {
    match shape {
        // Dispatches of 2560 work-groups x 4 waves x 20 ms, one a unit: the demo's kfdq-flood.
        Shape::Synthetic => (vec![Launch::timed(2560, 256, 20e6)], 1),
        // A training step of 11182 kernels; a unit is 256 of them (about 44 a step), so that
        // the demo's window holds enough units to count.
        Shape::Resnet18 => (
            from_trace(RESNET50_TRAIN.0, RESNET50_TRAIN.1, scale)
                .expect("the committed trace parses"),
            BATCH_UNIT_KERNELS,
        ),
    }
}

/// Kernels of the training trace per unit of work.
pub const BATCH_UNIT_KERNELS: usize = 256;

#[cfg(test)]
mod tests {
    use kfdq_trace::EMULATOR_TIME_SCALE;

    use super::*;

    #[test]
    fn the_traces_become_spin_launches_of_their_shape() {
        let r = request(Shape::Resnet18, EMULATOR_TIME_SCALE);
        assert_eq!(r.len(), 145, "the ResNet-18 trace's kernels");
        // Its first kernel: 784 work-groups of 2 waves (128 threads), 1.76 µs x 10 = 17.6 µs.
        assert_eq!((r[0].groups, r[0].threads), (784, 128));
        let ns = r[0].iterations as f64 * SPIN_PS_PER_ITERATION as f64 / 1000.0;
        assert!((ns - 17_600.0).abs() < 31.0, "{ns}");
        // A footprint of 32 slots (a whole H100 SM): 1024 threads, HIP's largest work-group.
        assert_eq!(r[1].threads, 1024);
        let (b, unit) = batch(Shape::Resnet18, EMULATOR_TIME_SCALE);
        assert_eq!((b.len(), unit), (11182, 256));
        // The training step's first kernels: 2 waves, then a whole SM's footprint.
        assert_eq!((b[0].threads, b[1].threads), (128, 1024));
        let s = request(Shape::Synthetic, EMULATOR_TIME_SCALE);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].iterations, 65_625, "2 ms / 30.476 ns");
    }

    #[test]
    fn the_request_run_alone_is_the_one_the_demo_hands_over() {
        // The demo's `$KFDQ_DEMO_KERNELS` for the ResNet-18 request at the same scale: the
        // same trace read the same way gives the same launches.
        let demo = "784:2:17.600,37:16:116.160,196:8:119.680";
        let alone = request(Shape::Resnet18, EMULATOR_TIME_SCALE);
        assert_eq!(from_kernels_arg(demo).unwrap(), alone[..3]);
    }

    #[test]
    fn the_demos_request_runs_as_given() {
        let r = from_kernels_arg("784:2:17.600,1:16:2000.000").unwrap();
        assert_eq!((r[0].groups, r[0].threads), (784, 128));
        assert_eq!((r[1].groups, r[1].threads), (1, 1024));
        assert_eq!(r[1].iterations, 65_625, "2 ms / 30.476 ns");
        assert!(
            from_kernels_arg("784:2")
                .unwrap_err()
                .contains("WGS:WAVES:WG_US")
        );
        assert!(from_kernels_arg("1:1:-3").is_err());
    }

    #[test]
    fn a_bad_trace_or_shape_is_refused_with_the_rule() {
        let e = from_trace("t.csv", "workgroups,waves_per_wg\n1,2\n", 1.0).unwrap_err();
        assert!(e.starts_with("t.csv:1: the header must be"), "{e}");
        let h = "workgroups,waves_per_wg,wg_us,stream,barrier";
        let e = from_trace("t.csv", &format!("{h}\n1,2,x,0,0\n"), 1.0).unwrap_err();
        assert!(e.starts_with("t.csv:2: field wg_us"), "{e}");
        let e = from_trace("t.csv", "# nothing\n", 1.0).unwrap_err();
        assert!(e.contains("t.csv: empty"), "{e}");
        assert!(
            Shape::parse(Some("bert"))
                .unwrap_err()
                .contains("synthetic or resnet18")
        );
        assert_eq!(Shape::parse(None), Ok(Shape::Resnet18));
    }
}
