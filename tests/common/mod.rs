//! Shared test harness: a private kfd-emu mount per test (FUSE, so root is needed).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

pub use kfd_emu::{EmuConfig, MountedEmu, Preset, Stats};
use kfdq::kfd::Root;

/// Whether a privileged test may run (root, or fail with the reason; `KFDQ_SKIP_PRIVILEGED=1`
/// skips and says so).
pub fn privileged(test: &str) -> bool {
    kfd_emu::privileged_test(test)
}

/// A mounted emulator in its own temporary directory.
pub struct Emu {
    pub emu: MountedEmu,
    _dir: tempfile::TempDir,
}

impl Emu {
    pub fn root(&self) -> Root {
        Root::new(self.emu.root())
    }

    pub fn path(&self) -> &Path {
        self.emu.root()
    }

    pub fn stats(&self) -> Stats {
        self.emu.stats()
    }

    /// Stats of one queue of `pid`.
    pub fn queue(&self, pid: u32, qid: u32) -> kfd_emu::QueueStats {
        self.stats()
            .queues
            .into_iter()
            .find(|q| q.pid == pid && q.queue_id == qid)
            .unwrap_or_else(|| panic!("emulator has no queue {qid} of pid {pid}"))
    }

    /// Stats of the partition `gpu_id`.
    pub fn partition(&self, gpu_id: u32) -> kfd_emu::PartitionStats {
        self.stats()
            .partitions
            .into_iter()
            .find(|p| p.gpu_id == gpu_id)
            .expect("partition")
    }
}

/// Mounts kfd-emu with `config`; `None` when privileged tests are skipped.
pub fn mount_with(test: &str, config: EmuConfig) -> Option<Emu> {
    if !privileged(test) {
        return None;
    }
    let dir = tempfile::Builder::new()
        .prefix("kfdq-test-")
        .tempdir()
        .expect("tempdir");
    let emu = MountedEmu::mount(dir.path(), config)
        .unwrap_or_else(|e| panic!("mounting kfd-emu for {test}: {e}"));
    Some(Emu { emu, _dir: dir })
}

/// Mounts kfd-emu with `preset` and defaults otherwise.
pub fn mount(test: &str, preset: Preset) -> Option<Emu> {
    mount_with(
        test,
        EmuConfig {
            preset,
            ..EmuConfig::default()
        },
    )
}

/// A `kfdq-demo hold` child: a separate process owning KFD queues.
pub struct Holder {
    pub child: Child,
    stdin: Option<ChildStdin>,
    pub pid: u32,
    pub gpu_id: u32,
    pub queues: Vec<u32>,
}

impl Holder {
    pub fn spawn(root: &Path, args: &[&str]) -> Holder {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kfdq-demo"))
            .arg("--root")
            .arg(root)
            .arg("hold")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kfdq-demo hold");
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

/// Polls `cond` every 2 ms for up to 10 s.
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !cond() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}
