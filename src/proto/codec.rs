//! Line-delimited JSON framing with a size limit.

use std::io::{self, BufRead};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Longest accepted line, newline included.
pub const MAX_LINE: usize = 1 << 20;

/// Why a line could not be decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The peer closed the connection.
    #[error("connection closed")]
    Closed,
    /// A line exceeded [`MAX_LINE`].
    #[error("message longer than {MAX_LINE} bytes")]
    TooLong,
    /// Not a message of this protocol.
    #[error("malformed message: {0}")]
    Malformed(String),
    /// The socket failed.
    #[error("socket: {0}")]
    Io(#[from] io::Error),
}

/// Encodes `msg` as one line.
pub fn encode<T: Serialize>(msg: &T) -> Vec<u8> {
    let mut v = Vec::new();
    encode_into(msg, &mut v);
    v
}

/// Encodes `msg` as one line at the end of `buf` (a connection's write buffer: no buffer of
/// its own per message).
pub fn encode_into<T: Serialize>(msg: &T, buf: &mut Vec<u8>) {
    let start = buf.len();
    // Serialising these plain data types cannot fail (no maps with non-string keys, no
    // custom serialisers).
    if let Err(e) = serde_json::to_writer(&mut *buf, msg) {
        buf.truncate(start);
        buf.extend_from_slice(
            format!(
                "{{\"type\":\"encode_error\",\"error\":{:?}}}",
                e.to_string()
            )
            .as_bytes(),
        );
    }
    buf.push(b'\n');
}

/// Reads messages line by line, refusing overlong lines without buffering them whole.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: BufRead> LineReader<R> {
    /// Wraps a buffered reader.
    pub fn new(inner: R) -> Self {
        LineReader {
            inner,
            buf: Vec::new(),
        }
    }

    /// The next message. A malformed line is reported and skipped (the stream stays usable);
    /// an overlong line is an error after which the caller should drop the connection.
    #[allow(clippy::should_implement_trait)] // generic over the message type; not an Iterator
    pub fn next<T: DeserializeOwned>(&mut self) -> Result<T, DecodeError> {
        self.buf.clear();
        loop {
            let chunk = self.inner.fill_buf()?;
            if chunk.is_empty() {
                return Err(DecodeError::Closed);
            }
            let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if self.buf.len() + take > MAX_LINE {
                return Err(DecodeError::TooLong);
            }
            self.buf.extend_from_slice(&chunk[..take]);
            self.inner.consume(take);
            if done {
                break;
            }
        }
        serde_json::from_slice(&self.buf).map_err(|e| DecodeError::Malformed(e.to_string()))
    }

    /// The underlying reader.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::QueueId;
    use crate::proto::{AgentMsg, Level, ShimMsg, Target};

    #[test]
    fn round_trip() {
        let m = AgentMsg::Preempt {
            seq: 7,
            level: Level::Deactivate,
            target: Target::Queues(vec![QueueId(1), QueueId(2)]),
            grace_period: 0,
        };
        let line = encode(&m);
        assert_eq!(line.last(), Some(&b'\n'));
        let mut r = LineReader::new(&line[..]);
        assert_eq!(r.next::<AgentMsg>().unwrap(), m);
        assert!(matches!(r.next::<AgentMsg>(), Err(DecodeError::Closed)));
    }

    #[test]
    fn malformed_line_is_skipped() {
        let mut data = b"{not json}\n".to_vec();
        data.extend(encode(&ShimMsg::Activity {
            queue_id: QueueId(3),
            busy: true,
        }));
        let mut r = LineReader::new(&data[..]);
        assert!(matches!(
            r.next::<ShimMsg>(),
            Err(DecodeError::Malformed(_))
        ));
        assert_eq!(
            r.next::<ShimMsg>().unwrap(),
            ShimMsg::Activity {
                queue_id: QueueId(3),
                busy: true
            }
        );
    }

    #[test]
    fn unknown_type_is_malformed() {
        let mut r = LineReader::new(&b"{\"type\":\"format_disk\"}\n"[..]);
        assert!(matches!(
            r.next::<AgentMsg>(),
            Err(DecodeError::Malformed(_))
        ));
    }

    #[test]
    fn overlong_line_is_refused() {
        let data = vec![b'x'; MAX_LINE + 10];
        let mut r = LineReader::new(std::io::BufReader::new(&data[..]));
        assert!(matches!(r.next::<AgentMsg>(), Err(DecodeError::TooLong)));
    }
}
