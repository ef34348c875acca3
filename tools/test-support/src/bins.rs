//! The workspace's binaries and libraries that cargo built for this test run.
//!
//! An integration test runs from `target/<profile>/deps/`; cargo puts the workspace's binaries
//! one level up (`cargo test --workspace` builds every package's binaries) and the shim's
//! cdylib in `deps/` as well.

use std::path::{Path, PathBuf};

/// `target/<profile>/deps`, where the running test binary lives.
pub fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .expect("the test binary lies in target/<profile>/deps")
        .to_path_buf()
}

/// The workspace binary `name` (`kfdq`, `kfdqd`, `kfd-emu`, `kfdq-test-hold`, ...).
pub fn workspace_bin(name: &str) -> PathBuf {
    let deps = deps_dir();
    let dir = deps.parent().unwrap_or(Path::new("."));
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "{} not found: `cargo test --workspace` builds it (or `cargo build --workspace --bins`)",
        p.display()
    );
    p
}

/// The `libkfdq_shim.so` of this build (`target/<profile>/deps/`, rebuilt before the
/// integration tests run).
pub fn shim_path() -> PathBuf {
    let p = deps_dir().join("libkfdq_shim.so");
    assert!(
        p.is_file(),
        "{} not found: build it with `cargo build -p kfdq-shim`",
        p.display()
    );
    p
}

/// Copies the program `src` to `dst` for a test to run it from there, through `cp` in a child
/// process: a copy written by this process holds a writable descriptor of `dst` for a moment,
/// and a test thread that forks meanwhile (any `Command::spawn` of another test) keeps it open
/// in its child until that child's exec, so running `dst` then fails with ETXTBSY ("Text file
/// busy"). The child's descriptor is gone once `cp` has exited.
pub fn copy_program(src: &Path, dst: &Path) {
    let st = std::process::Command::new("cp")
        .arg("--")
        .arg(src)
        .arg(dst)
        .status()
        .expect("run cp");
    assert!(st.success(), "cp {} {}: {st}", src.display(), dst.display());
}
