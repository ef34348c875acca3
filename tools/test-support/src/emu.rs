//! A private kfd-emu mount per test, in its own temporary directory and served by its own
//! `kfd-emu` process ([`crate::emu_process`]: never inside the test process, whose threads are
//! the emulator's clients), and what the emulator says about it (its `stats.json`).

use std::path::{Path, PathBuf};

pub use kfd_emu_api::{
    Arbitration, EmuConfig, FaultsFile, PartitionStats, Preset, QueueStats, Stats,
};

use crate::emu_process::EmuProcess;
use crate::privileged::require_root;
use crate::wait::WAIT_LIMIT;

/// A mounted emulator; unmounted, and its directory removed, when dropped.
#[derive(Debug)]
pub struct Emu {
    // Field order: unmount before the directory is removed.
    /// The emulator's process and its mount.
    pub emu: EmuProcess,
    _dir: tempfile::TempDir,
}

/// Mounts kfd-emu with `config` for the running test (which must be privileged: see
/// [`require_root`]).
pub fn mount(config: EmuConfig) -> Emu {
    mount_with_env(config, &[])
}

/// Mounts kfd-emu with `config` and `env` added to the emulator's environment.
pub fn mount_with_env(config: EmuConfig, env: &[(&str, &str)]) -> Emu {
    require_root();
    let dir = tempfile::Builder::new()
        .prefix("kfdq-test-")
        .tempdir()
        .expect("a temporary directory for the mount");
    let emu = EmuProcess::start_with_env(dir.path(), config, env);
    Emu { emu, _dir: dir }
}

/// Mounts kfd-emu with `preset` and defaults otherwise.
pub fn mount_preset(preset: Preset) -> Emu {
    mount(EmuConfig {
        preset,
        ..EmuConfig::default()
    })
}

/// Mounts kfd-emu (MI308X) with its partition keeping `slots` queues resident
/// (`num_cp_queues`), so that a few processes can oversubscribe it. The topology file is read
/// at mount time only.
pub fn mount_with_slots(slots: u32) -> Emu {
    require_root();
    let topo = tempfile::Builder::new()
        .prefix("kfdq-topology-")
        .suffix(".toml")
        .tempfile()
        .expect("a temporary topology file");
    std::fs::write(
        topo.path(),
        format!("preset = \"mi308x\"\n[[node]]\n[node.properties]\nnum_cp_queues = {slots}\n"),
    )
    .expect("write the topology file");
    mount(EmuConfig {
        preset: Preset::Mi308x,
        topology_file: Some(topo.path().to_path_buf()),
        ..EmuConfig::default()
    })
}

impl Emu {
    /// The mount point: `dev/kfd`, `sys/...` below it.
    pub fn root(&self) -> &Path {
        self.emu.root()
    }

    /// `rel` below the mount point.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// A file below the mount point, as text.
    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_else(|e| panic!("read {rel}: {e}"))
    }

    /// The emulator's statistics now.
    pub fn stats(&self) -> Stats {
        self.emu.stats()
    }

    /// The emulator's view of queue `qid` of `pid`.
    pub fn queue(&self, pid: u32, qid: u32) -> QueueStats {
        self.stats()
            .queues
            .into_iter()
            .find(|q| q.pid == pid && q.queue_id == qid)
            .unwrap_or_else(|| panic!("the emulator has no queue {qid} of pid {pid}"))
    }

    /// Every queue of `pid`.
    pub fn queues_of(&self, pid: u32) -> Vec<QueueStats> {
        queues_of(&self.stats(), pid)
    }

    /// The partition `gpu_id`.
    pub fn partition(&self, gpu_id: u32) -> PartitionStats {
        self.stats()
            .partitions
            .into_iter()
            .find(|p| p.gpu_id == gpu_id)
            .unwrap_or_else(|| panic!("the emulator has no partition with gpu_id {gpu_id}"))
    }

    /// gpu_ids of the emulated partitions, in topology order.
    pub fn gpu_ids(&self) -> Vec<u32> {
        self.stats().partitions.iter().map(|p| p.gpu_id).collect()
    }

    /// Polls the statistics until `f` holds and returns them; fails the test with `what` and
    /// the last statistics after [`WAIT_LIMIT`].
    pub fn wait_stats(&self, what: &str, f: impl FnMut(&Stats) -> bool) -> Stats {
        crate::wait::wait_state(what, WAIT_LIMIT, || self.stats(), f)
    }
}

/// The queues of `pid` in `stats`.
pub fn queues_of(stats: &Stats, pid: u32) -> Vec<QueueStats> {
    stats
        .queues
        .iter()
        .filter(|q| q.pid == pid)
        .cloned()
        .collect()
}
