//! Processes with KFD state and their queues: `ROOT/sys/class/kfd/kfd/proc/<pid>/queues/<qid>/`.
//!
//! The files are world-readable and printed without a trailing newline; no priority or
//! activity is exposed there.

use std::fs;
use std::path::Path;

use serde::Serialize;

use super::error::{Error, Result};
use super::ids::{GpuId, QueueId};
use super::paths::Root;

/// One queue as sysfs shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcQueue {
    /// Queue id.
    pub queue_id: QueueId,
    /// GPU.
    pub gpu_id: GpuId,
    /// Kernel queue type: 0 compute (AQL and PM4), 1 SDMA, 3 SDMA XGMI, 4 SDMA by engine.
    pub queue_type: u32,
    /// Ring bytes.
    pub ring_size: u64,
}

impl ProcQueue {
    /// Human name of the kernel queue type.
    pub fn type_name(&self) -> &'static str {
        match self.queue_type {
            0 => "compute",
            1 => "sdma",
            3 => "sdma-xgmi",
            4 => "sdma-by-eng",
            _ => "unknown",
        }
    }
}

/// A process with a KFD context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KfdProcess {
    /// Process id.
    pub pid: u32,
    /// Its queues, by id.
    pub queues: Vec<ProcQueue>,
}

fn read_num(path: &Path) -> Result<u64> {
    let text = fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    text.trim().parse().map_err(|_| Error::Sysfs {
        path: path.into(),
        what: format!("not a number: {text:?}"),
    })
}

fn numeric_entries(dir: &Path) -> Result<Vec<u32>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if let Some(n) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The queues of `pid` (empty when it has none; an error when the process has no KFD state).
pub fn process(root: &Root, pid: u32) -> Result<KfdProcess> {
    let dir = root.proc_dir().join(pid.to_string());
    let qdir = dir.join("queues");
    let mut queues = Vec::new();
    let ids = if qdir.exists() {
        numeric_entries(&qdir)?
    } else if dir.exists() {
        Vec::new()
    } else {
        return Err(Error::io(
            &dir,
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
    };
    for qid in ids {
        let q = qdir.join(qid.to_string());
        // A queue may vanish between listing and reading; skip it then.
        let (Ok(size), Ok(ty), Ok(gpu)) = (
            read_num(&q.join("size")),
            read_num(&q.join("type")),
            read_num(&q.join("gpuid")),
        ) else {
            continue;
        };
        queues.push(ProcQueue {
            queue_id: QueueId(qid),
            gpu_id: GpuId(gpu as u32),
            queue_type: ty as u32,
            ring_size: size,
        });
    }
    Ok(KfdProcess { pid, queues })
}

/// Every process with KFD state, by pid. An error when there is no amdkfd under `root` at all.
pub fn processes(root: &Root) -> Result<Vec<KfdProcess>> {
    let dir = root.proc_dir();
    if !dir.exists() {
        let topo = root.topology_dir();
        if !topo.exists() {
            return Err(Error::io(
                topo,
                std::io::Error::from(std::io::ErrorKind::NotFound),
            ));
        }
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for pid in numeric_entries(&dir)? {
        match process(root, pid) {
            Ok(p) => out.push(p),
            // Exited between listing and reading.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}
