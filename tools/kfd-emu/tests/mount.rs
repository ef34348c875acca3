//! Mount lifecycle: the binary, stale mounts, and unmounting while clients still hold
//! files or are blocked in DESTROY_QUEUE.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use kfd_emu::{EmuConfig, MountedEmu, Preset};
use kfd_sys::*;

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_kfd-emu");

/// Detaches whatever is left mounted at the path when a test ends (also on panic).
struct Detach(PathBuf);

impl Drop for Detach {
    fn drop(&mut self) {
        let _ = kfd_emu::unmount_path(&self.0);
    }
}

/// Starts the binary and returns it with its first stdout line.
fn serve(dir: &Path) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["--mount", &dir.display().to_string(), "--preset", "mi308x"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn kfd-emu");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// errno of listing a directory (opendir always reaches the FUSE server).
fn errno_of_readdir(p: &Path) -> Option<i32> {
    std::fs::read_dir(p).err().and_then(|e| e.raw_os_error())
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn binary_serves_until_sigterm_and_unmounts() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let _cleanup = Detach(dir.clone());
    let (child, line) = serve(&dir);
    let pid = child.id();
    let served = dir.join("dev/kfd").exists();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait_with_output().unwrap().status;
    assert_eq!(
        line,
        format!("kfd-emu: serving mi308x at {} (pid {pid})\n", dir.display())
    );
    assert!(served, "dev/kfd was not served");
    assert!(status.success(), "{status:?}");
    assert!(!dir.join("dev/kfd").exists(), "unmounted");
}

/// `kfd-emu unmount DIR` is the README's teardown: the server that served DIR must exit
/// with it, not keep running with nothing to serve.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn unmount_ends_the_server_that_served_the_mount() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let _cleanup = Detach(dir.clone());
    let (child, _) = serve(&dir);
    assert!(dir.join("dev/kfd").exists());
    let out = Command::new(BIN).arg("unmount").arg(&dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = child;
    let mut status = None;
    let exited = test_support::wait::wait_until(test_support::wait::WAIT_LIMIT, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("kfd-emu --mount kept running after `kfd-emu unmount` of its mount");
    }
    let status = status.unwrap();
    assert!(status.success(), "the server exits cleanly: {status:?}");
    assert!(!dir.join("dev").exists());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn stale_mounts_are_detached() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    let _cleanup = Detach(dir.clone());
    // A server killed with SIGKILL leaves a dead mount (ENOTCONN).
    let (mut child, _) = serve(&dir);
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(errno_of_readdir(&dir), Some(libc::ENOTCONN));
    let out = Command::new(BIN).arg("unmount").arg(&dir).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.is_dir() && !dir.join("dev").exists());
    let out = Command::new(BIN).arg("unmount").arg(&dir).output().unwrap();
    assert!(!out.status.success(), "not a mount point any more");
    // mount() detaches a stale mount by itself.
    let (mut child, _) = serve(&dir);
    child.kill().unwrap();
    child.wait().unwrap();
    let emu = MountedEmu::mount(&dir, EmuConfig::default()).unwrap();
    assert!(dir.join("dev/kfd").exists());
    // A live mount is refused.
    assert!(matches!(
        MountedEmu::mount(&dir, EmuConfig::default()),
        Err(kfd_emu::EmuError::AlreadyMounted(_))
    ));
    emu.unmount().unwrap();
    assert!(!dir.join("dev").exists());
}

#[test]
fn help_documents_the_presets() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "--mount",
        "--preset",
        "--legacy-kernel",
        "--packet-us",
        "mi308x",
        "ASSUMED",
        "unmount",
    ] {
        assert!(help.contains(word), "--help lacks {word}");
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn unmount_does_not_hang_on_open_files_or_blocked_destroyers() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    s.kfd.runtime_enable().unwrap();
    let (_r, w) = nix::unistd::pipe().unwrap();
    let mut e = kfd_ioctl_dbg_trap_enable_args {
        dbg_fd: std::os::fd::AsRawFd::as_raw_fd(&w) as u32,
        ..Default::default()
    };
    let me = std::process::id();
    s.kfd.dbg_trap(me, KFD_IOC_DBG_TRAP_ENABLE, &mut e).unwrap();
    let (q, _bufs) = s.queue(100, 7);
    let mut snap = [kfd_queue_snapshot_entry::default(); 2];
    let mut a = kfd_ioctl_dbg_trap_queue_snapshot_args {
        exception_mask: kfd_ec_mask(EC_QUEUE_NEW),
        snapshot_buf_ptr: snap.as_mut_ptr() as u64,
        num_queues: 2,
        entry_size: 64,
    };
    s.kfd
        .dbg_trap(me, KFD_IOC_DBG_TRAP_GET_QUEUE_SNAPSHOT, &mut a)
        .unwrap();
    let mut ids = [q.id];
    let mut sq = kfd_ioctl_dbg_trap_suspend_queues_args {
        queue_array_ptr: ids.as_mut_ptr() as u64,
        num_queues: 1,
        ..Default::default()
    };
    assert_eq!(
        s.kfd.dbg_trap(me, KFD_IOC_DBG_TRAP_SUSPEND_QUEUES, &mut sq),
        Ok(1)
    );
    std::thread::scope(|sc| {
        let h = sc.spawn(|| s.kfd.destroy_queue(q.id));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_destroys
            == 1));
        assert!(!h.is_finished());
        let start = Instant::now();
        drop(t);
        assert!(start.elapsed() < WAIT_LIMIT, "unmount hung");
        assert_eq!(
            h.join().unwrap(),
            Err(libc::ENODEV),
            "blocked destroyer released"
        );
    });
    // The emulator's process is gone (test-support runs it as its own process): the client's
    // files of the detached mount fail instead of hanging.
    let mut v = kfd_ioctl_get_version_args::default();
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_GET_VERSION, &mut v),
        Err(libc::ENOTCONN)
    );
    drop(s);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_embedded_emulator_answers_open_files_after_its_unmount() {
    require_root();
    // In this process, as a program embedding `MountedEmu` runs it: safe here because the test
    // maps no file of the mount (a fault on one would need the emulator's serving thread, which
    // shares this process's `mmap_lock`; docs/kfd-emulator.md).
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let _detach = Detach(root.clone());
    let emu = MountedEmu::mount(&root, EmuConfig::default()).unwrap();
    let kfd = Kfd {
        file: open_rw(&root.join("dev/kfd")),
    };
    emu.unmount().unwrap();
    assert!(!root.join("dev").exists(), "detached");
    // Files of the detached mount still answer until closed.
    assert_eq!(kfd.version(), (1, 17));
}
