//! The exposition of a scrape: a fresh registry built from the node's status and the
//! [`Recorder`], one function per family group (the agent itself, classes, the agent's own
//! work, partitions, processes), registered in the order the text lists them.

use std::fmt::Write as _;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::labels::{
    ClassLabel, GpuLabel, PreemptLabels, ProcessLabels, VersionLabel, level_label, level_number,
};
use super::recorder::Recorder;
use crate::ids::GpuId;
use crate::proto::Level;
use crate::proto::control::{Counters, NodeStatus};

/// A counter of seconds (or any fractional total).
type SecondsCounter = Counter<f64, AtomicU64>;

/// The text of a scrape (Prometheus text format) of `status` and `rec`.
pub fn render(status: &NodeStatus, rec: &Recorder) -> Result<String, std::fmt::Error> {
    let mut r = Registry::with_prefix("kfdq");
    agent(&mut r, status);
    classes(&mut r, status, rec);
    work(&mut r, &status.counters, rec);
    partitions(&mut r, status);
    processes(&mut r, status);

    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &r)?;
    if !text.ends_with('\n') {
        text.write_char('\n')?;
    }
    Ok(text)
}

fn counter(registry: &mut Registry, name: &str, help: &str, total: u64) {
    let c: Counter = Counter::default();
    c.inc_by(total);
    registry.register(name, help, c);
}

/// A label set the families here take.
trait Labels:
    Clone + std::fmt::Debug + std::hash::Hash + Eq + EncodeLabelSet + Send + Sync + 'static
{
}

impl<L> Labels for L where
    L: Clone + std::fmt::Debug + std::hash::Hash + Eq + EncodeLabelSet + Send + Sync + 'static
{
}

/// A family with one metric per label set, each given its value by `set`.
fn family<L: Labels, M: Default, V>(
    values: impl IntoIterator<Item = (L, V)>,
    set: impl Fn(&M, V),
) -> Family<L, M> {
    let f = Family::<L, M>::default();
    for (l, v) in values {
        set(&f.get_or_create(&l), v);
    }
    f
}

/// A family of gauges, one per label set.
fn gauge_family<L: Labels>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, i64)>,
) {
    let f = family(values, |g: &Gauge, v| {
        g.set(v);
    });
    registry.register(name, help, f);
}

/// A family of seconds counters, one per label set, registered with the seconds unit.
fn seconds_family<L: Labels>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, f64)>,
) {
    let f = family(values, |c: &SecondsCounter, v| {
        c.inc_by(v);
    });
    registry.register_with_unit(name, help, Unit::Seconds, f);
}

/// The agent itself: its version and uptime.
fn agent(r: &mut Registry, status: &NodeStatus) {
    let info = Family::<VersionLabel, Gauge>::default();
    info.get_or_create(&VersionLabel {
        version: status.version.clone(),
    })
    .set(1);
    r.register("agent_build_info", "kfdqd's version (value 1)", info);
    let uptime = Gauge::<f64, AtomicU64>::default();
    uptime.set(status.uptime_s);
    r.register_with_unit(
        "agent_uptime",
        "Time since kfdqd started",
        Unit::Seconds,
        uptime,
    );
}

/// Per class: busy and preempted time, busy periods, processes, preemptions and their latency.
fn classes(r: &mut Registry, status: &NodeStatus, rec: &Recorder) {
    let class = |name: &str| ClassLabel {
        class: name.to_owned(),
    };
    seconds_family(
        r,
        "class_busy",
        "Time any queue of any process of the class was busy (the shims' activity reports)",
        status
            .classes
            .iter()
            .map(|c| (class(&c.name), rec.busy_s(&c.name))),
    );
    seconds_family(
        r,
        "class_preempted",
        "Time the class had a process preempted (what protecting the classes above costs it)",
        status
            .classes
            .iter()
            .map(|c| (class(&c.name), rec.preempted_s(&c.name))),
    );
    r.register_with_unit(
        "class_busy_period",
        "Busy periods of each class, edge to edge (a queue of the class busy to none busy): what protection buys the classes above",
        Unit::Seconds,
        rec.busy_periods.clone(),
    );
    gauge_family(
        r,
        "class_processes",
        "Processes of the class connected to the agent",
        status
            .classes
            .iter()
            .map(|c| (class(&c.name), i64::from(c.processes))),
    );
    gauge_family(
        r,
        "class_preempted_processes",
        "Processes of the class preempted now, at any level",
        status
            .classes
            .iter()
            .map(|c| (class(&c.name), i64::from(c.preempted))),
    );
    let pre = Family::<PreemptLabels, Counter>::default();
    for (class, counts) in &rec.preemptions {
        for (level, n) in [Level::Hold, Level::Deactivate, Level::Suspend]
            .into_iter()
            .zip(counts)
            .filter(|(_, n)| **n > 0)
        {
            pre.get_or_create(&PreemptLabels {
                class: class.clone(),
                level: level_label(level).into(),
            })
            .inc_by(*n);
        }
    }
    r.register(
        "preemptions",
        "Preemptions of processes (the agent's preempt commands and the levels their own watches of the edge boards applied), by the process's class and the level",
        pre,
    );
    r.register_with_unit(
        "preemption_latency",
        "From a preempt command sent to the shim's acknowledgement that the level is in effect",
        Unit::Seconds,
        rec.preempt_latency.clone(),
    );
}

/// The agent's own work: its counters and the decision latency.
fn work(r: &mut Registry, k: &Counters, rec: &Recorder) {
    let decisions: [(&str, &str, u64); 9] = [
        ("decisions", "Policy decisions taken", k.decisions),
        (
            "edge_decisions",
            "Policy decisions taken from queues' busy edges alone",
            k.edge_decisions,
        ),
        (
            "direct_preempts",
            "Preemptions a subscribed process applied on its own from the edge board (direct edges)",
            k.direct_preempts,
        ),
        (
            "direct_releases",
            "Releases a subscribed process applied on its own (direct edges)",
            k.direct_releases,
        ),
        (
            "direct_forged",
            "Edge board slots cleared as forged: busy for long while their writer reported no busy queue",
            k.direct_forged,
        ),
        (
            "unlisted_queues",
            "Queues shims reported that the kernel does not list for their process (ignored)",
            k.unlisted_queues,
        ),
        (
            "replaced_sessions",
            "Shim sessions ended by a second hello for the same process (the earlier connection closed)",
            k.replaced_sessions,
        ),
        (
            "activity_dropped",
            "Activity reports dropped: queue ids beyond the process's registry and the few unregistered ids kept",
            k.activity_dropped,
        ),
        (
            "uid_connections_refused",
            "Connections refused at accept: their uid held max_connections_per_uid",
            k.uid_connections_refused,
        ),
    ];
    for (name, help, total) in decisions {
        counter(r, name, help, total);
    }
    r.register_with_unit(
        "decision_latency",
        "From the wake-up that led to commands to the commands written",
        Unit::Seconds,
        rec.decision_latency.clone(),
    );
    let commands: [(&str, &str, u64); 11] = [
        ("commands", "Commands sent to shims", k.commands),
        (
            "command_failures",
            "Commands a shim reported failed",
            k.command_failures,
        ),
        (
            "lease_expiries",
            "Leases that ran out in shims (each released its process on its own: the agent did not renew in time)",
            k.lease_expiries,
        ),
        (
            "hints",
            "Request hints taken from processes whose class preempts others",
            k.hints,
        ),
        (
            "hints_ignored",
            "Request hints ignored: the process's class preempts nobody",
            k.hints_ignored,
        ),
        (
            "hint_expiries",
            "Request hints that expired: held hint_timeout_ms without GPU work (never followed by work, or never ended)",
            k.hint_expiries,
        ),
        (
            "release_failures",
            "Releases (reactivate, resume) the kernel refused in shims; each is retried with backoff until it holds",
            k.release_failures,
        ),
        (
            "connections",
            "Connections accepted on the agent's socket",
            k.connections,
        ),
        (
            "bad_messages",
            "Malformed, oversized or truncated messages received",
            k.bad_messages,
        ),
        ("reloads", "Configurations reloaded (SIGHUP)", k.reloads),
        (
            "reload_failures",
            "Configurations refused on reload (the old one stayed)",
            k.reload_failures,
        ),
    ];
    for (name, help, total) in commands {
        counter(r, name, help, total);
    }
}

/// Per partition: device-wide preempts, queues, busy queues, resident slots.
fn partitions(r: &mut Registry, status: &NodeStatus) {
    let gpu = |id: GpuId| GpuLabel {
        gpu: id.0.to_string(),
    };
    let preempts = Family::<GpuLabel, Counter>::default();
    for p in &status.partitions {
        preempts.get_or_create(&gpu(p.gpu_id)).inc_by(p.preempts);
    }
    r.register(
        "partition_device_preempts",
        "Device-wide preempts (runlist updates) the agent's level-2/3 commands cost on the partition",
        preempts,
    );
    gauge_family(
        r,
        "partition_queues",
        "KFD queues of connected processes on the partition",
        status
            .partitions
            .iter()
            .map(|p| (gpu(p.gpu_id), i64::from(p.queues))),
    );
    gauge_family(
        r,
        "partition_busy_queues",
        "Of those, queues with work",
        status
            .partitions
            .iter()
            .map(|p| (gpu(p.gpu_id), i64::from(p.busy_queues))),
    );
    gauge_family(
        r,
        "partition_resident_slots",
        "Queues the partition keeps resident (beyond them the scheduler time-slices the runlist)",
        status
            .partitions
            .iter()
            .map(|p| (gpu(p.gpu_id), i64::from(p.resident_slots))),
    );
}

/// Per process (labelled with its pod, if any): level, queues, preemptions, preempted and
/// busy time.
fn processes(r: &mut Registry, status: &NodeStatus) {
    let procs = || {
        status.processes.iter().map(|p| {
            let (namespace, pod, container) = p.pod.as_ref().map_or_else(Default::default, |k| {
                (k.namespace.clone(), k.name.clone(), k.container.clone())
            });
            ProcessLabels {
                pid: p.pid.to_string(),
                class: p.class.clone(),
                exe: p.exe.clone(),
                namespace,
                pod,
                container,
            }
        })
    };
    gauge_family(
        r,
        "process_level",
        "Preemption level of the process now: 0 running, 1 held, 2 deactivated, 3 suspended",
        procs().zip(status.processes.iter().map(|p| level_number(p.level))),
    );
    gauge_family(
        r,
        "process_queues",
        "KFD queues of the process",
        procs().zip(status.processes.iter().map(|p| p.queues.len() as i64)),
    );
    let pre = Family::<ProcessLabels, Counter>::default();
    for (l, p) in procs().zip(&status.processes) {
        pre.get_or_create(&l).inc_by(p.preemptions);
    }
    r.register(
        "process_preemptions",
        "Preemptions of the process: the agent's preempt commands and the levels its own watches of the edge boards applied (per pod: sum by namespace, pod)",
        pre,
    );
    seconds_family(
        r,
        "process_preempted",
        "Time the process spent preempted, at any level",
        procs().zip(status.processes.iter().map(|p| p.preempted_ms as f64 / 1e3)),
    );
    seconds_family(
        r,
        "process_busy",
        "Time any queue of the process was busy (the shim's activity reports)",
        procs().zip(status.processes.iter().map(|p| p.busy_ms as f64 / 1e3)),
    );
}
