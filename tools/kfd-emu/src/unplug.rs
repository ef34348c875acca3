//! `kfd-emu/unplug` in the mount: a GPU partition leaves the KFD topology at run time and
//! comes back, as when a device is hot-removed or repartitioned. What goes is its
//! `sys/class/kfd/kfd/topology/nodes/<N>` directory (absent from the directory listing and
//! from lookups), which is what kfdq's and ROCr's discovery read; the emulated device behind
//! it (its queues, its render node) stays, so processes that hold it are not disturbed.
//!
//! * Reading gives the unplugged gpu_ids as JSON (`{"unplugged": [..]}`).
//! * Writing takes lines `remove <gpu_id>`, `restore <gpu_id>` or `clear` (restore all); a
//!   write with a bad line fails with `EINVAL` and changes nothing.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::config::Topology;

/// The gpu_ids unplugged now.
#[derive(Debug, Default)]
pub(crate) struct Unplugged(Mutex<BTreeSet<u32>>);

impl Unplugged {
    /// Whether the node with `gpu_id` is unplugged.
    pub(crate) fn contains(&self, gpu_id: u32) -> bool {
        crate::locks::lock(&self.0, "unplugged").contains(&gpu_id)
    }
}

/// The file's content now.
pub(crate) fn render(unplugged: &Unplugged) -> Vec<u8> {
    let ids: Vec<u32> = crate::locks::lock(&unplugged.0, "unplugged")
        .iter()
        .copied()
        .collect();
    let mut out = serde_json::to_vec(&serde_json::json!({ "unplugged": ids })).unwrap_or_default();
    out.push(b'\n');
    out
}

enum Line {
    Remove(u32),
    Restore(u32),
    Clear,
}

/// Applies a write: every line or none.
pub(crate) fn write(unplugged: &Unplugged, topo: &Topology, data: &[u8]) -> Result<(), String> {
    let text =
        std::str::from_utf8(data).map_err(|_| "kfd-emu/unplug: not UTF-8 text".to_string())?;
    let gpu = |s: &str| -> Result<u32, String> {
        s.parse::<u32>()
            .ok()
            .filter(|g| topo.gpu_index(*g).is_some())
            .ok_or_else(|| format!("kfd-emu/unplug: {s:?} is not a gpu_id of this emulator (see kfd-emu/config.json)"))
    };
    let lines = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            ["remove", g] => gpu(g).map(Line::Remove),
            ["restore", g] => gpu(g).map(Line::Restore),
            ["clear"] => Ok(Line::Clear),
            _ => Err(format!(
                "kfd-emu/unplug: {l:?}: write `remove <gpu_id>`, `restore <gpu_id>` or `clear`"
            )),
        })
        .collect::<Result<Vec<_>, _>>()
        .inspect_err(|e| tracing::warn!("{e}"))?;
    let mut set = crate::locks::lock(&unplugged.0, "unplugged");
    for l in lines {
        match l {
            Line::Remove(g) => {
                tracing::info!(gpu_id = g, "partition unplugged from the topology");
                set.insert(g);
            }
            Line::Restore(g) => {
                tracing::info!(gpu_id = g, "partition back in the topology");
                set.remove(&g);
            }
            Line::Clear => set.clear(),
        }
    }
    Ok(())
}
