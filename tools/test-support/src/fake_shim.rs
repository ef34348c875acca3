//! A process that speaks the shim's protocol itself, without the shim: hello as any class,
//! real queues of its own on the emulator (the agent counts only the queues the kernel lists
//! for a process), then whatever the test sends. It reads the agent's lines with `recvmsg`,
//! keeping the descriptors passed with them (boards, watches).
//!
//! The tenant tests use it as a forger (a tenant that does not cooperate), the edge tests as a
//! batch job that forges busy edges or rings a doorbell, the decision bench as its 64 clients.

use std::io::{IoSlice, IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use kfdq::kfd::{Kfd, Queue, QueueSpec, Root};
use kfdq::proto::{AgentMsg, QueueInfo, Registry, ShimMsg, encode};
use kfdq::{GpuId, Pid};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    sendmsg, socketpair,
};

/// The priority a fake shim's queues were asked for (HIP's normal priority's KFD value).
pub const REQUESTED_PRIORITY: u32 = 7;

/// How a fake shim introduces itself.
#[derive(Debug, Clone)]
pub struct Hello<'a> {
    /// The class it claims (`KFDQ_CLASS`).
    pub class: &'a str,
    /// Its executable's name in the hello.
    pub exe: &'a str,
    /// How many real queues it creates on the partition.
    pub queues: usize,
    /// The effective priority its registry reports for them.
    pub effective_priority: u32,
}

impl<'a> Hello<'a> {
    /// A forger in `class`: one queue at the requested priority.
    pub fn forger(class: &'a str) -> Hello<'a> {
        Hello {
            class,
            exe: "forger",
            queues: 1,
            effective_priority: REQUESTED_PRIORITY,
        }
    }
}

/// The fake shim's connection and queues.
#[derive(Debug)]
pub struct FakeShim {
    /// The connection to the agent.
    pub s: UnixStream,
    buf: Vec<u8>,
    /// The descriptors passed with the lines read so far (the last one's at the end).
    pub fds: Vec<OwnedFd>,
    /// Its real queues (kept: the kernel lists them while they live).
    _real: Vec<Queue<'static>>,
    /// Its first queue as its registry shows it.
    pub queue: QueueInfo,
    /// All its queues as its registry shows them.
    pub queues: Vec<QueueInfo>,
}

impl FakeShim {
    /// Connects to `sock` as a forger in `class` ([`Hello::forger`]) with one real queue on
    /// `gpu` of the emulator at `root`.
    pub fn connect(sock: &Path, class: &str, root: &Path, gpu: GpuId) -> FakeShim {
        FakeShim::connect_as(sock, &Hello::forger(class), root, gpu)
    }

    /// Connects to `sock` as `hello` says, with its queues on `gpu` of the emulator at `root`:
    /// hello, the agent's welcome, the registry.
    pub fn connect_as(sock: &Path, hello: &Hello<'_>, root: &Path, gpu: GpuId) -> FakeShim {
        assert!(hello.queues > 0, "a fake shim has at least one queue");
        // Leaked: the queues borrow it, and live as long as the fake shim (a test process).
        let kfd: &'static Kfd = Box::leak(Box::new(
            Kfd::open(&Root::new(root)).expect("open the emulator's kfd"),
        ));
        let real: Vec<Queue<'static>> = (0..hello.queues)
            .map(|_| kfd.create_queue(QueueSpec::aql(gpu)).expect("a real queue"))
            .collect();
        let queues: Vec<QueueInfo> = real
            .iter()
            .map(|q| QueueInfo {
                ring_size: 4096,
                ..QueueInfo::new(q.id(), gpu, REQUESTED_PRIORITY, hello.effective_priority)
            })
            .collect();
        let s = UnixStream::connect(sock).expect("connect to the agent");
        let mut f = FakeShim {
            s,
            buf: Vec::new(),
            fds: Vec::new(),
            _real: real,
            queue: queues[0].clone(),
            queues: queues.clone(),
        };
        f.send(&ShimMsg::Hello {
            version: kfdq::proto::VERSION,
            pid: Pid::this(),
            exe: hello.exe.into(),
            class: Some(hello.class.into()),
            priority: None,
        });
        let welcome = f.next();
        assert!(
            matches!(welcome, AgentMsg::Welcome { .. }),
            "the agent's answer to a hello: {welcome:?}"
        );
        f.registry(hello.class, queues);
        f
    }

    /// Sends a registry of `queues` in `class`.
    pub fn registry(&mut self, class: &str, queues: Vec<QueueInfo>) {
        self.send(&ShimMsg::Registry(Registry {
            pid: Pid::this(),
            class: Some(class.into()),
            queues,
            ..Registry::default()
        }));
    }

    /// Sends one message.
    pub fn send(&mut self, m: &ShimMsg) {
        self.s.write_all(&encode(m)).expect("write to the agent");
    }

    /// Says that the first queue went busy.
    pub fn busy(&mut self) {
        let queue_id = self.queue.queue_id;
        self.send(&ShimMsg::Activity {
            queue_id,
            busy: true,
        });
    }

    /// The agent's next line; panics when the agent closed the connection.
    #[expect(
        clippy::should_implement_trait,
        reason = "the forger tests' name; an iterator would end where a test must fail"
    )]
    pub fn next(&mut self) -> AgentMsg {
        self.try_next().expect("the agent closed the connection")
    }

    /// The agent's next line, or `None` once the agent closed the connection.
    pub fn try_next(&mut self) -> Option<AgentMsg> {
        loop {
            if let Some(nl) = self.buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=nl).collect();
                let m = serde_json::from_slice(&line[..nl]).expect("an agent's line");
                return Some(m);
            }
            let mut chunk = [0u8; 4096];
            let mut space = nix::cmsg_space!([RawFd; 2]);
            let mut iov = [IoSliceMut::new(&mut chunk)];
            let msg = recvmsg::<()>(
                self.s.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .expect("recvmsg from the agent");
            let n = msg.bytes;
            if n == 0 {
                return None;
            }
            for c in msg.cmsgs().expect("control messages") {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    // SAFETY: the kernel installed these descriptors in this process for this
                    // message just now; nothing else owns them.
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

    /// Passes a doorbell as a shim does (`SCM_RIGHTS` with the doorbell line), waits for the
    /// agent to take it, and returns the end that rings.
    pub fn doorbell(&mut self) -> OwnedFd {
        let (mine, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )
        .expect("a socket pair");
        let line = encode(&ShimMsg::Doorbell {});
        let sent = sendmsg::<()>(
            self.s.as_raw_fd(),
            &[IoSlice::new(&line)],
            &[ControlMessage::ScmRights(&[theirs.as_raw_fd()])],
            MsgFlags::empty(),
            None,
        )
        .expect("send the doorbell");
        assert_eq!(sent, line.len());
        self.until(|m| matches!(m, AgentMsg::DoorbellTaken {}).then_some(()));
        mine
    }
}
