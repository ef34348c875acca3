//! The registry published as a file for `kfdq ps`: `shim-<pid>.json` in the state directory,
//! rewritten when the registry changes, removed at exit.

use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use kfdq::Pid;
use kfdq::proto;
use kfdq::replace::PrivateDir;

use crate::state::STATE;

/// Set by the exit handler: stop publishing.
pub static EXITING: AtomicBool = AtomicBool::new(false);
/// Pid whose registry file this process wrote (0 = none).
pub static WROTE_PID: AtomicU32 = AtomicU32::new(0);

/// Where the registry is published: `$KFDQ_STATE_DIR`, else `/run/kfdq` when it exists and
/// is this user's own (root's), else `/tmp/kfdq-<uid>`, created 0700 and used only when it is
/// this user's own, writable by no one else and no symlink: another user who made it first
/// cannot redirect this process's writes or forge its `kfdq ps` data.
pub fn state_dir() -> Option<&'static PrivateDir> {
    static DIR: OnceLock<Option<PrivateDir>> = OnceLock::new();
    DIR.get_or_init(|| {
        // An explicit directory is used or nothing; the defaults are tried in order.
        match proto::state::state_dir_override() {
            Some(d) => {
                let dir = PrivateDir::named(&d).ok().filter(|_| writable(&d));
                if dir.is_none() {
                    crate::log::warn_always(&format!(
                        "KFDQ_STATE_DIR={} cannot be created or written: this process's registry is not published, \
                         so `kfdq ps` shows its queues without streams or class; control by the agent still works. \
                         Fix: make the directory writable for uid {}, or unset KFDQ_STATE_DIR (default /run/kfdq, else /tmp/kfdq-<uid>)",
                        d.display(),
                        crate::sys::effective_uid()
                    ));
                }
                dir
            }
            None => {
                let [run, tmp] = proto::state::default_state_dirs();
                PrivateDir::check(&run)
                    .ok()
                    .filter(|_| writable(&run))
                    .or_else(|| match PrivateDir::open(&tmp) {
                        Ok(d) => Some(d),
                        Err(e) => {
                            crate::log::warn_always(&format!(
                                "{e}: this process's registry is not published (`kfdq ps` shows its queues without streams or class; control by the agent still works)"
                            ));
                            None
                        }
                    })
            }
        }
    })
    .as_ref()
}

fn writable(d: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(d.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// Writes `shim-<pid>.json` when the registry changed since `last`.
pub fn publish_file(last: &mut u64) {
    if EXITING.load(Ordering::Relaxed) {
        return;
    }
    let (gen_now, reg) = {
        let st = STATE.lock();
        if st.generation == *last {
            return;
        }
        (st.generation, st.to_proto(Pid::this()))
    };
    let Some(dir) = state_dir() else { return };
    let name = proto::state::registry_file_name(Pid::this());
    let Ok(json) = serde_json::to_vec_pretty(&reg) else {
        return;
    };
    if dir.replace(&name, &json, 0o644).is_ok() {
        let first = WROTE_PID.swap(std::process::id(), Ordering::Relaxed) != std::process::id();
        *last = gen_now;
        if first {
            remove_stale(dir);
        }
    }
}

/// Removes the registry files of processes that are gone (killed before their exit handler
/// ran): once per process, at its first publish, only files of this user, only for pids
/// `/proc` no longer has. A file removed by mistake (a process of another pid namespace that
/// shares the directory) comes back at that process's next registry change.
fn remove_stale(dir: &PrivateDir) {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir.path()) else {
        return;
    };
    let me = std::process::id();
    let uid = crate::sys::effective_uid();
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("shim-"))
            .and_then(|n| n.strip_suffix(".json"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == me || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if e.metadata().is_ok_and(|m| m.uid() == uid) {
            let _ = dir.remove(&name.to_string_lossy());
        }
    }
}

/// Exit handler: removes this process's registry file (best effort).
pub fn remove_registry_file() {
    EXITING.store(true, Ordering::Relaxed);
    let me = std::process::id();
    if WROTE_PID.load(Ordering::Relaxed) == me
        && let Some(dir) = state_dir()
    {
        let _ = dir.remove(&proto::state::registry_file_name(Pid(me)));
    }
}
