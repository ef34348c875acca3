//! `kfdq demo` on GPUs it did not mount (a node's `/dev/kfd`, or a kfd-emu mount given as
//! --root): what the node cannot do is refused up front, with the reason and the fix, before a
//! process starts or a queue exists — not minutes later in the middle of a phase.
//!
//! In order: the shim (every controlled phase runs its workloads under it), the right to open
//! `/dev/kfd` read-write, a writable directory for the demo's agents' sockets, another kfdqd on
//! these GPUs (its lock), and per phase asked for, the level it needs where the node lacks it
//! (the doctor's verdict: `kfdq::capability`) and, for `level2-traced`, kfdqd's right to
//! ptrace the latency client.

use std::path::{Path, PathBuf};

use clap::ValueEnum;

use super::super::CliError;
use crate::args::Phase;
use kfdq::kfd::Root;

/// `CAP_SYS_PTRACE`'s bit in `CapEff` (linux/capability.h).
const CAP_SYS_PTRACE: u32 = 19;

fn refuse(what: &str, why: String, fix: &str) -> CliError {
    CliError::Usage(format!(
        "demo refuses to start: {what}: {why}\n  fix: {fix}"
    ))
}

/// The checks, in the order above; the first that fails is the error.
pub(super) fn check(root: &Path, phases: &[Phase]) -> Result<(), CliError> {
    crate::run::find_shim(None).map_err(|_| {
        let here = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.display().to_string()))
            .unwrap_or_else(|| "?".into());
        refuse(
            "no shim path",
            format!("libkfdq_shim.so is not at $KFDQ_SHIM, beside this kfdq ({here}), in ../lib/kfdq from it, /usr/local/lib/kfdq or /usr/lib/kfdq; every phase but the uncontrolled ones runs its workloads under the shim (LD_PRELOAD), which is how the agent sees and preempts them"),
            "install kfdq's package (it puts libkfdq_shim.so in /usr/lib/kfdq), or set KFDQ_SHIM=/path/to/libkfdq_shim.so, or put the library beside this kfdq",
        )
    })?;
    let r = Root::new(root);
    let kfd = r.kfd_device();
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&kfd)
    {
        return Err(refuse(
            "no rights to the GPU",
            format!(
                "{} cannot be opened read-write ({e}); the workloads and the demo's kfdqd need it",
                kfd.display()
            ),
            "add this user to the group that owns it (usually render: sudo usermod -aG render $USER, then log in again), or run the demo as root",
        ));
    }
    let tmp = std::env::temp_dir();
    if let Err(e) = tempfile::Builder::new()
        .prefix("kfdq-demo-check-")
        .tempdir()
    {
        return Err(refuse(
            "no agent rights",
            format!(
                "the demo's kfdqd listens on a socket in a directory it creates under {} and this user cannot create one there ({e})",
                tmp.display()
            ),
            "set TMPDIR to a directory this user may write (TMPDIR=$HOME/tmp kfdq demo)",
        ));
    }
    if let Some(h) = kfdq::agent::lock::held_by(root) {
        return Err(refuse(
            "a partition in use",
            format!(
                "another kfdqd{}{} runs on the GPUs under {} (it holds the lock {}); the demo's own agents would be refused the lock, and its processes would classify and preempt the demo's workloads too",
                h.pid.map_or(String::new(), |p| format!(" (pid {p})")),
                h.socket
                    .as_ref()
                    .map_or(String::new(), |s| format!(" serving {s}")),
                root.display(),
                h.path.display()
            ),
            "stop it for the demo's minutes (sudo systemctl stop kfdqd; start it again after), or run the demo on the built-in emulator (kfdq demo --emulator)",
        ));
    }
    levels(&r, phases)?;
    if phases.contains(&Phase::Level2Traced) {
        tracer_rights(&r)?;
    }
    Ok(())
}

/// A phase's name as --phases takes it.
fn name(p: Phase) -> String {
    p.to_possible_value()
        .map_or_else(|| format!("{p:?}"), |v| v.get_name().to_string())
}

/// The level a phase needs beyond 0-2 (which every node with amdkfd has): `3` or `tracer`.
fn needs(p: Phase) -> Option<&'static str> {
    match p {
        Phase::Level3 | Phase::Level3Direct => Some("3"),
        Phase::Level2Traced => Some("tracer"),
        _ => None,
    }
}

/// Refuses the phases whose level the doctor finds does not work on a partition.
fn levels(root: &Root, phases: &[Phase]) -> Result<(), CliError> {
    if phases.iter().all(|p| needs(*p).is_none()) {
        return Ok(());
    }
    let report = kfdq::doctor::inspect(root, &kfdq::doctor::Options::default());
    let mut bad = Vec::new();
    for &p in phases {
        let Some(level) = needs(p) else { continue };
        let why = report
            .partitions
            .iter()
            .flat_map(|part| part.levels.iter().map(move |l| (part.gpu_id, l)))
            .find(|(_, l)| l.level == level && !l.works)
            .map(|(gpu, l)| format!("gpu {gpu}: {}", l.why));
        if let Some(why) = why {
            bad.push((p, why));
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    let keep: Vec<String> = phases
        .iter()
        .filter(|p| !bad.iter().any(|(b, _)| b == *p))
        .map(|p| name(*p))
        .collect();
    let what: Vec<String> = bad
        .iter()
        .map(|(p, why)| format!("{} ({why})", name(*p)))
        .collect();
    Err(refuse(
        "a level this node cannot do",
        format!(
            "{} cannot run here; `kfdq doctor` shows every finding with its fix",
            what.join(", ")
        ),
        &format!(
            "fix the node as `kfdq doctor` says, or leave them out: --phases {}",
            keep.join(",")
        ),
    ))
}

/// `level2-traced`: kfdqd, started by this user, must ptrace the latency client.
fn tracer_rights(root: &Root) -> Result<(), CliError> {
    let scope_path = {
        let p = root.path().join("proc/sys/kernel/yama/ptrace_scope");
        if p.exists() {
            p
        } else {
            PathBuf::from("/proc/sys/kernel/yama/ptrace_scope")
        }
    };
    let scope: Option<u32> = std::fs::read_to_string(&scope_path)
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let cap = cap_sys_ptrace();
    // Yama 0 (or none): the classic rule, a process of the same user; 1 and 2: the capability
    // (the client is not kfdqd's descendant); 3: no one.
    let ok = match scope {
        None | Some(0) => true,
        Some(1 | 2) => cap,
        Some(_) => false,
    };
    if ok {
        return Ok(());
    }
    Err(refuse(
        "no agent rights",
        format!(
            "level2-traced needs the demo's kfdqd to ptrace the latency client, and kernel.yama.ptrace_scope is {}{}",
            scope.map_or("unset".into(), |s| s.to_string()),
            if scope.is_some_and(|s| s >= 3) {
                " (no one may attach)"
            } else {
                " and this user has no CAP_SYS_PTRACE"
            }
        ),
        "run the demo as root (sudo kfdq demo), or leave level2-traced out of --phases",
    ))
}

/// Whether this process holds CAP_SYS_PTRACE (its `CapEff`).
fn cap_sys_ptrace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_PTRACE) != 0)
}
