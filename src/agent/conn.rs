//! One non-blocking connection: bytes in, split into protocol lines with the size limit; bytes
//! out, buffered until the socket takes them. Nothing a peer sends can block the agent or make
//! it buffer more than [`MAX_LINE`] of input or [`MAX_OUTPUT`] of output for it.

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
}

impl Conn {
    /// Wraps an accepted socket (made non-blocking).
    pub fn new(stream: UnixStream) -> io::Result<Conn> {
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
        })
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
                    self.rbuf.clear();
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
            } else if self.rbuf.len() + take > MAX_LINE {
                self.rbuf.clear();
                out.push(Frame::TooLong);
                self.discarding = nl.is_none();
            } else {
                self.rbuf.extend_from_slice(&data[..take]);
                if nl.is_some() {
                    let mut line = std::mem::take(&mut self.rbuf);
                    line.pop();
                    out.push(Frame::Line(line));
                }
            }
            data = &data[take..];
        }
    }

    /// Queues `msg`, encoded straight into the output buffer (no buffer per message). False
    /// when the peer has left too much unread (drop it); then nothing was queued.
    pub fn queue_msg<T: serde::Serialize>(&mut self, msg: &T) -> bool {
        let start = self.wbuf.len();
        crate::proto::encode_into(msg, &mut self.wbuf);
        if self.wbuf.len() > MAX_OUTPUT {
            self.wbuf.truncate(start);
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
        (Conn::new(a).unwrap(), b)
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
