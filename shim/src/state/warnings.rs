//! The registry's warnings: added once, printed once, and the two kinds reported once per process
//! (work no stream claims, streams sharing queues).

use super::State;

/// How long work may sit on a compute queue that no stream claims before it is reported.
pub const UNCLAIMED_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

/// The start of the warning about work no stream claims.
pub const UNCLAIMED_WARNING: &str =
    "a KFD queue runs work that no HIP call through the shim submitted";

/// The start of the warning about streams sharing queues.
pub const SHARED_WARNING: &str = "streams share KFD queues";

impl State {
    /// Adds a warning once; returns true when it is new.
    pub fn warn(&mut self, w: String) -> bool {
        if self.warnings.contains(&w) {
            return false;
        }
        self.warnings.push(w);
        self.changed();
        true
    }

    /// Adds a warning and prints it on stderr, unless the same text was reported before.
    pub fn report(&mut self, w: String) {
        if self.warn(w.clone()) {
            crate::log::warn_always(&w);
        }
    }

    /// As [`Self::report`], once per process for warnings starting with `kind`; the text is
    /// built only then.
    pub fn report_once(&mut self, kind: &str, w: impl FnOnce() -> String) {
        if !self.warnings.iter().any(|x| x.starts_with(kind)) {
            self.report(w());
        }
    }
}
