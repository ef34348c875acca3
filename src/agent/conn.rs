//! One non-blocking connection: bytes in, split into protocol lines with the size limit; bytes
//! out, buffered until the socket takes them. Nothing a peer sends can block the agent or make
//! it buffer more than its line limit ([`FIRST_LINE`] until it is a shim, then [`MAX_LINE`])
//! of input or [`MAX_OUTPUT`] of output for it, and all connections together hold at most
//! their [`Budget`] ([`TOTAL_BUFFERED`]) beyond a small allowance each ([`FREE_PER_CONN`]).

use std::io::{self, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, recvmsg, sendmsg,
};

use crate::proto::MAX_LINE;

/// A connection, as the server numbers them.
pub type ConnId = u64;

/// Output a peer may leave unread before the agent drops it.
pub const MAX_OUTPUT: usize = 4 << 20;
/// Bytes read from one peer per wake-up (others are served in between).
const READ_BUDGET: usize = 256 << 10;

/// The longest line a peer may send before the agent knows it for a shim: a hello or a
/// control request (a few hundred bytes, an executable's path at most 4 KiB; the shim waits
/// for its welcome before it sends its registry).
pub const FIRST_LINE: usize = 16 << 10;

/// Buffer capacity each connection holds uncharged, for input and for output each: a hello,
/// a request, an Activity line, a status reply of a small node. So a full [`Budget`] stops
/// no peer's ordinary lines; all connections together hold at most
/// `TOTAL_BUFFERED + 2 * FREE_PER_CONN * max_connections`.
pub const FREE_PER_CONN: usize = 4 << 10;

/// Bytes all connections together may buffer (partial input lines and unwritten output).
/// Named, not measured: kfdqd's DaemonSet limit is 128 MiB and the agent itself needs some
/// 20 MiB; the rest is for buffers. A peer whose bytes do not fit gets its line dropped
/// ([`Frame::OverBudget`]) or, for output, is dropped as a slow reader is.
pub const TOTAL_BUFFERED: usize = 64 << 20;

/// Output capacity kept after a connection's output drained (more is given back).
const KEEP_CAPACITY: usize = 64 << 10;

/// The bytes all connections buffer, against their limit (shared by the server's
/// connections; one thread).
#[derive(Debug, Clone)]
pub struct Budget {
    used: std::rc::Rc<std::cell::Cell<usize>>,
    limit: usize,
}

impl Budget {
    /// Nothing buffered yet, at most `limit` bytes.
    pub fn new(limit: usize) -> Budget {
        Budget {
            used: Default::default(),
            limit,
        }
    }

    /// Bytes buffered now (capacity held, not length).
    #[cfg(test)]
    fn used(&self) -> usize {
        self.used.get()
    }

    /// Takes `n` bytes: false (nothing taken) when they do not fit.
    fn take(&self, n: usize) -> bool {
        let u = self.used.get();
        if u + n > self.limit {
            return false;
        }
        self.used.set(u + n);
        true
    }

    fn give(&self, n: usize) {
        self.used.set(self.used.get().saturating_sub(n));
    }
}

/// Descriptors a peer may have sent (`SCM_RIGHTS`) and not claimed yet; more are closed.
const MAX_FDS: usize = 2;

/// What arrived.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// One complete line, newline stripped.
    Line(Vec<u8>),
    /// A line longer than [`MAX_LINE`]; its bytes were dropped up to its newline.
    TooLong,
    /// The peer closed the connection in the middle of a line.
    Truncated,
    /// A line that did not fit the agent's buffers ([`TOTAL_BUFFERED`]); its bytes were
    /// dropped up to its newline.
    OverBudget,
}

/// A peer's connection.
#[derive(Debug)]
pub struct Conn {
    /// The socket (non-blocking).
    pub stream: UnixStream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    discarding: bool,
    /// The peer closed its side.
    pub eof: bool,
    /// Close once the output is written.
    pub closing: bool,
    /// Descriptors that came with the bytes (`SCM_RIGHTS`), oldest first, for the message
    /// that claims them (`ShimMsg::Doorbell`).
    pub fds: Vec<OwnedFd>,
    /// Descriptors to send (`SCM_RIGHTS`) with the output byte at this offset of `wbuf` (the
    /// first byte of the line that carries them), in offset order.
    out_fds: std::collections::VecDeque<(usize, OwnedFd)>,
    /// The longest line taken ([`FIRST_LINE`], then [`MAX_LINE`] once it is a shim).
    max_line: usize,
    /// What all connections buffer; this one's share is `charged`.
    budget: Budget,
    charged: usize,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.budget.give(self.charged);
    }
}

impl Conn {
    /// Wraps an accepted socket (made non-blocking), its buffers charged to `budget`.
    pub fn new(stream: UnixStream, budget: &Budget) -> io::Result<Conn> {
        stream.set_nonblocking(true)?;
        Ok(Conn {
            stream,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            discarding: false,
            eof: false,
            closing: false,
            fds: Vec::new(),
            out_fds: std::collections::VecDeque::new(),
            max_line: FIRST_LINE,
            budget: budget.clone(),
            charged: 0,
        })
    }

    /// The peer is a shim: its lines (registries) may be up to [`MAX_LINE`] long.
    pub fn shim_lines(&mut self) {
        self.max_line = MAX_LINE;
    }

    /// Charges the buffers' capacity to the budget: false (nothing changed) when the growth
    /// does not fit.
    fn charge(&mut self) -> bool {
        let now = self.rbuf.capacity().saturating_sub(FREE_PER_CONN)
            + self.wbuf.capacity().saturating_sub(FREE_PER_CONN);
        if now > self.charged {
            if !self.budget.take(now - self.charged) {
                return false;
            }
        } else {
            self.budget.give(self.charged - now);
        }
        self.charged = now;
        true
    }

    /// Reads what the socket has (up to a budget) and appends complete frames to `out`.
    /// An error means the connection is broken.
    pub fn read_frames(&mut self, out: &mut Vec<Frame>) -> io::Result<()> {
        let mut chunk = [0u8; 16 << 10];
        let mut budget = READ_BUDGET;
        while budget > 0 && !self.eof {
            match self.recv(&mut chunk) {
                Ok(0) => {
                    self.eof = true;
                    if !self.rbuf.is_empty() && !self.discarding {
                        out.push(Frame::Truncated);
                    }
                    self.rbuf = Vec::new();
                    self.charge();
                }
                Ok(n) => {
                    budget = budget.saturating_sub(n);
                    self.split(&chunk[..n], out);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One `recvmsg`: bytes into `buf`, descriptors kept (up to [`MAX_FDS`]; the rest closed).
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(buf)];
        let msg = recvmsg(
            &self.stream,
            &mut iov,
            &mut control,
            RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
        )?;
        for c in control.drain() {
            if let RecvAncillaryMessage::ScmRights(fds) = c {
                for fd in fds {
                    if self.fds.len() < MAX_FDS {
                        self.fds.push(fd);
                    }
                }
            }
        }
        Ok(msg.bytes)
    }

    fn split(&mut self, mut data: &[u8], out: &mut Vec<Frame>) {
        while !data.is_empty() {
            let nl = data.iter().position(|b| *b == b'\n');
            let take = nl.map_or(data.len(), |i| i + 1);
            if self.discarding {
                if nl.is_some() {
                    self.discarding = false;
                }
            } else if self.rbuf.len() + take > self.max_line {
                self.rbuf = Vec::new();
                out.push(Frame::TooLong);
                self.discarding = nl.is_none();
            } else if !self.reserve(take) {
                self.rbuf = Vec::new();
                out.push(Frame::OverBudget);
                self.discarding = nl.is_none();
            } else {
                self.rbuf.extend_from_slice(&data[..take]);
                if nl.is_some() {
                    let mut line = std::mem::take(&mut self.rbuf);
                    line.pop();
                    out.push(Frame::Line(line));
                }
            }
            self.charge();
            data = &data[take..];
        }
    }

    /// Room for `n` more input bytes in the budget (the input buffer grown to hold them).
    fn reserve(&mut self, n: usize) -> bool {
        if self.rbuf.capacity() - self.rbuf.len() >= n {
            return true;
        }
        let before = self.rbuf.capacity();
        self.rbuf.reserve(n);
        if self.charge() {
            return true;
        }
        self.rbuf.shrink_to(before);
        false
    }

    /// Queues `msg`, encoded straight into the output buffer (no buffer per message). False
    /// when the peer has left too much unread, or the agent's buffers are full (drop it);
    /// then nothing was queued.
    pub fn queue_msg<T: serde::Serialize>(&mut self, msg: &T) -> bool {
        let start = self.wbuf.len();
        crate::proto::encode_into(msg, &mut self.wbuf);
        if self.wbuf.len() > MAX_OUTPUT || !self.charge() {
            self.wbuf.truncate(start);
            self.wbuf.shrink_to(KEEP_CAPACITY.max(start));
            self.charge();
            return false;
        }
        true
    }

    /// [`Conn::queue_msg`], with `fd` sent (`SCM_RIGHTS`) with the line's first byte.
    pub fn queue_msg_fd<T: serde::Serialize>(&mut self, msg: &T, fd: OwnedFd) -> bool {
        let start = self.wbuf.len();
        if !self.queue_msg(msg) {
            return false;
        }
        self.out_fds.push_back((start, fd));
        true
    }

    /// Writes what the socket takes. An error means the connection is broken.
    pub fn flush(&mut self) -> io::Result<()> {
        while !self.wbuf.is_empty() {
            // Up to the next descriptor's byte; the descriptor goes with that byte.
            let (end, fd) = match self.out_fds.front() {
                Some((0, fd)) => (self.wbuf.len(), Some(fd)),
                Some((at, _)) => (*at, None),
                None => (self.wbuf.len(), None),
            };
            let end = self
                .out_fds
                .get(usize::from(fd.is_some()))
                .map_or(end, |(at, _)| end.min(*at));
            let sent = match fd {
                None => self.stream.write(&self.wbuf[..end]),
                Some(fd) => {
                    let fds = [std::os::fd::AsFd::as_fd(fd)];
                    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
                    let mut control = SendAncillaryBuffer::new(&mut space);
                    control.push(SendAncillaryMessage::ScmRights(&fds));
                    sendmsg(
                        &self.stream,
                        &[io::IoSlice::new(&self.wbuf[..end])],
                        &mut control,
                        SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
                    )
                    .map_err(io::Error::from)
                }
            };
            match sent {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.wbuf.drain(..n);
                    if fd.is_some() {
                        // Sent with its byte: ours is closed.
                        self.out_fds.pop_front();
                    }
                    for (at, _) in &mut self.out_fds {
                        *at -= n;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.wbuf.is_empty() && self.wbuf.capacity() > KEEP_CAPACITY {
            self.wbuf = Vec::new();
            self.charge();
        }
        Ok(())
    }

    /// Output is waiting.
    pub fn wants_write(&self) -> bool {
        !self.wbuf.is_empty()
    }

    /// Nothing more will happen on it: closed by the peer (or to be closed) with nothing left
    /// to write.
    pub fn finished(&self) -> bool {
        (self.eof || self.closing) && self.wbuf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::Pid;

    fn conn() -> (Conn, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        (Conn::new(a, &Budget::new(TOTAL_BUFFERED)).unwrap(), b)
    }

    #[test]
    fn lines_split_across_reads_and_overlong_ones_are_skipped() {
        let (mut c, mut peer) = conn();
        let mut out = Vec::new();
        peer.write_all(b"{\"a\":1}\n{\"b\"").unwrap();
        c.read_frames(&mut out).unwrap();
        peer.write_all(b":2}\n").unwrap();
        c.read_frames(&mut out).unwrap();
        assert_eq!(
            out,
            [
                Frame::Line(b"{\"a\":1}".to_vec()),
                Frame::Line(b"{\"b\":2}".to_vec())
            ]
        );
        out.clear();
        let big = vec![b'x'; MAX_LINE + 5];
        let w = std::thread::spawn(move || {
            peer.write_all(&big).unwrap();
            peer.write_all(b"tail\nok\npartial").unwrap();
            peer
        });
        while out.len() < 2 {
            c.read_frames(&mut out).unwrap();
        }
        let peer = w.join().unwrap();
        drop(peer);
        while !c.eof {
            c.read_frames(&mut out).unwrap();
        }
        assert_eq!(
            out,
            [
                Frame::TooLong,
                Frame::Line(b"ok".to_vec()),
                Frame::Truncated
            ]
        );
    }

    #[test]
    fn all_connections_together_buffer_within_their_budget() {
        let budget = Budget::new(100 << 10);
        let pair = || {
            let (a, b) = UnixStream::pair().unwrap();
            (Conn::new(a, &budget).unwrap(), b)
        };
        let (mut c1, mut p1) = pair();
        let (mut c2, mut p2) = pair();
        let mut out = Vec::new();
        // Two partial lines of 60 KiB (shims' lines, within the limit): the second does not fit.
        c1.shim_lines();
        c2.shim_lines();
        p1.write_all(&[b'x'; 60 << 10]).unwrap();
        p2.write_all(&[b'y'; 60 << 10]).unwrap();
        c1.read_frames(&mut out).unwrap();
        assert!(out.is_empty(), "{out:?}");
        c2.read_frames(&mut out).unwrap();
        assert_eq!(out, [Frame::OverBudget]);
        assert!(budget.used() <= 100 << 10, "{}", budget.used());
        // The first line ends; its bytes are given back, and the second peer's next line fits.
        p1.write_all(b"\n").unwrap();
        out.clear();
        c1.read_frames(&mut out).unwrap();
        assert!(matches!(&out[..], [Frame::Line(l)] if l.len() == 60 << 10));
        p2.write_all(b"\nok\n").unwrap();
        out.clear();
        c2.read_frames(&mut out).unwrap();
        assert_eq!(out, [Frame::Line(b"ok".to_vec())]);
        // Output is charged too, and given back when the peer goes.
        let big = "z".repeat(120 << 10);
        assert!(!c2.queue_msg(&big), "over the budget");
        assert!(c1.queue_msg(&"small"));
        drop((c1, c2));
        assert_eq!(budget.used(), 0);
    }

    use proptest::prelude::*;

    use crate::proto::{Level, Request, ShimMsg};

    fn request() -> impl Strategy<Value = Request> {
        let level = prop_oneof![
            Just(Level::Hold),
            Just(Level::Deactivate),
            Just(Level::Suspend)
        ];
        prop_oneof![
            Just(Request::Status),
            (any::<u32>(), any::<u32>()).prop_map(|(pid, priority)| Request::SetPriority {
                pid: Pid(pid),
                priority
            }),
            (any::<u32>(), level).prop_map(|(pid, level)| Request::Suspend {
                pid: Pid(pid),
                level
            }),
            any::<u32>().prop_map(|pid| Request::Resume { pid: Pid(pid) }),
            (any::<u32>(), ".{0,40}").prop_map(|(pid, class)| Request::SetClass {
                pid: Pid(pid),
                class
            }),
            (
                proptest::option::of(".{0,20}"),
                proptest::option::of(".{0,40}")
            )
                .prop_map(|(class, exe)| Request::Classify { class, exe }),
        ]
    }

    /// Feeds `data` to a connection in pieces cut at `cuts` (sorted offsets).
    fn frames(data: &[u8], cuts: &[usize]) -> Vec<Frame> {
        let (mut c, _peer) = conn();
        let mut out = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain(std::iter::once(&data.len())) {
            let cut = cut.min(data.len()).max(at);
            c.split(&data[at..cut], &mut out);
            at = cut;
        }
        out
    }

    proptest! {
        /// Any sequence of requests survives framing, however the bytes arrive.
        #[test]
        fn requests_round_trip_through_any_chunking(
            reqs in proptest::collection::vec(request(), 0..20),
            mut cuts in proptest::collection::vec(0usize..4096, 0..30),
        ) {
            let data: Vec<u8> = reqs.iter().flat_map(crate::proto::encode).collect();
            cuts.sort_unstable();
            let got: Vec<Request> = frames(&data, &cuts)
                .into_iter()
                .map(|f| match f {
                    Frame::Line(l) => serde_json::from_slice(&l).unwrap(),
                    other => panic!("{other:?}"),
                })
                .collect();
            prop_assert_eq!(got, reqs);
        }

        /// Arbitrary bytes never panic the decoder: every complete line comes out once, without
        /// its newline, and decodes to a message or an error.
        #[test]
        fn arbitrary_bytes_give_lines_or_errors(
            data in proptest::collection::vec(prop_oneof![any::<u8>(), Just(b'\n'), Just(b'{')], 0..2048),
            mut cuts in proptest::collection::vec(0usize..2048, 0..20),
        ) {
            cuts.sort_unstable();
            let out = frames(&data, &cuts);
            let complete = data.iter().filter(|b| **b == b'\n').count();
            prop_assert_eq!(out.len(), complete);
            let expected: Vec<&[u8]> = data.split(|b| *b == b'\n').take(complete).collect();
            for (f, want) in out.iter().zip(expected) {
                match f {
                    Frame::Line(l) => {
                        prop_assert_eq!(l.as_slice(), want);
                        let _ = serde_json::from_slice::<Request>(l);
                        let _ = serde_json::from_slice::<ShimMsg>(l);
                    }
                    other => prop_assert!(false, "{:?}", other),
                }
            }
        }
    }
}
