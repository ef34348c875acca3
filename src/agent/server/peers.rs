//! kfdqd's server: the connections' side — accepting peers, reading their frames, the hello
//! and its class, doorbells and allocation tokens (split from `server/mod.rs`, which keeps the
//! loop, delivery, reaping, the tracer and reloads).

use std::os::unix::net::UnixListener;
use std::time::Instant;

use super::{ALLOCATIONS_CHECK, Bucket, Peer, Role, Server};
use crate::agent::conn::{Conn, ConnId, Frame};
use crate::agent::doorbell::Ring;
use crate::agent::identity::{Claim, Identity};
use crate::agent::node::{HelloError, Out};
use crate::chain::Stage;
use crate::proto::{self, AgentMsg, Reply, Request, ShimMsg};

impl Server<'_> {
    /// Accepts the connections waiting on `listener`; `admin`: the admin socket's, whose
    /// peers are node admins.
    pub(super) fn accept(&mut self, listener: &UnixListener, admin: bool) {
        loop {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    use nix::libc::{EMFILE, ENFILE, ENOBUFS, ENOMEM};
                    if matches!(e.raw_os_error(), Some(EMFILE | ENFILE | ENOBUFS | ENOMEM)) {
                        if self.accept_paused.is_none() {
                            tracing::warn!(
                                "accept: {e}; not accepting for {} ms ({} connections open; [agent] max_connections, the descriptor limit LimitNOFILE)",
                                super::ACCEPT_PAUSE.as_millis(),
                                self.peers.len()
                            );
                        }
                        self.accept_paused = Some(Instant::now() + super::ACCEPT_PAUSE);
                    } else {
                        tracing::warn!("accept: {e}");
                    }
                    return;
                }
            };
            if self.peers.len() >= self.max_peers {
                tracing::warn!(
                    "connection refused: {} connections already ([agent] max_connections, within the descriptor limit)",
                    self.peers.len()
                );
                continue;
            }
            let mut id = match Identity::of_peer(&stream) {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!(
                        "the peer's identity could not be read ({e}); connection closed"
                    );
                    continue;
                }
            };
            // Node admins (on the admin socket, or root and the admin group outside pods)
            // are not capped per uid; tenants are.
            if !admin
                && !id.is_admin(self.node.config())
                && let Err(e) = self.uid_room(id.uid)
            {
                // Logged at the 1st, 2nd, 4th, ... refusal: a flood does not flood the log.
                if self.node.uid_connection_refused().is_power_of_two() {
                    tracing::warn!("connection refused: {e}");
                }
                continue;
            }
            id.claim = self.grants.resolve(&id.cgroup, id.claim);
            id.admin_channel = admin;
            let conn = match Conn::new(stream, &self.budget) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!("socket: {e}");
                    continue;
                }
            };
            self.node.connected();
            let cid = self.next_id;
            self.next_id += 1;
            self.peers.insert(
                cid,
                Peer {
                    conn,
                    id,
                    role: Role::New,
                    since: Instant::now(),
                },
            );
        }
    }

    /// Whether `uid` (a tenant's, on the agent's socket) may hold one more connection: an
    /// error naming the rule when it holds `[agent] max_connections_per_uid`.
    fn uid_room(&mut self, uid: u32) -> Result<(), String> {
        let cap = self.node.config().max_connections_per_uid;
        let held = self
            .peers
            .values()
            .filter(|p| p.id.uid == uid && !p.id.admin_channel)
            .count();
        if held < cap {
            return Ok(());
        }
        Err(format!(
            "uid {uid} holds {held} connections already ([agent] max_connections_per_uid = {cap})"
        ))
    }

    /// Reads and handles what `cid` sent; true when a decision is due.
    pub(super) fn read(&mut self, cid: ConnId, now: Instant) -> bool {
        let mut frames = Vec::new();
        let Some(peer) = self.peers.get_mut(&cid) else {
            return false;
        };
        if let Err(e) = peer.conn.read_frames(&mut frames) {
            tracing::debug!(conn = cid, "read: {e}");
            peer.conn.eof = true;
        }
        let mut dirty = false;
        for f in frames {
            dirty |= self.frame(cid, f, now);
        }
        let Some(peer) = self.peers.get(&cid) else {
            return dirty;
        };
        if peer.conn.eof {
            match peer.role {
                Role::Shim => {
                    self.node.gone(cid, &mut self.out);
                    dirty = true;
                }
                Role::Control => self.node.control_gone(cid),
                Role::New => {}
            }
        }
        dirty
    }

    fn error_to(&mut self, cid: ConnId, role: Role, detail: String) {
        self.node.bad_message();
        tracing::debug!(conn = cid, "{detail}");
        self.out.push(match role {
            Role::Shim => Out::Shim(cid, AgentMsg::Error { detail }),
            _ => Out::Control(cid, Reply::Error { error: detail }),
        });
    }

    fn frame(&mut self, cid: ConnId, f: Frame, now: Instant) -> bool {
        let Some(peer) = self.peers.get(&cid) else {
            return false;
        };
        let role = peer.role;
        let line = match f {
            Frame::Line(l) => l,
            Frame::TooLong => {
                self.error_to(
                    cid,
                    role,
                    format!(
                        "message longer than {} bytes: dropped (one JSON object per line)",
                        proto::MAX_LINE
                    ),
                );
                return false;
            }
            Frame::OverBudget => {
                self.error_to(
                    cid,
                    role,
                    format!(
                        "message dropped: the agent's connections buffer {} MiB at most, and that is in use now; send it again",
                        crate::agent::conn::TOTAL_BUFFERED >> 20
                    ),
                );
                return false;
            }
            Frame::Truncated => {
                self.error_to(
                    cid,
                    role,
                    "truncated message: the connection ended before its newline".into(),
                );
                return false;
            }
        };
        let value: serde_json::Value = match serde_json::from_slice(&line) {
            Ok(v) => v,
            Err(e) => {
                self.error_to(
                    cid,
                    role,
                    format!("malformed message (not JSON: {e}); send one JSON object per line"),
                );
                return false;
            }
        };
        let is_hello = value.get("type").and_then(|t| t.as_str()) == Some("hello");
        match role {
            Role::New if is_hello => self.hello(cid, value),
            Role::New | Role::Control => {
                let req: Request = match serde_json::from_value(value) {
                    Ok(r) => r,
                    Err(e) => {
                        self.error_to(
                            cid,
                            role,
                            format!("malformed request: {e}; see `kfdq --help` for the requests"),
                        );
                        return false;
                    }
                };
                let Some(peer) = self.peers.get_mut(&cid) else {
                    return false;
                };
                peer.role = Role::Control;
                let who = peer.id.clone();
                if !self.take_token(who.uid, now) {
                    self.out.push(Out::Control(
                        cid,
                        Reply::Error {
                            error: format!(
                                "rate limit: uid {} sent more than {} control requests per second ([agent] control_requests_per_s); try again shortly",
                                who.uid,
                                self.node.config().control_rate
                            ),
                        },
                    ));
                    return false;
                }
                self.node.control(cid, &who, req, now, &mut self.out);
                false
            }
            Role::Shim => {
                let mut msg: ShimMsg = match serde_json::from_value(value) {
                    Ok(m) => m,
                    Err(e) => {
                        self.error_to(cid, role, format!("malformed message: {e}"));
                        return false;
                    }
                };
                let Some(pid) = self.node.pid_of(cid) else {
                    return false;
                };
                if matches!(msg, ShimMsg::Doorbell {}) {
                    self.take_doorbell(cid);
                }
                if let ShimMsg::Registry(reg) = &mut msg {
                    let node = &*self.node;
                    let n = self
                        .kernel_queues
                        .verify(&self.root, pid, reg, |p| node.knows(p));
                    self.node.unlisted_queues(pid, n);
                }
                if let ShimMsg::BoardSealed { board } = msg
                    && !self.boards.sealed(board)
                {
                    self.error_to(cid, role, format!("edge board {board}: not sealed against writes (F_SEAL_FUTURE_WRITE); it is passed to no watcher"));
                    return false;
                }
                if let Some(c) = self.chain.as_mut()
                    && matches!(msg, ShimMsg::Activity { busy: true, .. })
                {
                    c.mark(Stage::AgentRead);
                }
                self.node.shim_message(pid, msg, now, &mut self.out)
            }
        }
    }

    /// `cid`'s shim passed its doorbell (the descriptor came with the line).
    fn take_doorbell(&mut self, cid: ConnId) {
        let Some(peer) = self.peers.get_mut(&cid) else {
            return;
        };
        let fd = (!peer.conn.fds.is_empty()).then(|| peer.conn.fds.remove(0));
        match self.doorbells.take(cid, fd) {
            Ok(()) => {
                self.node.doorbell_taken();
                self.out.push(Out::Shim(cid, AgentMsg::DoorbellTaken {}));
            }
            Err(e) => self.error_to(cid, Role::Shim, e.to_string()),
        }
    }

    /// `cid`'s doorbell is readable; true when a decision is due.
    pub(super) fn ring(&mut self, cid: ConnId, now: Instant) -> bool {
        if self.doorbells.read(cid) != Ring::Rang {
            return false;
        }
        let Some(pid) = self.node.pid_of(cid) else {
            return false;
        };
        if let Some(c) = self.chain.as_mut() {
            c.mark(Stage::AgentRead);
        }
        self.node.doorbell_rang(pid, now, &mut self.out)
    }

    /// Reads the allocations file if it changed; true when that reclassified processes.
    pub(super) fn check_allocations(&mut self, now: Instant) -> bool {
        self.next_allocations = now + ALLOCATIONS_CHECK;
        match self.allocations.poll() {
            Some(file) => {
                self.grants.prune(cgroup_exists);
                self.node.set_allocations(file);
                true
            }
            None => false,
        }
    }

    fn hello(&mut self, cid: ConnId, value: serde_json::Value) -> bool {
        if !self.peers.contains_key(&cid) {
            return false;
        }
        let (version, pid, class) = match serde_json::from_value::<ShimMsg>(value) {
            Ok(ShimMsg::Hello {
                version,
                pid,
                class,
                ..
            }) => (version, pid, class),
            Ok(_) | Err(_) => {
                self.error_to(cid, Role::New, "malformed hello".into());
                return false;
            }
        };
        let id = self.peers[&cid].id.clone();
        if id.admin_channel {
            self.error_to(
                cid,
                Role::New,
                "the admin socket takes control requests only: a shim connects to the agent's socket ([agent] socket)".into(),
            );
            return false;
        }
        // The process that connected must be the one that says hello: a connection parked
        // before hello (passed to a child, say) whose process exited speaks for nobody, even
        // when its pid now names another process.
        if !id.is_current() {
            tracing::warn!(
                conn = cid,
                pid = %id.pid,
                "refused a hello: the process that connected exited (its pid is free or another process's)"
            );
            self.refuse(cid, HelloError::Exited { pid: id.pid });
            return false;
        }
        if id.claim != Claim::None {
            self.check_allocations(Instant::now());
        }
        // An earlier session of this pid that the hello ends (`NodeState::hello`).
        let replaced = self
            .node
            .conn_of(id.pid)
            .filter(|c| *c != cid && !self.tracer.owns(*c));
        let res = self.node.hello(cid, id, version, class, pid, &mut self.out);
        if res.is_ok()
            && let Some(old) = replaced
            && let Some(p) = self.peers.get_mut(&old)
        {
            p.conn.queue_msg(&AgentMsg::Error {
                detail: "another connection of this process said hello: this session is closed"
                    .into(),
            });
            p.conn.closing = true;
        }
        let Some(peer) = self.peers.get_mut(&cid) else {
            return false;
        };
        match res {
            Ok(()) => {
                peer.role = Role::Shim;
                peer.conn.shim_lines();
                self.out.push(Out::Shim(
                    cid,
                    AgentMsg::Welcome {
                        version: proto::VERSION,
                        lease_ms: Some(self.node.lease_ms()),
                    },
                ));
                true
            }
            Err(e) => {
                tracing::warn!(conn = cid, "refused a shim: {e}");
                self.refuse(cid, e);
                false
            }
        }
    }

    /// Refuses `cid`'s hello with `e` and closes the connection once that is written.
    fn refuse(&mut self, cid: ConnId, e: HelloError) {
        self.out.push(Out::Shim(
            cid,
            AgentMsg::Refused {
                reason: e.to_string(),
            },
        ));
        if let Some(p) = self.peers.get_mut(&cid) {
            p.conn.closing = true;
        }
    }

    fn take_token(&mut self, uid: u32, now: Instant) -> bool {
        let rate = self.node.config().control_rate;
        let b = self.buckets.entry(uid).or_insert(Bucket {
            tokens: rate,
            at: now,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(rate);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// True when the cgroup v2 directory `cgroup` exists (or no cgroup v2 mount is found, so a
/// binding is never dropped for want of looking).
fn cgroup_exists(cgroup: &str) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let Some(root) = mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fs) = (f.next()?, f.next()?, f.next()?);
        (fs == "cgroup2").then_some(dir)
    }) else {
        return true;
    };
    std::path::Path::new(root)
        .join(cgroup.trim_start_matches('/'))
        .is_dir()
}

/// Descriptors kept for everything but connections: the listeners, the signalfd, the
/// metrics endpoint, the tracer, files, `/proc` reads.
const FD_RESERVE: u64 = 64;

/// Descriptors one connection may hold: its socket, its peer's pidfd (`SO_PEERPIDFD`, the
/// identity's [`Liveness`](crate::agent::identity::Liveness)) and its doorbell.
const FDS_PER_CONNECTION: u64 = 3;

/// How many connections the agent takes at most: `wanted` (`[agent] max_connections`), less
/// when the descriptor limit is lower (`/proc/self/limits`' soft "Max open files"; each
/// connection may hold three descriptors: its socket, its peer's pidfd and its doorbell), so `accept` never
/// runs out first. A limit that does not fit is logged with the fix (`LimitNOFILE=` in the
/// unit, deploy/systemd/kfdqd.service).
pub(super) fn connection_room(wanted: usize) -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Max open files"))
                .and_then(|r| r.split_whitespace().next()?.parse::<u64>().ok())
        });
    let Some(soft) = soft else {
        return wanted;
    };
    let room =
        usize::try_from(soft.saturating_sub(FD_RESERVE) / FDS_PER_CONNECTION).unwrap_or(usize::MAX);
    if room < wanted {
        tracing::warn!(
            "[agent] max_connections = {wanted} does not fit the descriptor limit {soft}: taking at most {room} connections (raise LimitNOFILE= in the unit)"
        );
    }
    wanted.min(room).max(1)
}
