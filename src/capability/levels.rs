//! The verdict per GPU partition: which preemption levels work there, and why not.

use serde::Serialize;

use super::kernel::{NodeFacts, QueuePriority, SchedPolicy};
use super::{Finding, Status};

/// Whether one level (or the tracer path) works on a partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LevelVerdict {
    /// 0-3, or `tracer`.
    pub level: &'static str,
    /// Its name in kfdq's vocabulary.
    pub name: &'static str,
    /// Whether it works here.
    pub works: bool,
    /// What it does here, or why it does not work.
    pub why: String,
}

/// One GPU partition's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionVerdict {
    /// Topology gpu_id.
    pub gpu_id: u32,
    /// `gfx942` etc.
    pub gfx: String,
    /// CUs of the partition.
    pub cus: u32,
    /// XCCs of the partition.
    pub xccs: u32,
    /// Active queues the hardware keeps resident before time-slicing the runlist.
    pub resident_slots: u32,
    /// Per level.
    pub levels: Vec<LevelVerdict>,
}

fn verdict(
    level: &'static str,
    name: &'static str,
    works: bool,
    why: impl Into<String>,
) -> LevelVerdict {
    LevelVerdict {
        level,
        name,
        works,
        why: why.into(),
    }
}

pub(crate) fn verdicts(facts: &NodeFacts, out: &mut Vec<Finding>) -> Vec<PartitionVerdict> {
    let Some(kfd) = &facts.kfd else {
        return Vec::new();
    };
    let debugger = kfd.capabilities().debugger_api;
    let hws = facts.sched_policy != SchedPolicy::NoHws;
    let drain = if facts.cwsr == Some(false) {
        "running waves finish first (cwsr_enable 0)"
    } else {
        "running waves are context-saved (CWSR)"
    };
    let mut parts = Vec::new();
    for node in kfd.topology().gpus() {
        let gpu_id = node.gpu_id.map_or(0, |g| g.0);
        let resident = node.resident_queue_limit();
        out.push(Finding::new(
            "resident-slots",
            Status::Info,
            format!(
                "gpu {gpu_id}: {resident} active queues stay resident ({} HQDs over {} XCCs); beyond that the scheduler time-slices the runlist and priority stops mattering — every HIP stream is a queue, so count streams of all processes",
                node.hw_queue_slots(),
                node.num_xcc()
            ),
        ));
        let priority_why = match facts.queue_priority {
            QueuePriority::PipeOnly => {
                "pipe priority only (0-6 low, 7-10 medium, 11-15 high): arbitration among resident queues, no preemption"
            }
            QueuePriority::Programmed => {
                "queue priority 0..15 and pipe priority: the CP prefers higher queues among resident ones, no preemption"
            }
            QueuePriority::Unknown => {
                "pipe priority at least (whether queue priority is programmed depends on the kernel); no preemption"
            }
        };
        let levels = vec![
            verdict("0", "priority", true, priority_why),
            verdict(
                "1",
                "hold",
                true,
                "the shim stops a stream's launches on the host; work already submitted drains",
            ),
            verdict(
                "2",
                "deactivate",
                true,
                format!(
                    "UPDATE_QUEUE percentage 0 on the process's own queues: one device-wide preempt; {drain}"
                ),
            ),
            if debugger && hws {
                verdict(
                    "3",
                    "suspend",
                    true,
                    format!(
                        "DBG_TRAP SUSPEND_QUEUES with a grace period: one device-wide preempt; {drain}"
                    ),
                )
            } else {
                verdict(
                    "3",
                    "suspend",
                    false,
                    if !debugger {
                        "no debugger API (KFD < 1.13)"
                    } else {
                        "no hardware scheduler (sched_policy 2): DBG_TRAP is refused"
                    },
                )
            },
            if !(debugger && hws) {
                verdict("tracer", "shimless control", false, "needs level 3")
            } else if facts.ptrace_scope.is_some_and(|s| s >= 3) {
                verdict(
                    "tracer",
                    "shimless control",
                    false,
                    "kernel.yama.ptrace_scope 3 forbids attaching",
                )
            } else {
                verdict(
                    "tracer",
                    "shimless control",
                    true,
                    "kfdqd attaches with ptrace and suspends the queues of processes without the shim",
                )
            },
        ];
        parts.push(PartitionVerdict {
            gpu_id,
            gfx: node
                .gfx_version()
                .map(|g| g.to_string())
                .unwrap_or_else(|| "unknown".into()),
            cus: node.cu_count(),
            xccs: node.num_xcc(),
            resident_slots: resident,
            levels,
        });
    }
    parts
}
