//! The emulator's error type (mounting, configuration, unmounting).

use std::io;
use std::path::PathBuf;

/// Why the emulator could not be started or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmuError {
    /// Invalid configuration or topology file.
    #[error("kfd-emu configuration: {0}")]
    Config(String),
    /// A system call or file operation failed.
    #[error("kfd-emu: {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The mount point is already a live mount.
    #[error("kfd-emu: {0} is already a mount point (unmount it first: kfd-emu unmount {0})")]
    AlreadyMounted(PathBuf),
    /// The mount did not become usable in time.
    #[error("kfd-emu: mount at {0} did not become usable within 10 s")]
    MountNotReady(PathBuf),
    /// `unmount` on a directory that is not a mount point.
    #[error("kfd-emu: {0} is not a mount point")]
    NotMounted(PathBuf),
    /// One of the emulator's threads panicked while it was mounted (its packets stopped
    /// completing, or exited processes stopped being reaped); the logs have the panic.
    #[error("kfd-emu: a thread of the emulator died while it was mounted: {0}")]
    ThreadDied(String),
}

impl EmuError {
    pub(crate) fn io(context: impl Into<String>, source: io::Error) -> EmuError {
        EmuError::Io {
            context: context.into(),
            source,
        }
    }
}
