//! `kfdq status` and `kfdq watch`: the agent's view of the node.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::client::{self, Unreachable};
use super::table::Table;
use super::{CliError, print_json};
use kfdq::kfd::Root;
use kfdq::proto::Level;
use kfdq::proto::control::{Control, NodeStatus};

fn level(l: Option<Level>) -> String {
    match l {
        None => "never".into(),
        Some(Level::Hold) => "1 hold".into(),
        Some(Level::Deactivate) => "2 deactivate".into(),
        Some(Level::Suspend) => "3 suspend".into(),
    }
}

/// The status as text.
pub fn render(s: &NodeStatus) -> String {
    let mut out = format!(
        "kfdqd {} (pid {}), configuration {}, up {:.0} s\npriorities: {}\n\n",
        s.version,
        s.agent_pid,
        s.config.as_deref().unwrap_or("built-in"),
        s.uptime_s,
        s.priority_note
    );
    let mut t = Table::new(&[
        "PARTITION",
        ">SLOTS",
        ">CUS",
        ">QUEUES",
        ">BUSY",
        ">PREEMPTS",
    ]);
    for p in &s.partitions {
        t.row(vec![
            p.gpu_id.to_string(),
            p.resident_slots.to_string(),
            p.cus.to_string(),
            p.queues.to_string(),
            p.busy_queues.to_string(),
            p.preempts.to_string(),
        ]);
    }
    out += &t.render();
    out.push('\n');
    let mut t = Table::new(&[
        "CLASS",
        ">RANK",
        ">PRIORITY",
        "PREEMPTED AT",
        ">HW QUEUES",
        "WITHOUT SHIM",
        ">PROCESSES",
        ">PREEMPTED",
    ]);
    for c in &s.classes {
        t.row(vec![
            c.name.clone(),
            c.rank.to_string(),
            c.priority.to_string(),
            level(c.level),
            c.hw_queues
                .map_or_else(|| "shim".to_string(), |n| n.to_string()),
            match c.control {
                Control::Shim => "left alone".into(),
                Control::Tracer => "tracer".into(),
            },
            c.processes.to_string(),
            c.preempted.to_string(),
        ]);
    }
    out += &t.render();
    out.push('\n');
    if s.processes.is_empty() {
        out += "no GPU process is connected (processes connect when they run under the shim with KFDQ_SOCKET set: `kfdq run --agent SOCKET ...`)\n";
    } else {
        let mut t = Table::new(&[
            ">PID",
            ">UID",
            "CLASS",
            "CLASS WHY",
            "CONTROL",
            "STATE",
            "WHY",
            ">QUEUES",
            ">BUSY",
            "EXE",
        ]);
        for p in &s.processes {
            let state = match p.manual {
                Some(_) => format!("{} (by hand)", p.state),
                None => p.state.clone(),
            };
            t.row(vec![
                p.pid.to_string(),
                p.uid.to_string(),
                p.class.clone(),
                p.class_reason.clone(),
                p.control.name().into(),
                state,
                p.reason.clone(),
                p.queues.len().to_string(),
                p.queues.iter().filter(|q| q.busy).count().to_string(),
                p.exe.clone(),
            ]);
        }
        out += &t.render();
        for p in &s.processes {
            for w in &p.warnings {
                out += &format!("warning: pid {}: {w}\n", p.pid);
            }
        }
    }
    for l in &s.left_alone {
        out += &format!(
            "not controlled: pid {} ({}, class {}): {}\n",
            l.pid, l.exe, l.class, l.reason
        );
    }
    let c = &s.counters;
    // A rate of nothing is 0.0, not the float's -0.0.
    let rate = if c.preempts_per_s == 0.0 {
        0.0
    } else {
        c.preempts_per_s
    };
    // One short line per topic: `kfdq watch` redraws in place, and a line wider than the
    // terminal would wrap and push the frame down.
    out += &format!(
        "\ndevice-wide preempts caused: {} ({rate:.1}/s over the last 10 s)\n\
         decisions {} ({} from busy edges alone), commands {} ({} failed)\n\
         decision latency p50 {:.0} µs, p99 {:.0} µs (the decision alone p99 {:.0} µs)\n\
         shim ack p50 {:.0} µs, max {:.0} µs; bad messages {}; reloads {} ({} refused)\n\
         leases run out {}; releases the kernel refused {} (retried until they held)\n",
        c.preempts,
        c.decisions,
        c.edge_decisions,
        c.commands,
        c.command_failures,
        c.decision_us_p50,
        c.decision_us_p99,
        c.decide_us_p99,
        c.ack_us_p50,
        c.ack_us_max,
        c.bad_messages,
        c.reloads,
        c.reload_failures,
        c.lease_expiries,
        c.release_failures
    );
    if !s.release.is_empty() {
        out += &format!("release: {}\n", s.release);
    }
    if let Some(cal) = &s.calibration {
        out += &format!(
            "calibration: {} (measured on {}): C {} µs\n",
            cal.file,
            cal.gfx_target,
            cal.round_trip_ns as f64 / 1e3
        );
        if let Some(w) = &cal.warning {
            out += &format!("warning: {w}\n");
        }
    }
    if c.hints + c.hints_ignored > 0 {
        out += &format!(
            "request hints: {} taken, {} ignored (class preempts nobody), {} expired (no work within hint_timeout_ms)\n",
            c.hints, c.hints_ignored, c.hint_expiries
        );
    }
    if c.direct_subscriptions > 0 {
        out += &format!(
            "direct edges: {} preempt(s) and {} release(s) by the processes' own watches, {} watch(es) sent, {} board slot(s) cleared, {} forged\n",
            c.direct_preempts,
            c.direct_releases,
            c.direct_subscriptions,
            c.direct_cleared,
            c.direct_forged
        );
    }
    if c.unlisted_queues > 0 {
        out += &format!(
            "{} reported queue(s) the kernel does not list were ignored\n",
            c.unlisted_queues
        );
    }
    if c.replaced_sessions + c.activity_dropped + c.uid_connections_refused > 0 {
        out += &format!(
            "tenant bounds: {} session(s) replaced by a second hello, {} activity report(s) dropped, {} connection(s) refused (max_connections_per_uid)\n",
            c.replaced_sessions, c.activity_dropped, c.uid_connections_refused
        );
    }
    out
}

/// What `kfdq --json status` prints when no agent answers: the shape of the protocol's
/// `Reply::Error` (`"type": "error"`), with the socket asked.
#[derive(serde::Serialize)]
struct NoAgent<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: String,
    socket: &'a Path,
}

/// `kfdq status`: the agent's view. Without an agent it fails (exit 1): the text form says so
/// and shows the read-only view of `kfdq ps` below, `--json` prints one error object.
pub(super) fn run(root: &Root, sock: &Path, json: bool) -> Result<(), CliError> {
    match client::status(sock) {
        Ok(s) => {
            if json {
                print_json(&s)
            } else {
                print!("{}", render(&s));
                Ok(())
            }
        }
        Err(e) if json => {
            print_json(&NoAgent {
                kind: "error",
                error: e.into_message(),
                socket: sock,
            })?;
            Err(CliError::Reported)
        }
        Err(Unreachable::NotRunning(m)) => {
            eprintln!("kfdq: {m}\nkfdq: the read-only view (kfdq ps) instead:");
            super::ps::run(root, sock, false)?;
            Err(CliError::Reported)
        }
        Err(e) => Err(e.into()),
    }
}

/// `kfdq watch`: the status, redrawn in place every `interval` (`--json`: one object per line).
/// An agent that goes away after the first frame (a restart) is waited for: one line says so
/// (`--json`: the error object), and the frames go on once it answers again.
pub(super) fn watch(
    sock: &Path,
    interval: Duration,
    count: Option<u64>,
    json: bool,
) -> Result<(), CliError> {
    let mut n = 0u64;
    // Told once per outage that the agent is gone (after a first frame: an agent that was
    // never there fails at once, one that restarts is waited for).
    let mut gone = false;
    loop {
        let s = match client::status(sock) {
            Ok(s) => {
                gone = false;
                s
            }
            Err(e) if n > 0 => {
                if !gone {
                    gone = true;
                    let msg = e.into_message();
                    let mut stdout = std::io::stdout().lock();
                    let said = if json {
                        json_line(
                            &mut stdout,
                            &NoAgent {
                                kind: "error",
                                error: msg,
                                socket: sock,
                            },
                        )
                    } else {
                        writeln!(
                            stdout,
                            "\x1b[H\x1b[J{msg}\nwaiting for the agent to come back (Ctrl-C to stop)"
                        )
                        .map_err(|e| CliError::Output(e.to_string()))
                    };
                    said?;
                    let _ = stdout.flush();
                }
                std::thread::sleep(interval);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let mut stdout = std::io::stdout().lock();
        let written = if json {
            json_line(&mut stdout, &s)
        } else {
            // Clear once, then home the cursor, draw, clear what the last frame left below.
            writeln!(
                stdout,
                "{}\x1b[H{}\x1b[J(every {:.1} s; Ctrl-C to stop)",
                if n == 0 { "\x1b[2J" } else { "" },
                fit(&render(&s), width()).replace('\n', "\x1b[K\n"),
                interval.as_secs_f64()
            )
            .map_err(|e| CliError::Output(e.to_string()))
        };
        written?;
        let _ = stdout.flush();
        n += 1;
        if count.is_some_and(|c| n >= c) {
            return Ok(());
        }
        std::thread::sleep(interval);
    }
}

/// The width `kfdq watch` draws in: the terminal's, else `$COLUMNS`, else unlimited (a pipe).
fn width() -> Option<usize> {
    terminal_size::terminal_size_of(std::io::stdout())
        .map(|(w, _)| usize::from(w.0))
        .or_else(|| std::env::var("COLUMNS").ok()?.trim().parse().ok())
        .filter(|&w| w > 0)
}

/// Cuts every line of `text` to `width` characters (the last one a `…` where something was
/// cut), so that a frame redrawn in place never wraps.
fn fit(text: &str, width: Option<usize>) -> String {
    let Some(width) = width else {
        return text.to_owned();
    };
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if body.chars().count() > width {
            out.extend(body.chars().take(width.saturating_sub(1)));
            out.push('…');
        } else {
            out.push_str(body);
        }
        out.push_str(nl);
    }
    out
}

/// Writes `value` as one line of JSON (`kfdq watch --json` prints a line per frame).
fn json_line<T: serde::Serialize>(out: &mut impl Write, value: &T) -> Result<(), CliError> {
    let line = serde_json::to_string(value).map_err(|e| CliError::Output(e.to_string()))?;
    writeln!(out, "{line}").map_err(|e| CliError::Output(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::fit;

    #[test]
    fn fit_cuts_long_lines_and_keeps_short_ones() {
        let text = "short\nµs wider than ten\n";
        assert_eq!(fit(text, None), text);
        assert_eq!(fit(text, Some(10)), "short\nµs wider …\n");
        assert!(fit(text, Some(10)).lines().all(|l| l.chars().count() <= 10));
    }
}
