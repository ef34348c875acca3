//! The latency client's request (`kfdq demo --request-shape`): the synthetic one (a few long
//! dispatches) or a real-shaped one (ResNet-18 batch 1 as traced on an H100: many short
//! kernels), its work-group times x [`EMULATOR_TIME_SCALE`] (the one factor for traces on the
//! emulator; it and docs/demo.md, "What runs", say why).

use kfdq_trace::EMULATOR_TIME_SCALE;

use super::super::CliError;
use super::super::args::RequestShape;

/// The ResNet-18 trace's path, naming it in errors.
const RESNET18_NAME: &str = "tools/preempt-lab/examples/traces/h100-resnet18-b1.csv";
/// ResNet-18 inference, batch 1, as traced on an H100 (docs/experiments.md, "The model against
/// an H100"): 145 kernels, 505 µs of block time, 0.56 ms alone there.
const RESNET18_TRACE: &str =
    include_str!("../../../../tools/preempt-lab/examples/traces/h100-resnet18-b1.csv");

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

/// The dispatches of a trace (read by kfdq-trace, tools/trace), each work-group's time
/// multiplied by `scale`. Each runs as a HIP work-group of the trace's `waves_per_wg`, at most
/// 16 waves ([`kfdq_trace::Dispatch::hip_launch`]): ResNet-18 has 20 kernels whose footprint is
/// a whole H100 SM (82 µs of its 505 µs block time), which run here as 16 waves, two
/// work-groups to a CU where the H100 ran one to an SM.
fn from_trace(name: &str, text: &str, scale: f64) -> Result<Vec<Dispatch>, String> {
    let launches = kfdq_trace::Trace::from_csv(name, text)
        .and_then(|t| t.hip_launches(name))
        .map_err(|e| e.to_string())?;
    Ok(launches
        .iter()
        .map(|l| Dispatch {
            wgs: l.workgroups,
            waves: l.waves,
            wg_us: l.wg_us * scale,
        })
        .collect())
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
            RequestShape::Resnet18 => {
                from_trace(RESNET18_NAME, RESNET18_TRACE, EMULATOR_TIME_SCALE)
                    .map_err(|e| CliError::Output(format!("the built-in ResNet-18 trace: {e}")))
            }
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
                "ResNet-18 batch 1 as traced on an H100, {} kernels on the null stream per request, each work-group {EMULATOR_TIME_SCALE}x its H100 time ({block_ms:.1} ms of block time; 0.56 ms alone on the H100)",
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
        let unscaled: f64 = from_trace(RESNET18_NAME, RESNET18_TRACE, 1.0)
            .unwrap()
            .iter()
            .map(|k| k.wg_us)
            .sum();
        assert!((unscaled - 504.934).abs() < 0.01, "{unscaled}");
        assert_eq!(d[0].wgs, 784);
        assert_eq!(d[0].waves, 2);
        assert!((d[0].wg_us - 1.76 * EMULATOR_TIME_SCALE).abs() < 1e-9);
        let arg = kernels_arg(&d);
        assert_eq!(arg.split(',').count(), 145);
        assert!(arg.starts_with(&format!("784:2:{:.3},", 1.76 * EMULATOR_TIME_SCALE)));
    }

    #[test]
    fn a_trace_line_that_is_not_numbers_is_refused_with_its_line() {
        let h = "workgroups,waves_per_wg,wg_us,stream,barrier";
        let e = from_trace("t.csv", &format!("# c\n{h}\n1,2,x,0,0\n"), 1.0).unwrap_err();
        assert!(e.starts_with("t.csv:3: field wg_us"), "{e}");
        let e = from_trace("t.csv", "a,b\n", 1.0).unwrap_err();
        assert!(e.contains("header"), "{e}");
    }

    #[test]
    fn a_footprint_of_a_whole_sm_runs_as_16_waves() {
        let h = "workgroups,waves_per_wg,wg_us,stream,barrier";
        let d = from_trace("t.csv", &format!("{h}\n37,32,11.616,0,0\n"), 2.0).unwrap();
        assert_eq!((d[0].wgs, d[0].waves, d[0].wg_us), (37, 16, 23.232));
        let n = RequestShape::Resnet18.dispatches().unwrap();
        assert_eq!(
            n.iter().filter(|k| k.waves == 16).count(),
            20,
            "ResNet-18's whole-SM kernels"
        );
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
