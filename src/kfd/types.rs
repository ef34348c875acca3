//! Typed values of the KFD interface that are checked on construction: priorities,
//! percentages, CU masks, queue kinds.

use std::fmt;

use nix::errno::Errno;

use super::error::{Error, Result};

/// KFD queue priority, 0..=15 (`KFD_MAX_QUEUE_PRIORITY`).
///
/// 0–6 map to pipe priority CS_LOW, 7–10 to CS_MEDIUM, 11–15 to CS_HIGH. Priority only
/// arbitrates among queues already resident on the hardware; it never preempts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "u32", into = "u32")]
pub struct Priority(u8);

impl Priority {
    /// Highest priority the kernel accepts.
    pub const MAX: u32 = kfd_sys::KFD_MAX_QUEUE_PRIORITY as u32;
    /// ROCr's LOW (libhsakmt MINIMUM).
    pub const LOW: Priority = Priority(0);
    /// ROCr's NORMAL.
    pub const NORMAL: Priority = Priority(7);
    /// ROCr's HIGH.
    pub const HIGH: Priority = Priority(11);

    /// A priority, or an error naming the range.
    pub fn new(value: u32) -> Result<Self> {
        if value > Self::MAX {
            return Err(Error::invalid(
                Errno::EINVAL,
                format!("queue priority {value} is out of range 0..={}", Self::MAX),
            ));
        }
        Ok(Priority(value as u8))
    }

    /// The raw value.
    pub fn get(self) -> u32 {
        u32::from(self.0)
    }

    /// The CP pipe priority this maps to.
    pub fn pipe_priority(self) -> &'static str {
        match self.0 {
            0..=6 => "CS_LOW",
            7..=10 => "CS_MEDIUM",
            _ => "CS_HIGH",
        }
    }
}

impl TryFrom<u32> for Priority {
    type Error = Error;
    fn try_from(v: u32) -> Result<Self> {
        Priority::new(v)
    }
}

impl From<Priority> for u32 {
    fn from(p: Priority) -> u32 {
        p.get()
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Queue percentage 0..=100: 0 makes the queue inactive (unmapped, waves CWSR-saved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Percentage(u8);

impl Percentage {
    /// Inactive.
    pub const OFF: Percentage = Percentage(0);
    /// Fully active.
    pub const FULL: Percentage = Percentage(100);

    /// A percentage, or an error naming the range.
    pub fn new(value: u32) -> Result<Self> {
        if value > kfd_sys::KFD_MAX_QUEUE_PERCENTAGE as u32 {
            return Err(Error::invalid(
                Errno::EINVAL,
                format!("queue percentage {value} is out of range 0..=100"),
            ));
        }
        Ok(Percentage(value as u8))
    }

    /// The raw value.
    pub fn get(self) -> u32 {
        u32::from(self.0)
    }
}

/// A compute-unit mask, as the kernel takes it: a bit list whose length is a multiple of 32.
///
/// On multi-XCC partitions bit *i* applies to XCC (*i* mod num_xcc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CuMask(Vec<u32>);

impl CuMask {
    /// Most bits the kernel honours; longer masks are truncated by it.
    pub const MAX_BITS: usize = 1024;

    /// A mask from 32-bit words (bit *i* of word *w* is CU `32*w + i`).
    pub fn from_words(words: Vec<u32>) -> Result<Self> {
        if words.is_empty() {
            return Err(Error::invalid(
                Errno::EINVAL,
                "a CU mask needs at least 32 bits (one word); the kernel rejects an empty mask",
            ));
        }
        if words.len() * 32 > Self::MAX_BITS {
            return Err(Error::invalid(
                Errno::EINVAL,
                format!(
                    "a CU mask has at most {} bits; got {}",
                    Self::MAX_BITS,
                    words.len() * 32
                ),
            ));
        }
        if words.iter().all(|w| *w == 0) {
            return Err(Error::invalid(
                Errno::EINVAL,
                "a CU mask with no CU enabled would hang the queue; enable at least one CU",
            ));
        }
        Ok(CuMask(words))
    }

    /// A mask enabling CUs `0..count`.
    pub fn first(count: usize) -> Result<Self> {
        let words = count.div_ceil(32).max(1);
        let mut v = vec![0u32; words];
        for cu in 0..count {
            v[cu / 32] |= 1 << (cu % 32);
        }
        CuMask::from_words(v)
    }

    /// The words.
    pub fn words(&self) -> &[u32] {
        &self.0
    }

    /// Number of bits (`num_cu_mask`).
    pub fn bits(&self) -> u32 {
        (self.0.len() * 32) as u32
    }

    /// Number of enabled CUs.
    pub fn enabled(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }
}

/// Queue kinds kfdq creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueKind {
    /// AQL compute queue (what ROCr creates for HIP streams).
    ComputeAql,
    /// PM4 compute queue.
    ComputePm4,
}

impl QueueKind {
    pub(crate) fn raw(self) -> u32 {
        match self {
            QueueKind::ComputeAql => kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL as u32,
            QueueKind::ComputePm4 => kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE as u32,
        }
    }
}
