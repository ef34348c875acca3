//! `kfdq run`: start a command under the launch shim with a class or priority.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::CliError;
use kfdq::kfd::{Priority, Root};
use kfdq::proto::control::ClassAnswer;
use kfdq::proto::{Level, Reply, Request};

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

/// Options of `kfdq run`.
pub struct RunOptions<'a> {
    pub class: Option<&'a str>,
    pub priority: Option<u32>,
    /// `--agent`/`--socket`/`KFDQ_SOCKET` (`None`: the default socket when an agent listens
    /// there).
    pub socket: Option<&'a Path>,
    pub shim: Option<&'a Path>,
    pub command: &'a [String],
}

/// The agent's socket for the command: the one given, else the default one if it exists.
fn agent_socket(given: Option<&Path>) -> Option<PathBuf> {
    given.map(Path::to_owned).or_else(|| {
        let d = Path::new(kfdq::proto::DEFAULT_SOCKET);
        d.exists().then(|| d.to_owned())
    })
}

/// The executable `prog` names, as the kernel will show it (`/proc/<pid>/exe`): a path, or the
/// first match on `$PATH`. `None` when it cannot be found (exec will say so).
fn resolve_exe(prog: &str) -> Option<String> {
    let found = if prog.contains('/') {
        Some(PathBuf::from(prog))
    } else {
        std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|d| d.join(prog))
                .find(|p| p.is_file())
        })
    }?;
    std::fs::canonicalize(found)
        .ok()
        .map(|p| p.display().to_string())
}

/// Asks the agent at `socket` which class the command will get. `Ok(None)`: no agent answered
/// (a warning said so and the command runs uncontrolled); `Err`: the class is unknown or
/// refused (the rule and the fix), and the command must not run.
fn ask_agent(
    socket: &Path,
    class: Option<&str>,
    prog: &str,
) -> Result<Option<ClassAnswer>, CliError> {
    let req = Request::Classify {
        class: class.map(str::to_owned),
        exe: resolve_exe(prog),
    };
    let fallback = || match class {
        Some(c) => match kfdq::policy::class::Class::parse(c) {
            Ok(b) => format!(
                "its queues get the built-in class {b}'s band (KFD {}..={}) and nothing preempts for them",
                b.band().lo,
                b.band().hi
            ),
            Err(_) => format!(
                "class {c:?} is not a built-in class, so its queues keep the runtime's priorities"
            ),
        },
        None => "its queues keep the runtime's priorities".into(),
    };
    match super::client::ask(socket, &req) {
        Ok(Reply::Class(a)) => match a.refused {
            Some(r) => Err(CliError::Refused(format!("{r}; nothing was run"))),
            None => Ok(Some(*a)),
        },
        Ok(Reply::Error { error }) => {
            eprintln!(
                "kfdq run: warning: the agent at {} could not say which class the command gets ({error}); running it under the shim, the agent classifies it when it connects",
                socket.display()
            );
            Ok(None)
        }
        Ok(other) => Err(CliError::Usage(format!(
            "unexpected answer from the agent at {}: {other:?}",
            socket.display()
        ))),
        Err(e) => {
            eprintln!(
                "kfdq run: warning: could not ask the agent which class the command gets ({}); the command runs uncontrolled: {} ({HW_QUEUES_ENV}={}, the shim's default), and its shim connects when the agent starts",
                e.into_message(),
                fallback(),
                kfdq::policy::class::hw_queues_for(class)
            );
            Ok(None)
        }
    }
}

fn level_words(l: Option<Level>) -> &'static str {
    match l {
        None => "never preempted",
        Some(Level::Hold) => "held (level 1) while a higher class is busy",
        Some(Level::Deactivate) => "deactivated (level 2) while a higher class is busy",
        Some(Level::Suspend) => "suspended (level 3) while a higher class is busy",
    }
}

pub(super) fn run(root: &Root, o: RunOptions<'_>) -> Result<(), CliError> {
    let Some((prog, args)) = o.command.split_first() else {
        return Err(CliError::Usage(
            "kfdq run needs a command after `--`, e.g. `kfdq run --class latency -- ./server`"
                .into(),
        ));
    };
    if let Some(p) = o.priority {
        Priority::new(p).map_err(|e| CliError::Usage(format!("--priority: {e}")))?;
    }
    let shim = find_shim(o.shim)?;
    let socket = agent_socket(o.socket);
    let answer = match &socket {
        Some(s) => ask_agent(s, o.class, prog)?,
        None => {
            if let Some(c) = o.class {
                use kfdq::policy::class::Class;
                let b = Class::parse(c).map_err(|_| {
                    CliError::Usage(format!(
                        "--class {c:?}: no agent to ask (none at {}; give its socket with --agent PATH or KFDQ_SOCKET), and without one only the built-in classes work: {}",
                        kfdq::proto::DEFAULT_SOCKET,
                        Class::ALL.map(Class::name).join(", ")
                    ))
                })?;
                eprintln!(
                    "kfdq run: warning: no agent (none at {}; --agent PATH or KFDQ_SOCKET names one): the command runs uncontrolled; its queues get the built-in class {b}'s band (KFD {}..={}) and nothing preempts for them",
                    kfdq::proto::DEFAULT_SOCKET,
                    b.band().lo,
                    b.band().hi
                );
            } else {
                eprintln!(
                    "kfdq run: warning: no agent (none at {}; --agent PATH or KFDQ_SOCKET names one): the command runs uncontrolled",
                    kfdq::proto::DEFAULT_SOCKET
                );
            }
            None
        }
    };
    if let Some(a) = &answer {
        eprintln!(
            "kfdq run: class {} ({}): KFD priority {}, {}",
            a.class,
            a.reason,
            o.priority.map_or(a.priority.into(), |p| p),
            level_words(a.level)
        );
    }
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
    if let Some(s) = &socket {
        cmd.env("KFDQ_SOCKET", s);
    }
    // The agent's hw_queues for the class, unless the user set GPU_MAX_HW_QUEUES (theirs
    // wins) or the class has none (the shim then applies its default for the class name).
    if std::env::var_os(HW_QUEUES_ENV).is_none()
        && let Some(n) = answer.as_ref().and_then(|a| a.hw_queues)
    {
        cmd.env(HW_QUEUES_ENV, n.to_string());
    }
    let err = cmd.exec();
    Err(CliError::Usage(format!("cannot run {prog}: {err}")))
}
