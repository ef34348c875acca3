//! Why a value in the agent's configuration is refused: the text names the key, its range and
//! the fix ([`super::config::ConfigError::Invalid`] adds the file and line).

use nix::errno::Errno;

use crate::policy::ReleaseError;

/// A setting's value the agent does not accept.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SettingError {
    /// A level name that is none of the levels.
    #[error("unknown level {0:?}: use none, hold (1), deactivate (2) or suspend (3)")]
    UnknownLevel(String),
    /// A class's `control` that is neither `shim` nor `tracer`.
    #[error(
        "control = {0:?} is not shim (processes under the shim only) or tracer (also processes without it, through the debugger API)"
    )]
    UnknownControl(String),
    /// A duration in ms out of range.
    #[error("{key} = {value} is out of range 0..=3600000 ms")]
    Milliseconds {
        /// The key.
        key: &'static str,
        /// Its value.
        value: f64,
    },
    /// `release = "cost"` beside `hysteresis_ms`.
    #[error(
        "release = \"cost\" and hysteresis_ms contradict each other: hysteresis_ms sets the fixed rule; remove one"
    )]
    CostAndHysteresis,
    /// A release rule of another name.
    #[error(
        "release = {0:?} is not cost (weigh the higher class's idle gaps against a preempt's cost) or hysteresis (a fixed hold, hysteresis_ms)"
    )]
    UnknownRelease(String),
    /// A key of the cost rule while the fixed hysteresis is in effect.
    #[error(
        "{0} belongs to the cost release rule, but the fixed hysteresis is in effect (hysteresis_ms or release = \"hysteresis\"); remove one"
    )]
    CostKeyUnderHysteresis(&'static str),
    /// `preempt_round_trip_us` out of range.
    #[error(
        "preempt_round_trip_us = {0} is out of range 0..=1000000 µs (one device-wide preempt and its restore)"
    )]
    RoundTrip(f64),
    /// `calibration` names a file that cannot be used.
    #[error("calibration = {path:?}: {message}")]
    Calibration {
        /// The file as written.
        path: std::path::PathBuf,
        /// Why (a malformed file's line and reason, or the conflicting key).
        message: String,
    },
    /// A parameter of the cost release rule out of range.
    #[error(transparent)]
    Release(#[from] ReleaseError),
    /// A group name this node does not know.
    #[error(
        "group {0:?} does not exist on this node: create it (groupadd {0}) or remove the setting"
    )]
    NoGroup(String),
    /// A user name this node does not know.
    #[error("user {0:?} does not exist on this node: use a uid or create the user")]
    NoUser(String),
    /// Looking a user or group up failed.
    #[error("looking up {kind} {name:?}: {errno}")]
    Lookup {
        /// `user` or `group`.
        kind: &'static str,
        /// The name.
        name: String,
        /// The error.
        errno: Errno,
    },
}
