//! What the workloads launch: the spin kernel (`kernels/spin.hip`) in the shapes of measured
//! traces, or the demo's synthetic shapes.
//!
//! A trace kernel (`tools/preempt-lab/examples/traces/*.csv`: work-groups, warps per
//! work-group, µs per work-group on an H100) becomes one launch of the spin kernel with the
//! same work-groups, the same threads per work-group (warps x 32, at most 1024: wave64s on
//! gfx9) and an iteration count for its work-group time times [`TIME_SCALE`]. The count is
//! the kernel's only argument: on a GPU the kernel takes its own time for it (the GPU's clock:
//! each iteration is one `s_sleep 1`), on kfd-emu the model's (the demo gives the emulator
//! [`PS_PER_ITERATION`] per iteration, `--kernel-times`' `work_group_time_by_arg`).

/// The one factor by which every traced kernel's work-group time is multiplied: the demo's
/// `RESNET18_SCALE` (src/bin/kfdq/demo/shape.rs, which says why: the emulator's CP polls rings,
/// so requests of a few hundred µs would measure the polls). The demo hands its request over in
/// `$KFDQ_DEMO_KERNELS`, already scaled; this factor scales the batch job's training trace and a
/// request when the workload runs on its own.
pub const TIME_SCALE: f64 = 10.0;

/// The model's time of one spin iteration, in picoseconds: `s_sleep 1` sleeps about 64 clocks
/// (AMD CDNA3 ISA reference, S_SLEEP: "approximately 64 x SIMM16[6:0] clocks"), at the
/// MI300X's peak engine clock of 2100 MHz (AMD Instinct MI300X data sheet): 30.476 ns. The loop's
/// own few instructions are not counted (an assumption; on silicon the kernel takes what it
/// takes, which `kfdq bench`'s calibration measures).
pub const PS_PER_ITERATION: u64 = 30_476;

/// Threads per warp in the traces (NVIDIA H100).
const TRACE_WARP: u32 = 32;
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
            iterations: ((wg_ns * 1000.0 / PS_PER_ITERATION as f64).round() as u64).max(1),
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

const RESNET18: &str = include_str!("../../preempt-lab/examples/traces/h100-resnet18-b1.csv");
const RESNET50_TRAIN: &str =
    include_str!("../../preempt-lab/examples/traces/h100-resnet50-train.csv");

/// The launches of a trace: its kernels in order, each work-group time scaled by `scale`.
pub fn from_trace(text: &str, scale: f64) -> Result<Vec<Launch>, String> {
    let mut out = Vec::new();
    let mut header = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split(',').collect();
        let Some(h) = &header else {
            header = Some(cols.iter().map(|c| c.to_string()).collect::<Vec<_>>());
            continue;
        };
        let col = |name: &str| -> Result<f64, String> {
            let i = h
                .iter()
                .position(|c| c == name)
                .ok_or_else(|| format!("the trace has no {name} column"))?;
            cols.get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| format!("line {}: {name} is not a number", n + 1))
        };
        let threads = (col("waves_per_wg")? as u32).saturating_mul(TRACE_WARP);
        out.push(Launch::timed(
            col("workgroups")? as u32,
            threads,
            col("wg_us")? * 1000.0 * scale,
        ));
    }
    if out.is_empty() {
        return Err("the trace has no kernels".into());
    }
    Ok(out)
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
            Ok(Launch::timed(wgs, waves.saturating_mul(64), wg_us * 1000.0))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(out)
}

/// One latency request.
pub fn request(shape: Shape, scale: f64) -> Vec<Launch> {
    match shape {
        // 4 dispatches x 80 work-groups x 4 waves x 2 ms: the demo's kfdq-latency.
        Shape::Synthetic => vec![Launch::timed(80, 256, 2e6); 4],
        Shape::Resnet18 => from_trace(RESNET18, scale).expect("the committed trace parses"),
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
            from_trace(RESNET50_TRAIN, scale).expect("the committed trace parses"),
            BATCH_UNIT_KERNELS,
        ),
    }
}

/// Kernels of the training trace per unit of work.
pub const BATCH_UNIT_KERNELS: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_traces_become_spin_launches_of_their_shape() {
        let r = request(Shape::Resnet18, TIME_SCALE);
        assert_eq!(r.len(), 145, "the ResNet-18 trace's kernels");
        // Its first kernel: 784 work-groups of 2 warps, 1.76 µs x 10 = 17.6 µs.
        assert_eq!((r[0].groups, r[0].threads), (784, 64));
        let ns = r[0].iterations as f64 * PS_PER_ITERATION as f64 / 1000.0;
        assert!((ns - 17_600.0).abs() < 31.0, "{ns}");
        // 32 warps: 1024 threads, HIP's largest work-group.
        assert_eq!(r[1].threads, 1024);
        let (b, unit) = batch(Shape::Resnet18, TIME_SCALE);
        assert_eq!((b.len(), unit), (11182, 256));
        let s = request(Shape::Synthetic, TIME_SCALE);
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].iterations, 65_625, "2 ms / 30.476 ns");
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
        assert!(
            from_trace("workgroups,waves_per_wg\n1,2\n", 1.0)
                .unwrap_err()
                .contains("wg_us")
        );
        assert!(
            from_trace("# nothing\n", 1.0)
                .unwrap_err()
                .contains("no kernels")
        );
        assert!(
            Shape::parse(Some("bert"))
                .unwrap_err()
                .contains("synthetic or resnet18")
        );
        assert_eq!(Shape::parse(None), Ok(Shape::Resnet18));
    }
}
