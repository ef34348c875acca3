//! Where kfdq finds the device nodes and sysfs: everything lives under a root prefix.
//!
//! `/` on a real node; the mount point of `kfd-emu` in tests and demos. Set with `--root` or
//! `KFDQ_ROOT`.

use std::path::{Path, PathBuf};

/// Environment variable naming the root prefix.
pub const ROOT_ENV: &str = "KFDQ_ROOT";

/// A root prefix under which `dev/kfd`, `dev/dri/renderD*` and `sys/class/kfd` are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root(PathBuf);

impl Root {
    /// A root at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Root(path.into())
    }

    /// `$KFDQ_ROOT`, or `/` when unset or empty.
    pub fn from_env() -> Self {
        match std::env::var_os(ROOT_ENV) {
            Some(p) if !p.is_empty() => Root::new(p),
            _ => Root::new("/"),
        }
    }

    /// The prefix itself.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `ROOT/dev/kfd`.
    pub fn kfd_device(&self) -> PathBuf {
        self.0.join("dev/kfd")
    }

    /// `ROOT/dev/dri/renderD<minor>`.
    pub fn render_node(&self, minor: u32) -> PathBuf {
        self.0.join(format!("dev/dri/renderD{minor}"))
    }

    /// `ROOT/sys/class/kfd/kfd/topology`.
    pub fn topology_dir(&self) -> PathBuf {
        self.0.join("sys/class/kfd/kfd/topology")
    }

    /// `ROOT/sys/class/kfd/kfd/proc`.
    pub fn proc_dir(&self) -> PathBuf {
        self.0.join("sys/class/kfd/kfd/proc")
    }
}

impl Default for Root {
    fn default() -> Self {
        Root::new("/")
    }
}
