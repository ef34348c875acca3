//! The latency client's request (`kfdq demo --request-shape`): the synthetic one (a few long
//! dispatches) or a real-shaped one (ResNet-18 batch 1 as traced on an H100: many short
//! kernels), scaled to the emulator's speed. docs/demo.md, "What runs", says why the scale.

use super::super::CliError;
use super::super::args::RequestShape;

/// ResNet-18 inference, batch 1, as traced on an H100 (docs/experiments.md, "The model against
/// an H100"): 145 kernels, 505 µs of block time, 0.56 ms alone there.
const RESNET18_TRACE: &str =
    include_str!("../../../../tools/preempt-lab/examples/traces/h100-resnet18-b1.csv");

/// Emulator time per H100 time for the `resnet18` request. The emulator's CP looks at rings
/// every 200 µs while work is in flight and every 1.6 ms while idle (docs/kfd-emulator.md), so
/// a request's first kernel waits up to a poll before it starts and a 0.56 ms request alone
/// would measure the polls, not the GPU. At 10x the trace's 505 µs of block time is ~5 ms, a
/// request's reaction and save are the same fraction of it as on the H100 only if they scale
/// too — they do not (the agent's ~300 µs is host time), so the scaled request is, relative to
/// its reaction, 10x easier to protect than the H100's; docs/demo.md states the measurement.
pub const RESNET18_SCALE: f64 = 10.0;

/// The synthetic request: this many dispatches of this many work-groups (4 waves each) of
/// this long, on the null stream. 8 ms alone on an MI308X partition — the field's ResNet-18 P99
/// was 2.65 ms, so the demo runs about 3x slower than the field.
const SYNTH_KERNELS: u32 = 4;
const SYNTH_WGS: u32 = 80;
const SYNTH_WG_US: u32 = 2000;

/// One dispatch of a request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Dispatch {
    /// Work-groups.
    pub wgs: u32,
    /// Waves per work-group.
    pub waves: u32,
    /// µs per work-group (as the emulator runs it).
    pub wg_us: f64,
}

/// The most waves a HIP work-group has (1024 threads of 64). A trace's `waves_per_wg` is a
/// wave-slot footprint on the H100 (up to an SM's 32 where registers or shared memory let one
/// block hold a whole SM); ResNet-18 has 20 such kernels (82 µs of its 505 µs block time), which
/// run here as 16 waves, two work-groups to a CU where the H100 ran one to an SM.
const MAX_WAVES: u32 = 16;

/// The dispatches of a preempt-lab trace (`workgroups,waves_per_wg,wg_us,...`, `#` comments),
/// each work-group's time multiplied by `scale`.
fn parse_trace(text: &str, scale: f64) -> Result<Vec<Dispatch>, String> {
    let mut out = Vec::new();
    let mut header = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !header {
            header = true;
            if !line.starts_with("workgroups,waves_per_wg,wg_us") {
                return Err(format!("line {}: header `{line}`", i + 1));
            }
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let bad = || format!("line {}: `{line}`", i + 1);
        let (Some(w), Some(v), Some(u)) = (f.first(), f.get(1), f.get(2)) else {
            return Err(bad());
        };
        out.push(Dispatch {
            wgs: w.parse().map_err(|_| bad())?,
            waves: v.parse::<u32>().map_err(|_| bad())?.min(MAX_WAVES),
            wg_us: u.parse::<f64>().map_err(|_| bad())? * scale,
        });
    }
    Ok(out)
}

impl RequestShape {
    /// Its name on the command line and in `$KFDQ_DEMO_SHAPE`.
    pub fn name(self) -> &'static str {
        match self {
            RequestShape::Synthetic => "synthetic",
            RequestShape::Resnet18 => "resnet18",
        }
    }

    /// The request's dispatches, in order, as the emulator runs them.
    pub fn dispatches(self) -> Result<Vec<Dispatch>, CliError> {
        match self {
            RequestShape::Synthetic => Ok(vec![
                Dispatch {
                    wgs: SYNTH_WGS,
                    waves: 4,
                    wg_us: f64::from(SYNTH_WG_US),
                };
                SYNTH_KERNELS as usize
            ]),
            RequestShape::Resnet18 => parse_trace(RESNET18_TRACE, RESNET18_SCALE)
                .map_err(|e| CliError::Output(format!("the built-in ResNet-18 trace: {e}"))),
        }
    }

    /// The built-in latency client's arguments after `N GAP_MS`.
    pub fn client_args(self) -> Result<Vec<String>, CliError> {
        Ok(match self {
            RequestShape::Synthetic => vec![
                SYNTH_KERNELS.to_string(),
                SYNTH_WG_US.to_string(),
                SYNTH_WGS.to_string(),
            ],
            RequestShape::Resnet18 => vec!["--kernels".into(), kernels_arg(&self.dispatches()?)],
        })
    }

    /// The request in words, for the table's header.
    pub fn describe(self) -> Result<String, CliError> {
        let d = self.dispatches()?;
        let block_ms: f64 = d.iter().map(|k| k.wg_us).sum::<f64>() / 1e3;
        Ok(match self {
            RequestShape::Synthetic => format!(
                "{SYNTH_KERNELS} dispatches x {SYNTH_WGS} work-groups x {} ms on the null stream per request (~8 ms alone; the field's ResNet-18: 2.65 ms, so time runs ~3x slower here)",
                SYNTH_WG_US / 1000
            ),
            RequestShape::Resnet18 => format!(
                "ResNet-18 batch 1 as traced on an H100, {} kernels on the null stream per request, each work-group {RESNET18_SCALE}x its H100 time ({block_ms:.1} ms of block time; 0.56 ms alone on the H100)",
                d.len()
            ),
        })
    }
}

/// `WGS:WAVES:WG_US,...`: the dispatches as the latency client's `--kernels` and
/// `$KFDQ_DEMO_KERNELS` take them.
pub fn kernels_arg(d: &[Dispatch]) -> String {
    d.iter()
        .map(|k| format!("{}:{}:{:.3}", k.wgs, k.waves, k.wg_us))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resnet18_request_is_the_trace_scaled() {
        let d = RequestShape::Resnet18.dispatches().unwrap();
        assert_eq!(d.len(), 145, "the trace's kernel count");
        let unscaled: f64 = parse_trace(RESNET18_TRACE, 1.0)
            .unwrap()
            .iter()
            .map(|k| k.wg_us)
            .sum();
        assert!((unscaled - 504.934).abs() < 0.01, "{unscaled}");
        assert_eq!(d[0].wgs, 784);
        assert_eq!(d[0].waves, 2);
        assert!((d[0].wg_us - 1.76 * RESNET18_SCALE).abs() < 1e-9);
        let arg = kernels_arg(&d);
        assert_eq!(arg.split(',').count(), 145);
        assert!(arg.starts_with(&format!("784:2:{:.3},", 1.76 * RESNET18_SCALE)));
    }

    #[test]
    fn a_trace_line_that_is_not_numbers_is_refused_with_its_line() {
        let e = parse_trace("# c\nworkgroups,waves_per_wg,wg_us\n1,2,x\n", 1.0).unwrap_err();
        assert!(e.contains("line 3"), "{e}");
        assert!(parse_trace("a,b\n", 1.0).unwrap_err().contains("header"));
    }

    #[test]
    fn the_synthetic_request_is_the_clients_old_arguments() {
        assert_eq!(
            RequestShape::Synthetic.client_args().unwrap(),
            ["4", "2000", "80"]
        );
        assert_eq!(
            kernels_arg(&RequestShape::Synthetic.dispatches().unwrap()),
            "80:4:2000.000,80:4:2000.000,80:4:2000.000,80:4:2000.000"
        );
    }
}
