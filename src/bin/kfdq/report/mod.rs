//! `kfdq report`: one archive (.tar.gz) an operator can send to the project or a vendor — the
//! node's versions, `kfdq doctor`, `kfdq topology`, optionally `kfdq bench` and its
//! calibration, the demo's output when given, and the agent's configuration — with nothing
//! secret in it (`scrub.rs`), and a manifest of what it holds, printed and inside.
//!
//! | concern | file |
//! |---|---|
//! | collecting the parts, the manifest, the archive | `mod.rs` |
//! | kernel, amdgpu, firmware, HIP runtime versions | `versions.rs` |
//! | environment values, tokens, the configuration's secrets | `scrub.rs` |
//!
//! The doctor, topology and bench parts are this same `kfdq` run as a child with `--json`, so
//! the archive holds exactly what those commands print.

mod scrub;
mod versions;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::args::ReportArgs;
use super::{CliError, print_json};
use kfdq::kfd::Root;
use scrub::Scrubber;

/// The agent's configuration when --agent-config does not name one (kfdqd's default).
const AGENT_CONFIG: &str = "/etc/kfdq/kfdq.toml";

/// One file of the archive.
#[derive(Debug, Serialize)]
struct Entry {
    name: String,
    bytes: usize,
    what: String,
    #[serde(skip)]
    data: Vec<u8>,
}

/// What the report holds, printed and kept in the archive.
#[derive(Debug, Serialize)]
struct Manifest {
    archive: PathBuf,
    entries: Vec<Entry>,
    /// Parts not in the archive, each with why.
    left_out: Vec<String>,
    /// Environment variables whose values were found in a part and replaced by `<$NAME>`.
    redacted_variables: Vec<String>,
    /// Token-shaped strings replaced by `<token>`.
    tokens_replaced: usize,
    /// Keys of the agent's configuration whose values were replaced by `<redacted>`.
    config_keys_redacted: usize,
}

impl Manifest {
    fn render(&self) -> String {
        let mut out = format!("kfdq report {}\n\n", self.archive.display());
        for e in &self.entries {
            out.push_str(&format!("  {:<18} {:>9} B  {}\n", e.name, e.bytes, e.what));
        }
        out.push_str(&format!(
            "  {:<18} {:>9}    this list\n",
            "MANIFEST.txt", ""
        ));
        for l in &self.left_out {
            out.push_str(&format!("  left out: {l}\n"));
        }
        out.push_str(&format!(
            "\nnothing secret: no environment is archived; values of {} variable(s) found in the parts were replaced by <$NAME>{}; {} token-shaped string(s) replaced by <token>; {} key(s) of the agent's configuration redacted, its comments dropped\n",
            self.redacted_variables.len(),
            if self.redacted_variables.is_empty() {
                String::new()
            } else {
                format!(" ({})", self.redacted_variables.join(", "))
            },
            self.tokens_replaced,
            self.config_keys_redacted
        ));
        out
    }
}

/// The parts as they are collected, each cleaned before it is kept.
struct Parts {
    scrub: Scrubber,
    entries: Vec<Entry>,
    left_out: Vec<String>,
    config_keys: usize,
}

impl Parts {
    fn add(&mut self, name: &str, text: &str, what: impl Into<String>) {
        let data = self.scrub.clean(text).into_bytes();
        self.entries.push(Entry {
            name: name.into(),
            bytes: data.len(),
            what: self.scrub.clean(&what.into()),
            data,
        });
    }

    fn leave_out(&mut self, why: impl AsRef<str>) {
        let why = self.scrub.clean(why.as_ref());
        self.left_out.push(why);
    }
}

/// A `kfdq` child: this binary with the report's --root and --agent.
fn kfdq(root: &Path, agent: Option<&Path>, args: &[&str]) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("kfdq"));
    let mut c = Command::new(exe);
    c.arg("--root").arg(root);
    if let Some(a) = agent {
        c.arg("--agent").arg(a);
    }
    c.arg("--json").args(args).stdin(Stdio::null());
    c
}

/// The first lines of a child's stderr, for the manifest.
fn first_lines(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().take(3).collect();
    lines.join(" / ")
}

/// Runs `kfdq --json <args>` and keeps its stdout as `name` (when it printed JSON).
fn json_part(parts: &mut Parts, root: &Path, agent: Option<&Path>, name: &str, args: &[&str]) {
    let what = format!("`kfdq --json {}`", args.join(" "));
    match kfdq(root, agent, args).output() {
        Err(e) => parts.leave_out(format!("{name}: {what} did not start: {e}")),
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            if serde_json::from_str::<serde_json::Value>(&text).is_ok() {
                let status = if out.status.success() {
                    String::new()
                } else {
                    format!(
                        " (it exited {}: its findings say why)",
                        out.status.code().unwrap_or(-1)
                    )
                };
                parts.add(name, &text, format!("{what}{status}"));
            } else {
                parts.leave_out(format!(
                    "{name}: {what} failed ({}): {}",
                    out.status,
                    first_lines(&out.stderr)
                ));
            }
        }
    }
}

/// `kfdq bench --json --write`, its progress on this terminal, a line every 30 s.
fn bench_part(parts: &mut Parts, root: &Path, agent: Option<&Path>, dir: &Path) {
    let cal = dir.join("calibration.toml");
    let cal_arg = cal.display().to_string();
    eprintln!(
        "kfdq report: running `kfdq bench` on every GPU partition: it takes minutes (it preempts each partition hundreds of times, so run it on an idle node); its progress follows"
    );
    let start = Instant::now();
    let child = kfdq(root, agent, &["bench", "--write", &cal_arg])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => return parts.leave_out(format!("bench.json: `kfdq bench` did not start: {e}")),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let out = child.wait_with_output();
        let _ = tx.send(());
        out
    });
    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
        rx.recv_timeout(Duration::from_secs(30))
    {
        eprintln!(
            "kfdq report: bench running, {:.0} s so far",
            start.elapsed().as_secs_f64()
        );
    }
    let out = match waiter.join() {
        Ok(Ok(o)) => o,
        _ => return parts.leave_out("bench.json: waiting for `kfdq bench` failed"),
    };
    eprintln!(
        "kfdq report: bench {} after {:.0} s",
        if out.status.success() {
            "done"
        } else {
            "failed"
        },
        start.elapsed().as_secs_f64()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    if out.status.success() && serde_json::from_str::<serde_json::Value>(&text).is_ok() {
        parts.add("bench.json", &text, "`kfdq --json bench`");
    } else {
        parts.leave_out(format!(
            "bench.json: `kfdq bench` failed ({}; its reason is printed above)",
            out.status
        ));
    }
    match std::fs::read_to_string(&cal) {
        Ok(t) => parts.add(
            "calibration.toml",
            &t,
            "`kfdq bench --write`: the model's parameters per partition",
        ),
        Err(_) if !out.status.success() => {}
        Err(e) => parts.leave_out(format!("calibration.toml: not written ({e})")),
    }
}

/// The demo's output: JSON (`kfdq --json demo`) or its table (`kfdq demo`).
fn demo_part(parts: &mut Parts, file: &Path) -> Result<(), CliError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        CliError::Usage(format!(
            "--demo-json {}: {e}; give the file `kfdq --json demo > demo.json` (or `kfdq demo > demo.txt`) wrote",
            file.display()
        ))
    })?;
    let what = format!("the demo's output, from {}", file.display());
    if serde_json::from_str::<serde_json::Value>(&text).is_ok() {
        parts.add("demo.json", &text, what);
    } else {
        parts.add(
            "demo.txt",
            &text,
            format!("{what} (not JSON: kept as text)"),
        );
    }
    Ok(())
}

/// The agent's configuration, its secrets and comments removed.
fn config_part(parts: &mut Parts, given: Option<&Path>) -> Result<(), CliError> {
    let path = given.unwrap_or(Path::new(AGENT_CONFIG));
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if given.is_some() => {
            return Err(CliError::Usage(format!(
                "--agent-config {}: {e}; name kfdqd's configuration file (kfdqd --config), or leave the option out for {AGENT_CONFIG}",
                path.display()
            )));
        }
        Err(e) => {
            parts.leave_out(format!(
                "agent.toml: {AGENT_CONFIG} not read ({e}); pass --agent-config FILE if kfdqd runs with another"
            ));
            return Ok(());
        }
    };
    match scrub::config(&text) {
        Ok((clean, n)) => {
            parts.config_keys += n;
            parts.add(
                "agent.toml",
                &clean,
                format!(
                    "the agent's configuration, from {} (comments dropped, secrets redacted)",
                    path.display()
                ),
            );
        }
        Err(why) => parts.leave_out(format!("agent.toml ({}): {why}", path.display())),
    }
    Ok(())
}

/// Where the archive goes: `--output`, else a new name in the current directory; refused up
/// front (before minutes of bench) when it exists or its directory does not.
fn target(given: Option<&Path>, stamp: u64) -> Result<PathBuf, CliError> {
    let path = given
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(format!("kfdq-report-{stamp}.tar.gz")));
    if path.exists() {
        return Err(CliError::Usage(format!(
            "--output {} exists: the report never overwrites a file; remove it or name another",
            path.display()
        )));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(CliError::Usage(format!(
            "--output {}: {} is not a directory; create it or name a file in one",
            path.display(),
            dir.display()
        )));
    }
    Ok(path)
}

/// Writes the entries and the manifest into a new .tar.gz at `path` (never over a file).
fn write_archive(path: &Path, prefix: &str, m: &Manifest, mtime: u64) -> Result<(), CliError> {
    let err = |e: std::io::Error| CliError::Output(format!("{}: {e}", path.display()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = tempfile::Builder::new()
        .prefix(".kfdq-report-")
        .tempfile_in(dir)
        .map_err(err)?;
    let gz = flate2::write::GzEncoder::new(tmp.as_file(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    let manifest = m.render();
    let files = m
        .entries
        .iter()
        .map(|e| (e.name.as_str(), e.data.as_slice()))
        .chain([("MANIFEST.txt", manifest.as_bytes())]);
    for (name, data) in files {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(mtime);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, format!("{prefix}/{name}"), data)
            .map_err(err)?;
    }
    let mut gz = tar.into_inner().map_err(err)?;
    gz.flush().map_err(err)?;
    gz.finish().map_err(err)?;
    tmp.persist_noclobber(path).map_err(|e| err(e.error))?;
    Ok(())
}

/// `kfdq report`.
pub(super) fn run(
    root: &Root,
    agent: Option<&Path>,
    args: ReportArgs,
    json: bool,
) -> Result<(), CliError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let output = target(args.output.as_deref(), now)?;
    let mut parts = Parts {
        scrub: Scrubber::new(std::env::vars_os().map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })),
        entries: Vec::new(),
        left_out: Vec::new(),
        config_keys: 0,
    };
    // The user's own inputs first: a bad one fails before anything runs.
    if let Some(f) = &args.demo_json {
        demo_part(&mut parts, f)?;
    }
    config_part(&mut parts, args.agent_config.as_deref())?;
    let versions = serde_json::to_string_pretty(&versions::read(root))
        .map_err(|e| CliError::Output(e.to_string()))?;
    parts.add(
        "versions.json",
        &versions,
        "kernel (uname), amdgpu and its firmware (sysfs, debugfs), HIP runtime and ROCm, kfdq",
    );
    let r = root.path();
    eprintln!("kfdq report: kfdq doctor, kfdq topology");
    json_part(&mut parts, r, agent, "doctor.json", &["doctor"]);
    json_part(&mut parts, r, agent, "topology.json", &["topology"]);
    if args.demo_json.is_none() {
        parts.leave_out(
            "demo.json: not given (run `kfdq --json demo > demo.json` and pass --demo-json demo.json)",
        );
    }
    if args.bench && !args.no_bench {
        let scratch = tempfile::tempdir()
            .map_err(|e| CliError::Output(format!("temporary directory: {e}")))?;
        bench_part(&mut parts, r, agent, scratch.path());
    } else {
        parts.leave_out(
            "bench.json, calibration.toml: the bench was not run (pass --bench: minutes, root, an idle node)",
        );
    }
    // Its name only: where the operator keeps it is theirs.
    let archive = PathBuf::from(output.file_name().unwrap_or(output.as_os_str()));
    let manifest = Manifest {
        archive,
        entries: std::mem::take(&mut parts.entries),
        left_out: std::mem::take(&mut parts.left_out),
        redacted_variables: parts.scrub.replaced.iter().cloned().collect(),
        tokens_replaced: parts.scrub.tokens,
        config_keys_redacted: parts.config_keys,
    };
    write_archive(&output, &format!("kfdq-report-{now}"), &manifest, now)?;
    if json {
        print_json(&manifest)
    } else {
        print!("{}", manifest.render());
        println!(
            "\nsend {} with a note of what else ran on the node (docs/hardware.md, \"Sharing results\")",
            output.display()
        );
        Ok(())
    }
}
