//! Mounting and unmounting: `MountedEmu` owns one FUSE session plus the CP and reaper
//! threads, and unmounts without hanging even while clients still hold files open.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd as _;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fuser::{BackgroundSession, Config, MountOption, Session, SessionACL};
use nix::errno::Errno;
use nix::mount::{MntFlags, MsFlags};

use crate::config::{EmuConfig, Topology};
use crate::effects::Effects;
use crate::error::EmuError;
use crate::faults::{Fault, FaultSpec, FaultStats};
use crate::fs::KfdFs;
use crate::state::Emu;
use crate::stats::{self, Stats};
use crate::{cp, ioctl};

/// FUSE event-loop threads. Page faults on the device files' mappings (which the emulator
/// itself takes when it writes client memory) are served by the proxy's reader thread, not by
/// these (`page_io`); two, so that one blocked request does not stall the rest.
const FUSE_THREADS: usize = 2;
/// How long `mount` waits for `<mount>/dev/kfd` to become reachable.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long unmount waits for the FUSE session to end before giving up on it.
const SESSION_GRACE: Duration = Duration::from_secs(2);

/// A mounted emulator. Dropping it unmounts (lazily if files are still open).
pub struct MountedEmu {
    root: PathBuf,
    emu: Arc<Emu>,
    session: Option<BackgroundSession>,
    threads: Vec<JoinHandle<()>>,
    /// This connection's `/sys/fs/fuse/connections/<id>/abort`, opened while mounted: once the
    /// mount is gone its id may name another mount's connection, while this file keeps naming
    /// ours (or none: writing then does nothing).
    abort: Option<std::fs::File>,
    /// Mounted with mount(2) by us (root) rather than by fusermount3.
    own_mount: bool,
    /// The `/dev/fuse` descriptor, while the proxy holds it open (none without the proxy).
    dev: Option<Weak<OwnedFd>>,
    done: bool,
}

impl std::fmt::Debug for MountedEmu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MountedEmu")
            .field("root", &self.root)
            .field("config", &self.emu.config)
            .finish_non_exhaustive()
    }
}

/// Unescapes the octal escapes (`\040`) of `/proc/self/mountinfo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` is a mount point (listed in `/proc/self/mountinfo`).
pub(crate) fn is_mount_point(path: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    info.lines().any(|l| {
        l.split(' ')
            .nth(4)
            .is_some_and(|mp| unescape_mountinfo(mp) == want)
    })
}

/// Detaches `path` if it is a dead FUSE mount (`ENOTCONN`/`ECONNABORTED`).
/// `statfs` is used because it always reaches the server, unlike a `stat` the kernel
/// may answer from its attribute cache. Returns whether something was detached.
pub(crate) fn detach_if_stale(path: &Path) -> Result<bool, EmuError> {
    match nix::sys::statfs::statfs(path) {
        Err(Errno::ENOTCONN | Errno::ECONNABORTED) => {
            lazy_unmount(path)?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// `umount2(MNT_DETACH)`, or `fusermount3 -u -z` when not root.
fn lazy_unmount(path: &Path) -> Result<(), EmuError> {
    match nix::mount::umount2(path, MntFlags::MNT_DETACH) {
        Ok(()) => Ok(()),
        Err(Errno::EPERM) => fusermount_unmount(path),
        Err(e) => Err(EmuError::io(
            format!("detach {}", path.display()),
            std::io::Error::from(e),
        )),
    }
}

fn fusermount_unmount(path: &Path) -> Result<(), EmuError> {
    let out = Command::new("fusermount3")
        .args(["-u", "-z", "--"])
        .arg(path)
        .output()
        .map_err(|e| EmuError::io("run fusermount3", e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(EmuError::io(
            format!("fusermount3 -u -z {}", path.display()),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        ))
    }
}

/// Unmounts a (possibly stale) kfd-emu mount: a normal unmount first, a lazy one if
/// it is busy or dead. This is `kfd-emu unmount DIR`.
pub fn unmount_path(path: &Path) -> Result<(), EmuError> {
    if detach_if_stale(path)? {
        return Ok(());
    }
    match nix::mount::umount2(path, MntFlags::empty()) {
        Ok(()) => Ok(()),
        Err(Errno::EBUSY) => lazy_unmount(path),
        Err(Errno::EINVAL) => Err(EmuError::NotMounted(path.to_path_buf())),
        Err(Errno::EPERM) => fusermount_unmount(path),
        Err(e) => Err(EmuError::io(
            format!("unmount {}", path.display()),
            std::io::Error::from(e),
        )),
    }
}

/// Mounts FUSE at `root` with mount(2) (root only) and returns the `/dev/fuse` fd.
fn mount_as_root(root: &Path) -> Result<OwnedFd, EmuError> {
    let dev = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open("/dev/fuse")
        .map_err(|e| EmuError::io("open /dev/fuse", e))?;
    let data = format!(
        "fd={},rootmode=40000,user_id=0,group_id=0,allow_other",
        dev.as_raw_fd()
    );
    nix::mount::mount(
        Some("kfd-emu"),
        root,
        Some("fuse.kfd-emu"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| EmuError::io(format!("mount FUSE at {}", root.display()), e.into()))?;
    Ok(OwnedFd::from(dev))
}

/// The text of a panic payload.
fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Runs one of the emulator's own threads; if it panics, says so loudly (an error log naming
/// the thread and what stops working) and records it in `Emu::dead_threads`, which
/// `kfd-emu/stats.json` shows and `unmount` reports.
fn guarded(name: &'static str, emu: Arc<Emu>, f: fn(Arc<Emu>)) {
    let e = emu.clone();
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(e))) {
        let text = format!("{name}: {}", panic_text(p.as_ref()));
        tracing::error!(
            thread = name,
            "kfd-emu thread died ({text}): from now on the emulator no longer completes packets \
             (kfd-emu-cp) or reaps exited processes (kfd-emu-reaper); unmount it"
        );
        crate::locks::lock(&emu.dead_threads, "dead threads").push(text);
    }
}

impl MountedEmu {
    /// Mounts an emulator at `mountpoint` (created if missing; a stale FUSE mount
    /// there is detached first). Returns once `<mountpoint>/dev/kfd` can be stat'ed.
    pub fn mount(mountpoint: &Path, config: EmuConfig) -> Result<MountedEmu, EmuError> {
        let topo = Topology::build(&config)?;
        detach_if_stale(mountpoint)?;
        std::fs::create_dir_all(mountpoint)
            .map_err(|e| EmuError::io(format!("create {}", mountpoint.display()), e))?;
        let root = mountpoint
            .canonicalize()
            .map_err(|e| EmuError::io(format!("resolve {}", mountpoint.display()), e))?;
        if is_mount_point(&root) {
            return Err(EmuError::AlreadyMounted(root));
        }
        let emu = Arc::new(Emu::new(config, topo, root.clone()));
        let fs = KfdFs::new(emu.clone());
        let mut cfg = Config::default();
        cfg.n_threads = Some(FUSE_THREADS);
        let own_mount = nix::unistd::geteuid().is_root();
        let mut held = None;
        let session = if own_mount {
            let dev = mount_as_root(&root)?;
            // KFD_EMU_FUSE_PROXY=0 serves /dev/fuse directly (no FUSE_INTERRUPT; for measuring
            // what the proxy costs, docs/performance.md).
            let fd = if std::env::var("KFD_EMU_FUSE_PROXY").as_deref() == Ok("0") {
                dev
            } else {
                let (fd, dev) =
                    crate::fuse_proxy::start(&emu, dev, FUSE_THREADS).inspect_err(|_| {
                        let _ = nix::mount::umount2(&root, MntFlags::MNT_DETACH);
                    })?;
                held = Some(dev);
                fd
            };
            cfg.acl = SessionACL::All;
            Session::from_fd(fs, fd, SessionACL::All, cfg).map_err(|e| {
                let _ = nix::mount::umount2(&root, MntFlags::MNT_DETACH);
                EmuError::io("FUSE handshake", e)
            })?
        } else {
            cfg.mount_options = vec![
                MountOption::FSName("kfd-emu".into()),
                MountOption::Subtype("kfd-emu".into()),
            ];
            Session::new(fs, &root, &cfg).map_err(|e| EmuError::io("mount with fusermount3", e))?
        };
        let session = session.spawn().map_err(|e| {
            if own_mount {
                let _ = nix::mount::umount2(&root, MntFlags::MNT_DETACH);
            }
            EmuError::io("start FUSE session", e)
        })?;
        let mut me = MountedEmu {
            root: root.clone(),
            emu: emu.clone(),
            session: Some(session),
            threads: Vec::new(),
            abort: None,
            own_mount,
            dev: held,
            done: false,
        };
        for (name, f) in [
            ("kfd-emu-cp", cp::cp_thread as fn(Arc<Emu>)),
            (
                "kfd-emu-reaper",
                ioctl::lifecycle::reaper_thread as fn(Arc<Emu>),
            ),
        ] {
            let e = emu.clone();
            let t = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || guarded(name, e, f))
                .map_err(|e| EmuError::io("spawn thread", e))?;
            me.threads.push(t);
        }
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if std::fs::metadata(root.join("dev/kfd")).is_ok() {
                break;
            }
            if Instant::now() > deadline {
                return Err(EmuError::MountNotReady(root));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if let Ok(md) = std::fs::metadata(&root) {
            let dev = md.dev();
            let conn = (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev));
            me.abort = OpenOptions::new()
                .write(true)
                .open(format!("/sys/fs/fuse/connections/{conn}/abort"))
                .ok();
            let _ = emu
                .fuse_dev
                .set(format!("{}:{}", libc::major(dev), libc::minor(dev)));
        }
        tracing::info!(root = %root.display(), preset = %emu.config.preset, "kfd-emu mounted");
        Ok(me)
    }

    /// The mount point (canonical path).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What the emulator was started with.
    pub fn config(&self) -> &EmuConfig {
        &self.emu.config
    }

    /// Snapshot of the HWS model (the same data `kfd-emu/stats.json` serves).
    pub fn stats(&self) -> Stats {
        stats::snapshot(&self.emu)
    }

    /// From now on, `fault.ioctl` fails with `fault.errno` (every call, or one in
    /// `fault.every`) and changes nothing; adds to the failures already injected.
    pub fn inject(&self, fault: Fault) {
        tracing::info!(?fault, "failure injected");
        self.emu.faults.inject(fault);
    }

    /// From now on, the failure `spec` describes (an errno every N calls or with a seeded
    /// probability, or a preempt timeout); adds to the failures already injected. The same as
    /// writing its text form to `kfd-emu/faults`.
    pub fn inject_spec(&self, spec: FaultSpec) {
        tracing::info!(%spec, "failure injected");
        self.emu.faults.inject(spec);
    }

    /// The failures in effect, with the calls each saw and failed (what `kfd-emu/faults` shows).
    pub fn faults(&self) -> Vec<FaultStats> {
        self.emu.faults.list()
    }

    /// A handle that waits until this mount's FUSE session ends, for example because someone
    /// ran `kfd-emu unmount` (or `umount`) on it: `kfd-emu --mount` exits then instead of
    /// serving nothing.
    pub fn session_end(&self) -> SessionEnd {
        SessionEnd(self.emu.clone())
    }

    /// Ends every injected failure.
    pub fn clear_faults(&self) {
        self.emu.faults.clear();
    }

    /// Unmounts now, reporting failures (dropping also unmounts, silently).
    pub fn unmount(mut self) -> Result<(), EmuError> {
        self.shutdown()
    }

    /// Unmounts as [`unmount`](Self::unmount) does, for a process that exits next
    /// (`kfd-emu --mount`): the connection also ends once this process does, whatever its
    /// threads wait for. A request the proxy has read but not answered keeps its caller in an
    /// uninterruptible wait until the connection ends, and the connection ends when its last
    /// `/dev/fuse` descriptor is closed: at exit, unless such a caller is one of this process's
    /// own threads (the kernel faulting a client's device-file page in on its behalf), which
    /// keeps the descriptor table, hence the descriptor, and the process, alive for ever. So the
    /// descriptor's table entry is replaced by `/dev/null` here; the device file is released
    /// when the proxy's read in flight on it returns, at the latest when exit ends that thread.
    pub fn unmount_for_exit(mut self) -> Result<(), EmuError> {
        let result = self.shutdown();
        if let Some(dev) = self.dev.as_ref().and_then(Weak::upgrade)
            && let Ok(null) = std::fs::File::open("/dev/null")
        {
            // SAFETY: `dev` keeps the descriptor open (its number is not reused meanwhile);
            // dup2 only points that number at /dev/null, which its owner closes in the end.
            let _ = unsafe { libc::dup2(null.as_raw_fd(), dev.as_raw_fd()) };
        }
        result
    }

    fn shutdown(&mut self) -> Result<(), EmuError> {
        if self.done {
            return Ok(());
        }
        self.done = true;
        self.emu.shutdown.store(true, Ordering::Release);
        {
            let _g = self.emu.lock();
            self.emu.cp_wake.notify_all();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let died = crate::locks::lock(&self.emu.dead_threads, "dead threads").clone();
        // Blocked DESTROY_QUEUE callers get ENODEV instead of waiting forever.
        let mut effects = Effects::default();
        {
            let mut st = self.emu.lock();
            for pd in st.pending_destroys.drain(..) {
                effects
                    .replies
                    .push((pd.reply, Vec::new(), Err(libc::ENODEV)));
            }
        }
        effects.run(&self.emu);
        let result = if self.own_mount {
            match nix::mount::umount2(&self.root, MntFlags::empty()) {
                Ok(()) | Err(Errno::EINVAL) => Ok(()),
                Err(Errno::EBUSY) => {
                    tracing::info!(root = %self.root.display(), "mount busy, detaching lazily");
                    lazy_unmount(&self.root)
                }
                Err(e) => {
                    let _ = lazy_unmount(&self.root);
                    Err(EmuError::io(
                        format!("unmount {}", self.root.display()),
                        std::io::Error::from(e),
                    ))
                }
            }
        } else {
            fusermount_unmount(&self.root)
        };
        if let Some(session) = self.session.take() {
            self.finish_session(session);
        }
        if !died.is_empty() {
            tracing::error!(?died, "unmounted an emulator whose threads had died");
            return result.and(Err(EmuError::ThreadDied(died.join("; "))));
        }
        result
    }

    /// Waits briefly for the FUSE session to end; aborts the connection through
    /// fusectl if that is available; otherwise leaves the session thread running
    /// (it ends when the last client closes its files).
    fn finish_session(&self, session: BackgroundSession) {
        let wait = |s: &BackgroundSession, d: Duration| {
            let deadline = Instant::now() + d;
            while !s.guard.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            s.guard.is_finished()
        };
        if !wait(&session, SESSION_GRACE) {
            if let Some(mut abort) = self.abort.as_ref() {
                if std::io::Write::write_all(&mut abort, b"1").is_ok() {
                    wait(&session, SESSION_GRACE);
                }
            }
        }
        if session.guard.is_finished() {
            if let Err(e) = session.join() {
                tracing::debug!("FUSE session ended with: {e}");
            }
        } else {
            tracing::info!(
                root = %self.root.display(),
                "clients still hold files of the detached mount; leaving its session running"
            );
        }
    }
}

/// Waits for a mount's FUSE session to end ([`MountedEmu::session_end`]).
pub struct SessionEnd(Arc<Emu>);

impl std::fmt::Debug for SessionEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionEnd")
            .field("root", &self.0.root)
            .finish()
    }
}

impl SessionEnd {
    /// Blocks until the session has ended.
    pub fn wait(&self) {
        let (over, cv) = &self.0.session_over;
        let mut g = crate::locks::lock(over, "session over");
        while !*g {
            g = cv
                .wait(g)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

impl Drop for MountedEmu {
    fn drop(&mut self) {
        if let Err(e) = self.shutdown() {
            tracing::warn!("kfd-emu unmount: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_unescape() {
        assert_eq!(unescape_mountinfo("/tmp/a\\040b"), "/tmp/a b");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo("/x\\"), "/x\\");
        assert!(is_mount_point(Path::new("/")));
    }

    #[test]
    fn a_dying_thread_is_recorded_and_shown() {
        let config = EmuConfig::default();
        let topo = Topology::build(&config).unwrap();
        let emu = Arc::new(Emu::new(
            config,
            topo,
            std::path::PathBuf::from("/nonexistent"),
        ));
        fn dies(_: Arc<Emu>) {
            panic!("injected failure");
        }
        guarded("kfd-emu-cp", emu.clone(), dies);
        assert_eq!(
            crate::stats::snapshot(&emu).dead_threads,
            vec!["kfd-emu-cp: injected failure".to_string()]
        );
        fn lives(_: Arc<Emu>) {}
        guarded("kfd-emu-reaper", emu.clone(), lives);
        assert_eq!(crate::stats::snapshot(&emu).dead_threads.len(), 1);
    }
}

#[cfg(test)]
mod send_sync {
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn mounted_emu_is_send_and_sync() {
        assert_send_sync::<super::MountedEmu>();
        assert_send_sync::<crate::Stats>();
    }
}
