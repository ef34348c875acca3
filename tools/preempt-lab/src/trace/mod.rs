//! User trace files (`sim --hp-trace FILE`, `--lp-trace FILE`): a job's dispatches, one per
//! line (CSV) or array element (JSON), each with
//!
//! * `workgroups`: work-groups in the grid (integer, at least 1);
//! * `waves_per_wg`: waves of 64 threads per work-group (integer 1..=32: a work-group of 256
//!   threads is 4 waves; gfx942 work-groups hold at most 1024 threads, 16 waves), the unit the
//!   partition model schedules wave slots in; more than its own waves where registers or LDS
//!   let fewer work-groups share a CU (32: one per CU of 32 slots, such as an H100 SM);
//! * `wg_us`: the time of one work-group once it has its slots, µs (number above 0); with
//!   `cu_util`, its time alone on its CU;
//! * `stream`: the HIP stream it was launched on (integer, at least 0);
//! * `barrier`: whether the host waits for it (`hipStreamSynchronize`, `hipDeviceSynchronize`,
//!   a blocking copy): `true`/`false` or `1`/`0`;
//!
//! and optionally, both or neither (the memory and CU-sharing terms of gfx-model's
//! `Contention`; docs/gfx-model.md):
//!
//! * `cu_util`: the share of its CU's issue rate one work-group uses alone (number 0..=1);
//! * `dram_bytes`: the DRAM bytes one work-group moves (number, at least 0).
//!
//! A request is the dispatches up to and including the next one with `barrier` set;
//! dispatches after the last barrier form a last request. A latency-critical job submits the
//! file's requests in turn (request `i mod n` at its `i`-th arrival, arrivals from the
//! scenario); a batch job cycles through the dispatches in a closed loop.
//!
//! The simulation runs each job on one queue, so its streams share that queue in file order,
//! each dispatch after the previous one completed (the AQL barrier bit ROCclr sets): what ROCm
//! does when streams share a hardware queue. Overlap between streams is not modelled.
//!
//! Errors name the file, the line, the field and the rule.

use std::path::Path;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::workload::{Arrival, Kernel, Shape, Workload};

mod error;
pub use error::TraceError;

/// The most wave slots a work-group may occupy: a whole CU of 32 (gfx942 work-groups hold at
/// most 16 waves; more stands for registers or LDS that let fewer share a CU).
pub const MAX_WAVES_PER_WG: u32 = 32;

/// The CSV header, in this order; [`CSV_OPTIONAL`] may follow it.
pub const CSV_HEADER: [&str; 5] = ["workgroups", "waves_per_wg", "wg_us", "stream", "barrier"];

/// Optional CSV columns after [`CSV_HEADER`], both or neither.
pub const CSV_OPTIONAL: [&str; 2] = ["cu_util", "dram_bytes"];

/// One dispatch of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceDispatch {
    /// The kernel as the model runs it.
    pub kernel: Kernel,
    /// Its stream.
    pub stream: u32,
    /// Whether the host waits for it (ends a request).
    pub barrier: bool,
}

/// A parsed trace file.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// Its dispatches in order.
    pub dispatches: Vec<TraceDispatch>,
}

impl Trace {
    /// Reads a trace file: JSON if its name ends in `.json`, CSV otherwise.
    pub fn load(path: &Path) -> Result<Trace, TraceError> {
        let name = path.display().to_string();
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(source) => return Err(TraceError::Read { name, source }),
        };
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            Trace::from_json(&name, &text)
        } else {
            Trace::from_csv(&name, &text)
        }
    }

    /// Parses CSV: a header line naming the five fields in [`CSV_HEADER`] order, then one
    /// dispatch per line; blank lines and lines starting with `#` are skipped; no quoting.
    pub fn from_csv(name: &str, text: &str) -> Result<Trace, TraceError> {
        let mut dispatches = Vec::new();
        let mut header = false;
        let mut columns = CSV_HEADER.len();
        let full: Vec<&str> = CSV_HEADER.iter().chain(&CSV_OPTIONAL).copied().collect();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let cells: Vec<&str> = l.split(',').map(str::trim).collect();
            if !header {
                if cells == full {
                    columns = full.len();
                } else if cells != CSV_HEADER {
                    return Err(TraceError::Header {
                        name: name.into(),
                        line,
                        got: l.into(),
                    });
                }
                header = true;
                continue;
            }
            if cells.len() != columns {
                return Err(TraceError::Fields {
                    name: name.into(),
                    line,
                    got: cells.len(),
                    expected: columns,
                    columns: full[..columns].join(","),
                });
            }
            let at = |field: &'static str, rule: String| TraceError::Field {
                name: name.into(),
                line,
                field,
                rule,
            };
            let workgroups = cells[0]
                .parse::<u64>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| at("workgroups", rule_workgroups(cells[0])))?;
            let waves = cells[1]
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_WAVES_PER_WG).contains(n))
                .ok_or_else(|| at("waves_per_wg", rule_waves(cells[1])))?;
            let wg_us = cells[2]
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x > 0.0)
                .ok_or_else(|| at("wg_us", rule_wg_us(cells[2])))?;
            let stream = cells[3]
                .parse::<u32>()
                .map_err(|_| at("stream", rule_stream(cells[3])))?;
            let barrier = match cells[4] {
                "1" | "true" => true,
                "0" | "false" => false,
                other => return Err(at("barrier", rule_barrier(other))),
            };
            let mut d = dispatch(workgroups, waves, wg_us, stream, barrier);
            if columns > CSV_HEADER.len() {
                let util = cells[5]
                    .parse::<f64>()
                    .ok()
                    .filter(|x| (0.0..=1.0).contains(x))
                    .ok_or_else(|| at("cu_util", rule_cu_util(cells[5])))?;
                let bytes = cells[6]
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite() && *x >= 0.0)
                    .ok_or_else(|| at("dram_bytes", rule_dram_bytes(cells[6])))?;
                footprint(&mut d, util, bytes);
            }
            dispatches.push(d);
        }
        if !header {
            return Err(TraceError::Empty { name: name.into() });
        }
        Trace::new(name, dispatches)
    }

    /// Parses JSON: `{"dispatches": [{"workgroups": 64, "waves_per_wg": 4, "wg_us": 40,
    /// "stream": 0, "barrier": false}, ...]}`; every field is required, no other is allowed.
    pub fn from_json(name: &str, text: &str) -> Result<Trace, TraceError> {
        let file: JsonFile = serde_json::from_str(text).map_err(|e| {
            let msg = e.to_string();
            // serde_json appends " at line L column C"; put the position first, as for CSV.
            let msg = msg
                .rsplit_once(" at line ")
                .map_or(msg.as_str(), |(m, _)| m)
                .to_string();
            TraceError::Json {
                name: name.into(),
                line: e.line(),
                column: e.column(),
                message: msg,
            }
        })?;
        let dispatches = file
            .dispatches
            .into_iter()
            .map(|d| {
                let mut t = dispatch(
                    d.workgroups.0,
                    d.waves_per_wg.0,
                    d.wg_us.0,
                    d.stream,
                    d.barrier,
                );
                footprint(&mut t, d.cu_util.0, d.dram_bytes.0);
                t
            })
            .collect();
        Trace::new(name, dispatches)
    }

    fn new(name: &str, dispatches: Vec<TraceDispatch>) -> Result<Trace, TraceError> {
        if dispatches.is_empty() {
            return Err(TraceError::NoDispatches { name: name.into() });
        }
        Ok(Trace { dispatches })
    }

    /// Where each request ends (exclusive indices): after every barrier, and at the end.
    pub fn request_ends(&self) -> Vec<usize> {
        let mut ends: Vec<usize> = self
            .dispatches
            .iter()
            .enumerate()
            .filter(|(_, d)| d.barrier)
            .map(|(i, _)| i + 1)
            .collect();
        if ends.last() != Some(&self.dispatches.len()) {
            ends.push(self.dispatches.len());
        }
        ends
    }

    /// The streams used.
    pub fn streams(&self) -> usize {
        let mut s: Vec<u32> = self.dispatches.iter().map(|d| d.stream).collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    }

    /// The job this trace describes, arriving as `arrival`; `file` names it in reports.
    pub fn workload(&self, file: &str, arrival: Arrival) -> Workload {
        Workload {
            shape: Shape::Trace,
            kernels: self.dispatches.iter().map(|d| d.kernel).collect(),
            arrival,
            trace: Some(file.to_string()),
            request_ends: self.request_ends(),
        }
    }
}

fn dispatch(workgroups: u64, waves: u32, wg_us: f64, stream: u32, barrier: bool) -> TraceDispatch {
    TraceDispatch {
        kernel: Kernel {
            workgroups,
            waves_per_wg: waves,
            wg_ns: ((wg_us * 1000.0).round() as u64).max(1),
            cu_util_permille: 0,
            dram_bytes: 0,
        },
        stream,
        barrier,
    }
}

/// Sets the optional columns: `util` 0..=1 as permille, `bytes` rounded.
fn footprint(d: &mut TraceDispatch, util: f64, bytes: f64) {
    d.kernel.cu_util_permille = (util * 1000.0).round() as u16;
    d.kernel.dram_bytes = bytes.round() as u64;
}

fn rule_workgroups(v: &str) -> String {
    format!("{v:?} is not an integer of at least 1 (work-groups in the grid)")
}

fn rule_waves(v: &str) -> String {
    format!(
        "{v:?} is not an integer in 1..={MAX_WAVES_PER_WG} (wave slots of 64 threads per work-group: a CU's 32 at most)"
    )
}

fn rule_cu_util(v: &str) -> String {
    format!("{v:?} is not a number in 0..=1 (the share of its CU one work-group uses)")
}

fn rule_dram_bytes(v: &str) -> String {
    format!("{v:?} is not a number of at least 0 (DRAM bytes one work-group moves)")
}

fn rule_wg_us(v: &str) -> String {
    format!("{v:?} is not a number above 0 (the time of one work-group, µs)")
}

fn rule_stream(v: &str) -> String {
    format!("{v:?} is not an integer of at least 0 (the HIP stream)")
}

fn rule_barrier(v: &str) -> String {
    format!("{v:?} is not true, false, 1 or 0 (whether the host waits for the dispatch)")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonFile {
    dispatches: Vec<JsonDispatch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonDispatch {
    workgroups: Workgroups,
    waves_per_wg: Waves,
    wg_us: WgUs,
    stream: u32,
    barrier: bool,
    #[serde(default)]
    cu_util: CuUtil,
    #[serde(default)]
    dram_bytes: DramBytes,
}

struct Workgroups(u64);
#[derive(Default)]
struct CuUtil(f64);
#[derive(Default)]
struct DramBytes(f64);

impl<'de> Deserialize<'de> for CuUtil {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if (0.0..=1.0).contains(&v) {
            Ok(CuUtil(v))
        } else {
            Err(de::Error::custom(format!(
                "field cu_util: {}",
                rule_cu_util(&v.to_string())
            )))
        }
    }
}

impl<'de> Deserialize<'de> for DramBytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v.is_finite() && v >= 0.0 {
            Ok(DramBytes(v))
        } else {
            Err(de::Error::custom(format!(
                "field dram_bytes: {}",
                rule_dram_bytes(&v.to_string())
            )))
        }
    }
}
struct Waves(u32);
struct WgUs(f64);

impl<'de> Deserialize<'de> for Workgroups {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v >= 1.0 && v.fract() == 0.0 && v <= u64::MAX as f64 {
            Ok(Workgroups(v as u64))
        } else {
            Err(de::Error::custom(format!(
                "field workgroups: {}",
                rule_workgroups(&v.to_string())
            )))
        }
    }
}

impl<'de> Deserialize<'de> for Waves {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v.fract() == 0.0 && (1.0..=f64::from(MAX_WAVES_PER_WG)).contains(&v) {
            Ok(Waves(v as u32))
        } else {
            Err(de::Error::custom(format!(
                "field waves_per_wg: {}",
                rule_waves(&v.to_string())
            )))
        }
    }
}

impl<'de> Deserialize<'de> for WgUs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        if v.is_finite() && v > 0.0 {
            Ok(WgUs(v))
        } else {
            Err(de::Error::custom(format!(
                "field wg_us: {}",
                rule_wg_us(&v.to_string())
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CSV: &str = "# two requests on two streams\n\
                       workgroups,waves_per_wg,wg_us,stream,barrier\n\
                       64,4,40,0,0\n\
                       \n\
                       128,2,12.5,1,1\n\
                       32,4,40,0,true\n";

    #[test]
    fn csv_and_json_give_the_same_trace_and_requests_end_at_barriers() {
        let a = Trace::from_csv("t.csv", CSV).unwrap();
        let json = r#"{"dispatches": [
            {"workgroups": 64, "waves_per_wg": 4, "wg_us": 40, "stream": 0, "barrier": false},
            {"workgroups": 128, "waves_per_wg": 2, "wg_us": 12.5, "stream": 1, "barrier": true},
            {"workgroups": 32, "waves_per_wg": 4, "wg_us": 40, "stream": 0, "barrier": true}
        ]}"#;
        let b = Trace::from_json("t.json", json).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.dispatches[1].kernel.wg_ns, 12_500);
        assert_eq!(a.request_ends(), vec![2, 3]);
        assert_eq!(a.streams(), 2);
        assert_eq!(a.dispatches[0].kernel.dram_bytes, 0);
        // The optional columns, in CSV and JSON alike.
        let c = Trace::from_csv(
            "t.csv",
            "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util,dram_bytes\n132,32,1397.6,0,1,0.9353,10489635\n",
        )
        .unwrap();
        let j = Trace::from_json(
            "t.json",
            r#"{"dispatches": [{"workgroups": 132, "waves_per_wg": 32, "wg_us": 1397.6, "stream": 0,
                "barrier": true, "cu_util": 0.9353, "dram_bytes": 10489635}]}"#,
        )
        .unwrap();
        assert_eq!(c, j);
        let k = c.dispatches[0].kernel;
        assert_eq!(
            (k.cu_util_permille, k.dram_bytes, k.wg_ns),
            (935, 10_489_635, 1_397_600)
        );
        let w = a.workload("t.csv", Arrival::Periodic { rate: 10.0 });
        assert_eq!(w.request(0), 0..2);
        assert_eq!(w.request(1), 2..3);
        assert_eq!(w.request(2), 0..2);
        // No barrier at the end: the tail is a last request.
        let c = Trace::from_csv(
            "c",
            "workgroups,waves_per_wg,wg_us,stream,barrier\n1,1,1,0,1\n2,1,1,0,0\n",
        )
        .unwrap();
        assert_eq!(c.request_ends(), vec![1, 2]);
    }

    #[test]
    fn bad_csv_names_line_field_and_rule() {
        let h = "workgroups,waves_per_wg,wg_us,stream,barrier\n";
        let cases = [
            ("64,4,40,0,0\n", "t:1: the header must be"),
            (
                &format!("{h}64,4,40,0,0\n0,4,40,0,0\n") as &str,
                "t:3: field workgroups: \"0\" is not an integer of at least 1",
            ),
            (
                &format!("{h}64,33,40,0,0\n"),
                "t:2: field waves_per_wg: \"33\" is not an integer in 1..=32",
            ),
            (
                "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util,dram_bytes\n64,4,40,0,0,1.5,0\n",
                "t:2: field cu_util: \"1.5\" is not a number in 0..=1",
            ),
            (
                "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util,dram_bytes\n64,4,40,0,0,0.5\n",
                "t:2: 6 fields, expected 7",
            ),
            (
                "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util\n64,4,40,0,0,0.5\n",
                "t:1: the header must be",
            ),
            (
                &format!("{h}64,4,-3,0,0\n"),
                "t:2: field wg_us: \"-3\" is not a number above 0",
            ),
            (&format!("{h}64,4,nan,0,0\n"), "t:2: field wg_us"),
            (&format!("{h}64,4,40,x,0\n"), "t:2: field stream"),
            (
                &format!("{h}64,4,40,0,yes\n"),
                "t:2: field barrier: \"yes\"",
            ),
            (&format!("{h}64,4,40\n"), "t:2: 3 fields, expected 5"),
            (h, "t: no dispatches"),
            ("", "t: empty"),
        ];
        for (text, want) in cases {
            let e = Trace::from_csv("t", text).unwrap_err().to_string();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn bad_json_names_line_field_and_rule() {
        let d = |body: &str| format!("{{\"dispatches\": [\n{body}\n]}}");
        let ok =
            r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 1, "stream": 0, "barrier": true}"#;
        let cases = [
            (
                d(&format!(
                    "{ok},\n{}",
                    r#"{"workgroups": 0, "waves_per_wg": 1, "wg_us": 1, "stream": 0, "barrier": true}"#
                )),
                "t:3:",
                "field workgroups: \"0\" is not an integer of at least 1",
            ),
            (
                d(
                    r#"{"workgroups": 1, "waves_per_wg": 40, "wg_us": 1, "stream": 0, "barrier": true}"#,
                ),
                "t:2:",
                "field waves_per_wg",
            ),
            (
                d(
                    r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 0, "stream": 0, "barrier": true}"#,
                ),
                "t:2:",
                "field wg_us: \"0\" is not a number above 0",
            ),
            (
                d(r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 1, "stream": 0}"#),
                "t:2:",
                "missing field `barrier`",
            ),
            (
                d(
                    r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 1, "stream": 0, "barrier": true, "grid": 3}"#,
                ),
                "t:2:",
                "unknown field `grid`",
            ),
            (d(""), "t: no dispatches", ""),
        ];
        for (text, at, want) in cases {
            let e = Trace::from_json("t", &text).unwrap_err().to_string();
            assert!(e.starts_with(at) && e.contains(want), "{text}: {e}");
        }
    }
}
