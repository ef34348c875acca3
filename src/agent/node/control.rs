//! Control requests from `kfdq` (status, priority, suspend/resume, class): who may do what,
//! and the reply, now or once the shims acknowledged what the request caused.

use std::time::Instant;

use super::super::conn::ConnId;
use super::super::identity::{ClassChangeError, Identity, classify, may_set_class};
use super::super::kubernetes::cap::cap_of;
use super::process::Proc;
use super::status::level_name;
use super::waiters::{ACK_TIMEOUT, Waiter};
use super::{NodeState, Out};
use crate::ids::Pid;
use crate::policy::Run;
use crate::proto::control::{ClassAnswer, Control};
use crate::proto::{Level, Reply, Request};

impl NodeState {
    /// Runs a control request from `who` on control connection `conn`. The reply comes now,
    /// or once the shims acknowledged the commands it caused.
    pub fn control(
        &mut self,
        conn: ConnId,
        who: &Identity,
        req: Request,
        now: Instant,
        out: &mut Vec<Out>,
    ) {
        // A request may move, preempt or release a process: the next decision looks at all.
        // Status and Classify only read, so the next decision stays an edge decision if it
        // can (a status poll must not slow the reaction it observes).
        if !matches!(req, Request::Status | Request::Classify { .. }) {
            self.full_due = true;
        }
        let reply = match self.control_inner(conn, who, req, now, out) {
            Ok(Some(detail)) => Reply::Done { detail },
            Ok(None) => return,
            Err(e) => Reply::Error {
                error: e.to_string(),
            },
        };
        out.push(Out::Control(conn, reply));
    }

    fn target(&self, who: &Identity, pid: Pid) -> Result<&Proc, ControlError> {
        let p = self
            .procs
            .get(&pid)
            .ok_or(ControlError::NotConnected { pid })?;
        if !who.is_admin(&self.cfg) && !who.owns(&p.id) {
            return Err(ControlError::NotOwner {
                pid,
                owner: p.id.uid,
                uid: who.uid,
                admin_group: self.cfg.admin_group.as_ref().map(|(n, _)| n.clone()),
            });
        }
        Ok(p)
    }

    fn control_inner(
        &mut self,
        conn: ConnId,
        who: &Identity,
        req: Request,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> Result<Option<String>, ControlError> {
        let (pid, undo_manual, what) = match req {
            Request::Status => {
                let mut status = self.status(now);
                // A pod sees its own container's processes only (issue 50, item 2).
                status.processes.retain(|p| {
                    self.procs
                        .get(&p.pid)
                        .is_none_or(|q| who.may_see(&q.id, &self.cfg))
                });
                if who.in_pod() && !who.is_admin(&self.cfg) {
                    status.left_alone.clear();
                }
                out.push(Out::Control(conn, Reply::Status(Box::new(status))));
                return Ok(None);
            }
            Request::Classify { class, exe } => {
                out.push(Out::Control(
                    conn,
                    Reply::Class(Box::new(self.classify_for(who, class, exe))),
                ));
                return Ok(None);
            }
            Request::SetPriority { pid, priority } => {
                if priority > 15 {
                    return Err(ControlError::PriorityRange { priority });
                }
                let p = self.target(who, pid)?;
                if p.via == Control::Tracer {
                    return Err(ControlError::PriorityNeedsShim { pid });
                }
                if !who.is_admin(&self.cfg) {
                    let cap = self
                        .cfg
                        .class(&p.classified.entitled)
                        .map_or(0, |c| u32::from(c.max_priority));
                    if priority > cap {
                        return Err(ControlError::PriorityCap {
                            pid,
                            class: p.classified.entitled.clone(),
                            cap,
                        });
                    }
                }
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.priority_override = Some(priority);
                    p.priority_sent = None;
                }
                (pid, false, format!("priority {priority}"))
            }
            Request::Suspend { pid, level } => {
                let p = self.target(who, pid)?;
                if p.via == Control::Tracer && level != Level::Suspend {
                    return Err(ControlError::LevelNeedsShim { pid });
                }
                if let Some(p) = self.procs.get_mut(&pid) {
                    if p.manual == Some(level) {
                        return Ok(Some(format!(
                            "process {pid} is already {} by hand",
                            level_name(Run::Preempted(level))
                        )));
                    }
                    p.manual = Some(level);
                    p.failed = None;
                }
                (
                    pid,
                    true,
                    format!("{} by hand", level_name(Run::Preempted(level))),
                )
            }
            Request::Resume { pid } => {
                self.target(who, pid)?;
                if let Some(p) = self.procs.get_mut(&pid) {
                    if p.manual.is_none() {
                        return Ok(Some(format!(
                            "process {pid} was not preempted by hand; it is {} ({})",
                            level_name(p.applied),
                            p.reason()
                        )));
                    }
                    p.manual = None;
                }
                (pid, false, "resume".into())
            }
            Request::SetClass { pid, class } => {
                let p = self.target(who, pid)?;
                may_set_class(
                    &self.cfg,
                    who,
                    &p.classified.entitled,
                    &class,
                    p.cap.as_ref(),
                )?;
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.class_override = Some(class.clone());
                    p.priority_override = None;
                    p.priority_sent = None;
                }
                (pid, false, format!("class {class}"))
            }
        };
        let before = self.seq;
        self.decide(now, out);
        let seqs: Vec<u64> = self
            .procs
            .get(&pid)
            .map(|p| p.pending.keys().filter(|s| *s > before).collect())
            .unwrap_or_default();
        let state = self
            .procs
            .get(&pid)
            .map(|p| format!("{} ({})", level_name(p.applied), p.reason()))
            .unwrap_or_default();
        if seqs.is_empty() {
            return Ok(Some(format!(
                "process {pid}: {what}; nothing to send, it is {state}"
            )));
        }
        self.waiters.push(Waiter {
            conn,
            pid,
            seqs,
            details: vec![format!("process {pid}: {what}; now {state}")],
            failed: false,
            deadline: now + ACK_TIMEOUT,
            undo_manual,
        });
        Ok(None)
    }
}

impl NodeState {
    /// [`Request::Classify`]: the class a process of `who` running `exe` and asking for
    /// `class` would get, with its class's settings. Changes nothing.
    fn classify_for(
        &self,
        who: &Identity,
        class: Option<String>,
        exe: Option<String>,
    ) -> ClassAnswer {
        let mut id = who.clone();
        if let Some(e) = exe.filter(|e| !e.is_empty()) {
            id.exe = e;
        }
        let cap = cap_of(&self.cfg, &self.allocations, &id.claim);
        let c = classify(&self.cfg, &id, class.as_deref(), cap.as_ref());
        let rule = self.cfg.rule(&c.class);
        ClassAnswer {
            priority: rule.map_or(0, |r| r.priority),
            level: rule.and_then(|r| r.level),
            hw_queues: rule.and_then(|r| r.hw_queues),
            class: c.class,
            reason: c.reason,
            refused: c.refused,
        }
    }
}

/// Why a control request was refused (sent to `kfdq` as [`Reply::Error`]'s text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// No process with this pid is connected or traced.
    #[error(
        "no GPU process with pid {pid} is connected to the agent: `kfdq status` lists those it controls (a process is controlled when it runs under the shim, e.g. `kfdq run`, with KFDQ_SOCKET set to the agent's socket)"
    )]
    NotConnected {
        /// The pid asked for.
        pid: Pid,
    },
    /// The requester neither owns the process nor is an admin.
    #[error(
        "permission: process {pid} belongs to uid {owner}, and uid {uid} may control only its own processes (its uid and, where either runs in a pod, its container); node admins control any: root or members of the admin group{} outside pods, or through the admin socket ([agent] admin_socket)",
        admin_note(.admin_group)
    )]
    NotOwner {
        /// The process.
        pid: Pid,
        /// Its owner.
        owner: u32,
        /// The requester.
        uid: u32,
        /// The configured admin group's name.
        admin_group: Option<String>,
    },
    /// A priority beyond KFD's range.
    #[error(
        "priority {priority} is out of range 0..=15 (KFD's queue priorities; 0-6 low, 7-10 medium, 11-15 high pipe)"
    )]
    PriorityRange {
        /// The priority asked for.
        priority: u32,
    },
    /// A priority for a process the tracer controls.
    #[error(
        "process {pid} runs without the shim: only a process itself may change its queues' priority (UPDATE_QUEUE); run it under the shim (kfdq run) to set one"
    )]
    PriorityNeedsShim {
        /// The process.
        pid: Pid,
    },
    /// A priority above the class's cap, asked by a non-admin.
    #[error(
        "class cap: process {pid}'s class {class} allows priorities up to {cap} for its users; root or the admin group may set more"
    )]
    PriorityCap {
        /// The process.
        pid: Pid,
        /// Its class.
        class: String,
        /// The class's `max_priority`.
        cap: u32,
    },
    /// Level 1 or 2 for a process the tracer controls.
    #[error(
        "process {pid} runs without the shim and is controlled through the tracer, which can only suspend its queues (level 3): use --level suspend, or run it under the shim (kfdq run) for levels 1 and 2"
    )]
    LevelNeedsShim {
        /// The process.
        pid: Pid,
    },
    /// A class change the requester may not make.
    #[error(transparent)]
    Class(#[from] ClassChangeError),
}

/// The admin group part of [`ControlError::NotOwner`]'s text.
fn admin_note(group: &Option<String>) -> String {
    group.as_ref().map_or_else(
        || " (none configured: [agent] admin_group)".into(),
        |n| format!(" ({n})"),
    )
}
