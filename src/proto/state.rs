//! Where shims publish their registries for `kfdq ps`: `shim-<pid>.json` in a state directory.

use std::path::PathBuf;

use crate::ids::Pid;

/// Environment variable overriding the state directory.
pub const STATE_DIR_ENV: &str = "KFDQ_STATE_DIR";

/// File name of `pid`'s registry.
pub fn registry_file_name(pid: Pid) -> String {
    format!("shim-{pid}.json")
}

/// `$KFDQ_STATE_DIR`, when set and not empty.
pub fn state_dir_override() -> Option<PathBuf> {
    std::env::var_os(STATE_DIR_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// The default directories, in order of preference: `/run/kfdq`, `/tmp/kfdq-<uid>`.
pub fn default_state_dirs() -> [PathBuf; 2] {
    [
        PathBuf::from("/run/kfdq"),
        PathBuf::from(format!("/tmp/kfdq-{}", nix::unistd::getuid())),
    ]
}

/// Directories a reader searches, in order: `$KFDQ_STATE_DIR`, `/run/kfdq`, `/tmp/kfdq-<uid>`.
pub fn state_dirs() -> Vec<PathBuf> {
    state_dir_override()
        .into_iter()
        .chain(default_state_dirs())
        .collect()
}

/// Reads the registry `pid` published, if any (the first one found in [`state_dirs`]).
pub fn read_registry(pid: Pid) -> Option<super::Registry> {
    state_dirs().into_iter().find_map(|d| {
        let text = std::fs::read_to_string(d.join(registry_file_name(pid))).ok()?;
        serde_json::from_str(&text).ok()
    })
}
