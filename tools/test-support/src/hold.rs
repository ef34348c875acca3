//! A `kfdq-test-hold` child: a separate process that owns KFD queues, optionally busy with
//! packets, for tests to act on (kfdq ps, the debugger path) or to use as a witness that the
//! emulator's CP ran for a while.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::bins::workspace_bin;
use crate::emu::Emu;
use crate::wait::wait_for;

/// A `kfdq-test-hold` child: a separate process owning KFD queues.
#[derive(Debug)]
pub struct Holder {
    /// The process.
    pub child: Child,
    stdin: Option<ChildStdin>,
    /// Its pid.
    pub pid: u32,
    /// The GPU its queues are on.
    pub gpu_id: u32,
    /// Its queue ids.
    pub queues: Vec<u32>,
}

impl Holder {
    /// Starts `kfdq-test-hold --root <root> <args>` and reads its queues.
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

/// Waits until the emulator's CP has run `packets` packets of `packet_us` µs each for a
/// separate process: proof that the CP ran (and that time passed) for at least that long,
/// without a fixed sleep. Tests that assert that something did *not* happen meanwhile use it
/// as the window.
pub fn cp_witness(emu: &Emu, packets: u32, packet_us: u64) {
    let h = Holder::spawn(
        emu.root(),
        &[
            "--packets",
            &packets.to_string(),
            "--packet-us",
            &packet_us.to_string(),
        ],
    );
    let qid = h.queues[0];
    wait_for("the witness queue to run its packets", || {
        emu.queue(h.pid, qid).packets_done >= u64::from(packets)
    });
    let status = h.finish();
    assert!(status.success(), "kfdq-test-hold failed: {status}");
}
