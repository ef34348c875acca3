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
