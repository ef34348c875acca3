//! The line format the demo's workloads print on stdout (docs/demo.md, "Your own workloads"),
//! one fact per line; other lines are ignored.
//!
//! The latency-critical (HP) workload:
//!   ready                        warm-up done, its GPU queues exist; it then waits until the
//!                                file $KFDQ_DEMO_GO exists before its first timed request
//!   request <i> <latency_us> [<start_us>]
//!                                one per timed request; its start (CLOCK_MONOTONIC, the
//!                                moment before its first launch) is optional and gives the
//!                                reaction columns
//!   window <start_us> <end_us>   optional: the timed span on CLOCK_MONOTONIC (default: from
//!                                the go file to its exit, on the demo's clock)
//!   runtime <name version>       optional, either workload: the HIP runtime it runs on
//!                                (the `runtime` field of --json)
//! The batch (LP) workload:
//!   ready                        its work is queued
//!   done <t_us>                  one per unit of work completed (a dispatch, a training
//!                                step), CLOCK_MONOTONIC; it exits once $KFDQ_DEMO_STOP exists
//! The built-in workloads' `CHECKPOINT ready <pid>` (kfdq-latency) and `flooding` (kfdq-flood)
//! count as `ready`.

/// Where the format is described, for error messages.
pub const DOC: &str = "docs/demo.md, \"Your own workloads\"";

/// An HP workload's `ready` line.
pub fn hp_ready(line: &str) -> bool {
    line.trim() == "ready" || line.starts_with("CHECKPOINT ready")
}

/// An LP workload's `ready` line.
pub fn lp_ready(line: &str) -> bool {
    matches!(line.trim(), "ready" | "flooding")
}

/// What an HP workload reported.
#[derive(Debug, Clone, PartialEq)]
pub struct HpOutput {
    /// Request latencies in the order printed, µs.
    pub latencies_us: Vec<f64>,
    /// Each request's start (CLOCK_MONOTONIC µs) where its line gave one, in the same order.
    pub starts_us: Vec<Option<f64>>,
    /// The timed window (CLOCK_MONOTONIC µs), if it printed one.
    pub window: Option<(f64, f64)>,
}

fn bad(line: &str, want: &str) -> String {
    format!("malformed line {line:?}: expected `{want}` with numbers ({DOC})")
}

fn number(s: Option<&str>) -> Option<f64> {
    s?.parse::<f64>().ok().filter(|v| v.is_finite())
}

/// Parses an HP workload's stdout.
pub fn parse_hp(lines: &[String]) -> Result<HpOutput, String> {
    let mut out = HpOutput {
        latencies_us: Vec::new(),
        starts_us: Vec::new(),
        window: None,
    };
    for l in lines {
        let mut w = l.split_whitespace();
        match w.next() {
            Some("request") => {
                let (_, lat, start) = (w.next(), number(w.next()), w.next());
                let start = match start {
                    None => None,
                    s => Some(
                        number(s).ok_or_else(|| bad(l, "request <i> <latency_us> <start_us>"))?,
                    ),
                };
                match lat {
                    Some(v) if v >= 0.0 => {
                        out.latencies_us.push(v);
                        out.starts_us.push(start);
                    }
                    _ => return Err(bad(l, "request <i> <latency_us>")),
                }
            }
            Some("window") => match (number(w.next()), number(w.next())) {
                (Some(a), Some(b)) if b >= a => out.window = Some((a, b)),
                _ => return Err(bad(l, "window <start_us> <end_us>")),
            },
            _ => {}
        }
    }
    Ok(out)
}

/// The `runtime <name and version>` line a workload printed first (kfdq-hipwork does), if any.
pub fn runtime(lines: &[String]) -> Option<String> {
    lines.iter().find_map(|l| {
        l.strip_prefix("runtime ")
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
    })
}

/// Parses an LP workload's stdout: the completion times of its `done` lines, µs.
pub fn parse_lp(lines: &[String]) -> Result<Vec<f64>, String> {
    let mut done = Vec::new();
    for l in lines {
        let mut w = l.split_whitespace();
        if w.next() == Some("done") {
            done.push(number(w.next()).ok_or_else(|| bad(l, "done <t_us>"))?);
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_built_in_workloads_and_a_script_parse_alike() {
        assert!(hp_ready("CHECKPOINT ready 1234") && hp_ready("ready"));
        assert!(lp_ready("flooding") && lp_ready("ready ") && !lp_ready("done 5"));
        let hp = parse_hp(&v(&[
            "queue null 1 2 3",
            "request 0 8012",
            "request 1 9000.5 123456789",
            "window 100 2100",
            "latency n 2 p50 8012 p99 9000 max 9000",
        ]))
        .unwrap();
        assert_eq!(hp.latencies_us, [8012.0, 9000.5]);
        assert_eq!(hp.starts_us, [None, Some(123456789.0)]);
        assert_eq!(hp.window, Some((100.0, 2100.0)));
        assert_eq!(parse_hp(&v(&["hello"])).unwrap().latencies_us, [0.0; 0]);
        assert_eq!(
            runtime(&v(&[
                "ready",
                "runtime HIP 6.4.43484 (libamdhip64.so.6.4.43484)"
            ]))
            .as_deref(),
            Some("HIP 6.4.43484 (libamdhip64.so.6.4.43484)")
        );
        assert_eq!(runtime(&v(&["runtime ", "ready"])), None);
        assert_eq!(
            parse_lp(&v(&["flooding", "done 5", "done 7", "flood dispatches 2"])).unwrap(),
            [5.0, 7.0]
        );
    }

    #[test]
    fn malformed_lines_are_refused_with_the_format() {
        let e = parse_hp(&v(&["request 3 fast"])).unwrap_err();
        assert!(
            e.contains("request <i> <latency_us>") && e.contains(DOC),
            "{e}"
        );
        assert!(parse_hp(&v(&["window 9 1"])).is_err());
        assert!(
            parse_hp(&v(&["request 3 100 soon"]))
                .unwrap_err()
                .contains("<start_us>")
        );
        assert!(
            parse_lp(&v(&["done soon"]))
                .unwrap_err()
                .contains("done <t_us>")
        );
    }
}
