//! The test-side agent: a `UnixListener` speaking `kfdq::proto` to the shims under test.
#![allow(dead_code)]

use std::io::{BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::{Duration, Instant};

use kfdq::proto::{self, AgentMsg, LineReader, Registry, ShimMsg};
use kfdq::{Pid, QueueId};
use test_support::wait::WAIT_LIMIT;

/// The test's agent end of one shim connection.
pub struct Conn {
    pub w: UnixStream,
    pub r: LineReader<BufReader<UnixStream>>,
    pub registry: Option<Registry>,
    /// Last `Activity` state reported per queue (also from messages read while waiting for an
    /// ack, so a transition reported just before an ack is not lost).
    pub activity: std::collections::HashMap<u32, bool>,
    pub pid: Pid,
    pub seq: u64,
}

pub fn listen(dir: &std::path::Path) -> (UnixListener, std::path::PathBuf) {
    let path = dir.join("agent.sock");
    let l = UnixListener::bind(&path).expect("bind agent socket");
    l.set_nonblocking(true).expect("nonblocking listener");
    (l, path)
}

pub fn accept_raw(l: &UnixListener) -> UnixStream {
    let deadline = Instant::now() + WAIT_LIMIT;
    let s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "the shim never connected");
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(WAIT_LIMIT)).unwrap();
    s
}

pub fn accept(l: &UnixListener) -> Conn {
    accept_with_lease(l, None)
}

/// [`accept`], welcoming the shim with a lease of `lease_ms` on every preemption.
pub fn accept_with_lease(l: &UnixListener, lease_ms: Option<u32>) -> Conn {
    let s = accept_raw(l);
    s.set_read_timeout(Some(WAIT_LIMIT)).unwrap();
    let w = s.try_clone().unwrap();
    let mut c = Conn {
        w,
        r: LineReader::new(BufReader::new(s)),
        registry: None,
        activity: std::collections::HashMap::new(),
        pid: Pid(0),
        seq: 0,
    };
    match c.r.next::<ShimMsg>().expect("hello") {
        ShimMsg::Hello { version, pid, .. } => {
            assert_eq!(version, proto::VERSION);
            c.pid = pid;
        }
        other => panic!("expected hello, got {other:?}"),
    }
    c.send(&AgentMsg::Welcome {
        version: proto::VERSION,
        lease_ms,
    });
    c
}

impl Conn {
    pub fn send(&mut self, m: &AgentMsg) {
        self.w.write_all(&proto::encode(m)).expect("send to shim");
    }

    pub fn read(&mut self) -> ShimMsg {
        let m = self.r.next::<ShimMsg>().expect("message from the shim");
        match &m {
            ShimMsg::Registry(r) => self.registry = Some(r.clone()),
            ShimMsg::Activity { queue_id, busy } => {
                self.activity.insert(queue_id.0, *busy);
            }
            _ => {}
        }
        m
    }

    /// Sends a command and returns its ack (ok, detail).
    pub fn command(&mut self, make: impl FnOnce(u64) -> AgentMsg) -> (bool, String) {
        self.seq += 1;
        let seq = self.seq;
        self.send(&make(seq));
        loop {
            if let ShimMsg::Ack { seq: s, ok, detail } = self.read()
                && s == seq
            {
                return (ok, detail);
            }
        }
    }

    pub fn ok(&mut self, make: impl FnOnce(u64) -> AgentMsg) -> String {
        let (ok, detail) = self.command(make);
        assert!(ok, "command failed: {detail}");
        detail
    }

    /// Reads until the last `Activity` state reported for `qid` is `busy` (a transition
    /// reported before a command's ack counts: the queue may have drained just before a hold).
    /// A queue starts idle and the shim reports transitions only, so a queue it never reported
    /// is idle: one whose work always completed between two samples (a loaded machine delays
    /// the samples) is never reported at all.
    pub fn wait_activity(&mut self, qid: u32, busy: bool) {
        let deadline = Instant::now() + WAIT_LIMIT;
        while self.activity.get(&qid).copied().unwrap_or(false) != busy {
            assert!(
                Instant::now() < deadline,
                "no activity message queue {qid} busy={busy} within {WAIT_LIMIT:?}; last states {:?}, last registry: {:#?}",
                self.activity,
                self.registry
            );
            self.read();
        }
    }

    /// Reads until a registry satisfying `cond` arrives.
    pub fn wait_registry(&mut self, what: &str, cond: impl Fn(&Registry) -> bool) -> Registry {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            if let Some(r) = &self.registry
                && cond(r)
            {
                return r.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no registry with {what}; last: {:#?}",
                self.registry
            );
            self.read();
        }
    }
}

/// The contention test's and bench's latency client (`latency_client`'s shape): 12 requests at
/// 10/s, each 4 dispatches of 80 work-groups of 2 ms (8 ms alone on an MI308X partition: 80 x 4
/// waves fit its 2560 wave slots at once).
pub const CONTENTION_CLIENT: [&str; 5] = ["12", "100", "4", "2000", "80"];

/// Their flood ([`Flood::start`]'s arguments): 2560 work-groups of 4 waves and 20 ms each (four
/// rounds of the whole partition, 80 ms a dispatch), 4 in flight.
pub const CONTENTION_FLOOD: [&str; 3] = ["20000", "2560", "4"];

/// A program flooding the partition (`programs/flood.c` WG_US WGS IN_FLIGHT, class `batch`)
/// connected to a test-side agent, its queue registered and running.
pub struct Flood {
    pub app: super::App,
    pub conn: Conn,
    /// Its queue.
    pub queue: u32,
    _listener: UnixListener,
    _dir: tempfile::TempDir,
}

impl Flood {
    pub fn start(emu: &super::Emu, args: [&str; 3]) -> Flood {
        let dir = tempfile::tempdir().expect("tempdir");
        let (listener, sock) = listen(dir.path());
        let mut app = super::Launch::new(super::programs().get("flood"))
            .args(args)
            .env("KFDQ_CLASS", "batch")
            .env("KFDQ_SOCKET", sock.display().to_string())
            .start(emu);
        let mut conn = accept(&listener);
        app.wait_line("flooding");
        let queue = app.queues()["flood"].queue_id;
        conn.wait_registry("the flood stream on its queue", |r| {
            r.queues.iter().any(|q| q.queue_id == QueueId(queue))
        });
        let pid = app.pid;
        super::wait_for("the flood running", || emu.queue(pid, queue).busy_ns > 0);
        Flood {
            app,
            conn,
            queue,
            _listener: listener,
            _dir: dir,
        }
    }

    /// Preempts every queue of the flood at `level` (acknowledged).
    pub fn preempt(&mut self, level: proto::Level) {
        self.conn.ok(|seq| AgentMsg::Preempt {
            seq,
            level,
            target: proto::Target::All,
            grace_period: 0,
        });
    }

    /// Releases what [`Self::preempt`] did (acknowledged).
    pub fn release(&mut self, level: proto::Level) {
        self.conn.ok(|seq| AgentMsg::Release {
            seq,
            level,
            target: proto::Target::All,
        });
    }
}
