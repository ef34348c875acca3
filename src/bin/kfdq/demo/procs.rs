//! The demo's processes: children whose stdout lines are collected as they come, the
//! emulator's mount, the agent — each stopped and cleaned up when dropped.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::super::CliError;
use super::interrupt;
use super::reaction::QueueTimes;

/// How often a wait looks whether the demo was interrupted.
const TICK: Duration = Duration::from_millis(100);

/// A child process with its stdout as lines and its stderr in a log file.
pub struct Child {
    name: String,
    child: std::process::Child,
    lines: Receiver<String>,
    log: PathBuf,
    /// Lines read so far.
    pub seen: Vec<String>,
}

fn fail(msg: String) -> CliError {
    CliError::Usage(msg)
}

impl Child {
    /// Its process id, which is also its process group's (`spawn`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts `cmd`; its stderr goes to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: &Path) -> Result<Child, CliError> {
        let err = std::fs::File::create(log)
            .map_err(|e| fail(format!("creating {}: {e}", log.display())))?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            // Its own process group, so that stopping it stops what it started too (a
            // workload that is a shell or a launcher; `terminate`).
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            fail(format!(
                "starting {name} ({}): {e}",
                cmd.get_program().to_string_lossy()
            ))
        })?;
        let (tx, rx) = channel();
        if let Some(out) = child.stdout.take() {
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        Ok(Child {
            name: name.into(),
            child,
            lines: rx,
            log: log.to_owned(),
            seen: Vec::new(),
        })
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n  ");
        if tail.is_empty() {
            format!("(nothing on stderr; log {})", self.log.display())
        } else {
            format!("its stderr ({}):\n  {tail}", self.log.display())
        }
    }

    /// Waits for a stdout line for which `is` holds; `what` names it in errors.
    pub fn wait_line(
        &mut self,
        what: &str,
        is: impl Fn(&str) -> bool,
        timeout: Duration,
    ) -> Result<String, CliError> {
        if let Some(l) = self.seen.iter().find(|l| is(l)) {
            return Ok(l.clone());
        }
        let deadline = Instant::now() + timeout;
        loop {
            interrupt::check()?;
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.min(TICK)) {
                Ok(l) => {
                    let hit = is(&l);
                    self.seen.push(l.clone());
                    if hit {
                        return Ok(l);
                    }
                }
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(fail(format!(
                        "{} printed no `{what}` line within {} s; {}",
                        self.name,
                        timeout.as_secs(),
                        self.stderr_tail()
                    )));
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                    return Err(fail(format!(
                        "{} exited ({status}) before printing `{what}`; {}",
                        self.name,
                        self.stderr_tail()
                    )));
                }
            }
        }
    }

    /// Waits for it to exit (at most `timeout`) and returns every stdout line.
    pub fn finish(mut self, timeout: Duration) -> Result<Vec<String>, CliError> {
        let deadline = Instant::now() + timeout;
        loop {
            interrupt::check()?;
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()).min(TICK))
            {
                Ok(l) => self.seen.push(l),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(RecvTimeoutError::Timeout) => {
                    return Err(fail(format!(
                        "{} did not finish within {} s; {}",
                        self.name,
                        timeout.as_secs(),
                        self.stderr_tail()
                    )));
                }
            }
        }
        let status = self
            .child
            .wait()
            .map_err(|e| fail(format!("waiting for {}: {e}", self.name)))?;
        if !status.success() {
            return Err(fail(format!(
                "{} failed ({status}); {}",
                self.name,
                self.stderr_tail()
            )));
        }
        Ok(std::mem::take(&mut self.seen))
    }

    /// Waits until `cond` holds while it runs: fails at once when it exits first (kfdqd
    /// refusing to start: another agent holds the lock for its root, a bad configuration) and
    /// after `timeout`, either way with its stderr's tail, where it says why.
    pub fn wait_up(
        &mut self,
        what: &str,
        timeout: Duration,
        mut cond: impl FnMut() -> bool,
    ) -> Result<(), CliError> {
        let mut exited = None;
        let up = wait_until(what, timeout, || {
            if cond() {
                return true;
            }
            exited = self.child.try_wait().ok().flatten();
            exited.is_some()
        });
        match (up, exited) {
            (Ok(()), None) => Ok(()),
            (Ok(()), Some(status)) => Err(fail(format!(
                "{} exited ({status}) before {what}; {}",
                self.name,
                self.stderr_tail()
            ))),
            (Err(e), _) => Err(fail(format!("{e}; {}", self.stderr_tail()))),
        }
    }

    /// SIGTERM to its process group while it runs, then wait (SIGKILL after 5 s): a process it
    /// started (the GPU process under a shell) goes with it, never left running with its
    /// queues preempted.
    pub fn terminate(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let group = Pid::from_raw(self.child.id() as i32);
            let _ = killpg(group, Signal::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = killpg(group, Signal::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Waits `d`, ending early (with the error) when the demo is interrupted.
pub fn pause(d: Duration) -> Result<(), CliError> {
    let deadline = Instant::now() + d;
    while Instant::now() < deadline {
        interrupt::check()?;
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()).min(TICK));
    }
    Ok(())
}

/// Polls `cond` every 10 ms until it holds, or fails with `what` after `timeout`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> Result<(), CliError> {
    let deadline = Instant::now() + timeout;
    while !cond() {
        interrupt::check()?;
        if Instant::now() >= deadline {
            return Err(fail(format!("{what}: not within {} s", timeout.as_secs())));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// A kfd-emu mount: the demo's own (unmounted when dropped) or one it was given (`--root` of
/// a mount already there, left as it is).
pub struct Emulator {
    /// kfd-emu and its path, for the demo's own mount.
    own: Option<(Child, PathBuf)>,
    /// The mount point (the root for everything else).
    pub root: PathBuf,
}

impl Emulator {
    /// Mounts kfd-emu with `preset` at `root` (and the kernels' times of `kernel_times`).
    pub fn mount(
        kfd_emu: &Path,
        preset: &str,
        root: &Path,
        log: &Path,
        kernel_times: Option<&Path>,
    ) -> Result<Emulator, CliError> {
        let mut cmd = Command::new(kfd_emu);
        cmd.arg("--mount").arg(root).arg("--preset").arg(preset);
        if let Some(k) = kernel_times {
            cmd.arg("--kernel-times").arg(k);
        }
        let mut child = Child::spawn("kfd-emu", cmd, log)?;
        let dev = root.join("dev/kfd");
        let up = wait_until("kfd-emu mounting", Duration::from_secs(20), || {
            dev.exists() || matches!(child.child.try_wait(), Ok(Some(_)))
        });
        if up.is_err() || !dev.exists() {
            let tail = child.stderr_tail();
            child.terminate();
            return Err(fail(format!(
                "kfd-emu did not come up at {}; it needs root, /dev/fuse and fusermount3 (Debian package fuse3; scripts/setup.sh installs it); {tail}",
                root.display()
            )));
        }
        Ok(Emulator {
            own: Some((child, kfd_emu.to_owned())),
            root: root.to_owned(),
        })
    }

    /// The kfd-emu mount at `root`, when it is one (it serves the emulator's statistics
    /// file): the demo reads its counters as from its own mount, and leaves it mounted.
    pub fn existing(root: &Path) -> Option<Emulator> {
        let e = Emulator {
            own: None,
            root: root.to_owned(),
        };
        (root.join("dev/kfd").exists() && e.stats().is_some()).then_some(e)
    }

    fn stats(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(self.root.join("kfd-emu/stats.json")).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// The emulator's process (group), when the demo mounted it.
    pub fn pid(&self) -> Option<u32> {
        self.own.as_ref().map(|(c, _)| c.pid())
    }

    /// Device-wide preempts the emulator's HWS model counted so far (all partitions).
    pub fn preempts(&self) -> Option<u64> {
        let v = self.stats()?;
        Some(
            v.get("partitions")?
                .as_array()?
                .iter()
                .filter_map(|p| p.get("preempts")?.as_u64())
                .sum(),
        )
    }

    /// The times at which each compute queue of the processes `pids` stopped being runnable
    /// and became runnable again, as the emulator recorded them (its latest 1024 of each).
    pub fn queue_times(&self, pids: &[u32]) -> Option<Vec<QueueTimes>> {
        let v = self.stats()?;
        let times = |q: &serde_json::Value, key: &str| -> Vec<f64> {
            q.get(key)
                .and_then(serde_json::Value::as_array)
                .map(|a| a.iter().filter_map(serde_json::Value::as_f64).collect())
                .unwrap_or_default()
        };
        Some(
            v.get("queues")?
                .as_array()?
                .iter()
                .filter(|q| {
                    q.get("pid")
                        .and_then(serde_json::Value::as_u64)
                        .is_some_and(|p| pids.iter().any(|x| u64::from(*x) == p))
                        && q.get("queue_type")
                            .and_then(serde_json::Value::as_str)
                            .is_some_and(|t| t.starts_with("compute"))
                })
                .map(|q| QueueTimes {
                    stopped_us: times(q, "stopped_at_us"),
                    runnable_us: times(q, "runnable_at_us"),
                    runnable_now: q
                        .get("active")
                        .and_then(serde_json::Value::as_bool)
                        .unwrap_or(true),
                })
                .collect(),
        )
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let Some((child, kfd_emu)) = &mut self.own else {
            return;
        };
        child.terminate();
        let _ = Command::new(kfd_emu)
            .arg("unmount")
            .arg(&self.root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
