//! `kfd-emu run`: runs a program in a private mount namespace in which a mounted emulator sits
//! at the paths the real driver uses, so unmodified ROCm finds it: `/dev/kfd`,
//! `/dev/dri/renderD*`, `/sys/devices/virtual/kfd/kfd`, `/sys/class/kfd/kfd` and
//! `/sys/module/amdgpu`. Optionally the program runs chrooted in another root filesystem (a
//! Debian sid root with the real ROCm user space). Nothing outside the namespace changes: the
//! mounts are private and vanish with the program.
//!
//! Layout inside the namespace (`R` is the root, `/` without `--root`):
//! * `R/dev`: a fresh tmpfs with the host's `null`, `zero`, `full`, `random`, `urandom` and
//!   `tty` bound in, a tmpfs `shm`, and the emulator's `kfd` and `dri/`;
//! * `R/proc`: the host's procfs (same pid namespace); `R/proc/modules` lists the host's modules
//!   and the emulator's amdgpu (older ROCm checks that it is loaded) when the host kernel has
//!   module support: a kernel without it has no `/proc/modules`, and none can be added to
//!   procfs (an amdgpu built into such a kernel is not listed either);
//! * `R/sys`: the host's sysfs, with fresh tmpfs on `devices/virtual` and `module` that hold
//!   only the emulator's `kfd/kfd` and `amdgpu`; `R/sys/devices` and `R/sys/class` are tmpfs
//!   with the host's entries bound back beside the emulator's (its GPUs' PCI functions; the
//!   `kfd` and `drm` classes: `crate::sysfs_drm`, what ROCm SMI reads), which replace a host
//!   entry of the same name (ROCr reads the CPU and NUMA topology from the host's
//!   `devices/system`);
//! * `R/tmp` and `R/run`: fresh tmpfs (what a program writes there, e.g. kfdq's registry in
//!   `/run/kfdq`, stays out of the root filesystem, which may be shared by several runs);
//! * each `--bind SRC:DST`: host `SRC` at `R/DST`.

use std::convert::Infallible;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

use crate::error::EmuError;

/// What to run and where.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Mount point of a running emulator.
    pub emu: PathBuf,
    /// Root filesystem to chroot into (`None`: the host's).
    pub root: Option<PathBuf>,
    /// (host path, path inside the root) pairs to bind-mount.
    pub binds: Vec<(PathBuf, PathBuf)>,
    /// Working directory inside the root.
    pub cwd: PathBuf,
}

/// Host device nodes made visible in the sandbox's `/dev`.
const HOST_DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

fn io(context: impl Into<String>, e: impl Into<std::io::Error>) -> EmuError {
    EmuError::io(context, e.into())
}

fn bind(src: &Path, dst: &Path, recursive: bool) -> Result<(), EmuError> {
    let mut flags = MsFlags::MS_BIND;
    if recursive {
        flags |= MsFlags::MS_REC;
    }
    mount(Some(src), dst, None::<&str>, flags, None::<&str>)
        .map_err(|e| io(format!("bind {} on {}", src.display(), dst.display()), e))
}

fn tmpfs(dst: &Path) -> Result<(), EmuError> {
    mount(
        Some("tmpfs"),
        dst,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some("mode=0755"),
    )
    .map_err(|e| io(format!("mount tmpfs on {}", dst.display()), e))
}

fn mkdir(p: &Path) -> Result<(), EmuError> {
    std::fs::create_dir_all(p).map_err(|e| io(format!("create {}", p.display()), e))
}

fn touch(p: &Path) -> Result<(), EmuError> {
    std::fs::write(p, b"").map_err(|e| io(format!("create {}", p.display()), e))
}

/// A tmpfs on `at` that holds only `src` bound at `at/name` (`name` may have several parts).
fn only(at: &Path, name: &str, src: &Path) -> Result<(), EmuError> {
    if !at.is_dir() {
        mkdir(at)?;
    }
    tmpfs(at)?;
    let dst = at.join(name);
    mkdir(&dst)?;
    bind(src, &dst, false)
}

/// Names of the directories (and links to them) in `dir`.
fn entries(dir: &Path) -> Result<Vec<String>, EmuError> {
    let rd = std::fs::read_dir(dir).map_err(|e| io(format!("list {}", dir.display()), e))?;
    Ok(rd
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect())
}

/// Rebuilds the sysfs directory `host` (under `R/sys`) as a tmpfs, staged in the sandbox's
/// `R/dev` and moved into place: the emulator's entries of `ours` bound in, the host's other
/// entries bound back except those named in `skip` (then filled by the caller).
fn rebuild(host: &Path, ours: &Path, skip: &[&str], dev: &Path) -> Result<(), EmuError> {
    let emulated = entries(ours)?;
    let stage = dev.join(".kfd-emu-stage");
    mkdir(&stage)?;
    tmpfs(&stage)?;
    for name in entries(host)? {
        if !skip.contains(&name.as_str()) && !emulated.contains(&name) {
            mkdir(&stage.join(&name))?;
            bind(&host.join(&name), &stage.join(&name), true)?;
        }
    }
    for name in &emulated {
        mkdir(&stage.join(name))?;
        bind(&ours.join(name), &stage.join(name), false)?;
    }
    mount(
        Some(&stage),
        host,
        None::<&str>,
        MsFlags::MS_MOVE,
        None::<&str>,
    )
    .map_err(|e| io(format!("move {} to {}", stage.display(), host.display()), e))?;
    std::fs::remove_dir(&stage).map_err(|e| io(format!("remove {}", stage.display()), e))
}

/// Shows the emulator's amdgpu module in `R/proc/modules` after the host's modules: the
/// combined text is written to a file in the sandbox's fresh `R/dev` tmpfs, bound over
/// `R/proc/modules`, and unlinked (the mount keeps it). Nothing is done when the host kernel has
/// no `/proc/modules`.
fn add_amdgpu_module(emu: &Path, root: &Path) -> Result<(), EmuError> {
    let target = root.join("proc/modules");
    let Ok(host) = std::fs::read_to_string(&target) else {
        tracing::debug!(
            "the host kernel has no /proc/modules (no module support): not adding amdgpu"
        );
        return Ok(());
    };
    let emulated = std::fs::read_to_string(emu.join("proc/modules"))
        .map_err(|e| io(format!("read {}", emu.join("proc/modules").display()), e))?;
    let mut text: String = host
        .lines()
        .filter(|l| l.split(' ').next() != Some("amdgpu"))
        .map(|l| format!("{l}\n"))
        .collect();
    text.push_str(&emulated);
    let file = root.join("dev/.kfd-emu-modules");
    std::fs::write(&file, text).map_err(|e| io(format!("write {}", file.display()), e))?;
    bind(&file, &target, false)?;
    std::fs::remove_file(&file).map_err(|e| io(format!("remove {}", file.display()), e))
}

/// Checks what can be checked before anything is mounted, with the fix in the message.
fn check(s: &Sandbox) -> Result<PathBuf, EmuError> {
    if !nix::unistd::geteuid().is_root() {
        return Err(EmuError::Config(
            "kfd-emu run needs root (it creates a mount namespace and bind mounts); run it with sudo".into(),
        ));
    }
    if !s.emu.join("dev/kfd").exists() {
        return Err(EmuError::Config(format!(
            "no emulator mounted at {} (no dev/kfd there); start one with `kfd-emu --mount {}`",
            s.emu.display(),
            s.emu.display()
        )));
    }
    let root = s.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    for d in ["dev", "proc", "sys", "tmp"] {
        if !root.join(d).is_dir() {
            return Err(EmuError::Config(format!(
                "{} has no {d}/ directory: --root must be a root filesystem (e.g. one built by scripts/sid-root.sh)",
                root.display()
            )));
        }
    }
    for (src, _) in &s.binds {
        if !src.exists() {
            return Err(EmuError::Config(format!(
                "--bind source {} does not exist",
                src.display()
            )));
        }
    }
    Ok(root)
}

/// Sets up the namespace and replaces this process with `argv` (returns only on failure).
pub fn run(s: &Sandbox, argv: &[String]) -> Result<Infallible, EmuError> {
    let Some((prog, args)) = argv.split_first() else {
        return Err(EmuError::Config(
            "no command given: kfd-emu run [OPTIONS] -- COMMAND [ARGS]".into(),
        ));
    };
    let root = check(s)?;
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| io("unshare the mount namespace", e))?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| io("make / private", e))?;
    let emu = &s.emu;
    // /dev
    let dev = root.join("dev");
    tmpfs(&dev)?;
    for d in HOST_DEVICES {
        let host = Path::new("/dev").join(d);
        if host.exists() {
            touch(&dev.join(d))?;
            bind(&host, &dev.join(d), false)?;
        }
    }
    mkdir(&dev.join("shm"))?;
    tmpfs(&dev.join("shm"))?;
    touch(&dev.join("kfd"))?;
    bind(&emu.join("dev/kfd"), &dev.join("kfd"), false)?;
    mkdir(&dev.join("dri"))?;
    bind(&emu.join("dev/dri"), &dev.join("dri"), false)?;
    // /proc and /sys
    bind(Path::new("/proc"), &root.join("proc"), true)?;
    add_amdgpu_module(emu, &root)?;
    let sys = root.join("sys");
    bind(Path::new("/sys"), &sys, true)?;
    rebuild(
        &sys.join("devices"),
        &emu.join("sys/devices"),
        &["virtual"],
        &dev,
    )?;
    only(
        &sys.join("devices/virtual"),
        "kfd/kfd",
        &emu.join("sys/class/kfd/kfd"),
    )?;
    rebuild(&sys.join("class"), &emu.join("sys/class"), &[], &dev)?;
    only(
        &sys.join("module"),
        "amdgpu",
        &emu.join("sys/module/amdgpu"),
    )?;
    tmpfs(&root.join("tmp"))?;
    if root.join("run").is_dir() {
        tmpfs(&root.join("run"))?;
    }
    for (src, dst) in &s.binds {
        let at = root.join(dst.strip_prefix("/").unwrap_or(dst));
        if src.is_dir() {
            mkdir(&at)?;
        } else {
            if let Some(parent) = at.parent() {
                mkdir(parent)?;
            }
            touch(&at)?;
        }
        bind(src, &at, true)?;
    }
    if root != Path::new("/") {
        nix::unistd::chroot(&root).map_err(|e| io(format!("chroot {}", root.display()), e))?;
    }
    nix::unistd::chdir(&s.cwd).map_err(|e| io(format!("chdir {}", s.cwd.display()), e))?;
    let err = std::process::Command::new(prog).args(args).exec();
    Err(EmuError::Config(format!("could not run {prog}: {err}")))
}
