//! Every privileged test of the workspace carries the marker that makes
//! `KFDQ_SKIP_PRIVILEGED=1` show it as ignored (tools/test-support/src/privileged.rs).

use std::path::Path;

use test_support::privileged::SKIP_MARKER;
use test_support::skip_markers::{privileged_tests, unmarked};

const SUITES: &[&str] = &[
    "tests",
    "shim/tests",
    "device-plugin/tests",
    "tools/kfd-emu/tests",
    "tools/fakehip/tests",
    "tools/gfx-model/tests",
    "tools/preempt-lab/tests",
];

#[test]
fn every_privileged_test_is_marked() {
    let ws = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut missing = Vec::new();
    let mut counted = 0;
    for s in SUITES {
        let dir = ws.join(s);
        missing.extend(unmarked(&dir));
        counted += privileged_tests(&dir).values().map(Vec::len).sum::<usize>();
    }
    assert!(
        counted > 100,
        "found only {counted} privileged tests: is the scan broken?"
    );
    assert!(
        missing.is_empty(),
        "privileged tests without `{SKIP_MARKER}` (add it under #[test]):\n{}",
        missing
            .iter()
            .map(|(p, l, n)| format!("  {}:{l} {n}", p.display()))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
