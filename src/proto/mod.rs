//! The shim <-> agent control protocol, defined once and shared by `libkfdq_shim.so`, `kfdqd`
//! and tests.
//!
//! Transport: a Unix stream socket (`KFDQ_SOCKET`); the agent listens, each shim connects.
//! Framing: one JSON object per line (`\n`-terminated, at most [`MAX_LINE`] bytes). The first
//! line each side sends is a hello carrying [`VERSION`]; a peer with another major version is
//! refused with [`AgentMsg::Refused`]. Commands carry a `seq` echoed by the shim's
//! [`ShimMsg::Ack`]. A message the agent cannot take is answered with [`AgentMsg::Error`] and
//! the session goes on. Control clients (`kfdq`) use the same socket with [`control`]'s
//! requests. Closing the socket means "agent gone": the shim releases every hold and
//! reactivates/resumes every queue (fail open).
#![forbid(unsafe_code)]

mod codec;
pub mod control;
mod messages;
pub mod peer;
pub mod state;

pub use codec::{DecodeError, LineReader, MAX_LINE, encode};
pub use control::{Reply, Request};
pub use messages::*;

/// Protocol version. Bump on any incompatible change.
pub const VERSION: u32 = 1;
