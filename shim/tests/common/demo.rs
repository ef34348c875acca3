//! `kfdq demo` as the tests run it: the workspace's kfdq, shim and programs, none of the
//! caller's agent or root variables.

use std::process::{Command, Output};

use super::{shim_path, workspace_bin};

/// `kfdq demo ARGS` with `more` applied to the command (more arguments, variables): its output
/// and stderr as text.
pub fn run(args: &[&str], more: impl FnOnce(&mut Command)) -> (Output, String) {
    let mut cmd = Command::new(workspace_bin("kfdq"));
    cmd.arg("demo")
        .args(args)
        .env("KFDQ_SHIM", shim_path())
        .env_remove("KFDQ_ROOT")
        .env_remove("KFDQ_SOCKET");
    more(&mut cmd);
    let out = cmd.output().expect("run kfdq demo");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stderr)
}

/// `kfdq demo --json --runtime hip --hip-root ROOT ARGS` (the workloads'
/// default shape): the demo on the real HIP runtime of a sid root.
pub fn run_hip(root: &std::path::Path, args: &[&str]) -> (Output, String) {
    let root = root.display().to_string();
    let mut all = vec!["--json", "--runtime", "hip", "--hip-root", &root];
    all.extend_from_slice(args);
    run(&all, |cmd| {
        cmd.env_remove("KFDQ_DEMO_SHAPE");
    })
}
