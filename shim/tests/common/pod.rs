//! Pod-like processes: a cgroup v2 directory per container laid out as the kubelet makes them
//! (`.../kubepods/besteffort/pod<uid>/<container id>`, under a parent of the test's own), and
//! a program started inside it as the runtime starts a container's first process (its parent,
//! the test, outside the container's cgroup).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{App, Emu, Launch, programs};

/// The cgroup v2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host).
fn cgroup2_root() -> PathBuf {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && f[2] == "cgroup2").then(|| PathBuf::from(f[1]))
        })
        .expect("a cgroup v2 mount (the agent reads containers from cgroup v2 paths)")
}

/// One container's cgroup; removed (with its parents made here) when dropped, once its
/// processes are gone.
pub struct Container {
    /// The cgroup directory.
    pub dir: PathBuf,
    /// Its path as `/proc/PID/cgroup` shows it.
    pub path: String,
    top: PathBuf,
}

impl Container {
    /// A fresh container cgroup of a fresh pod.
    pub fn new() -> Container {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let root = cgroup2_root();
        let top = root.join(format!("kfdq-tenant-{}-{n}", std::process::id()));
        let rel = format!("kubepods/besteffort/pod{n:08x}-test/ctr{n}");
        let dir = top.join(&rel);
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("mkdir {}: {e} (needs root)", dir.display()));
        let path = format!("/{}", dir.strip_prefix(&root).unwrap().display());
        Container { dir, path, top }
    }

    /// Starts `worker 300` in this container with `env`: a shell moves itself into the
    /// cgroup and execs `prefix` (e.g. `env -u KFDQ_ALLOCATION`) and the worker, so the
    /// worker keeps the shell's pid (the container's first process, as the runtime starts
    /// it). Waits for its READY line.
    pub fn worker(
        &self,
        emu: &Emu,
        sock: &Path,
        prefix: &str,
        env: &[(&'static str, String)],
    ) -> App {
        let w = programs().get("worker").display().to_string();
        let procs = self.dir.join("cgroup.procs");
        let mut l = Launch::new("/bin/sh".into())
            .arg("-c")
            .arg(format!(
                "echo $$ > {} && exec {prefix} {w} 300",
                procs.display()
            ))
            .env("KFDQ_SOCKET", sock.display().to_string());
        for (k, v) in env {
            l = l.env(k, v.clone());
        }
        let mut app = l.start(emu);
        app.wait_line("READY");
        let cg = std::fs::read_to_string(format!("/proc/{}/cgroup", app.pid)).unwrap();
        assert!(cg.contains(&self.path), "{cg}");
        app
    }
}

impl Container {
    /// Runs `program args` inside this container (a shell moves itself into the cgroup and
    /// execs it) as root, and returns its output.
    pub fn run(&self, program: &Path, args: &[&str]) -> std::process::Output {
        let procs = self.dir.join("cgroup.procs");
        std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(format!("echo $$ > {} && exec \"$@\"", procs.display()))
            .arg("sh")
            .arg(program)
            .args(args)
            .env_remove("KFDQ_SOCKET")
            .output()
            .expect("run in the container")
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // Deepest first; a directory with processes left stays (rmdir fails), harmlessly.
        let mut d: &Path = &self.dir;
        loop {
            let _ = std::fs::remove_dir(d);
            if d == self.top {
                break;
            }
            match d.parent() {
                Some(p) => d = p,
                None => break,
            }
        }
    }
}
