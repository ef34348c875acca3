//! Priority classes: how a process's class (`KFDQ_CLASS`) and an optional forced priority
//! (`KFDQ_PRIORITY`) turn the priority a runtime asks for into the KFD queue priority in effect.
//!
//! KFD accepts queue priorities 0..=15 and maps them to three CP pipe priorities (0-6 low, 7-10
//! medium, 11-15 high). ROCr creates HIP's low / normal / high streams at 0 / 7 / 11. A class owns
//! a band of KFD priorities; the runtime's request picks the low end, the middle or the high end
//! of the band, so classes always order (every latency queue is above every normal queue, which
//! is above every batch queue) and the application's own stream priorities still order inside
//! its class.

use std::fmt;

/// Highest KFD queue priority (`KFD_MAX_QUEUE_PRIORITY`).
pub const KFD_PRIORITY_MAX: u32 = 15;

/// HIP's stream priority range: greatest (-1) ..= least (1).
pub const HIP_PRIORITY_GREATEST: i32 = -1;
/// Least HIP stream priority.
pub const HIP_PRIORITY_LEAST: i32 = 1;

/// `GPU_MAX_HW_QUEUES` for a process without a built-in class: ROCclr's own default (4), so the
/// shim adds no queue to a partition that the runtime would not have created without it.
pub const UNCLASSIFIED_HW_QUEUES: u32 = 4;

/// `GPU_MAX_HW_QUEUES` for a process whose `KFDQ_CLASS` is `class`: the built-in class's
/// [`Class::hw_queues`], or [`UNCLASSIFIED_HW_QUEUES`] for no or an unknown class name.
pub fn hw_queues_for(class: Option<&str>) -> u32 {
    class
        .and_then(|c| Class::parse(c).ok())
        .map_or(UNCLASSIFIED_HW_QUEUES, Class::hw_queues)
}

/// The largest `hw_queues` a class may ask for (per priority pool and process; a partition keeps
/// 24 resident on gfx942, so far more than this only fills the runlist with idle queues).
pub const MAX_HW_QUEUES: u32 = 1024;

/// Largest in-flight window (AQL packets per queue); larger windows are what an unbounded one
/// already gives (ROCclr's rings hold 1024-4096 packets).
pub const MAX_WINDOW: u32 = 4096;

/// A band of KFD priorities, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Band {
    /// Lowest priority of the band.
    pub lo: u32,
    /// Highest priority of the band.
    pub hi: u32,
}

impl Band {
    /// The priority of the band that `pos` selects: its top, its middle (rounded down) or its bottom.
    pub fn pick(self, pos: Position) -> u32 {
        match pos {
            Position::High => self.hi,
            Position::Mid => self.lo + (self.hi - self.lo) / 2,
            Position::Low => self.lo,
        }
    }

    /// True when `p` lies in the band.
    pub fn contains(self, p: u32) -> bool {
        (self.lo..=self.hi).contains(&p)
    }
}

/// Built-in priority classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// Latency-critical work (inference serving): KFD 11..=15, the CP's high pipe priority.
    Latency,
    /// Ordinary work: KFD 7..=10, the CP's medium pipe priority.
    Normal,
    /// Best-effort work (training, batch): KFD 0..=6, the CP's low pipe priority.
    Batch,
}

impl Class {
    /// Every class, highest first.
    pub const ALL: [Class; 3] = [Class::Latency, Class::Normal, Class::Batch];

    /// The class's name as written in `KFDQ_CLASS`.
    pub fn name(self) -> &'static str {
        match self {
            Class::Latency => "latency",
            Class::Normal => "normal",
            Class::Batch => "batch",
        }
    }

    /// The KFD priorities the class owns.
    pub fn band(self) -> Band {
        match self {
            Class::Latency => Band { lo: 11, hi: 15 },
            Class::Normal => Band { lo: 7, hi: 10 },
            Class::Batch => Band { lo: 0, hi: 6 },
        }
    }

    /// Hardware queues per priority pool the runtime may create for a process of this class
    /// (`GPU_MAX_HW_QUEUES`, read by ROCclr once, at its first HIP call); streams beyond it share
    /// queues round-robin. docs/policy.md, "Hardware queues per class", has the evidence: a
    /// partition keeps `num_cp_queues` (24 on gfx942) queues resident for all its processes
    /// together, and with more active queues the hardware scheduler time-slices the runlist and
    /// priority stops mattering. `latency` gets 8 so that up to 8 concurrent streams of a service
    /// never serialize behind each other; `normal` and `batch` keep ROCclr's own default of 4 (a
    /// lower class gains only its own concurrency from more queues and costs everyone slots).
    pub fn hw_queues(self) -> u32 {
        match self {
            Class::Latency => 8,
            Class::Normal | Class::Batch => UNCLASSIFIED_HW_QUEUES,
        }
    }

    /// Parses a class name (case-insensitive, surrounding blanks ignored).
    pub fn parse(s: &str) -> Result<Class, ClassError> {
        let t = s.trim();
        Class::ALL
            .into_iter()
            .find(|c| c.name().eq_ignore_ascii_case(t))
            .ok_or_else(|| ClassError::Unknown(s.to_string()))
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where inside a band a request lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// HIP priority -1 / ROCr's high queues (KFD 11..=15 requested).
    High,
    /// HIP priority 0 / ROCr's normal queues (KFD 7..=10 requested).
    Mid,
    /// HIP priority 1 / ROCr's low queues (KFD 0..=6 requested).
    Low,
}

/// The position a runtime's requested KFD priority stands for (ROCr asks 0 / 7 / 11; libhsakmt's
/// full map is 0, 3, 5, 7, 9, 11, 15). Uses the kernel's own pipe-priority split.
pub fn position_of_kfd(requested: u32) -> Position {
    match requested {
        11.. => Position::High,
        7..=10 => Position::Mid,
        _ => Position::Low,
    }
}

/// The position of a (clamped) HIP stream priority.
pub fn position_of_hip(priority: i32) -> Position {
    match clamp_hip_priority(priority).effective {
        HIP_PRIORITY_GREATEST => Position::High,
        0 => Position::Mid,
        _ => Position::Low,
    }
}

/// A HIP stream priority as asked and as HIP applies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HipPriority {
    /// What the application passed.
    pub requested: i32,
    /// What HIP uses: `requested` clamped to [-1, 1].
    pub effective: i32,
}

impl HipPriority {
    /// True when HIP changed the value (the request was outside [-1, 1]).
    pub fn clamped(&self) -> bool {
        self.requested != self.effective
    }

    /// A warning text for a clamped request, naming the rule; `None` when in range.
    pub fn warning(&self) -> Option<String> {
        self.clamped().then(|| {
            format!(
                "hipStreamCreateWithPriority(priority {}) is outside HIP's range [{HIP_PRIORITY_GREATEST}, {HIP_PRIORITY_LEAST}] \
                 (-1 greatest, 1 least); HIP clamps it to {} ({})",
                self.requested,
                self.effective,
                hip_priority_name(self.effective)
            )
        })
    }
}

/// "high" / "normal" / "low" for a HIP priority in range.
pub fn hip_priority_name(p: i32) -> &'static str {
    match p {
        i32::MIN..=-1 => "high",
        0 => "normal",
        _ => "low",
    }
}

/// Clamps a HIP stream priority to [-1, 1] the way HIP does.
pub fn clamp_hip_priority(requested: i32) -> HipPriority {
    HipPriority {
        requested,
        effective: requested.clamp(HIP_PRIORITY_GREATEST, HIP_PRIORITY_LEAST),
    }
}

/// Why a class name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClassError {
    /// Not one of the built-in classes.
    Unknown(String),
}

impl fmt::Display for ClassError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClassError::Unknown(s) => write!(
                f,
                "KFDQ_CLASS={s:?} is not a built-in class (latency, normal, batch): the shim gives its queues no class band; the agent (KFDQ_SOCKET) applies the class its configuration defines"
            ),
        }
    }
}

impl std::error::Error for ClassError {}

/// Why a forced priority was refused or changed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PriorityError {
    /// Not a number.
    NotANumber(String),
    /// Above [`KFD_PRIORITY_MAX`]; carries the clamped value.
    OutOfRange {
        /// The value given.
        given: u64,
        /// The value used instead.
        used: u32,
    },
}

impl fmt::Display for PriorityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PriorityError::NotANumber(s) => write!(
                f,
                "KFDQ_PRIORITY={s:?} is not a KFD queue priority (an integer 0..=15); ignored"
            ),
            PriorityError::OutOfRange { given, used } => {
                write!(
                    f,
                    "KFDQ_PRIORITY={given} is out of range 0..={KFD_PRIORITY_MAX}; using {used}"
                )
            }
        }
    }
}

impl std::error::Error for PriorityError {}

/// Parses `KFDQ_PRIORITY`. Values above 15 are clamped (the error carries the value used).
pub fn parse_forced_priority(s: &str) -> Result<u32, PriorityError> {
    let t = s.trim();
    match t.parse::<u64>() {
        Ok(v) if v <= u64::from(KFD_PRIORITY_MAX) => Ok(v as u32),
        Ok(v) => Err(PriorityError::OutOfRange {
            given: v,
            used: KFD_PRIORITY_MAX,
        }),
        Err(_) => Err(PriorityError::NotANumber(s.to_string())),
    }
}

/// The static priority policy of one process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PriorityPolicy {
    /// Class, when `KFDQ_CLASS` named one.
    pub class: Option<Class>,
    /// Priority forced on every queue (`KFDQ_PRIORITY`), already in range.
    pub forced: Option<u32>,
}

impl PriorityPolicy {
    /// Builds the policy from the raw `KFDQ_CLASS` / `KFDQ_PRIORITY` values (unset or empty =
    /// `None`). Invalid values are ignored (or clamped) and described in the returned warnings.
    pub fn from_values(
        class: Option<&str>,
        priority: Option<&str>,
    ) -> (PriorityPolicy, Vec<String>) {
        let mut warnings = Vec::new();
        let class = match class.filter(|s| !s.trim().is_empty()).map(Class::parse) {
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                warnings.push(e.to_string());
                None
            }
            None => None,
        };
        let forced = match priority
            .filter(|s| !s.trim().is_empty())
            .map(parse_forced_priority)
        {
            Some(Ok(p)) => Some(p),
            Some(Err(e @ PriorityError::OutOfRange { used, .. })) => {
                warnings.push(e.to_string());
                Some(used)
            }
            Some(Err(e)) => {
                warnings.push(e.to_string());
                None
            }
            None => None,
        };
        (PriorityPolicy { class, forced }, warnings)
    }

    /// The KFD priority a queue gets when the runtime asks for `requested`: the forced priority,
    /// else the class band's pick for the request's position, else the request itself (capped
    /// at 15).
    pub fn effective(&self, requested: u32) -> u32 {
        if let Some(p) = self.forced {
            return p;
        }
        match self.class {
            Some(c) => c.band().pick(position_of_kfd(requested)),
            None => requested.min(KFD_PRIORITY_MAX),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bands_partition_the_kfd_range_in_order() {
        let mut seen = [0u8; 16];
        for c in Class::ALL {
            for p in c.band().lo..=c.band().hi {
                seen[p as usize] += 1;
            }
        }
        assert!(
            seen.iter().all(|&n| n == 1),
            "every priority 0..=15 in exactly one band: {seen:?}"
        );
        assert!(Class::Latency.band().lo > Class::Normal.band().hi);
        assert!(Class::Normal.band().lo > Class::Batch.band().hi);
    }

    #[test]
    fn bands_match_the_cp_pipe_priority_split() {
        // kfd_mqd_manager.c pipe_priority_map: 0-6 low, 7-10 medium, 11-15 high.
        assert_eq!(Class::Batch.band(), Band { lo: 0, hi: 6 });
        assert_eq!(Class::Normal.band(), Band { lo: 7, hi: 10 });
        assert_eq!(Class::Latency.band(), Band { lo: 11, hi: 15 });
    }

    #[test]
    fn rocr_requests_map_to_band_positions() {
        let p = |c| PriorityPolicy {
            class: Some(c),
            forced: None,
        };
        // ROCr: HIP 1 / 0 / -1 -> KFD 0 / 7 / 11.
        assert_eq!(
            [0, 7, 11].map(|r| p(Class::Latency).effective(r)),
            [11, 13, 15]
        );
        assert_eq!(
            [0, 7, 11].map(|r| p(Class::Normal).effective(r)),
            [7, 8, 10]
        );
        assert_eq!([0, 7, 11].map(|r| p(Class::Batch).effective(r)), [0, 3, 6]);
        // libhsakmt's other values land in the same positions.
        assert_eq!(p(Class::Latency).effective(15), 15);
        assert_eq!(p(Class::Latency).effective(9), 13);
        assert_eq!(p(Class::Latency).effective(3), 11);
    }

    #[test]
    fn hip_positions() {
        assert_eq!(position_of_hip(-1), Position::High);
        assert_eq!(position_of_hip(0), Position::Mid);
        assert_eq!(position_of_hip(1), Position::Low);
        assert_eq!(position_of_hip(12), Position::Low);
        assert_eq!(position_of_hip(-7), Position::High);
    }

    #[test]
    fn forced_priority_wins_over_class() {
        let (pol, w) = PriorityPolicy::from_values(Some("batch"), Some("12"));
        assert!(w.is_empty());
        assert_eq!(pol.effective(0), 12);
        assert_eq!(pol.effective(11), 12);
    }

    #[test]
    fn no_class_keeps_the_request() {
        let pol = PriorityPolicy::default();
        assert_eq!([0, 7, 11, 15].map(|r| pol.effective(r)), [0, 7, 11, 15]);
        assert_eq!(pol.effective(99), 15);
    }

    #[test]
    fn invalid_values_are_reported_and_ignored_or_clamped() {
        let (pol, w) = PriorityPolicy::from_values(Some("gold"), Some("16"));
        assert_eq!(
            pol,
            PriorityPolicy {
                class: None,
                forced: Some(15)
            }
        );
        assert_eq!(w.len(), 2);
        assert!(
            w[0].contains("\"gold\"") && w[0].contains("latency, normal, batch"),
            "{}",
            w[0]
        );
        assert!(
            w[1].contains("16") && w[1].contains("0..=15") && w[1].contains("using 15"),
            "{}",
            w[1]
        );

        let (pol, w) = PriorityPolicy::from_values(Some(" Latency "), Some("abc"));
        assert_eq!(
            pol,
            PriorityPolicy {
                class: Some(Class::Latency),
                forced: None
            }
        );
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("\"abc\"") && w[0].contains("ignored"),
            "{}",
            w[0]
        );

        let (pol, w) = PriorityPolicy::from_values(Some(""), Some(" "));
        assert_eq!(pol, PriorityPolicy::default());
        assert!(w.is_empty());
    }

    #[test]
    fn hip_priority_clamping_is_reported() {
        let ok = clamp_hip_priority(-1);
        assert!(!ok.clamped() && ok.warning().is_none());
        let hi = clamp_hip_priority(3);
        assert_eq!(hi.effective, 1);
        let w = hi.warning().expect("warning");
        assert!(
            w.contains("priority 3") && w.contains("[-1, 1]") && w.contains("clamps it to 1 (low)"),
            "{w}"
        );
        let lo = clamp_hip_priority(-12);
        assert_eq!(lo.effective, -1);
        assert!(
            lo.warning()
                .expect("warning")
                .contains("clamps it to -1 (high)")
        );
    }

    #[test]
    fn class_names_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::parse(c.name()), Ok(c));
            assert_eq!(Class::parse(&c.name().to_uppercase()), Ok(c));
        }
        assert!(matches!(
            Class::parse("realtime"),
            Err(ClassError::Unknown(_))
        ));
    }
}
