//! Each column's rule, in words: the CSV and the JSON reader refuse a value with the same text.

use crate::record::MAX_WAVES_PER_WG;

pub(crate) fn workgroups(v: &str) -> String {
    format!("{v:?} is not an integer of at least 1 (work-groups in the grid)")
}

pub(crate) fn waves(v: &str) -> String {
    format!(
        "{v:?} is not an integer in 1..={MAX_WAVES_PER_WG} (wave slots of 64 threads per work-group: a CU's 32 at most)"
    )
}

pub(crate) fn cu_util(v: &str) -> String {
    format!("{v:?} is not a number in 0..=1 (the share of its CU one work-group uses)")
}

pub(crate) fn dram_bytes(v: &str) -> String {
    format!("{v:?} is not a number of at least 0 (DRAM bytes one work-group moves)")
}

pub(crate) fn wg_us(v: &str) -> String {
    format!("{v:?} is not a number above 0 (the time of one work-group, µs)")
}

pub(crate) fn stream(v: &str) -> String {
    format!("{v:?} is not an integer of at least 0 (the HIP stream)")
}

pub(crate) fn barrier(v: &str) -> String {
    format!("{v:?} is not true, false, 1 or 0 (whether the host waits for the dispatch)")
}

/// `wg_us`'s range: a finite number above 0.
pub(crate) fn wg_us_ok(v: f64) -> bool {
    v.is_finite() && v > 0.0
}

/// `cu_util`'s range.
pub(crate) fn cu_util_ok(v: f64) -> bool {
    (0.0..=1.0).contains(&v)
}

/// `dram_bytes`'s range: a finite number of at least 0.
pub(crate) fn dram_bytes_ok(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

/// `waves_per_wg`'s range.
pub(crate) fn waves_ok(v: u32) -> bool {
    (1..=MAX_WAVES_PER_WG).contains(&v)
}
