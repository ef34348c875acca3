//! User trace files (`sim --hp-trace FILE`, `--lp-trace FILE`) and the built-in scenarios'
//! measured traces, read by `kfdq-trace` (tools/trace: the format, each column's meaning, the
//! errors naming file, line, field and rule). Here: a trace as the model runs it.
//!
//! Each dispatch becomes one [`Kernel`]: its work-groups, `waves_per_wg` as the wave slots the
//! partition model gives each work-group, `wg_us` in whole ns and the optional `cu_util` and
//! `dram_bytes` as gfx-model's contention terms (0 without them; docs/gfx-model.md).
//!
//! A request is the dispatches up to and including the next one with `barrier` set;
//! dispatches after the last barrier form a last request. A latency-critical job submits the
//! file's requests in turn (request `i mod n` at its `i`-th arrival, arrivals from the
//! scenario); a batch job cycles through the dispatches in a closed loop.
//!
//! The simulation runs each job on one queue, so its streams share that queue in file order,
//! each dispatch after the previous one completed (the AQL barrier bit ROCclr sets): what ROCm
//! does when streams share a hardware queue. Overlap between streams is not modelled.

pub use kfdq_trace::{Trace, TraceError};

use crate::workload::{Arrival, Kernel, Shape, Workload};

/// A dispatch as the partition model runs it.
pub fn kernel(d: &kfdq_trace::Dispatch) -> Kernel {
    Kernel {
        workgroups: d.workgroups,
        waves_per_wg: d.waves_per_wg,
        wg_ns: d.wg_ns(),
        cu_util_permille: d.cu_util_permille(),
        dram_bytes: d.dram_bytes(),
    }
}

/// The trace's dispatches as the model's kernels, in order.
pub fn kernels(t: &Trace) -> Vec<Kernel> {
    t.dispatches.iter().map(kernel).collect()
}

/// The job `t` describes, arriving as `arrival`; `file` names it in reports.
pub fn workload(t: &Trace, file: &str, arrival: Arrival) -> Workload {
    Workload {
        shape: Shape::Trace,
        kernels: kernels(t),
        arrival,
        trace: Some(file.to_string()),
        request_ends: t.request_ends(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trace_runs_as_its_kernels_and_requests_end_at_barriers() {
        let t = Trace::from_csv(
            "t.csv",
            "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util,dram_bytes\n\
             132,32,1397.6,0,0,0.9353,10489635\n64,4,40,1,1,0,0\n32,4,40,0,0,0,0\n",
        )
        .unwrap();
        let k = kernels(&t)[0];
        assert_eq!(
            (k.workgroups, k.waves_per_wg, k.wg_ns),
            (132, 32, 1_397_600)
        );
        assert_eq!((k.cu_util_permille, k.dram_bytes), (935, 10_489_635));
        let w = workload(&t, "t.csv", Arrival::Periodic { rate: 10.0 });
        assert_eq!(w.trace.as_deref(), Some("t.csv"));
        assert_eq!(w.request(0), 0..2);
        assert_eq!(w.request(1), 2..3);
        assert_eq!(w.request(2), 0..2);
    }
}
