//! What the node's unit tests (`tests*.rs`) share: the agent file they start from, identities,
//! a node on given partitions, a process connected (hello, registry), a message and a decision
//! as (messages, time) -> commands. No socket, no process: identities are given.

use std::time::Instant;

use super::{AgentConfig, NodeState, Out, PartitionObs};
use crate::agent::identity::{Claim, Identity};
use crate::ids::{GpuId, Pid};
use crate::proto::{QueueInfo, Registry, ShimMsg};

/// A class of an agent file: name, rank, priority and, for a class that is preempted, its
/// level; every class is chosen by `KFDQ_CLASS` (`match = { env = true }`).
pub(super) type Class<'a> = (&'a str, u32, u32, Option<&'a str>);

/// An agent file: `[agent]` with `agent` (its keys, one a line, each ending in a newline),
/// then `classes`.
pub(super) fn agent_file(agent: &str, classes: &[Class<'_>]) -> String {
    let mut text = format!("[agent]\n{agent}");
    for (name, rank, priority, level) in classes {
        text.push_str(&format!(
            "\n[[class]]\nname = \"{name}\"\nrank = {rank}\npriority = {priority}\n"
        ));
        if let Some(level) = level {
            text.push_str(&format!("level = \"{level}\"\n"));
        }
        text.push_str("match = { env = true }\n");
    }
    text
}

/// A process's identity as the agent reads it from `/proc`: root, no groups, no cgroup, no
/// claim, executable `/bin/p<pid>`.
pub(super) fn identity(pid: Pid) -> Identity {
    Identity {
        pid,
        start: 0,
        uid: 0,
        gid: 0,
        groups: vec![],
        exe: format!("/bin/p{pid}"),
        cgroup: String::new(),
        claim: Claim::None,
        admin_channel: false,
        liveness: Default::default(),
    }
}

/// A node with `config` on `gpus` (80 CUs each, `resident_slots` resident queues), no process
/// yet.
pub(super) fn node_on(config: &str, gpus: &[GpuId], resident_slots: u32, t0: Instant) -> NodeState {
    let cfg = AgentConfig::parse(config, None).unwrap();
    let parts = gpus
        .iter()
        .map(|&gpu_id| PartitionObs {
            gpu_id,
            resident_slots,
            cus: 80,
        })
        .collect();
    NodeState::new(cfg, parts, String::new(), t0).unwrap()
}

/// The registry of `pid` in `class` with `queues`.
pub(super) fn registry(pid: Pid, class: &str, queues: Vec<QueueInfo>) -> ShimMsg {
    ShimMsg::Registry(Registry {
        pid,
        class: Some(class.into()),
        queues,
        ..Registry::default()
    })
}

/// Connection `conn` says hello as `id` in `class`, then its registry of `queues`, at `t`.
pub(super) fn connect(
    n: &mut NodeState,
    conn: u64,
    id: Identity,
    class: &str,
    queues: Vec<QueueInfo>,
    t: Instant,
    out: &mut Vec<Out>,
) {
    let pid = id.pid;
    n.hello(
        conn,
        id,
        crate::proto::VERSION,
        Some(class.into()),
        pid,
        out,
    )
    .unwrap();
    n.shim_message(pid, registry(pid, class, queues), t, out);
}

/// Decides at `t` (the timer the last decision set), returning the commands.
pub(super) fn decide(n: &mut NodeState, t: Instant) -> Vec<Out> {
    let mut out = Vec::new();
    n.decide(t, &mut out);
    out
}

/// Sends `msg` from `pid` at `now`, decides if it asks for it, and returns the commands.
pub(super) fn step(n: &mut NodeState, pid: Pid, msg: ShimMsg, now: Instant) -> Vec<Out> {
    let mut out = Vec::new();
    if n.shim_message(pid, msg, now, &mut out) {
        n.decide(now, &mut out);
    }
    out
}
