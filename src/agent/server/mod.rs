//! The agent's event loop: one thread, `poll(2)` over the listening socket, a signalfd and
//! every connection. Messages are read as they come, a decision is taken once per wake-up
//! (so a burst of activity is one decision), commands are written without blocking. A peer
//! that sends garbage gets an error reply; one that says nothing costs a file descriptor.

mod deliver;
mod peers;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::board::Boards;
use super::config::AgentConfig;
use super::conn::{Conn, ConnId};
use super::discover::{self, Found};
use super::doorbell::Doorbells;
use super::http::Endpoint;
use super::identity::Identity;
use super::kubernetes::features;
use super::kubernetes::watch::AllocationWatch;
use super::node::{NodeState, Out};
use super::notify::{Watchdog, notify};
use super::tracer::{Cmd, Event, Tracer};
use super::{AgentError, socket};
use crate::chain::{Recorder, Stage};
use crate::ids::Pid;
use crate::kfd::{Root, Topology};
use crate::policy::PartitionObs;
use crate::proto::AgentMsg;
use crate::proto::ShimMsg;

/// How long shutdown waits for the shims to acknowledge their releases.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);
/// A process the tracer could not take is tried again after this long (its debugger may have
/// detached).
const RETRY_LEFT_ALONE: Duration = Duration::from_secs(10);
/// While a process carries a `KFDQ_ALLOCATION`, the allocations file is looked at (a stat)
/// this often: the device plugin names a grant's pod once the kubelet's PodResources shows
/// it, which is after the container started, so a process's pod labels lag by at most this.
const ALLOCATIONS_CHECK: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Has not said what it is.
    New,
    /// A shim (its process is in the node).
    Shim,
    /// A control client.
    Control,
}

#[derive(Debug)]
struct Peer {
    conn: Conn,
    id: Identity,
    role: Role,
}

/// Per-uid token bucket for control requests.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Options of [`run`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Root prefix for the topology (a kfd-emu mount in tests).
    pub root: PathBuf,
    /// The configuration file given on the command line (reloaded on SIGHUP).
    pub config_path: Option<PathBuf>,
}

/// The GPU partitions under `root`.
pub fn partitions(root: &Root) -> Result<Vec<PartitionObs>, AgentError> {
    let topo = Topology::read(root)?;
    Ok(topo
        .gpus()
        .filter_map(|n| {
            Some(PartitionObs {
                gpu_id: n.gpu_id?,
                resident_slots: n.resident_queue_limit(),
                cus: n.cu_count(),
            })
        })
        .collect())
}

/// Runs the agent until SIGTERM or SIGINT: binds the socket, tells systemd it is ready, serves,
/// and at the end releases every process it preempted.
pub fn run(cfg: AgentConfig, opts: &Options) -> Result<(), AgentError> {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGHUP, Signal::SIGTERM, Signal::SIGINT] {
        mask.add(s);
    }
    // SIGCHLD too, before any thread starts: the tracer thread reads its tracees' stops from
    // a signalfd, which sees a process-directed signal only while every thread blocks it.
    let mut blocked = mask;
    blocked.add(Signal::SIGCHLD);
    blocked.thread_block().map_err(AgentError::Signals)?;
    let sigfd = SignalFd::with_flags(&mask, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(AgentError::Signals)?;
    // A broken pipe is an error on that connection, not the agent's death.
    // SIGPIPE: Rust's runtime already ignores it.

    let root = Root::new(&opts.root);
    let parts = partitions(&root)?;
    if parts.is_empty() {
        tracing::warn!(
            "the topology under {} has no GPU: the agent serves, but there is nothing to arbitrate",
            opts.root.display()
        );
    }
    let note = crate::capability::priority_note(&root);
    // One agent per node (the lock), and everything that can fail before the socket exists:
    // a refused start leaves no socket behind and never says "ready".
    let lock = super::lock::acquire(&opts.root, &cfg.socket.path)?;
    let metrics = match cfg.metrics {
        Some(addr) => Some(Endpoint::start(addr)?),
        None => None,
    };
    let socket_path = cfg.socket.path.clone();
    let config_name = cfg
        .source
        .as_ref()
        .map_or("built-in".into(), |p| p.display().to_string());
    let nparts = parts.len();
    let mut node = NodeState::new(cfg, parts, note, Instant::now())?;
    let listener = socket::bind(&node.config().socket)?;
    if let Some(f) = &node.config().kubernetes.features {
        features::publish(f, &root);
    }
    tracing::info!(
        socket = %socket_path.display(),
        partitions = nparts,
        config = %config_name,
        lock = %lock.path().display(),
        "kfdqd ready"
    );
    notify(&format!(
        "READY=1\nSTATUS=serving on {}",
        socket_path.display()
    ));
    let r = serve(&mut node, &listener, &sigfd, metrics.as_ref(), opts);
    notify("STOPPING=1");
    // A stopped agent enforces nothing: the node stops saying what it can do.
    if let Some(f) = &node.config().kubernetes.features {
        features::withdraw(f);
    }
    socket::remove(&socket_path);
    drop(lock);
    r
}

struct Server<'a> {
    node: &'a mut NodeState,
    peers: BTreeMap<ConnId, Peer>,
    next_id: ConnId,
    buckets: HashMap<u32, Bucket>,
    out: Vec<Out>,
    root: Root,
    /// Processes without the shim (started at the first one to take).
    tracer: Option<Tracer>,
    /// Tracer sessions: connection id -> pid.
    traced: BTreeMap<ConnId, Pid>,
    /// Sent to the tracer, not answered yet: the process and its class.
    seizing: BTreeMap<Pid, (Found, String)>,
    /// Candidates of the last scan (a process is taken at its second).
    candidates: BTreeSet<Pid>,
    /// Not tried again before.
    retry: BTreeMap<Pid, Instant>,
    next_scan: Instant,
    /// The device plugin's allocations file.
    allocations: AllocationWatch,
    /// When it is looked at next (while a process claims an allocation).
    next_allocations: Instant,
    /// Reaction-chain timestamps (`KFDQ_CHAIN_TRACE`, `crate::chain`).
    chain: Option<Recorder>,
    /// The shims' doorbells (`doorbell.rs`).
    doorbells: Doorbells,
    /// The edge boards (direct edges, `board.rs`).
    boards: Boards,
}

fn serve(
    node: &mut NodeState,
    listener: &UnixListener,
    sigfd: &SignalFd,
    metrics: Option<&Endpoint>,
    opts: &Options,
) -> Result<(), AgentError> {
    let allocations = AllocationWatch::new(&node.config().kubernetes.allocations);
    let mut s = Server {
        node,
        peers: BTreeMap::new(),
        next_id: 1,
        buckets: HashMap::new(),
        out: Vec::new(),
        root: Root::new(&opts.root),
        tracer: None,
        traced: BTreeMap::new(),
        seizing: BTreeMap::new(),
        candidates: BTreeSet::new(),
        retry: BTreeMap::new(),
        next_scan: Instant::now(),
        allocations,
        next_allocations: Instant::now(),
        chain: match Recorder::from_env() {
            Some(Ok(r)) => Some(r),
            Some(Err(e)) => {
                tracing::warn!("{e}");
                None
            }
            None => None,
        },
        doorbells: Doorbells::default(),
        boards: Boards::default(),
    };
    let mut stopping: Option<Instant> = None;
    let mut tracer_told = false;
    let mut watchdog = Watchdog::from_env(Instant::now());
    loop {
        watchdog.progress(Instant::now());
        let ids: Vec<ConnId> = s.peers.keys().copied().collect();
        let deadline = match stopping {
            Some(t) => Some(t + SHUTDOWN_WAIT),
            None => {
                let scan = s.node.config().uses_tracer().then_some(s.next_scan);
                let allocations = s.node.has_claims().then_some(s.next_allocations);
                [s.node.deadline(), scan, allocations]
                    .into_iter()
                    .flatten()
                    .min()
            }
        };
        let deadline = [deadline, watchdog.deadline()].into_iter().flatten().min();
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(d) => {
                let ms = d
                    .saturating_duration_since(Instant::now())
                    .as_micros()
                    .div_ceil(1000);
                PollTimeout::try_from(ms.min(60_000) as i32).unwrap_or(PollTimeout::MAX)
            }
        };
        let ready: Vec<(bool, bool)>;
        let rung: Vec<ConnId>;
        let (listen_ready, sig_ready, scrape_ready, tracer_ready);
        {
            let mut fds = Vec::with_capacity(ids.len() + 4);
            fds.push(PollFd::new(listener.as_fd(), PollFlags::POLLIN));
            fds.push(PollFd::new(sigfd.as_fd(), PollFlags::POLLIN));
            // Without an endpoint the signalfd stands in (an fd polled for nothing).
            fds.push(match metrics {
                Some(m) => PollFd::new(m.fd(), PollFlags::POLLIN),
                None => PollFd::new(sigfd.as_fd(), PollFlags::empty()),
            });
            fds.push(match &s.tracer {
                Some(t) => PollFd::new(t.fd(), PollFlags::POLLIN),
                None => PollFd::new(sigfd.as_fd(), PollFlags::empty()),
            });
            for id in &ids {
                let p = &s.peers[id];
                let mut ev = PollFlags::empty();
                if !p.conn.eof && !p.conn.closing {
                    ev |= PollFlags::POLLIN;
                }
                if p.conn.wants_write() {
                    ev |= PollFlags::POLLOUT;
                }
                fds.push(PollFd::new(p.conn.stream.as_fd(), ev));
            }
            let bells = s.doorbells.polled();
            for (_, fd) in &bells {
                fds.push(PollFd::new(*fd, PollFlags::POLLIN));
            }
            match poll(&mut fds, timeout) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(AgentError::Poll(e)),
            }
            let rev = |f: &PollFd| f.revents().unwrap_or(PollFlags::empty());
            listen_ready = rev(&fds[0]).contains(PollFlags::POLLIN);
            sig_ready = !rev(&fds[1]).is_empty();
            scrape_ready = rev(&fds[2]).contains(PollFlags::POLLIN);
            tracer_ready = rev(&fds[3]).contains(PollFlags::POLLIN);
            let peers_end = 4 + ids.len();
            rung = fds[peers_end..]
                .iter()
                .zip(&bells)
                .filter(|(f, _)| !rev(f).is_empty())
                .map(|(_, (c, _))| *c)
                .collect();
            ready = fds[4..peers_end]
                .iter()
                .map(|f| {
                    let r = rev(f);
                    (
                        r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR),
                        r.contains(PollFlags::POLLOUT),
                    )
                })
                .collect();
        }
        let woke = Instant::now();

        if sig_ready {
            while let Ok(Some(si)) = sigfd.read_signal() {
                match Signal::try_from(si.ssi_signo as i32) {
                    Ok(Signal::SIGHUP) => s.reload(opts),
                    Ok(sig) => {
                        if stopping.is_none() {
                            tracing::info!("{sig}: releasing every process, then exiting");
                            let n = s.node.release_all(woke, &mut s.out);
                            tracing::info!("{n} release command(s) sent");
                            stopping = Some(woke);
                        }
                    }
                    Err(_) => {}
                }
            }
        }
        if listen_ready && stopping.is_none() {
            s.accept(listener);
        }
        let mut dirty = false;
        for (id, (readable, _)) in ids.iter().zip(&ready) {
            if *readable {
                dirty |= s.read(*id, woke);
            }
        }
        for cid in rung {
            dirty |= s.ring(cid, woke);
        }
        if tracer_ready {
            dirty |= s.tracer_events(woke);
        }
        if stopping.is_none() && s.node.config().uses_tracer() && woke >= s.next_scan {
            s.scan(woke);
        }
        if stopping.is_none() && s.node.has_claims() && woke >= s.next_allocations {
            dirty |= s.check_allocations(woke);
        }
        let mut sent_commands = false;
        let mut compute = Duration::ZERO;
        let mut decided = None;
        if stopping.is_none() && (dirty || s.node.deadline().is_some_and(|d| d <= woke)) {
            let before = s.out.len();
            let t = Instant::now();
            s.node.decide_commands(t, &mut s.out);
            compute = t.elapsed();
            decided = Some(t);
            sent_commands = s.out[before..].iter().any(|o| matches!(o, Out::Shim(..)));
            if let Some(c) = s.chain.as_mut()
                && s.out[before..]
                    .iter()
                    .any(|o| matches!(o, Out::Shim(_, AgentMsg::Preempt { .. })))
            {
                c.mark(Stage::AgentDecided);
            }
        }
        s.deliver();
        let written = woke.elapsed();
        // The times and the lease renewals, once the commands are out (no command depends on
        // them); the renewals are written at once.
        if let Some(t) = decided {
            s.node.after_write(t, &mut s.out);
            if !s.out.is_empty() {
                s.deliver();
            }
        }
        if let Some(c) = s.chain.as_mut()
            && let Err(e) = c.flush_when_quiet()
        {
            tracing::warn!("{e}");
            s.chain = None;
        }
        if stopping.is_some() && !tracer_told {
            // After the releases went out: the tracer resumes and detaches everyone.
            tracer_told = true;
            if let Some(t) = &mut s.tracer {
                t.send(Cmd::Shutdown);
            }
        }
        if sent_commands && dirty {
            s.node.record_decision(written, compute);
        }
        s.reap();
        if scrape_ready
            && let Some(m) = metrics
            && m.take_request()
        {
            match s.node.metrics(Instant::now()) {
                Ok(text) => m.answer(text),
                Err(e) => tracing::warn!("metrics: rendering a scrape failed: {e}"),
            }
        }
        if let Some(t) = stopping
            && (s.node.unacknowledged() == 0 || t.elapsed() >= SHUTDOWN_WAIT)
        {
            let left = s.node.unacknowledged();
            if left > 0 {
                tracing::warn!(
                    "{left} release(s) unacknowledged after {:?}; closing the connections makes those shims release on their own",
                    SHUTDOWN_WAIT
                );
            }
            // Dropping the tracer joins its thread once it detached its tracees.
            drop(s.tracer.take());
            return Ok(());
        }
    }
}

impl Server<'_> {
    fn reap(&mut self) {
        let done: Vec<ConnId> = self
            .peers
            .iter()
            .filter(|(_, p)| p.conn.finished() || (p.conn.eof && p.conn.closing))
            .map(|(c, _)| *c)
            .collect();
        for cid in done {
            if let Some(p) = self.peers.remove(&cid)
                && p.role == Role::Shim
            {
                let mut out = Vec::new();
                self.node.gone(cid, &mut out);
                self.out.extend(out);
            }
        }
        // A doorbell goes with its connection.
        let peers = &self.peers;
        self.doorbells.retain(|c| peers.contains_key(&c));
    }

    /// Handles what the tracer reported; true when a decision is due.
    fn tracer_events(&mut self, now: Instant) -> bool {
        let events = match &mut self.tracer {
            Some(t) => t.take_events(),
            None => return false,
        };
        let mut dirty = false;
        for e in events {
            match e {
                Event::Seized { pid, conn } => {
                    if let Some((found, _)) = self.seizing.remove(&pid) {
                        self.traced.insert(conn, pid);
                        self.node.traced(conn, found.id, found.requested);
                        dirty = true;
                    }
                }
                Event::Refused { pid, reason } => {
                    if let Some((found, class)) = self.seizing.remove(&pid) {
                        self.node.left_alone(&found.id, class, reason);
                        self.retry.insert(pid, now + RETRY_LEFT_ALONE);
                    }
                }
                Event::Msg { conn, msg } => {
                    if let Some(pid) = self.node.pid_of(conn) {
                        // A traced process's busy sample is its edge's arrival, as a shim's is.
                        if let Some(c) = self.chain.as_mut()
                            && matches!(msg, ShimMsg::Activity { busy: true, .. })
                        {
                            c.mark(Stage::AgentRead);
                        }
                        dirty |= self.node.shim_message(pid, msg, now, &mut self.out);
                    }
                }
                Event::Gone { conn, pid, why } => {
                    tracing::debug!(pid = %pid, "tracer session ended: {why}");
                    self.traced.remove(&conn);
                    self.node.gone(conn, &mut self.out);
                    dirty = true;
                }
            }
        }
        dirty
    }

    /// Looks for GPU processes without the shim in tracer classes and hands the settled ones
    /// to the tracer.
    fn scan(&mut self, now: Instant) {
        self.next_scan = now + self.node.config().tracer.scan;
        self.node.scanned();
        self.retry.retain(|_, t| *t > now);
        self.node
            .forget_left_alone(|pid| std::path::Path::new(&format!("/proc/{pid}")).exists());
        let found = discover::gpu_processes(&self.root, |pid| {
            self.node.knows(pid) || self.seizing.contains_key(&pid) || self.retry.contains_key(&pid)
        });
        let settled = discover::settled(&self.candidates, &found);
        self.candidates = found.iter().map(|f| f.id.pid).collect();
        for f in settled {
            let Some(class) = self.node.tracer_class(&f.id, f.requested.as_deref()) else {
                continue;
            };
            if self.tracer.is_none() {
                match Tracer::start(self.root.clone(), self.node.config().tracer) {
                    Ok(t) => self.tracer = Some(t),
                    Err(e) => {
                        tracing::error!("the tracer thread could not start: {e}");
                        return;
                    }
                }
            }
            let conn = self.next_id;
            self.next_id += 1;
            let pid = f.id.pid;
            self.seizing.insert(pid, (f, class));
            if let Some(t) = &mut self.tracer {
                t.send(Cmd::Seize { pid, conn });
            }
        }
    }

    fn reload(&mut self, opts: &Options) {
        let Some(path) = opts
            .config_path
            .clone()
            .or_else(|| self.node.config().source.clone())
        else {
            tracing::warn!(
                "SIGHUP: running on the built-in configuration; there is no file to reload (start with --config)"
            );
            return;
        };
        match AgentConfig::load(&path) {
            Ok(cfg) => {
                if cfg.socket != self.node.config().socket {
                    tracing::warn!(
                        "SIGHUP: the [agent] socket settings changed; they take effect at the next start"
                    );
                }
                if cfg.metrics != self.node.config().metrics {
                    tracing::warn!(
                        "SIGHUP: [metrics] listen changed; it takes effect at the next start"
                    );
                }
                let allocations = cfg.kubernetes.allocations.clone();
                let labels = (
                    self.node.config().kubernetes.features.clone(),
                    cfg.kubernetes.features.clone(),
                );
                match self.node.reload(cfg) {
                    Ok(()) => {
                        self.allocations.set_path(&allocations);
                        self.check_allocations(Instant::now());
                        match labels {
                            (Some(old), new) if new.as_ref() != Some(&old) => {
                                features::withdraw(&old)
                            }
                            _ => {}
                        }
                        if let Some(f) = &self.node.config().kubernetes.features {
                            features::publish(f, &self.root);
                        }
                        tracing::info!("SIGHUP: reloaded {}", path.display());
                        notify("READY=1\nSTATUS=configuration reloaded");
                    }
                    Err(e) => {
                        self.node.reload_failed();
                        tracing::error!("SIGHUP: {e}; the configuration in effect stays");
                    }
                }
            }
            Err(e) => {
                self.node.reload_failed();
                tracing::error!("SIGHUP: {e}; the configuration in effect stays");
            }
        }
    }
}
