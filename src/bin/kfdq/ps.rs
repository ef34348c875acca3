//! `kfdq ps`.

use serde::Serialize;

use super::table::Table;
use super::{CliError, kfd_error, print_json};
use kfdq::Pid;
use kfdq::kfd::Root;
use kfdq::kfd::procfs::{self, ProcQueue};
use kfdq::proto::control::{Control, ProcessStatus};
use kfdq::proto::state::read_registry;
use kfdq::proto::{QueueInfo, Registry, StreamInfo, StreamKind};

#[derive(Serialize)]
struct QueueView<'a> {
    #[serde(flatten)]
    queue: &'a ProcQueue,
    type_name: &'static str,
    /// From the shim's registry, when the process runs under it.
    managed: Option<&'a QueueInfo>,
    /// Streams on this queue (shim registry).
    streams: Vec<&'a StreamInfo>,
    /// Suspended by the agent's tracer (a process without the shim).
    traced_suspended: bool,
}

#[derive(Serialize)]
struct ProcessView<'a> {
    pid: u32,
    command: Option<String>,
    /// Class from the shim's registry.
    class: Option<&'a str>,
    /// True when the process runs under libkfdq_shim.so.
    shim: bool,
    /// True for the agent itself (kfdqd opens the GPU for the debugger API and the doctor's
    /// probes; it has no shim and needs none).
    is_agent: bool,
    queues: Vec<QueueView<'a>>,
    /// In-flight window (AQL packets per queue) the shim enforces; `None`: unbounded.
    window: Option<u32>,
    warnings: &'a [String],
    /// The agent's view (class, state, why), when an agent answers.
    agent: Option<&'a ProcessStatus>,
    /// Why its queues' priority and state show `?` (no shim registry was found for it).
    #[serde(skip_serializing_if = "Option::is_none")]
    unknown: Option<&'static str>,
}

/// Why `kfdq ps` cannot show a process's queue priorities and states (`?`): it found no
/// registry of the shim's for `pid` in the state directories it searches.
fn why_unknown(pid: u32, agent: Option<&ProcessStatus>) -> &'static str {
    const ELSEWHERE: &str = "its shim writes its state in another directory than the ones kfdq ps searches ($KFDQ_STATE_DIR, /run/kfdq, /tmp/kfdq-<uid>): run kfdq ps with the process's KFDQ_STATE_DIR";
    if agent.is_some_and(|a| a.control == Control::Shim) {
        return ELSEWHERE;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(maps) if maps.contains("libkfdq_shim") => ELSEWHERE,
        Ok(_) if agent.is_some_and(|a| a.control == Control::Tracer) => {
            "no shim: the agent's tracer controls it, and amdkfd shows no queue's priority"
        }
        Ok(_) => {
            "no shim: amdkfd shows no queue's priority or state to other processes (run it under kfdq run to see them)"
        }
        Err(_) => {
            "no access to its /proc/<pid>/maps (another user's process: run kfdq ps as root) and no shim state found for it"
        }
    }
}

/// `WINDOW`: the window and how many launches waited at it (and gave up on a stalled queue).
fn window_cell(window: Option<u32>, q: Option<&QueueInfo>) -> String {
    let waits = q.map_or(0, |q| q.window_waits);
    let stalls = q.map_or(0, |q| q.window_stalls);
    let mut cell = window.map_or_else(|| "-".to_string(), |w| w.to_string());
    if waits > 0 {
        cell.push_str(&format!(" ({waits} waited"));
        if stalls > 0 {
            cell.push_str(&format!(", {stalls} stalled"));
        }
        cell.push(')');
    }
    cell
}

fn stream_label(s: &StreamInfo) -> String {
    match s.kind {
        StreamKind::Null => "null".into(),
        StreamKind::PerThread => format!("per-thread#{}", s.stream_id),
        StreamKind::Created => {
            let prio = s
                .hip_priority
                .map(|p| format!(" hip {p:+}"))
                .unwrap_or_default();
            match &s.creator {
                Some(lib) => format!("#{}{prio} ({lib})", s.stream_id),
                None => format!("#{}{prio}", s.stream_id),
            }
        }
    }
}

fn command_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

pub(super) fn run(root: &Root, agent: &std::path::Path, json: bool) -> Result<(), CliError> {
    let procs = procfs::processes(root).map_err(|e| kfd_error("listing KFD processes", root, e))?;
    let asked = super::client::status(agent);
    let no_agent = asked.is_err();
    let status = asked.ok();
    let agent_view = |pid: u32| {
        status
            .as_ref()
            .and_then(|s| s.processes.iter().find(|p| p.pid == Pid(pid)))
    };
    let registries: Vec<Option<Registry>> =
        procs.iter().map(|p| read_registry(Pid(p.pid))).collect();
    let views: Vec<ProcessView<'_>> = procs
        .iter()
        .zip(&registries)
        .map(|(p, reg)| (p, reg, command_of(p.pid)))
        .map(|(p, reg, command)| ProcessView {
            pid: p.pid,
            // Without an agent to say its pid, the agent is the process named kfdqd.
            is_agent: status.as_ref().map_or_else(
                || command.as_deref() == Some("kfdqd"),
                |s| s.agent_pid == Pid(p.pid),
            ),
            command,
            class: reg.as_ref().and_then(|r| r.class.as_deref()),
            shim: reg.is_some(),
            queues: p
                .queues
                .iter()
                .map(|q| {
                    let managed = reg.as_ref().and_then(|r| {
                        r.queues
                            .iter()
                            .find(|m| m.queue_id == q.queue_id && m.gpu_id == q.gpu_id)
                    });
                    let streams = reg
                        .as_ref()
                        .map(|r| {
                            r.streams
                                .iter()
                                .filter(|s| s.queue_id == Some(q.queue_id))
                                .collect()
                        })
                        .unwrap_or_default();
                    let traced_suspended = agent_view(p.pid).is_some_and(|a| {
                        a.control == Control::Tracer
                            && a.queues
                                .iter()
                                .any(|x| x.queue_id == q.queue_id && x.preempted.is_some())
                    });
                    QueueView {
                        queue: q,
                        type_name: q.type_name(),
                        managed,
                        streams,
                        traced_suspended,
                    }
                })
                .collect(),
            window: reg.as_ref().and_then(|r| r.window),
            warnings: reg.as_ref().map(|r| r.warnings.as_slice()).unwrap_or(&[]),
            agent: agent_view(p.pid),
            unknown: (reg.is_none() && !p.queues.is_empty())
                .then(|| why_unknown(p.pid, agent_view(p.pid))),
        })
        .collect();
    if json {
        return print_json(&views);
    }
    let mut t = Table::new(&[
        ">PID",
        "COMMAND",
        "CLASS",
        ">QUEUE",
        "GPU_ID",
        "TYPE",
        ">RING_BYTES",
        ">PRIO",
        "STREAMS",
        "STATE",
        "BUSY",
        "WINDOW",
        "CONTROL",
        "AGENT",
    ]);
    for p in &views {
        let cmd = p.command.clone().unwrap_or_else(|| "?".into());
        let class = match (p.agent, p.shim) {
            _ if p.is_agent => "(the agent)".into(),
            (Some(a), _) => a.class.clone(),
            (None, true) => p.class.unwrap_or("-").to_string(),
            (None, false) => "(no shim)".into(),
        };
        let agent_state = p
            .agent
            .map_or_else(|| "-".to_string(), |a| format!("{}: {}", a.state, a.reason));
        let control = p
            .agent
            .map_or_else(|| "-".to_string(), |a| a.control.name().to_string());
        if p.queues.is_empty() {
            t.row(vec![
                p.pid.to_string(),
                cmd.clone(),
                class.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                control.clone(),
                agent_state.clone(),
            ]);
        }
        for q in &p.queues {
            let (prio, state) = match q.managed {
                Some(m) => (
                    if m.effective_priority == m.requested_priority {
                        m.effective_priority.to_string()
                    } else {
                        format!("{} (asked {})", m.effective_priority, m.requested_priority)
                    },
                    if m.suspended {
                        "suspended".to_string()
                    } else if m.deactivated {
                        "deactivated".to_string()
                    } else if q.streams.iter().any(|s| s.held) {
                        // Calls of the program waiting in the shim for the release.
                        match q.streams.iter().map(|s| s.held_calls).sum::<u32>() {
                            0 => "held".to_string(),
                            n => format!("held, {n} call(s) waiting"),
                        }
                    } else {
                        "active".to_string()
                    },
                ),
                // Without the shim, the agent's tracer knows whether it suspended the queue.
                None if q.traced_suspended => ("?".into(), "suspended".to_string()),
                None if p.agent.is_some_and(|a| a.control == Control::Tracer) => {
                    ("?".into(), "active".to_string())
                }
                None => ("?".into(), "?".to_string()),
            };
            let streams = if q.streams.is_empty() {
                "-".to_string()
            } else {
                q.streams
                    .iter()
                    .map(|s| stream_label(s))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            t.row(vec![
                p.pid.to_string(),
                cmd.clone(),
                class.clone(),
                q.queue.queue_id.0.to_string(),
                q.queue.gpu_id.to_string(),
                q.type_name.into(),
                q.queue.ring_size.to_string(),
                prio,
                streams,
                state,
                p.agent
                    .and_then(|a| a.queues.iter().find(|x| x.queue_id == q.queue.queue_id))
                    .map_or("-", |x| if x.busy { "yes" } else { "no" })
                    .into(),
                window_cell(p.window, q.managed),
                control.clone(),
                agent_state.clone(),
            ]);
        }
    }
    print!("{}", t.render());
    for p in &views {
        for w in p.warnings {
            println!("warning: pid {}: {w}", p.pid);
        }
    }
    for p in views.iter().filter(|p| !p.is_agent) {
        if let Some(why) = p.unknown {
            println!("?: pid {}: {why}", p.pid);
        }
    }
    let nq: usize = views.iter().map(|p| p.queues.len()).sum();
    println!("{} process(es) with KFD state, {nq} queue(s).", views.len());
    if no_agent {
        println!(
            "BUSY, CONTROL and AGENT are blank: they are the agent's view, and no agent answered at {} (`kfdq status` says why; --agent PATH names another)",
            agent.display()
        );
    }
    if let Ok(topo) = kfdq::kfd::Topology::read(root) {
        for node in topo.gpus() {
            let Some(gpu) = node.gpu_id else { continue };
            println!(
                "{}",
                partition_line(&views, gpu.0, node.resident_queue_limit())
            );
        }
    }
    Ok(())
}

/// One partition's queues against its resident slots: beyond them the hardware scheduler
/// time-slices the runlist, and queue priority stops deciding who runs.
fn partition_line(views: &[ProcessView<'_>], gpu: u32, slots: u32) -> String {
    let queues: Vec<&QueueView<'_>> = views
        .iter()
        .flat_map(|p| &p.queues)
        .filter(|q| q.queue.gpu_id.0 == gpu)
        .collect();
    let active = queues
        .iter()
        .filter(|q| {
            !q.traced_suspended && q.managed.is_none_or(|m| !(m.deactivated || m.suspended))
        })
        .count();
    let mut line = format!(
        "gpu {gpu}: {} queue(s), {active} active, {slots} resident slots",
        queues.len()
    );
    if active > slots as usize {
        line.push_str(
            " — more active queues than slots: the scheduler time-slices the runlist and priorities \
             stop deciding who runs (fewer streams per process, a lower hw_queues for their class, or level 2 for batch classes)",
        );
    }
    line
}
