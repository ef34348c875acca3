//! The root crate's test harness: what tools/test-support shares (the privileged-test rule, a
//! private kfd-emu mount per test, waiting on conditions), plus a `kfdq-test-hold` child, a
//! separate process owning KFD queues.
#![allow(dead_code, unused_imports)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

pub use test_support::bins::workspace_bin;
pub use test_support::emu::{Emu, EmuConfig, MountedEmu, Preset, Stats, mount, mount_preset};
pub use test_support::wait_for;

use kfdq::kfd::Root;

/// The emulator as kfdq's safe layer sees it.
pub trait KfdRoot {
    /// The mount point as a [`Root`].
    fn kfd_root(&self) -> Root;
}

impl KfdRoot for Emu {
    fn kfd_root(&self) -> Root {
        Root::new(self.root())
    }
}

/// A `kfdq-test-hold` child: a separate process owning KFD queues.
pub struct Holder {
    pub child: Child,
    stdin: Option<ChildStdin>,
    pub pid: u32,
    pub gpu_id: u32,
    pub queues: Vec<u32>,
}

impl Holder {
    pub fn spawn(root: &Path, args: &[&str]) -> Holder {
        let mut child = Command::new(workspace_bin("kfdq-test-hold"))
            .arg("--root")
            .arg(root)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kfdq-test-hold");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("read holder line");
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("holder printed {line:?}: {e}"));
        Holder {
            stdin: child.stdin.take(),
            pid: v["pid"].as_u64().expect("pid") as u32,
            gpu_id: v["gpu_id"].as_u64().expect("gpu_id") as u32,
            queues: v["queues"]
                .as_array()
                .expect("queues")
                .iter()
                .map(|q| q.as_u64().expect("id") as u32)
                .collect(),
            child,
        }
    }

    /// Asks the holder to exit and waits for it.
    pub fn finish(mut self) -> std::process::ExitStatus {
        if let Some(mut s) = self.stdin.take() {
            let _ = writeln!(s, "exit");
        }
        self.child.wait().expect("wait holder")
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
