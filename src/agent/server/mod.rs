//! The agent's event loop: one thread, `poll(2)` over the listening socket, a signalfd and
//! every connection. Messages are read as they come, a decision is taken once per wake-up
//! (so a burst of activity is one decision), commands are written without blocking. A peer
//! that sends garbage gets an error reply; one that says nothing costs a file descriptor.

mod deliver;
mod peers;

use std::collections::{BTreeMap, HashMap};
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::board::Boards;
use super::config::AgentConfig;
use super::conn::{Budget, Conn, ConnId, TOTAL_BUFFERED};
use super::doorbell::Doorbells;
use super::http::Endpoint;
use super::identity::Identity;
use super::kubernetes::container::Bindings;
use super::kubernetes::features;
use super::kubernetes::watch::AllocationWatch;
use super::node::{NodeState, Out};
use super::notify::{Watchdog, notify};
use super::tracer::Sessions;
use super::{AgentError, socket};
use crate::chain::{Recorder, Stage};
use crate::kfd::{Root, Topology};
use crate::policy::PartitionObs;
use crate::proto::AgentMsg;

/// How long shutdown waits for the shims to acknowledge their releases.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(2);
/// While a process carries a `KFDQ_ALLOCATION`, the allocations file is looked at (a stat)
/// this often: the device plugin names a grant's pod once the kubelet's PodResources shows
/// it, which is after the container started, so a process's pod labels lag by at most this.
const ALLOCATIONS_CHECK: Duration = Duration::from_secs(1);

/// A connection that has said neither hello nor a request this long after it was accepted is
/// closed: a tenant cannot park descriptors and buffers on the agent (issue 50 item 7). A
/// shim says hello right after connecting and `kfdq` sends its request at once.
const HELLO_DEADLINE: Duration = Duration::from_secs(5);

/// After `accept` failed for want of descriptors or memory (EMFILE, ENFILE, ENOMEM,
/// ENOBUFS), the listeners are not polled for this long: the pending connection stays
/// readable, and polling it again at once would spin the loop.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

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
    /// When it was accepted (a [`Role::New`] peer is closed at [`HELLO_DEADLINE`]).
    since: Instant,
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
    /// `--metrics-listen`: it overrides `[metrics] listen` of every (re)load.
    pub metrics_listen: Option<std::net::SocketAddr>,
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
    // Before anything else: in another pid namespace than KFD's every pid would name another
    // process (docs/agent.md "The pid namespace").
    super::pid_namespace::check()?;
    if let Some(w) = cfg.calibration.as_ref().and_then(|c| c.warning.as_ref()) {
        tracing::warn!("{w}");
    }
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
    let admin_path = node.config().admin_socket.clone();
    let admin = match &admin_path {
        Some(p) => Some(socket::bind(&super::config::SocketConfig {
            path: p.clone(),
            group: None,
            mode: 0o600,
        })?),
        None => None,
    };
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
    let r = serve(
        &mut node,
        [Some(&listener), admin.as_ref()],
        &sigfd,
        metrics.as_ref(),
        opts,
    );
    notify("STOPPING=1");
    // A stopped agent enforces nothing: the node stops saying what it can do.
    if let Some(f) = &node.config().kubernetes.features {
        features::withdraw(f);
    }
    socket::remove(&socket_path);
    if let Some(p) = &admin_path {
        socket::remove(p);
    }
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
    /// Processes without the shim: the tracer and its sessions.
    tracer: Sessions,
    /// The device plugin's allocations file.
    allocations: AllocationWatch,
    /// When it is looked at next (while a process claims an allocation).
    next_allocations: Instant,
    /// Which container each allocation token is bound to.
    grants: Bindings,
    /// Accepting paused until then (see [`ACCEPT_PAUSE`]).
    accept_paused: Option<Instant>,
    /// The most peers at once: `[agent] max_connections`, less when the descriptor limit
    /// would run out first ([`peers::connection_room`]).
    max_peers: usize,
    /// Reaction-chain timestamps (`KFDQ_CHAIN_TRACE`, `crate::chain`).
    chain: Option<Recorder>,
    /// The shims' doorbells (`doorbell.rs`).
    doorbells: Doorbells,
    /// The edge boards (direct edges, `board.rs`).
    boards: Boards,
    /// The shims' queues checked against the kernel's list (`kernel_queues.rs`).
    kernel_queues: super::kernel_queues::KernelQueues,
    /// What all connections may buffer together (`conn.rs`).
    budget: Budget,
}

fn serve(
    node: &mut NodeState,
    listeners: [Option<&UnixListener>; 2],
    sigfd: &SignalFd,
    metrics: Option<&Endpoint>,
    opts: &Options,
) -> Result<(), AgentError> {
    let allocations = AllocationWatch::new(&node.config().kubernetes.allocations);
    let max_peers = peers::connection_room(node.config().max_connections);
    // Kept beside the admin socket (root-only, never in a pod); in memory without one.
    let grants = Bindings::load(
        node.config()
            .admin_socket
            .as_ref()
            .and_then(|p| p.parent())
            .map(|d| d.join("bindings.json"))
            .as_deref(),
    );
    let mut s = Server {
        node,
        peers: BTreeMap::new(),
        next_id: 1,
        buckets: HashMap::new(),
        out: Vec::new(),
        root: Root::new(&opts.root),
        tracer: Sessions::new(Instant::now()),
        allocations,
        next_allocations: Instant::now(),
        grants,
        accept_paused: None,
        max_peers,
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
        kernel_queues: Default::default(),
        budget: Budget::new(TOTAL_BUFFERED),
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
                let scan = s
                    .node
                    .config()
                    .uses_tracer()
                    .then_some(s.tracer.next_scan());
                let allocations = s.node.has_claims().then_some(s.next_allocations);
                let hello = s
                    .peers
                    .values()
                    .filter(|p| p.role == Role::New)
                    .map(|p| p.since + HELLO_DEADLINE)
                    .min();
                [s.node.deadline(), scan, allocations, hello, s.accept_paused]
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
            let mut fds = Vec::with_capacity(ids.len() + 5);
            if s.accept_paused.is_some_and(|t| t <= Instant::now()) {
                s.accept_paused = None;
            }
            let accepting = s.accept_paused.is_none();
            for l in listeners {
                fds.push(match l {
                    Some(l) if accepting => PollFd::new(l.as_fd(), PollFlags::POLLIN),
                    _ => PollFd::new(sigfd.as_fd(), PollFlags::empty()),
                });
            }
            fds.push(PollFd::new(sigfd.as_fd(), PollFlags::POLLIN));
            // Without an endpoint the signalfd stands in (an fd polled for nothing).
            fds.push(match metrics {
                Some(m) => PollFd::new(m.fd(), PollFlags::POLLIN),
                None => PollFd::new(sigfd.as_fd(), PollFlags::empty()),
            });
            fds.push(match s.tracer.fd() {
                Some(fd) => PollFd::new(fd, PollFlags::POLLIN),
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
            listen_ready = [0, 1].map(|i| rev(&fds[i]).contains(PollFlags::POLLIN));
            sig_ready = !rev(&fds[2]).is_empty();
            scrape_ready = rev(&fds[3]).contains(PollFlags::POLLIN);
            tracer_ready = rev(&fds[4]).contains(PollFlags::POLLIN);
            let peers_end = 5 + ids.len();
            rung = fds[peers_end..]
                .iter()
                .zip(&bells)
                .filter(|(f, _)| !rev(f).is_empty())
                .map(|(_, (c, _))| *c)
                .collect();
            ready = fds[5..peers_end]
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
        for ((l, ready), admin) in listeners.into_iter().zip(listen_ready).zip([false, true]) {
            if let Some(l) = l
                && ready
                && stopping.is_none()
            {
                s.accept(l, admin);
            }
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
            dirty |= s.tracer.events(s.node, s.chain.as_mut(), woke, &mut s.out);
        }
        if stopping.is_none() && s.node.config().uses_tracer() && woke >= s.tracer.next_scan() {
            s.tracer
                .scan(s.node, &s.root, &mut s.grants, &mut s.next_id, woke);
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
            s.tracer.shutdown();
        }
        if sent_commands && dirty {
            s.node.record_decision(written, compute);
        }
        s.reap(woke);
        // Here, at the end of a turn: a health probe answered proves the loop turns.
        if scrape_ready
            && let Some(m) = metrics
            && let Some(asked) = m.take_request()
        {
            match s.node.metrics(Instant::now()) {
                Ok(text) => m.answer(asked, text),
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
            s.tracer.stop();
            return Ok(());
        }
    }
}

impl Server<'_> {
    fn reap(&mut self, now: Instant) {
        let silent = |p: &Peer| p.role == Role::New && p.since + HELLO_DEADLINE <= now;
        let done: Vec<ConnId> = self
            .peers
            .iter()
            .filter(|(_, p)| p.conn.finished() || (p.conn.eof && p.conn.closing) || silent(p))
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
        match AgentConfig::load_for_node(Some(&path), &opts.root) {
            Ok(mut cfg) => {
                if let Some(a) = opts.metrics_listen {
                    cfg.metrics = Some(a);
                }
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
                        if let Some(w) = self
                            .node
                            .config()
                            .calibration
                            .as_ref()
                            .and_then(|c| c.warning.as_ref())
                        {
                            tracing::warn!("{w}");
                        }
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
