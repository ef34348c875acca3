//! The agent's messages, answered: targets resolved to the streams (level 1) or queues
//! (levels 0, 2, 3) they name, each command executed under the registry lock (`levels/`), and
//! the replies (acknowledgements, the registry) to send back.

use kfdq::Pid;
use kfdq::proto::{AgentMsg, Level, ShimMsg, Target};

use crate::command_error::CommandError;
use crate::levels::{
    activate, deactivate, hold, release, resume, set_cu_masks, set_priority, set_window, suspend,
};
use crate::state::STATE;
use crate::targets::{queues_of, streams_of};

/// Answers one agent message.
pub fn handle(msg: AgentMsg) -> Vec<ShimMsg> {
    let ack = |seq: u64, r: Result<String, CommandError>| match r {
        Ok(detail) => ShimMsg::Ack {
            seq,
            ok: true,
            detail,
        },
        Err(e) => ShimMsg::Ack {
            seq,
            ok: false,
            detail: e.to_string(),
        },
    };
    crate::log::debug(|| format!("agent: {msg:?}"));
    let mut st = STATE.lock();
    let out = match msg {
        AgentMsg::Welcome { .. } => vec![],
        // The control thread's lease (`control/`) took it.
        AgentMsg::Renew {} => vec![],
        AgentMsg::Edges {
            on,
            hint_timeout_ms,
        } => {
            crate::hint::allow(hint_timeout_ms.filter(|_| on));
            if st.edges != on {
                st.edges = on;
                st.refresh_flags();
            }
            vec![]
        }
        AgentMsg::DoorbellTaken {} => {
            crate::edges::taken();
            vec![]
        }
        // The control thread (`control/`) reports every queue's state after it.
        AgentMsg::Rang {} => vec![],
        // The control thread hands these to `watch.rs` (they need no registry lock).
        AgentMsg::BoardWriter { .. }
        | AgentMsg::Watch { .. }
        | AgentMsg::Unwatch { .. }
        | AgentMsg::BoardChanged {} => vec![],
        AgentMsg::Refused { reason } => {
            crate::log::warn_always(&format!("the agent refused this process: {reason}"));
            vec![]
        }
        AgentMsg::SetCuMask { seq, target, masks } => {
            vec![ack(seq, set_cu_masks(&mut st, &target, &masks))]
        }
        AgentMsg::Error { detail } => {
            crate::log::debug(|| format!("the agent could not take a message: {detail}"));
            vec![]
        }
        AgentMsg::SetWindow { seq, dispatches } => vec![ack(seq, set_window(&mut st, dispatches))],
        AgentMsg::Query { seq } => vec![
            ShimMsg::Registry(st.to_proto(Pid::this())),
            ack(seq, Ok("registry sent".into())),
        ],
        AgentMsg::SetPriority {
            seq,
            target,
            priority,
        } => vec![ack(seq, set_priority(&mut st, &target, priority))],
        AgentMsg::Preempt {
            seq,
            level,
            target,
            grace_period,
        } => {
            crate::chain::preempt_started();
            let r = match level {
                Level::Hold => streams_of(&st, &target)
                    .map(|s| hold(&mut st, &s, matches!(target, Target::All))),
                Level::Deactivate => queues_of(&st, &target).and_then(|q| deactivate(&mut st, &q)),
                Level::Suspend => {
                    queues_of(&st, &target).and_then(|q| suspend(&mut st, &q, grace_period))
                }
            };
            crate::chain::preempt_done();
            vec![ack(seq, r)]
        }
        AgentMsg::Release { seq, level, target } => {
            let r = match level {
                Level::Hold => streams_of(&st, &target)
                    .map(|s| release(&mut st, &s, matches!(target, Target::All))),
                Level::Deactivate => queues_of(&st, &target).and_then(|q| activate(&mut st, &q)),
                Level::Suspend => queues_of(&st, &target).and_then(|q| resume(&mut st, &q)),
            };
            vec![ack(seq, r)]
        }
    };
    drop(st);
    STATE.notify_all();
    out
}
