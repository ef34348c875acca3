//! `kfd-emu --mount` exits on SIGTERM whatever became of its mount: after its `/dev/fuse`
//! proxy loop stopped (the connection aborted through fusectl), and with the mount lazily
//! detached while a client still holds its files. The emulator runs as its own process (the
//! test support starts the `kfd-emu` binary), as in production.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kfd_emu::Preset;
use kfd_sys::*;

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
    let conn = fuse_connection(t.root());
    let status = abort_fuse_connection(conn).expect("run unshare");
    assert!(
        status.success(),
        "aborting FUSE connection {conn}: {status}"
    );
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
    let s = Arc::new(Session::new(&t, 0));
    // A VRAM BO mapped through the render node: each ioctl below writes its result into an
    // untouched page of it, so the emulator's own threads take faults that its proxy serves
    // (`page_io`) while SIGTERM arrives.
    const PAGES: usize = 4096;
    let len = PAGES * 4096;
    let ptr = s.map_vram_bo(len);
    let base = ptr as u64;
    let returned = Arc::new(AtomicUsize::new(0));
    // Not a scoped thread: were its calls to hang, the test fails instead of waiting for it.
    let client = {
        let (s, returned) = (s.clone(), returned.clone());
        std::thread::spawn(move || {
            for page in 0..PAGES {
                let mut args = kfd_ioctl_get_process_apertures_new_args {
                    kfd_process_device_apertures_ptr: base + (page * 4096) as u64,
                    num_of_nodes: 1,
                    ..Default::default()
                };
                let r = s.kfd.ioctl(AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut args);
                returned.fetch_add(1, Ordering::Relaxed);
                r?;
            }
            Ok::<i32, i32>(0)
        })
    };
    wait_for("the client's first ioctls", || {
        returned.load(Ordering::Relaxed) > 8
    });
    nix::mount::umount2(t.root(), nix::mount::MntFlags::MNT_DETACH).expect("detach");
    let status = t.emu.stop().unwrap_or_else(|| {
        panic!("kfd-emu did not exit within {WAIT_LIMIT:?} of SIGTERM after a lazy unmount")
    });
    assert!(status.success(), "kfd-emu exited with {status}");
    // The client's calls end (with an error once the emulator is gone) instead of hanging.
    wait_for("the client's ioctls to return", || client.is_finished());
    let _ = client.join();
    // SAFETY: unmaps the mapping made above; its device is gone, nothing is written back.
    unsafe { libc::munmap(ptr, len) };
}
