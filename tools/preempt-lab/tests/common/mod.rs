//! What the binary's tests share: running `preempt-lab` and reading a successful run's output.

use std::process::{Command, Output};

/// Runs the `preempt-lab` binary with `args`.
pub fn lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_preempt-lab"))
        .args(args)
        .output()
        .expect("run preempt-lab")
}

/// The stdout of a run that succeeded (the test fails with its stderr otherwise).
pub fn ok(o: &Output) -> String {
    test_support::output::success_stdout(o)
}
