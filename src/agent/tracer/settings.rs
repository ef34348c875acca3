//! `[tracer]` in the agent's configuration: how often the tracer samples its tracees' queues
//! and looks for processes without the shim. Parsed here, by the tracer's side; the
//! configuration (`crate::agent::config`) adds the file and line to an error.

use std::ops::RangeInclusive;
use std::time::Duration;

use serde::Deserialize;

/// How the tracer samples and refreshes (`[tracer]` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracerSettings {
    /// Activity sampling period: each tracee's queues' read and write indexes are read this
    /// often.
    pub activity: Duration,
    /// Queue-set refresh (GET_QUEUE_SNAPSHOT) and discovery period.
    pub scan: Duration,
}

/// Default scan period: a new GPU process is controlled within half a second; each scan costs
/// one sysfs listing per node and one snapshot ioctl per tracee (docs/performance.md).
pub const DEFAULT_SCAN: Duration = Duration::from_millis(500);

/// Accepted `scan_ms` values.
const SCAN_RANGE_MS: RangeInclusive<u64> = 50..=60_000;

impl Default for TracerSettings {
    fn default() -> Self {
        TracerSettings {
            // The shim's own default, so a traced process is seen as quickly as a shim one.
            activity: crate::proto::DEFAULT_ACTIVITY_PERIOD,
            scan: DEFAULT_SCAN,
        }
    }
}

/// The section as written.
#[derive(Deserialize, Default, Debug)]
#[serde(deny_unknown_fields)]
pub struct FileTracer {
    activity_us: Option<u64>,
    scan_ms: Option<u64>,
}

fn in_range(v: u64, range: RangeInclusive<u64>, what: &str) -> Result<u64, String> {
    if range.contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{what} = {v} is out of range {}..={}",
            range.start(),
            range.end()
        ))
    }
}

/// Applies the section to `settings`; `Err` is the rule broken and its range.
pub fn apply(file: &FileTracer, settings: &mut TracerSettings) -> Result<(), String> {
    if let Some(v) = file.activity_us {
        let v = in_range(
            v,
            crate::proto::ACTIVITY_RANGE_US,
            "activity_us (µs between samples of a traced process's queues)",
        )?;
        settings.activity = Duration::from_micros(v);
    }
    if let Some(v) = file.scan_ms {
        let v = in_range(
            v,
            SCAN_RANGE_MS,
            "scan_ms (ms between looks for GPU processes without the shim)",
        )?;
        settings.scan = Duration::from_millis(v);
    }
    Ok(())
}
