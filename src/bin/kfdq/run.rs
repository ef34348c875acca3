//! `kfdq run`: start a command under the launch shim with a class or priority.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::CliError;
use kfdq::kfd::{Priority, Root};

/// Environment variable naming the shim library.
pub const SHIM_ENV: &str = "KFDQ_SHIM";
const SHIM_NAME: &str = "libkfdq_shim.so";

/// Where the shim is looked for: `--shim`, `$KFDQ_SHIM`, next to the kfdq binary, then the
/// install locations.
pub fn find_shim(explicit: Option<&Path>) -> Result<PathBuf, CliError> {
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.to_path_buf());
    } else {
        if let Some(p) = std::env::var_os(SHIM_ENV).filter(|p| !p.is_empty()) {
            candidates.push(PathBuf::from(p));
        }
        if let Some(dir) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
        {
            candidates.push(dir.join(SHIM_NAME));
            // An install tree: <prefix>/bin/kfdq next to <prefix>/lib/kfdq/ (the package's
            // layout, wherever it is unpacked).
            if let Some(prefix) = dir.parent() {
                candidates.push(prefix.join("lib/kfdq").join(SHIM_NAME));
            }
        }
        candidates.push(PathBuf::from("/usr/local/lib/kfdq").join(SHIM_NAME));
        candidates.push(PathBuf::from("/usr/lib/kfdq").join(SHIM_NAME));
    }
    for c in candidates {
        if c.is_file() {
            return Ok(c);
        }
        tried.push(c.display().to_string());
    }
    Err(CliError::Usage(format!(
        "{SHIM_NAME} not found (tried {}); build it with `cargo build -p kfdq-shim` or pass --shim PATH",
        tried.join(", ")
    )))
}

/// The runtime's hardware queues per priority pool (ROCclr reads it once, at its first call).
const HW_QUEUES_ENV: &str = "GPU_MAX_HW_QUEUES";

/// The agent's `hw_queues` for `class`, unless the user set `GPU_MAX_HW_QUEUES` (theirs wins) or
/// the class has none (the shim then applies its default for the class name). An agent that
/// cannot be asked costs one line on stderr, never the run.
fn agent_hw_queues(class: &str, socket: &Path) -> Option<u32> {
    if std::env::var_os(HW_QUEUES_ENV).is_some() {
        return None;
    }
    match super::client::status(socket) {
        Ok(st) => st
            .classes
            .iter()
            .find(|c| c.name == class)
            .and_then(|c| c.hw_queues),
        Err(e) => {
            let (m, fallback) = (
                e.into_message(),
                kfdq::policy::class::hw_queues_for(Some(class)),
            );
            eprintln!(
                "kfdq run: warning: could not ask the agent for class {class}'s hw_queues ({m}); \
                 the shim's default for it applies ({HW_QUEUES_ENV}={fallback})"
            );
            None
        }
    }
}

/// Options of `kfdq run`.
pub struct RunOptions<'a> {
    pub class: Option<&'a str>,
    pub priority: Option<u32>,
    pub socket: Option<&'a Path>,
    pub shim: Option<&'a Path>,
    pub command: &'a [String],
}

pub(super) fn run(root: &Root, o: RunOptions<'_>) -> Result<(), CliError> {
    let Some((prog, args)) = o.command.split_first() else {
        return Err(CliError::Usage(
            "kfdq run needs a command after `--`, e.g. `kfdq run --class latency -- ./server`"
                .into(),
        ));
    };
    if let Some(c) = o.class {
        use kfdq::policy::class::Class;
        Class::parse(c).map_err(|_| {
            let known: Vec<&str> = Class::ALL.iter().map(|k| k.name()).collect();
            CliError::Usage(format!(
                "--class {c:?} is not a priority class; known: {}",
                known.join(", ")
            ))
        })?;
    }
    if let Some(p) = o.priority {
        Priority::new(p).map_err(|e| CliError::Usage(format!("--priority: {e}")))?;
    }
    let shim = find_shim(o.shim)?;
    let mut cmd = Command::new(prog);
    cmd.args(args);
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(existing) if !existing.is_empty() => format!("{}:{existing}", shim.display()),
        _ => shim.display().to_string(),
    };
    cmd.env("LD_PRELOAD", preload);
    if root.path() != Path::new("/") {
        cmd.env(kfdq::kfd::paths::ROOT_ENV, root.path());
    }
    if let Some(c) = o.class {
        cmd.env("KFDQ_CLASS", c);
    }
    if let Some(p) = o.priority {
        cmd.env("KFDQ_PRIORITY", p.to_string());
    }
    if let Some(s) = o.socket {
        cmd.env("KFDQ_SOCKET", s);
    }
    if let (Some(c), Some(s)) = (o.class, o.socket)
        && let Some(n) = agent_hw_queues(c, s)
    {
        cmd.env(HW_QUEUES_ENV, n.to_string());
    }
    let err = cmd.exec();
    Err(CliError::Usage(format!("cannot run {prog}: {err}")))
}
