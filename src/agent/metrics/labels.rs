//! The label sets of the agent's series and the names and numbers of preemption levels.

use prometheus_client::encoding::EncodeLabelSet;

use crate::proto::Level;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ClassLabel {
    pub(super) class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct PreemptLabels {
    pub(super) class: String,
    pub(super) level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct LevelLabel {
    pub(super) level: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct GpuLabel {
    pub(super) gpu: String,
}

/// A process's labels. `namespace`, `pod` and `container` name the Kubernetes container that
/// holds its allocation, empty for a process without one (Prometheus reads an empty label as
/// an absent one, so `{pod=""}` selects the processes outside pods).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ProcessLabels {
    pub(super) pid: String,
    pub(super) class: String,
    pub(super) exe: String,
    pub(super) namespace: String,
    pub(super) pod: String,
    pub(super) container: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct VersionLabel {
    pub(super) version: String,
}

/// The metric name of a level (`hold`, `deactivate`, `suspend`).
pub fn level_label(l: Level) -> &'static str {
    match l {
        Level::Hold => "hold",
        Level::Deactivate => "deactivate",
        Level::Suspend => "suspend",
    }
}

/// A level as a number (0 running, 1 hold, 2 deactivate, 3 suspend).
pub(super) fn level_number(l: Option<Level>) -> i64 {
    match l {
        None => 0,
        Some(Level::Hold) => 1,
        Some(Level::Deactivate) => 2,
        Some(Level::Suspend) => 3,
    }
}
