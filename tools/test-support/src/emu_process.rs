//! A kfd-emu mount served by its own process: the `kfd-emu` binary, started the way production
//! runs it (`kfd-emu --mount DIR`), with the test's configuration (`--config FILE`).
//!
//! Why not the emulator inside the test process: the test is the emulator's client, and a
//! client thread that takes a fault on a render-node or `/dev/kfd` page, or unmaps a dirty
//! mapping of one (`fuse_vma_close` writes it back), holds the process's `mmap_lock` while it
//! waits for a FUSE_READ or FUSE_WRITE. The emulator's thread that serves those
//! (`kfd-emu-fuse-in`) takes the same `mmap_lock` whenever it faults on its own memory (its read
//! buffer, a heap that grows); in one process that is a cycle, and the mount hung (kernel
//! stacks in docs/kfd-emulator.md, "The emulator's own page faults"). In a process of its own,
//! the serving thread only ever takes the emulator's `mmap_lock`, whose holders (the emulator's
//! threads) never wait for a FUSE request: no cycle, whatever the test does.
//!
//! The statistics and injected failures go through the mount's own files (`kfd-emu/stats.json`,
//! `kfd-emu/faults`), as another process sees them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use kfd_emu_api::{EmuConfig, FaultSpec, FaultStats, FaultsFile, Stats};

use crate::wait::WAIT_LIMIT;

/// A running `kfd-emu` process and its mount; stopped (SIGTERM, which unmounts) when dropped.
#[derive(Debug)]
pub struct EmuProcess {
    child: Child,
    /// The emulator's stdin (`--exit-with-stdin`): were the test process to die without
    /// dropping this value, the pipe closes and the emulator exits all the same.
    _stdin: ChildStdin,
    root: PathBuf,
    config: EmuConfig,
    log: PathBuf,
}

/// The `kfd-emu` binary of this build: the one cargo built next to the running test, checked
/// to be newer than every source file of kfd-emu and of kfd-emu-api, whose configuration it
/// reads (a binary left from an earlier build would run old code: `cargo test -p` of another
/// package does not rebuild it).
pub fn kfd_emu_bin() -> PathBuf {
    let bin = crate::bins::workspace_bin("kfd-emu");
    let built = std::fs::metadata(&bin).and_then(|m| m.modified());
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let newest = ["kfd-emu", "kfd-emu-api"]
        .iter()
        .filter_map(|c| newest_source(&tools.join(c)))
        .max_by_key(|(t, _)| *t);
    if let (Ok(built), Some((newest, path))) = (built, newest) {
        assert!(
            built >= newest,
            "{} is older than {}: build it again (`cargo build -p kfd-emu --bin kfd-emu`, or \
             `cargo test --workspace`)",
            bin.display(),
            path.display()
        );
    }
    bin
}

/// The most recently modified `.rs` or `Cargo.toml` file below `dir` (`src/`, `build.rs`), and
/// when.
fn newest_source(dir: &Path) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            let Ok(md) = e.metadata() else { continue };
            let name = e.file_name();
            let name = name.to_string_lossy();
            if md.is_dir() {
                // The emulator's own tests and benches are not in the binary.
                if name != "tests" && name != "bench" {
                    todo.push(p);
                }
            } else if (name.ends_with(".rs") || name == "Cargo.toml")
                && let Ok(t) = md.modified()
                && newest.as_ref().is_none_or(|(n, _)| t > *n)
            {
                newest = Some((t, p));
            }
        }
    }
    newest
}

impl EmuProcess {
    /// Starts `kfd-emu` with `config`, mounted at `dir/root`; its configuration file and log
    /// lie in `dir`. Returns once the mount serves `dev/kfd`; fails the test with the
    /// emulator's log when it does not start within [`WAIT_LIMIT`].
    pub fn start(dir: &Path, config: EmuConfig) -> EmuProcess {
        Self::start_with_env(dir, config, &[])
    }

    /// [`EmuProcess::start`] with `env` added to the emulator's environment (e.g.
    /// `KFD_EMU_FUSE_PROXY=0`, docs/kfd-emulator.md).
    pub fn start_with_env(dir: &Path, config: EmuConfig, env: &[(&str, &str)]) -> EmuProcess {
        let config_file = dir.join("kfd-emu-config.json");
        let text = serde_json::to_vec(&config).expect("an EmuConfig is JSON");
        std::fs::write(&config_file, text).expect("write the emulator's configuration");
        let log = dir.join("kfd-emu.log");
        let log_file = std::fs::File::create(&log).expect("create the emulator's log");
        let mount = dir.join("root");
        let mut child = Command::new(kfd_emu_bin())
            .arg("--mount")
            .arg(&mount)
            .arg("--config")
            .arg(&config_file)
            .arg("--exit-with-stdin")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("start kfd-emu: {e}"));
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        // The first line says the mount serves (`kfd-emu: serving ...`); none: it failed.
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut me = EmuProcess {
            child,
            _stdin: stdin,
            root: mount.clone(),
            config,
            log,
        };
        match rx.recv_timeout(WAIT_LIMIT) {
            Ok(line) if line.starts_with("kfd-emu: serving") => {}
            Ok(_) => panic!(
                "kfd-emu did not mount at {}:\n{}",
                mount.display(),
                me.log_text()
            ),
            Err(_) => panic!(
                "kfd-emu did not mount at {} within {WAIT_LIMIT:?}:\n{}",
                mount.display(),
                me.log_text()
            ),
        }
        me.root = mount
            .canonicalize()
            .unwrap_or_else(|e| panic!("resolve {}: {e}", mount.display()));
        me
    }

    /// The mount point (canonical path).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// What the emulator was started with.
    pub fn config(&self) -> &EmuConfig {
        &self.config
    }

    /// The emulator's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the emulator logged so far (its stderr).
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The HWS model's state now (`kfd-emu/stats.json`).
    pub fn stats(&self) -> Stats {
        let p = self.root.join("kfd-emu/stats.json");
        let text = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        serde_json::from_slice(&text).unwrap_or_else(|e| panic!("parse {}: {e}", p.display()))
    }

    /// Adds an injected failure (a line written to `kfd-emu/faults`).
    pub fn inject(&self, fault: impl Into<FaultSpec>) {
        self.write_faults(&format!("{}\n", fault.into()));
    }

    /// Ends every injected failure.
    pub fn clear_faults(&self) {
        self.write_faults("clear\n");
    }

    /// The failures in effect, with the calls each saw and failed.
    pub fn faults(&self) -> Vec<FaultStats> {
        let p = self.root.join("kfd-emu/faults");
        let text = std::fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
        let f: FaultsFile =
            serde_json::from_slice(&text).unwrap_or_else(|e| panic!("parse {}: {e}", p.display()));
        f.faults
    }

    fn write_faults(&self, line: &str) {
        let p = self.root.join("kfd-emu/faults");
        std::fs::write(&p, line)
            .unwrap_or_else(|e| panic!("write {line:?} to {}: {e}", p.display()));
    }

    /// Stops the emulator (SIGTERM: it unmounts) and waits for it to exit; after
    /// [`WAIT_LIMIT`] it is killed and its mount detached. The exit status, `None` when it had
    /// to be killed.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let mut status = None;
        let exited = crate::wait::wait_until(WAIT_LIMIT, || {
            status = self.child.try_wait().ok().flatten();
            status.is_some()
        });
        if exited {
            return status;
        }
        eprintln!(
            "kfd-emu (pid {pid}) did not exit within {WAIT_LIMIT:?} of SIGTERM: killed; its log:\n{}",
            self.log_text()
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = nix::mount::umount2(&self.root, nix::mount::MntFlags::MNT_DETACH);
        None
    }
}

impl Drop for EmuProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}
