//! The agent's Prometheus metrics: what it records as it goes (class busy time, preemptions
//! per class and level, preemption and decision latency histograms) and the exposition of a
//! scrape, built from the node's status plus those records. docs/operations.md lists every
//! series.
//!
//! A scrape builds a fresh registry: totals the node already counts are written as counters of
//! that value, state (partitions, processes) as gauges of the moment, and the two histograms
//! are the live ones. Nothing here does I/O; [`super::http`] serves the text.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::ids::GpuId;
use crate::proto::Level;
use crate::proto::control::NodeStatus;

/// The `Content-Type` of what [`render`] returns (Prometheus text format 0.0.4).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Histogram buckets of latencies, seconds: 50 µs doubling to 1.6 s (16 buckets). A level-2
/// preempt on kfd-emu acknowledges in about a millisecond, a level-3 one after its grace
/// period; an ack slower than the last bucket means a stuck shim (the agent gives up at 5 s).
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(50e-6, 2.0, 16)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabel {
    class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PreemptLabels {
    class: String,
    level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LevelLabel {
    level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabel {
    gpu: String,
}

/// A process's labels. `namespace`, `pod` and `container` name the Kubernetes container that
/// holds its allocation, empty for a process without one (Prometheus reads an empty label as
/// an absent one, so `{pod=""}` selects the processes outside pods).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProcessLabels {
    pid: String,
    class: String,
    exe: String,
    namespace: String,
    pod: String,
    container: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: String,
}

/// The metric name of a level (`hold`, `deactivate`, `suspend`).
pub fn level_label(l: Level) -> &'static str {
    match l {
        Level::Hold => "hold",
        Level::Deactivate => "deactivate",
        Level::Suspend => "suspend",
    }
}

/// A level as a number (0 running, 1 hold, 2 deactivate, 3 suspend).
fn level_number(l: Option<Level>) -> i64 {
    match l {
        None => 0,
        Some(Level::Hold) => 1,
        Some(Level::Deactivate) => 2,
        Some(Level::Suspend) => 3,
    }
}

/// Time each class spent in a state (busy, preempted): accrued at every account.
#[derive(Debug, Default)]
struct TimeIn {
    since: BTreeMap<String, Instant>,
    total_s: BTreeMap<String, f64>,
}

impl TimeIn {
    /// Accrues up to `now`; `classes` are in the state from now on. Returns the classes that
    /// left it, with when they had entered it.
    fn account(&mut self, now: Instant, classes: &[&str]) -> Vec<(String, Instant)> {
        let mut left = Vec::new();
        for (class, since) in &self.since {
            let dt = now.saturating_duration_since(*since).as_secs_f64();
            // No allocation once the class is known.
            match self.total_s.get_mut(class) {
                Some(t) => *t += dt,
                None => {
                    self.total_s.insert(class.clone(), dt);
                }
            }
            if !classes.contains(&class.as_str()) {
                left.push((class.clone(), *since));
            }
        }
        for (c, _) in &left {
            self.since.remove(c);
        }
        for (c, since) in &mut self.since {
            let _ = c;
            *since = now;
        }
        for c in classes {
            self.since.entry((*c).to_owned()).or_insert(now);
        }
        left
    }

    fn total(&self, class: &str) -> f64 {
        self.total_s.get(class).copied().unwrap_or(0.0)
    }
}

/// What the node records between scrapes.
#[derive(Debug)]
pub struct Recorder {
    busy: TimeIn,
    /// When each busy class's current busy period began (`busy` restarts its own clock at
    /// every account).
    period_start: BTreeMap<String, Instant>,
    busy_periods: Family<ClassLabel, Histogram>,
    preempted: TimeIn,
    /// Preemptions per class, per level (hold, deactivate, suspend): the agent's commands
    /// and the levels the processes' own watches applied.
    preemptions: BTreeMap<String, [u64; 3]>,
    preempt_latency: Family<LevelLabel, Histogram>,
    decision_latency: Histogram,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            busy: TimeIn::default(),
            period_start: BTreeMap::new(),
            busy_periods: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            preempted: TimeIn::default(),
            preemptions: BTreeMap::new(),
            preempt_latency: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            decision_latency: Histogram::new(latency_buckets()),
        }
    }
}

impl Recorder {
    /// Accounts busy and preempted time up to `now`; `busy` are the classes busy from now on
    /// (a class is busy while any queue of any of its processes is), `preempted` those with a
    /// process preempted from now on. Returns the busy periods that ended (class, seconds):
    /// a class's busy period runs from the account that found it busy to the one that found
    /// it idle, and each is observed in the busy-period histogram.
    pub fn account<'a>(
        &mut self,
        now: Instant,
        busy: impl IntoIterator<Item = &'a str>,
        preempted: impl IntoIterator<Item = &'a str>,
    ) -> Vec<(String, f64)> {
        let busy: Vec<&str> = busy.into_iter().collect();
        let preempted: Vec<&str> = preempted.into_iter().collect();
        self.busy.account(now, &busy);
        self.preempted.account(now, &preempted);
        let mut ended = Vec::new();
        self.period_start.retain(|c, start| {
            if busy.contains(&c.as_str()) {
                return true;
            }
            ended.push((
                c.clone(),
                now.saturating_duration_since(*start).as_secs_f64(),
            ));
            false
        });
        for c in busy {
            self.period_start.entry(c.to_owned()).or_insert(now);
        }
        for (class, s) in &ended {
            self.busy_periods
                .get_or_create(&ClassLabel {
                    class: class.clone(),
                })
                .observe(*s);
        }
        ended
    }

    /// Seconds `class` was busy.
    pub fn busy_s(&self, class: &str) -> f64 {
        self.busy.total(class)
    }

    /// Seconds `class` had a process preempted.
    pub fn preempted_s(&self, class: &str) -> f64 {
        self.preempted.total(class)
    }

    /// A process of `class` preempted at `level` (by the agent's command or its own watch).
    pub fn preempted(&mut self, class: &str, level: Level) {
        let i = level_number(Some(level)) as usize - 1;
        // No allocation on the decision's path once the class is known.
        match self.preemptions.get_mut(class) {
            Some(n) => n[i] += 1,
            None => {
                let mut n = [0; 3];
                n[i] = 1;
                self.preemptions.insert(class.to_owned(), n);
            }
        }
    }

    /// A preempt command at `level` acknowledged after `seconds`.
    pub fn preempt_acked(&self, level: Level, seconds: f64) {
        self.preempt_latency
            .get_or_create(&LevelLabel {
                level: level_label(level).into(),
            })
            .observe(seconds);
    }

    /// A decision that sent commands took `seconds` from wake-up to the commands written.
    pub fn decision(&self, seconds: f64) {
        self.decision_latency.observe(seconds);
    }
}

fn counter(registry: &mut Registry, name: &str, help: &str, total: u64) {
    let c: Counter = Counter::default();
    c.inc_by(total);
    registry.register(name, help, c);
}

fn gauge_family<L>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    values: impl IntoIterator<Item = (L, i64)>,
) where
    L: Clone + std::fmt::Debug + std::hash::Hash + Eq + EncodeLabelSet + Send + Sync + 'static,
{
    let f = Family::<L, Gauge>::default();
    for (l, v) in values {
        f.get_or_create(&l).set(v);
    }
    registry.register(name, help, f);
}

/// The text of a scrape (Prometheus text format) of `status` and `rec`.
pub fn render(status: &NodeStatus, rec: &Recorder) -> Result<String, std::fmt::Error> {
    let mut r = Registry::with_prefix("kfdq");
    let gpu = |id: GpuId| GpuLabel {
        gpu: id.0.to_string(),
    };

    let info = Family::<VersionLabel, Gauge>::default();
    info.get_or_create(&VersionLabel {
        version: status.version.clone(),
    })
    .set(1);
    r.register("agent_build_info", "kfdqd's version (value 1)", info);
    let uptime = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    uptime.set(status.uptime_s);
    r.register_with_unit(
        "agent_uptime",
        "Time since kfdqd started",
        Unit::Seconds,
        uptime,
    );

    // Classes.
    let busy = Family::<ClassLabel, Counter<f64, std::sync::atomic::AtomicU64>>::default();
    for c in &status.classes {
        let s = rec.busy_s(&c.name);
        busy.get_or_create(&ClassLabel {
            class: c.name.clone(),
        })
        .inc_by(s);
    }
    r.register_with_unit(
        "class_busy",
        "Time any queue of any process of the class was busy (the shims' activity reports)",
        Unit::Seconds,
        busy,
    );
    let preempted = Family::<ClassLabel, Counter<f64, std::sync::atomic::AtomicU64>>::default();
    for c in &status.classes {
        preempted
            .get_or_create(&ClassLabel {
                class: c.name.clone(),
            })
            .inc_by(rec.preempted_s(&c.name));
    }
    r.register_with_unit(
        "class_preempted",
        "Time the class had a process preempted (what protecting the classes above costs it)",
        Unit::Seconds,
        preempted,
    );
    r.register_with_unit(
        "class_busy_period",
        "Busy periods of each class, edge to edge (a queue of the class busy to none busy): what protection buys the classes above",
        Unit::Seconds,
        rec.busy_periods.clone(),
    );
    gauge_family(
        &mut r,
        "class_processes",
        "Processes of the class connected to the agent",
        status.classes.iter().map(|c| {
            (
                ClassLabel {
                    class: c.name.clone(),
                },
                i64::from(c.processes),
            )
        }),
    );
    gauge_family(
        &mut r,
        "class_preempted_processes",
        "Processes of the class preempted now, at any level",
        status.classes.iter().map(|c| {
            (
                ClassLabel {
                    class: c.name.clone(),
                },
                i64::from(c.preempted),
            )
        }),
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

    // The agent's own work.
    let k = &status.counters;
    counter(&mut r, "decisions", "Policy decisions taken", k.decisions);
    counter(
        &mut r,
        "edge_decisions",
        "Policy decisions taken from queues' busy edges alone",
        k.edge_decisions,
    );
    counter(
        &mut r,
        "direct_preempts",
        "Preemptions a subscribed process applied on its own from the edge board (direct edges)",
        k.direct_preempts,
    );
    counter(
        &mut r,
        "direct_releases",
        "Releases a subscribed process applied on its own (direct edges)",
        k.direct_releases,
    );
    counter(
        &mut r,
        "direct_forged",
        "Edge board slots cleared as forged: busy for long while their writer reported no busy queue",
        k.direct_forged,
    );
    counter(
        &mut r,
        "unlisted_queues",
        "Queues shims reported that the kernel does not list for their process (ignored)",
        k.unlisted_queues,
    );
    counter(
        &mut r,
        "replaced_sessions",
        "Shim sessions ended by a second hello for the same process (the earlier connection closed)",
        k.replaced_sessions,
    );
    counter(
        &mut r,
        "activity_dropped",
        "Activity reports dropped: queue ids beyond the process's registry and the few unregistered ids kept",
        k.activity_dropped,
    );
    counter(
        &mut r,
        "uid_connections_refused",
        "Connections refused at accept: their uid held max_connections_per_uid",
        k.uid_connections_refused,
    );
    r.register_with_unit(
        "decision_latency",
        "From the wake-up that led to commands to the commands written",
        Unit::Seconds,
        rec.decision_latency.clone(),
    );
    counter(&mut r, "commands", "Commands sent to shims", k.commands);
    counter(
        &mut r,
        "command_failures",
        "Commands a shim reported failed",
        k.command_failures,
    );
    counter(
        &mut r,
        "lease_expiries",
        "Leases that ran out in shims (each released its process on its own: the agent did not renew in time)",
        k.lease_expiries,
    );
    counter(
        &mut r,
        "hints",
        "Request hints taken from processes whose class preempts others",
        k.hints,
    );
    counter(
        &mut r,
        "hints_ignored",
        "Request hints ignored: the process's class preempts nobody",
        k.hints_ignored,
    );
    counter(
        &mut r,
        "hint_expiries",
        "Request hints that expired: held hint_timeout_ms without GPU work (never followed by work, or never ended)",
        k.hint_expiries,
    );
    counter(
        &mut r,
        "release_failures",
        "Releases (reactivate, resume) the kernel refused in shims; each is retried with backoff until it holds",
        k.release_failures,
    );
    counter(
        &mut r,
        "connections",
        "Connections accepted on the agent's socket",
        k.connections,
    );
    counter(
        &mut r,
        "bad_messages",
        "Malformed, oversized or truncated messages received",
        k.bad_messages,
    );
    counter(
        &mut r,
        "reloads",
        "Configurations reloaded (SIGHUP)",
        k.reloads,
    );
    counter(
        &mut r,
        "reload_failures",
        "Configurations refused on reload (the old one stayed)",
        k.reload_failures,
    );

    // Partitions.
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
        &mut r,
        "partition_queues",
        "KFD queues of connected processes on the partition",
        status
            .partitions
            .iter()
            .map(|p| (gpu(p.gpu_id), i64::from(p.queues))),
    );
    gauge_family(
        &mut r,
        "partition_busy_queues",
        "Of those, queues with work",
        status
            .partitions
            .iter()
            .map(|p| (gpu(p.gpu_id), i64::from(p.busy_queues))),
    );
    gauge_family(
        &mut r,
        "partition_resident_slots",
        "Queues the partition keeps resident (beyond them the scheduler time-slices the runlist)",
        status
            .partitions
            .iter()
            .map(|p| (gpu(p.gpu_id), i64::from(p.resident_slots))),
    );

    // Processes.
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
        &mut r,
        "process_level",
        "Preemption level of the process now: 0 running, 1 held, 2 deactivated, 3 suspended",
        procs().zip(status.processes.iter().map(|p| level_number(p.level))),
    );
    gauge_family(
        &mut r,
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
    let held = Family::<ProcessLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
    for (l, p) in procs().zip(&status.processes) {
        held.get_or_create(&l).inc_by(p.preempted_ms as f64 / 1e3);
    }
    r.register_with_unit(
        "process_preempted",
        "Time the process spent preempted, at any level",
        Unit::Seconds,
        held,
    );
    let busy = Family::<ProcessLabels, Counter<f64, std::sync::atomic::AtomicU64>>::default();
    for (l, p) in procs().zip(&status.processes) {
        busy.get_or_create(&l).inc_by(p.busy_ms as f64 / 1e3);
    }
    r.register_with_unit(
        "process_busy",
        "Time any queue of the process was busy (the shim's activity reports)",
        Unit::Seconds,
        busy,
    );

    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &r)?;
    if !text.ends_with('\n') {
        text.write_char('\n')?;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn busy_time_accrues_only_while_busy() {
        let mut r = Recorder::default();
        let t0 = Instant::now();
        r.account(t0, ["latency"], []);
        let ended = r.account(
            t0 + Duration::from_millis(300),
            ["latency", "batch"],
            ["normal"],
        );
        assert!(ended.is_empty());
        let ended = r.account(t0 + Duration::from_millis(500), ["batch"], ["normal"]);
        assert_eq!(ended, vec![("latency".to_string(), 0.5)], "one busy period");
        r.account(t0 + Duration::from_millis(900), [], []);
        r.account(t0 + Duration::from_millis(5000), [], []);
        assert!((r.preempted_s("normal") - 0.6).abs() < 1e-9);
        let s = |c: &str| r.busy_s(c);
        assert!((s("latency") - 0.5).abs() < 1e-9, "{}", s("latency"));
        assert!((s("batch") - 0.6).abs() < 1e-9, "{}", s("batch"));
    }
}
