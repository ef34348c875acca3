//! `kfd-emu --mount` exits on SIGTERM whatever became of its mount: after its `/dev/fuse`
//! proxy loop stopped (the connection aborted through fusectl), and with the mount lazily
//! detached while a client still holds its files. The emulator runs as its own process (the
//! test support starts the `kfd-emu` binary), as in production.

mod common;

use std::os::unix::fs::MetadataExt as _;

use kfd_emu::Preset;

use common::*;
use test_support::wait_for;

/// The names of the threads of process `pid` (`/proc/PID/task/*/comm`; no `mmap_lock` taken).
fn threads(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

/// Aborts the FUSE connection of the mount at `root` through fusectl, mounted for that in a
/// private mount namespace (the host's stays as it was: a mount test depends on it).
fn abort_connection(root: &std::path::Path) {
    let dev = std::fs::metadata(root).expect("stat the mount").dev();
    let conn = (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev));
    let status = std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t fusectl none /sys/fs/fuse/connections && \
             echo 1 > /sys/fs/fuse/connections/{conn}/abort"
        ))
        .status()
        .expect("run unshare");
    assert!(
        status.success(),
        "aborting FUSE connection {conn}: {status}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sigterm_ends_an_emulator_whose_proxy_loop_stopped() {
    require_root();
    let mut t = mount_preset(Preset::Mi210);
    let pid = t.emu.pid();
    // A client holds dev/kfd open across the abort.
    let kfd = t.open_kfd();
    assert!(
        threads(pid).iter().any(|n| n == "kfd-emu-fuse-in"),
        "{:?}",
        threads(pid)
    );
    abort_connection(t.root());
    // The proxy's reader sees the connection end (ENODEV) and stops.
    wait_for("the proxy loop (kfd-emu-fuse-in) to stop", || {
        !threads(pid).iter().any(|n| n == "kfd-emu-fuse-in")
    });
    let status = t.emu.stop();
    assert!(
        status.is_some(),
        "kfd-emu did not exit within {WAIT_LIMIT:?} of SIGTERM after its proxy loop stopped"
    );
    drop(kfd);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sigterm_ends_an_emulator_whose_busy_mount_was_detached() {
    require_root();
    let mut t = mount_preset(Preset::Mi210);
    let kfd = t.open_kfd();
    kfd.version();
    nix::mount::umount2(t.root(), nix::mount::MntFlags::MNT_DETACH).expect("detach the mount");
    let status = t.emu.stop();
    let status = status.unwrap_or_else(|| {
        panic!("kfd-emu did not exit within {WAIT_LIMIT:?} of SIGTERM after a lazy unmount")
    });
    assert!(status.success(), "kfd-emu exited with {status}");
    // The client's open file now fails instead of hanging.
    let mut v = kfd_sys::kfd_ioctl_get_version_args::default();
    assert!(kfd.ioctl(kfd_sys::AMDKFD_IOC_GET_VERSION, &mut v).is_err());
}
