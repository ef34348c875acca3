//! A tenant that does not cooperate: a process that speaks the shim's protocol itself (hello
//! as any class), with one real queue of its own on the emulator (the kernel lists it), and
//! reads the agent's lines with `recvmsg`, keeping the descriptors passed with them.

use std::io::{IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use kfdq::kfd::{Kfd, Queue, QueueSpec, Root};
use kfdq::proto::{AgentMsg, QueueInfo, Registry, ShimMsg, encode};
use kfdq::{GpuId, Pid};

/// The forger's connection and queue.
pub struct Forger {
    pub s: std::os::unix::net::UnixStream,
    buf: Vec<u8>,
    pub fds: Vec<OwnedFd>,
    /// Its real queue (kept: the kernel lists it while it lives).
    _queue: Queue<'static>,
    pub queue: QueueInfo,
}

impl Forger {
    /// Connects to `sock` as `class` with one real queue on `gpu` of the emulator at `root`.
    pub fn connect(
        sock: &std::path::Path,
        class: &str,
        root: &std::path::Path,
        gpu: GpuId,
    ) -> Forger {
        // Leaked: the queue borrows it, and lives as long as the forger (a test process).
        let kfd: &'static Kfd = Box::leak(Box::new(
            Kfd::open(&Root::new(root)).expect("open the emulator's kfd"),
        ));
        let queue = kfd.create_queue(QueueSpec::aql(gpu)).expect("a real queue");
        let s = std::os::unix::net::UnixStream::connect(sock).unwrap();
        let info = QueueInfo {
            queue_id: queue.id(),
            gpu_id: gpu,
            requested_priority: 7,
            effective_priority: 7,
            ring_base: 0,
            ring_size: 4096,
            streams: vec![],
            deactivated: false,
            suspended: false,
            busy: false,
            window_waits: 0,
            window_stalls: 0,
        };
        let mut f = Forger {
            s,
            buf: Vec::new(),
            fds: Vec::new(),
            _queue: queue,
            queue: info.clone(),
        };
        let pid = Pid::this();
        f.send(&ShimMsg::Hello {
            version: kfdq::proto::VERSION,
            pid,
            exe: "forger".into(),
            class: Some(class.into()),
            priority: None,
        });
        assert!(matches!(f.next(), AgentMsg::Welcome { .. }));
        f.registry(class, vec![info]);
        f
    }

    /// Sends a registry of `queues`.
    pub fn registry(&mut self, class: &str, queues: Vec<QueueInfo>) {
        self.send(&ShimMsg::Registry(Registry {
            pid: Pid::this(),
            class: Some(class.into()),
            queues,
            ..Registry::default()
        }));
    }

    pub fn send(&mut self, m: &ShimMsg) {
        self.s.write_all(&encode(m)).unwrap();
    }

    /// The agent's next line.
    pub fn next(&mut self) -> AgentMsg {
        loop {
            if let Some(nl) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                return serde_json::from_slice(&line[..nl]).unwrap();
            }
            let mut chunk = [0u8; 4096];
            let mut space = nix::cmsg_space!([std::os::fd::RawFd; 2]);
            let mut iov = [IoSliceMut::new(&mut chunk)];
            let msg = nix::sys::socket::recvmsg::<()>(
                self.s.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                nix::sys::socket::MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .unwrap();
            let n = msg.bytes;
            assert!(n > 0, "the agent closed the connection");
            for c in msg.cmsgs().unwrap() {
                if let nix::sys::socket::ControlMessageOwned::ScmRights(fds) = c {
                    // SAFETY: installed in this process for us by the kernel just now.
                    self.fds.extend(
                        fds.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// The agent's lines until one `pick` takes (the descriptor of the last is in `fds`).
    pub fn until<T>(&mut self, mut pick: impl FnMut(&AgentMsg) -> Option<T>) -> T {
        loop {
            let m = self.next();
            if let Some(t) = pick(&m) {
                return t;
            }
        }
    }
}
