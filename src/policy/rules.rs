//! What the policy is told: the classes (rank, priority, preemption level, starvation guard, CU
//! share) and its timing (release rule, minimum interval between device-wide preempts).

use crate::policy::Level;
use crate::policy::class::{Class, MAX_HW_QUEUES, MAX_WINDOW};
use crate::policy::release::{CostRelease, Release};

/// The longest `hint_timeout_ms`: a minute. A hint is the application's word that work is
/// coming; one that keeps other jobs preempted longer without any is no longer a bound
/// (a hinting process stays under its class's starvation guard either way).
pub const MAX_HINT_TIMEOUT_MS: u32 = 60_000;

/// One class of processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassRule {
    /// Its name (`latency`, `batch`, ...).
    pub name: String,
    /// Higher ranks run first; while a class of higher rank is busy on a partition, lower classes
    /// with a level are preempted there.
    pub rank: u8,
    /// KFD queue priority of its queues (0..=15; level 0).
    pub priority: u8,
    /// How it is preempted while a higher class is busy; `None`: never preempted.
    pub level: Option<Level>,
    /// Starvation guard: once preempted for `after_ns`, it runs for `run_ns`.
    pub starvation: Option<Starvation>,
    /// Share of each partition's CUs (per mille) its queues are confined to; `None`: all CUs.
    pub cu_share_permille: Option<u16>,
    /// In-flight window: at most this many AQL packets outstanding per queue of its processes
    /// (the shim makes launches beyond it wait), so that a hold (level 1) holds real work;
    /// `None`: unbounded.
    pub window: Option<u32>,
    /// Hardware queues per priority pool its processes' runtime may create
    /// (`GPU_MAX_HW_QUEUES`, applied by `kfdq run --class`); `None`: the shim's default for the
    /// class name ([`crate::policy::class::Class::hw_queues`]).
    pub hw_queues: Option<u32>,
    /// Request hints of its processes (docs/shim.md, "Request hints") expire after this many
    /// ms without GPU work; `None`: [`crate::proto::DEFAULT_HINT_TIMEOUT`]. Only a class that
    /// preempts others can hint.
    pub hint_timeout_ms: Option<u32>,
}

/// A preempted class's guaranteed share: `run_ns` of running after `after_ns` preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Starvation {
    /// How long it runs once the guard triggers.
    pub run_ns: u64,
    /// How long it stays preempted before the guard triggers.
    pub after_ns: u64,
}

/// The policy's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// The classes; a process whose class is not listed is treated as the lowest-ranked class.
    pub classes: Vec<ClassRule>,
    /// When lower classes resume after a higher class goes idle.
    pub release: Release,
    /// With [`Release::Hysteresis`]: a higher class must be idle this long before lower classes
    /// resume.
    pub hysteresis_ns: u64,
    /// Least time between two device-wide preempts on one partition (changes wait for it).
    pub min_preempt_interval_ns: u64,
}

/// A configuration the policy refuses, with the rule it breaks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// No class at all.
    #[error("the policy needs at least one class; add a [[class]] table")]
    NoClasses,
    /// Two classes share a name.
    #[error("class {0:?} is defined twice; class names must be unique")]
    DuplicateName(String),
    /// Two classes share a rank.
    #[error("classes {0:?} and {1:?} both have rank {2}; give each class its own rank")]
    DuplicateRank(String, String, u8),
    /// A priority outside KFD's range.
    #[error("class {0:?}: priority {1} is out of range 0..=15 (KFD's queue priorities)")]
    Priority(String, u8),
    /// A CU share of 0 or over 1000 per mille.
    #[error("class {0:?}: cu_share {1} per mille is out of range 1..=1000")]
    CuShare(String, u16),
    /// A window of 0 or beyond what a ring holds.
    #[error(
        "class {0:?}: window {1} is out of range 1..=4096 dispatches (omit it for an unbounded window)"
    )]
    Window(String, u32),
    /// A hardware queue count of 0 or beyond [`crate::policy::class::MAX_HW_QUEUES`].
    #[error(
        "class {0:?}: hw_queues {1} is out of range 1..=1024 queues per priority pool (omit it for the class's default)"
    )]
    HwQueues(String, u32),
    /// A hint bound of 0 or beyond [`MAX_HINT_TIMEOUT_MS`].
    #[error(
        "class {0:?}: hint_timeout_ms {1} is out of range 1..=60000 ms (omit it for the default, 50 ms)"
    )]
    HintTimeout(String, u32),
    /// A starvation guard that never runs.
    #[error("class {0:?}: the starvation guard's run time must be above 0")]
    Starvation(String),
    /// A parameter of the cost release rule out of range (the message names it).
    #[error("release rule: {0}")]
    Release(crate::policy::release::ReleaseError),
}

impl PolicyConfig {
    /// kfdq's built-in classes: `latency` (rank 2, priority 13, never preempted), `normal`
    /// (rank 1, priority 8, held at level 1) and `batch` (rank 0, priority 3, deactivated at
    /// level 2, guaranteed 10 ms of running after 500 ms preempted, window 2); hardware queues per
    /// [`Class::hw_queues`]; the cost release rule with its defaults ([`CostRelease::default`];
    /// the hysteresis, 20 ms, applies only when [`Release::Hysteresis`] is chosen); 1 ms between
    /// device-wide preempts.
    pub fn builtin() -> PolicyConfig {
        PolicyConfig {
            classes: vec![
                ClassRule {
                    name: "latency".into(),
                    rank: 2,
                    priority: 13,
                    level: None,
                    starvation: None,
                    cu_share_permille: None,
                    window: None,
                    hw_queues: Some(Class::Latency.hw_queues()),
                    hint_timeout_ms: None,
                },
                ClassRule {
                    name: "normal".into(),
                    rank: 1,
                    priority: 8,
                    level: Some(Level::Hold),
                    starvation: None,
                    cu_share_permille: None,
                    window: None,
                    hw_queues: Some(Class::Normal.hw_queues()),
                    hint_timeout_ms: None,
                },
                ClassRule {
                    name: "batch".into(),
                    rank: 0,
                    priority: 3,
                    level: Some(Level::Deactivate),
                    starvation: Some(Starvation {
                        run_ns: 10_000_000,
                        after_ns: 500_000_000,
                    }),
                    cu_share_permille: None,
                    window: Some(2),
                    hw_queues: Some(Class::Batch.hw_queues()),
                    hint_timeout_ms: None,
                },
            ],
            release: Release::Cost(CostRelease::default()),
            hysteresis_ns: 20_000_000,
            min_preempt_interval_ns: 1_000_000,
        }
    }

    /// Checks every rule; the error names the first one broken.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.classes.is_empty() {
            return Err(PolicyError::NoClasses);
        }
        if let Release::Cost(c) = &self.release {
            c.validate().map_err(PolicyError::Release)?;
        }
        for (i, c) in self.classes.iter().enumerate() {
            if c.priority > 15 {
                return Err(PolicyError::Priority(c.name.clone(), c.priority));
            }
            if let Some(s) = c.cu_share_permille
                && !(1..=1000).contains(&s)
            {
                return Err(PolicyError::CuShare(c.name.clone(), s));
            }
            if let Some(w) = c.window
                && !(1..=MAX_WINDOW).contains(&w)
            {
                return Err(PolicyError::Window(c.name.clone(), w));
            }
            if let Some(h) = c.hw_queues
                && !(1..=MAX_HW_QUEUES).contains(&h)
            {
                return Err(PolicyError::HwQueues(c.name.clone(), h));
            }
            if let Some(t) = c.hint_timeout_ms
                && !(1..=MAX_HINT_TIMEOUT_MS).contains(&t)
            {
                return Err(PolicyError::HintTimeout(c.name.clone(), t));
            }
            if c.starvation.is_some_and(|s| s.run_ns == 0) {
                return Err(PolicyError::Starvation(c.name.clone()));
            }
            for d in &self.classes[..i] {
                if d.name == c.name {
                    return Err(PolicyError::DuplicateName(c.name.clone()));
                }
                if d.rank == c.rank {
                    return Err(PolicyError::DuplicateRank(
                        d.name.clone(),
                        c.name.clone(),
                        c.rank,
                    ));
                }
            }
        }
        Ok(())
    }

    /// The rule of class `name`, or the lowest-ranked class for an unknown name (`None` only
    /// for a configuration without classes, which [`Self::validate`] refuses).
    pub fn class(&self, name: &str) -> Option<&ClassRule> {
        self.class_index(name).map(|i| &self.classes[i])
    }

    /// [`Self::class`] as an index into `classes`.
    pub fn class_index(&self, name: &str) -> Option<usize> {
        self.classes
            .iter()
            .position(|c| c.name == name)
            .or_else(|| (0..self.classes.len()).min_by_key(|&i| self.classes[i].rank))
    }
}
