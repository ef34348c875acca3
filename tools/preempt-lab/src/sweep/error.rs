//! What is wrong with a sweep, and why a sweep's runs stopped.

use super::SweepKind;
use crate::scenario::UnknownControl;
use crate::sim::SetupError;
use kfdq::policy::ReleaseError;

/// What is wrong with a `--sweep` or one of its values: each names the sweep, the value and
/// the rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// No sweep of this name.
    #[error(
        "unknown sweep {0:?}: use one of {known} (optionally =V1,V2,...)",
        known = SweepKind::ALL.map(SweepKind::name).join(", ")
    )]
    UnknownKind(String),
    /// `KIND=` with nothing after it.
    #[error("--sweep {}= names no value", .0.name())]
    NoValues(SweepKind),
    /// A value the sweep does not take.
    #[error("--sweep {}: {value:?} {rule}", kind.name())]
    Value {
        /// The sweep.
        kind: SweepKind,
        /// The value.
        value: String,
        /// The rule it breaks.
        rule: &'static str,
    },
    /// A release-rule sweep on a scenario whose classes use the fixed hysteresis.
    #[error("--sweep {}: {value:?} {source}", kind.name())]
    NotCostRule {
        /// The sweep.
        kind: SweepKind,
        /// The value.
        value: String,
        /// What the scenario uses instead.
        source: NotCostRule,
    },
    /// The value makes the cost release rule invalid.
    #[error("--sweep {}: {value:?} {source}", kind.name())]
    Release {
        /// The sweep.
        kind: SweepKind,
        /// The value.
        value: String,
        /// The rule's complaint.
        source: ReleaseError,
    },
    /// A `level` sweep's value is no configuration.
    #[error(transparent)]
    Control(#[from] UnknownControl),
}

/// A scenario whose classes use the fixed hysteresis, asked for a cost-rule parameter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
#[error(
    "applies to the cost release rule, but the classes of scenario {scenario} use the fixed hysteresis: add --release cost"
)]
pub struct NotCostRule {
    /// The scenario's name.
    pub scenario: String,
}

/// Why [`run`](super::run) stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError<E> {
    /// A value of the sweep.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// A scenario could not be set up.
    #[error(transparent)]
    Setup(#[from] SetupError),
    /// The caller's `on_series` failed.
    #[error("{0}")]
    Series(E),
}
