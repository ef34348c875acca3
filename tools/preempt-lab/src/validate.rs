//! `preempt-lab validate`: the partition model against the H100 co-location measurements
//! (docs/experiments.md, "The model against an H100"). Each measured row is replayed on
//! gfx-model, with the traced kernels, on an H100-shaped partition, the way
//! `tools/preempt-lab/real-gpu/colocate.py` ran it: the same arrival times, the latency job's
//! requests in order on one queue, the batch job's units (a training iteration, a GEMM, an add)
//! in a closed loop with the row's window, a host-side hold or the drained-before-each-request
//! preemption, stream priority as queue priority, green-context SM splits as disjoint CU masks.
//! One model parameter (the loaded-latency cap) is fitted on one row; the rest are measured or
//! come from the H100's datasheet.

use std::path::{Path, PathBuf};

use gfx_model::{Arbitration, Contention, Dispatch, Edit, Params, Partition, Shape as GpuShape};
use serde::Deserialize;

use crate::sim::footprint;
use crate::trace::{self, Trace, TraceError};
use crate::workload::Kernel;
use kfdq::stats::nearest_rank;

/// An NVIDIA H100 SXM (for validation only): 132 SMs (NVIDIA H100 Tensor Core GPU
/// Architecture whitepaper, 2022: 132 SMs on the SXM5 part), each 2048 threads = 32 slots of 64
/// threads (CUDA C Programming Guide, compute capability 9.0: 64 warps per SM). Queues: one per
/// stream, far below any limit (32 here: irrelevant with two).
pub fn h100() -> GpuShape {
    GpuShape {
        num_xcc: 1,
        cus_per_xcc: 132,
        waves_per_cu: 32,
        resident_queues: 32,
    }
}

/// The H100's DRAM bandwidth as measured on the lent card: a device-to-device copy moved 3.0 TB/s
/// counting bytes read and written (results/shapes.json, `copy_bandwidth_gbs`; the datasheet
/// says 3.35 TB/s), and the bandwidth loop 3.04 TB/s.
pub const H100_DRAM_BYTES_PER_US: u64 = 3_000_000;

/// How the batch job runs next to the latency job in a row.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Both run; the batch job keeps `window` units in flight.
    Plain,
    /// No batch unit starts while a request is in flight (kfdq's level 1 on the host).
    Hold,
    /// The batch job stops `lead_ns` before each arrival and the request waits for it to drain.
    Temporal { lead_ns: u64 },
}

/// One row to replay.
#[derive(Debug, Clone)]
struct Row {
    lp: String,
    config: String,
    hp: bool,
    lp_job: Option<Vec<Kernel>>,
    window: u32,
    mode: Mode,
    hp_priority: u8,
    /// HP on CUs 0..n, LP on the rest.
    split: Option<u32>,
}

/// A measured row of coloc.json.
#[derive(Debug, Clone, Deserialize)]
struct Measured {
    lp: String,
    config: String,
    #[serde(default)]
    latency_ms: Vec<f64>,
    lp_units_per_s: Option<f64>,
    lp_window: Option<u32>,
    lead_ms: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
struct Coloc {
    arrivals_s: Vec<f64>,
    rows: Vec<Measured>,
}

/// What the model says of one row.
#[derive(Debug, Clone, Default)]
struct Modelled {
    latency_ms: Vec<f64>,
    lp_units_per_s: Option<f64>,
}

const HP: u64 = 1;
const LP: u64 = 2;

/// Replays `row` on the model: arrivals at `arrivals` (ns), HP request `hp_req`.
fn replay(row: &Row, arrivals: &[u64], hp_req: &[Kernel], contention: Contention) -> Modelled {
    let params = Params {
        arbitration: Arbitration::PipePriority,
        ..Params::default()
    };
    let mut p = Partition::new(h100(), params);
    p.set_contention(Some(contention));
    let mut edits = vec![
        Edit::Add {
            queue: HP,
            priority: row.hp_priority,
            active: true,
        },
        Edit::Add {
            queue: LP,
            priority: 7,
            active: true,
        },
    ];
    if let Some(n) = row.split {
        let cus = h100().cus();
        let mask = |lo: u32, hi: u32| {
            let mut w = vec![0u32; cus.div_ceil(32) as usize];
            for c in lo..hi {
                w[(c / 32) as usize] |= 1 << (c % 32);
            }
            Some(w)
        };
        edits.push(Edit::SetCuMask(HP, mask(0, n)));
        edits.push(Edit::SetCuMask(LP, mask(n, cus)));
    }
    p.update_runlist(&edits, None);
    let start = p.now().max(1);
    // A persistent kernel (one work-group per CU, as many as the GPU has SMs: cuBLAS's GEMM
    // here) is launched for the SMs its context has: on a split, the LP job's CUs, each
    // work-group doing its share of the same work.
    let lp_job: Option<Vec<Kernel>> = row.lp_job.as_ref().map(|job| {
        let full = u64::from(h100().cus());
        let cus = row.split.map_or(full, |n| full - u64::from(n));
        job.iter()
            .map(|k| {
                if k.workgroups == full && k.waves_per_wg == 32 && cus < full {
                    Kernel {
                        workgroups: cus,
                        wg_ns: k.wg_ns * full / cus,
                        ..*k
                    }
                } else {
                    *k
                }
            })
            .collect()
    });
    let mut tag = 0u64;
    let mut next = |p: &mut Partition, q: u64, k: &Kernel| {
        tag += 1;
        let d = Dispatch {
            tag,
            workgroups: k.workgroups,
            waves_per_wg: k.waves_per_wg,
            wg_ns: k.wg_ns,
            barrier: true,
        };
        p.submit_with(q, d, footprint(k));
        tag
    };
    let hp_arrivals: Vec<u64> = if row.hp {
        arrivals.iter().map(|a| start + a).collect()
    } else {
        Vec::new()
    };
    let end_lp_alone = start + arrivals.last().copied().unwrap_or(10_000_000_000);
    // LP: units in flight (their last tags), held or not.
    let mut lp_inflight: std::collections::VecDeque<u64> = Default::default();
    let mut lp_done = 0u64;
    let mut held = false;
    let mut i = 0usize; // next arrival
    let mut hp_pending: Option<(u64, u64)> = None; // (last tag, arrival)
    let mut latency_ms = Vec::new();
    let top_up = |p: &mut Partition,
                  inflight: &mut std::collections::VecDeque<u64>,
                  held: bool,
                  next: &mut dyn FnMut(&mut Partition, u64, &Kernel) -> u64| {
        let Some(job) = &lp_job else { return };
        while !held && inflight.len() < row.window as usize {
            let mut last = 0;
            for k in job {
                last = next(p, LP, k);
            }
            inflight.push_back(last);
        }
    };
    top_up(&mut p, &mut lp_inflight, held, &mut next);
    let lead = match row.mode {
        Mode::Temporal { lead_ns } => lead_ns,
        _ => 0,
    };
    loop {
        let done_hp = row.hp && latency_ms.len() == hp_arrivals.len();
        if done_hp || (!row.hp && p.now() >= end_lp_alone) {
            break;
        }
        // The next host event: an arrival (or its lead), or the model's next event.
        let host = if row.hp && hp_pending.is_none() && i < hp_arrivals.len() {
            let a = hp_arrivals[i];
            let hold_at = a.saturating_sub(lead);
            if p.now() < hold_at {
                Some(hold_at)
            } else if p.now() < a {
                Some(a)
            } else {
                // Due, and waiting (for the batch job to drain): the model's events move on.
                None
            }
        } else if !row.hp {
            Some(end_lp_alone)
        } else {
            None
        };
        let t = match (host, p.next_event()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None if row.hp && hp_pending.is_none() && i < hp_arrivals.len() => p.now(),
                None => break,
            },
        };
        p.advance_to(t);
        for c in p.take_completions() {
            if c.queue == LP {
                if lp_inflight.front() == Some(&c.tag) {
                    lp_inflight.pop_front();
                    lp_done += 1;
                }
            } else if let Some((last, arrival)) = hp_pending
                && c.tag == last
            {
                latency_ms.push((c.end_ns - arrival) as f64 / 1e6);
                hp_pending = None;
                if row.mode != Mode::Plain {
                    held = false;
                }
            }
        }
        if row.hp && hp_pending.is_none() && i < hp_arrivals.len() {
            let arrival = hp_arrivals[i];
            let now = p.now();
            let go = match row.mode {
                Mode::Plain => now >= arrival,
                Mode::Hold => {
                    if now >= arrival {
                        held = true;
                    }
                    now >= arrival
                }
                Mode::Temporal { .. } => {
                    if now + lead >= arrival {
                        held = true;
                    }
                    now >= arrival && lp_inflight.is_empty()
                }
            };
            if go {
                let mut last = 0;
                for k in hp_req {
                    last = next(&mut p, HP, k);
                }
                hp_pending = Some((last, arrival));
                i += 1;
            }
        }
        top_up(&mut p, &mut lp_inflight, held, &mut next);
    }
    let elapsed = (p.now() - start) as f64 / 1e9;
    Modelled {
        latency_ms,
        lp_units_per_s: lp_job.as_ref().map(|_| lp_done as f64 / elapsed),
    }
}

/// The validation: every measured row, the model's value beside it, and the fitted cap.
#[derive(Debug, Clone)]
pub struct Validation {
    /// The loaded-latency cap fitted on the one row named in `fit_row`, permille.
    pub latency_cap_permille: u32,
    /// The row it was fitted on.
    pub fit_row: String,
    /// The per-request dispatch gap added to every modelled request, ns (from the alone row).
    pub gap_ns: f64,
    /// Every measured row with the model's values.
    pub rows: Vec<Compared>,
}

/// One row: measured and modelled P50 ratio, P99 ratio and LP kept.
#[derive(Debug, Clone)]
pub struct Compared {
    /// The batch job (`-` for none).
    pub lp: String,
    /// The configuration.
    pub config: String,
    /// Measured: HP P50 / alone, HP P99 / alone, LP / LP alone.
    pub measured: [Option<f64>; 3],
    /// The model's, the same.
    pub modelled: [Option<f64>; 3],
}

/// Why a validation could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ValidateError {
    /// The results file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The results file is not colocate.py's.
    #[error("{}: {source}", path.display())]
    Results {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: serde_json::Error,
    },
    /// A trace file.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A row the validation needs is not in the results.
    #[error("{0}")]
    Missing(&'static str),
}

fn load_kernels(traces: &Path, file: &str) -> Result<Vec<Kernel>, ValidateError> {
    Ok(trace::kernels(&Trace::load(&traces.join(file))?))
}

/// Runs the validation from colocate.py's `results` and the `traces` folder. `progress` is
/// told each row as it is replayed.
pub fn run(
    results: &Path,
    traces: &Path,
    mut progress: impl FnMut(&str),
) -> Result<Validation, ValidateError> {
    let path = results.join("coloc.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(source) => return Err(ValidateError::Read { path, source }),
    };
    let coloc: Coloc = match serde_json::from_str(&text) {
        Ok(c) => c,
        Err(source) => return Err(ValidateError::Results { path, source }),
    };
    let hp_req = load_kernels(traces, "h100-resnet18-b1.csv")?;
    let jobs = [
        ("train", load_kernels(traces, "h100-resnet50-train.csv")?),
        ("gemm", load_kernels(traces, "h100-gemm.csv")?),
        ("bw", load_kernels(traces, "h100-bw.csv")?),
    ];
    let arrivals: Vec<u64> = coloc.arrivals_s.iter().map(|a| (a * 1e9) as u64).collect();
    let rows: Vec<Row> = coloc
        .rows
        .iter()
        .map(|m| {
            let lp_job = jobs
                .iter()
                .find(|(n, _)| *n == m.lp)
                .map(|(_, k)| k.clone());
            let split = ["16", "32", "64"]
                .iter()
                .find(|n| m.config.ends_with(&format!("split{n}")))
                .map(|n| n.parse().unwrap_or(16));
            let mode = if m.config.starts_with("hold") {
                Mode::Hold
            } else if m.config == "temporal" {
                Mode::Temporal {
                    lead_ns: (m.lead_ms.unwrap_or(0.0) * 1e6) as u64,
                }
            } else {
                Mode::Plain
            };
            let high = matches!(m.config.as_str(), "priority" | "hold-w1" | "hold-unbounded");
            Row {
                lp: m.lp.clone(),
                config: m.config.clone(),
                hp: !m.latency_ms.is_empty(),
                lp_job,
                window: m.lp_window.unwrap_or(1),
                mode,
                hp_priority: if high { 13 } else { 7 },
                split,
            }
        })
        .collect();
    let contention = |cap: u32| Contention {
        dram_bytes_per_us: H100_DRAM_BYTES_PER_US,
        latency_cap_permille: cap,
    };
    let measured =
        |lp: &str, config: &str| coloc.rows.iter().find(|m| m.lp == lp && m.config == config);
    let alone_m = measured("-", "hp-alone-cold").ok_or(ValidateError::Missing(
        "coloc.json has no hp-alone-cold row",
    ))?;
    // The fit: the cap that puts the bandwidth loop's 32-SM split on its measured P50 ratio.
    let fit_row = "bw split32";
    let fit_target = {
        let m = measured("bw", "split32")
            .ok_or(ValidateError::Missing("coloc.json has no bw split32 row"))?;
        nearest_rank(&m.latency_ms, 0.5) / nearest_rank(&alone_m.latency_ms, 0.5)
    };
    let find = |lp: &str, config: &str| {
        rows.iter()
            .find(|r| r.lp == lp && r.config == config)
            .cloned()
    };
    let alone_row = find("-", "hp-alone-cold").ok_or(ValidateError::Missing("no alone row"))?;
    let fit = find("bw", "split32").ok_or(ValidateError::Missing("no bw split32 row"))?;
    // The alone baseline does not depend on the cap (nothing else runs).
    let alone = replay(&alone_row, &arrivals, &hp_req, contention(1000));
    // Per-request dispatch gap: measured alone minus the model's alone, spread over its kernels.
    let gap_ms = nearest_rank(&alone_m.latency_ms, 0.5) - nearest_rank(&alone.latency_ms, 0.5);
    let with_gap = |v: f64| v + gap_ms;
    let ratio = |m: &Modelled, q: f64| {
        let a: Vec<f64> = alone.latency_ms.iter().map(|&v| with_gap(v)).collect();
        let l: Vec<f64> = m.latency_ms.iter().map(|&v| with_gap(v)).collect();
        nearest_rank(&l, q) / nearest_rank(&a, q)
    };
    progress("fitting the loaded-latency cap on bw split32");
    let mut best = (1000u32, f64::INFINITY);
    let mut cap = 1000u32;
    while cap <= 6000 {
        let m = replay(&fit, &arrivals, &hp_req, contention(cap));
        let err = (ratio(&m, 0.5) - fit_target).abs();
        if err < best.1 {
            best = (cap, err);
        }
        cap += 250;
    }
    let c = contention(best.0);
    let lp_alone: Vec<(String, f64)> = jobs
        .iter()
        .filter_map(|(n, _)| {
            let r = find(n, "lp-alone")?;
            Some((
                n.to_string(),
                replay(&r, &arrivals, &hp_req, c).lp_units_per_s?,
            ))
        })
        .collect();
    let lp_alone_m = |lp: &str| measured(lp, "lp-alone").and_then(|m| m.lp_units_per_s);
    let mut out = Vec::new();
    for r in &rows {
        progress(&format!("{} {}", r.lp, r.config));
        let m = measured(&r.lp, &r.config).ok_or(ValidateError::Missing("row vanished"))?;
        let model = if r.config == "hp-alone-cold" {
            alone.clone()
        } else {
            replay(r, &arrivals, &hp_req, c)
        };
        let meas = [
            (!m.latency_ms.is_empty())
                .then(|| nearest_rank(&m.latency_ms, 0.5) / nearest_rank(&alone_m.latency_ms, 0.5)),
            (!m.latency_ms.is_empty()).then(|| {
                nearest_rank(&m.latency_ms, 0.99) / nearest_rank(&alone_m.latency_ms, 0.99)
            }),
            m.lp_units_per_s.zip(lp_alone_m(&r.lp)).map(|(a, b)| a / b),
        ];
        let lp_base = lp_alone.iter().find(|(n, _)| *n == r.lp).map(|(_, v)| *v);
        let modelled = [
            (!model.latency_ms.is_empty()).then(|| ratio(&model, 0.5)),
            (!model.latency_ms.is_empty()).then(|| ratio(&model, 0.99)),
            model.lp_units_per_s.zip(lp_base).map(|(a, b)| a / b),
        ];
        out.push(Compared {
            lp: r.lp.clone(),
            config: r.config.clone(),
            measured: meas,
            modelled,
        });
    }
    Ok(Validation {
        latency_cap_permille: best.0,
        fit_row: fit_row.into(),
        gap_ns: gap_ms * 1e6,
        rows: out,
    })
}

impl Validation {
    /// The table: per row, measured and modelled ratios and the model's error.
    pub fn table(&self) -> String {
        let mut s = format!(
            "gfx-model vs the H100 (ratios to the latency job alone; LP kept to the batch job alone)\n\
             fitted: loaded-latency cap {:.2} on {}; dispatch gap {:.0} us a request (alone row)\n\n",
            f64::from(self.latency_cap_permille) / 1000.0,
            self.fit_row,
            self.gap_ns / 1e3
        );
        s += &format!(
            "{:<6} {:<17} {:>9} {:>9} {:>7} | {:>9} {:>9} {:>7} | {:>7} {:>7} {:>7}\n",
            "LP", "config", "P50x", "P99x", "LP", "P50x", "P99x", "LP", "err50", "err99", "errLP"
        );
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
        let e = |m: Option<f64>, x: Option<f64>| match (m, x) {
            (Some(m), Some(x)) if m > 0.0 => format!("{:+.0}%", (x / m - 1.0) * 100.0),
            _ => "-".into(),
        };
        for Compared {
            lp,
            config,
            measured: m,
            modelled: x,
        } in &self.rows
        {
            s += &format!(
                "{:<6} {:<17} {:>9} {:>9} {:>7} | {:>9} {:>9} {:>7} | {:>7} {:>7} {:>7}\n",
                lp,
                config,
                f(m[0]),
                f(m[1]),
                f(m[2]),
                f(x[0]),
                f(x[1]),
                f(x[2]),
                e(m[0], x[0]),
                e(m[1], x[1]),
                e(m[2], x[2])
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(workgroups: u64, waves_per_wg: u32, wg_ns: u64, cu_util_permille: u16) -> Kernel {
        Kernel {
            workgroups,
            waves_per_wg,
            wg_ns,
            cu_util_permille,
            dram_bytes: 0,
        }
    }

    fn row(split: Option<u32>, lp_job: Option<Vec<Kernel>>) -> Row {
        Row {
            lp: "-".into(),
            config: "t".into(),
            hp: true,
            lp_job,
            window: 1,
            mode: Mode::Plain,
            hp_priority: 7,
            split,
        }
    }

    const C: Contention = Contention {
        dram_bytes_per_us: H100_DRAM_BYTES_PER_US,
        latency_cap_permille: 3000,
    };

    #[test]
    fn a_request_alone_takes_its_kernels_and_a_split_packs_them() {
        // 264 blocks of one per SM: 2 rounds of 10 us on 132 SMs; on 16 SMs 17 rounds.
        let req = [kernel(264, 32, 10_000, 0)];
        let arrivals = [0, 50_000_000];
        let alone = replay(&row(None, None), &arrivals, &req, C);
        assert_eq!(alone.latency_ms, [0.02, 0.02]);
        let split = replay(&row(Some(16), None), &arrivals, &req, C);
        assert_eq!(split.latency_ms, [0.17, 0.17]);
        // Blocks that each use a quarter of an SM: 4 share an SM on 16 SMs (1 round, 64 SMs'
        // worth of work on 16): the CU factor, not the slots, slows them.
        let req = [kernel(64, 4, 10_000, 250)];
        let alone = replay(&row(None, None), &arrivals, &req, C);
        let split = replay(&row(Some(16), None), &arrivals, &req, C);
        assert_eq!((alone.latency_ms[0], split.latency_ms[0]), (0.01, 0.01));
        let split = replay(&row(Some(8), None), &arrivals, &req, C);
        assert_eq!(split.latency_ms[0], 0.02);
    }

    #[test]
    fn a_persistent_batch_kernel_follows_the_sms_of_its_split_and_requests_wait_for_its_blocks() {
        let gemm = vec![kernel(132, 32, 1_000_000, 900)];
        let arrivals = [1_000_000_000];
        let req = [kernel(8, 4, 10_000, 0)];
        let mut r = row(None, Some(gemm.clone()));
        r.hp = false;
        let full = replay(&r, &arrivals, &req, C).lp_units_per_s.unwrap();
        r.split = Some(16);
        let split = replay(&r, &arrivals, &req, C).lp_units_per_s.unwrap();
        // 116 blocks doing 132 blocks' work: 116/132 of the throughput, not half of it.
        assert!(
            (split / full - 116.0 / 132.0).abs() < 0.02,
            "{split} / {full}"
        );
        // Next to the GEMM with no split, a request waits for a whole block (1 ms).
        let r = row(None, Some(gemm));
        let m = replay(&r, &arrivals, &req, C);
        assert!(m.latency_ms[0] > 0.5, "{:?}", m.latency_ms);
    }
}
