//! The reaction chain through a running agent: a latency-class launch -> the batch job's work
//! stops completing, and the latency work's end -> the batch job's work completes again.
//!
//! Both jobs are helper processes started the way kfdq controls real work, `kfdq run --class
//! latency|batch` (the shim, its connection to the agent, the agent's decision and level), on
//! one of two runtimes (`runtime.rs`): the node's HIP runtime (`kfdq-bench-hip`: the spin kernel
//! through `hipModuleLaunchKernel`, so the latency launch is a launch edge the shim reports), or
//! the bench itself (`kfdq bench --helper ROLE`, hidden) with a raw KFD queue (`probe.rs`), whose
//! latency queue the shim learns is busy only from its activity samples (`KFDQ_ACTIVITY_US`).
//! Both speak `kfdq::reaction`'s protocol: the batch helper runs a stream of short packets and
//! watches its completions (`victim.rs`); the latency helper launches a request and says when
//! (CLOCK_MONOTONIC) and when it ended.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kfdq::kfd::{GpuId, Kfd, Root, Signal};
use kfdq::policy::Level;
use kfdq::proto::control::ProcessStatus;
use kfdq::proto::{Reply, Request};
use kfdq::reaction::{BATCH_PACKETS, LATENCY_PACKETS, PACKET_NS, WAVES};

use super::R;
use super::child::LineChild;
use super::probe::{Lane, WAIT};
use super::report::Unavailable;
use super::runtime::HelperRuntime;
use super::samples::Samples;
use super::spin::{self, Spin};
use super::victim::{self, Watch};
use crate::{CliError, kfd_error};

/// The agent's answer: its classes' levels, or why the chain cannot be measured.
fn agent_ready(socket: &Path, runtime: &HelperRuntime) -> Result<Level, Unavailable> {
    let what = "reaction chain through the agent";
    let start = "start kfdqd (systemctl start kfdqd, or `kfdqd --root DIR` on kfd-emu) and point kfdq at it with --agent PATH or KFDQ_SOCKET, then run the bench again";
    let status = match crate::client::ask(socket, &Request::Status) {
        Ok(Reply::Status(s)) => s,
        Ok(other) => {
            return Err(Unavailable::new(
                what,
                format!(
                    "the agent at {} answered {other:?} to a status request",
                    socket.display()
                ),
                start,
            ));
        }
        Err(e) => {
            return Err(Unavailable::new(
                what,
                format!(
                    "no agent answers at {}: {}",
                    socket.display(),
                    e.into_message()
                ),
                start,
            ));
        }
    };
    let class = |n: &str| status.classes.iter().find(|c| c.name == n);
    let (Some(_), Some(batch)) = (class("latency"), class("batch")) else {
        return Err(Unavailable::new(
            what,
            "the agent's configuration has no `latency` and `batch` classes (the helpers run as those)",
            "add [[class]] latency and batch to the agent's configuration (docs/agent.md)",
        ));
    };
    match batch.level {
        Some(Level::Hold) if matches!(runtime, HelperRuntime::Raw) => Err(Unavailable::new(
            what,
            "the agent's class batch is at level 1 (hold): the shim holds HIP launches, and the raw helpers drive KFD queues, which a hold does not stop",
            "measure level 1 with the HIP helpers (--runtime hip, docs/hardware.md), or class batch at level 2 or 3",
        )),
        Some(l) => Ok(l),
        None => Err(Unavailable::new(
            what,
            "the agent's class batch has no preemption level: a latency launch preempts nothing",
            "give [[class]] batch a level (hold, deactivate or suspend) in the agent's configuration",
        )),
    }
}

/// A helper process under `kfdq run` (its stderr shown only if it fails: the shim warns, as
/// it should, that a raw helper's queue runs work no HIP call submitted).
type Helper = LineChild;

fn spawn_helper(
    root: &Root,
    socket: &Path,
    gpu: GpuId,
    role: &str,
    runtime: &HelperRuntime,
) -> R<Helper> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Output(format!("finding kfdq's own binary: {e}")))?;
    let mut cmd = Command::new(&exe);
    cmd.arg("--root")
        .arg(root.path())
        .arg("--agent")
        .arg(socket)
        .args(["run", "--class", role, "--"]);
    match runtime {
        HelperRuntime::Raw => cmd.arg(&exe).arg("--root").arg(root.path()).args([
            "bench",
            "--helper",
            role,
            "--gpu",
            &gpu.0.to_string(),
        ]),
        HelperRuntime::Hip {
            helper,
            hip_runtime,
            target,
            device,
        } => cmd
            .arg(helper)
            .args(["--role", role, "--target", target, "--hip-runtime"])
            .arg(hip_runtime)
            .args(["--device", &device.to_string()]),
    };
    LineChild::spawn(cmd, &format!("the {role} helper"), true)
}

/// Measures the chain `repeat` times on `gpu`; `Err(Unavailable)` inside when no agent (or
/// no level for the batch class) makes it measurable.
#[allow(clippy::too_many_arguments)]
pub fn run(
    root: &Root,
    socket: &Path,
    gpu: GpuId,
    runtime: &HelperRuntime,
    repeat: u32,
    ns_per_iteration: f64,
    quiet: bool,
    out: &mut Samples,
) -> R<Result<Level, Unavailable>> {
    let level = match agent_ready(socket, runtime) {
        Ok(l) => l,
        Err(u) => return Ok(Err(u)),
    };
    let mut batch = spawn_helper(root, socket, gpu, "batch", runtime)?;
    let mut latency = spawn_helper(root, socket, gpu, "latency", runtime)?;
    let (reaction_row, release_row) = match runtime {
        HelperRuntime::Raw => ("agent_reaction", "agent_release"),
        HelperRuntime::Hip { .. } => ("agent_reaction_hip", "agent_release_hip"),
    };
    for h in [&mut batch, &mut latency] {
        let a = h.answer()?;
        if a != "ready" {
            return Err(CliError::Refused(format!("reaction-chain helper: {a}")));
        }
        // Before any work: the agent must know the helper and its queue, or the batch
        // stream may run out before the agent hears of it (docs/hardware.md).
        wait_registered(socket, h.pid())?;
    }
    let mut missed = 0;
    for i in 0..repeat {
        if !quiet {
            eprintln!(
                "kfdq bench: {gpu}: reaction chain through the agent ({} helpers): sample {}/{repeat}",
                runtime.name(),
                i + 1
            );
        }
        // The agent learns that the batch job is busy from its shim's activity samples.
        stream_seen_busy(&mut batch, socket, ns_per_iteration, quiet)?;
        let done = latency.ask(&format!("go {ns_per_iteration}"))?;
        let times: Vec<u64> = done
            .strip_prefix("done ")
            .map(|t| {
                t.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let &[launch, end] = times.as_slice() else {
            return Err(CliError::Refused(format!("latency helper: {done}")));
        };
        let answer = batch.ask(&format!("report {launch} {end}"))?;
        let words: Vec<&str> = answer.split_whitespace().collect();
        match words.as_slice() {
            ["reaction", r, "release", s] => {
                let (Ok(r), Ok(s)) = (r.parse(), s.parse()) else {
                    return Err(CliError::Refused(format!("batch helper: {answer}")));
                };
                out.call(reaction_row, 0, r);
                out.call(release_row, 0, s);
            }
            ["reaction", "none"] => missed += 1,
            _ => return Err(CliError::Refused(format!("batch helper: {answer}"))),
        }
    }
    if missed == repeat {
        return Ok(Err(Unavailable::new(
            "reaction chain through the agent",
            format!(
                "in {repeat} latency launches the batch helper never stopped (the agent's level for batch: {level:?})"
            ),
            if level == Level::Hold {
                "at level 1 the batch class needs a `window` (e.g. 2, docs/shim.md): without one the batch helper queues its whole stream before the hold, and a hold stops only new launches"
            } else {
                "check `kfdq status` while the bench runs: the helpers must show as classes latency and batch"
            },
        )));
    }
    Ok(Ok(level))
}

fn expect(answer: String, want: &str) -> R<()> {
    if answer == want {
        Ok(())
    } else {
        Err(CliError::Refused(format!(
            "reaction-chain helper: {answer}"
        )))
    }
}

/// How long after the batch helper said `running` the agent may take to show it busy before
/// the stream is taken as gone unseen and started again. Named guess: the stream is 80 ms of
/// work ([`BATCH_PACKETS`] x [`PACKET_NS`]); on a loaded host the shim's sampling thread and
/// the bench can both be descheduled for that long (seen: 80 ms without a sample beside two
/// busy loops), so the whole stream can run between two samples and the agent, rightly, never
/// shows it busy. Ten times the stream is no hang and rarely a needless restart (which costs
/// only the time to drain the old stream: the helper waits for that).
const STREAM_SEEN_WITHIN: Duration = Duration::from_secs(1);

/// Starts the batch helper's stream and waits until the agent shows the helper busy; a stream
/// the agent did not show busy within [`STREAM_SEEN_WITHIN`] is ended (`report 0 0`: no
/// latency request, so no sample) and started again, until [`WAIT`] has passed.
fn stream_seen_busy(
    batch: &mut Helper,
    socket: &Path,
    ns_per_iteration: f64,
    quiet: bool,
) -> R<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        expect(batch.ask(&format!("stream {ns_per_iteration}"))?, "running")?;
        let until = deadline.min(Instant::now() + STREAM_SEEN_WITHIN);
        let busy = |p: &ProcessStatus| p.queues.iter().any(|q| q.busy);
        let last = match wait_view(socket, batch.pid(), busy, until) {
            Ok(()) => return Ok(()),
            Err(last) => last,
        };
        if Instant::now() >= deadline {
            return Err(not_seen(batch.pid(), "busy", &last));
        }
        if !quiet {
            eprintln!(
                "kfdq bench: the agent did not show the batch helper busy within {} ms of its stream's start ({last}); the stream ran unseen (a loaded host), starting it again",
                STREAM_SEEN_WITHIN.as_millis()
            );
        }
        let answer = batch.ask("report 0 0")?;
        if !answer.starts_with("reaction") {
            return Err(CliError::Refused(format!("batch helper: {answer}")));
        }
    }
}

/// Waits until the agent shows `pid` with its queue: its shim connected and reported its
/// registry. A helper says `ready` once its queue exists, while its shim's control thread may
/// still be connecting (on a loaded host, for longer than the batch stream runs): work started
/// before that is work the agent never had a chance to see.
fn wait_registered(socket: &Path, pid: u32) -> R<()> {
    wait_view(socket, pid, |p| !p.queues.is_empty(), Instant::now() + WAIT)
        .map_err(|last| not_seen(pid, "registered with its queue", &last))
}

/// The bench's error when the agent never showed helper `pid` `what` within [`WAIT`].
fn not_seen(pid: u32, what: &str, last: &str) -> CliError {
    CliError::Refused(format!(
        "the agent did not see the helper (pid {pid}) {what} within {} s ({last}): is it connected (`kfdq status`)?",
        WAIT.as_secs()
    ))
}

/// Waits until the agent's view of `pid` satisfies `want`, or `deadline`: then `Err` says what
/// the agent showed at the last look (or why it did not answer), so a failure can be told
/// apart: the helper unknown to the agent, its queues idle in the agent's view, or no status at
/// all.
fn wait_view(
    socket: &Path,
    pid: u32,
    want: impl Fn(&ProcessStatus) -> bool,
    deadline: Instant,
) -> Result<(), String> {
    // What the agent showed at the last status it answered: a refusal (the rate limit) says
    // nothing about the helper, so it does not replace a view.
    let mut last = String::from("no status yet");
    loop {
        let now = match crate::client::ask(socket, &Request::Status) {
            Ok(Reply::Status(s)) => match s.processes.iter().find(|p| p.pid.0 == pid) {
                Some(p) if want(p) => return Ok(()),
                Some(p) => {
                    let queues: Vec<String> = p
                        .queues
                        .iter()
                        .map(|q| {
                            format!("{} busy {} preempted {:?}", q.queue_id, q.busy, q.preempted)
                        })
                        .collect();
                    format!(
                        "the agent showed it {} with queues [{}], warnings {:?}",
                        p.state,
                        queues.join(", "),
                        p.warnings
                    )
                }
                None => "the agent did not list it".into(),
            },
            Ok(other) => format!("the agent answered {other:?} to a status request"),
            Err(e) => format!("the status request failed: {}", e.into_message()),
        };
        if !now.contains("rate limit") || last == "no status yet" {
            last = now;
        }
        if Instant::now() >= deadline {
            return Err(last);
        }
        // A client of the agent keeps under its control-request rate limit (50/s by
        // default), with room to spare for the bench's other requests: a faster poll only
        // collects refusals.
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// The helper's side (`kfdq bench --helper latency|batch --gpu ID`), run under the shim.
pub fn helper(root: &Root, gpu: GpuId, role: &str) -> R<()> {
    let kfd = Kfd::open(root).map_err(|e| kfd_error("opening /dev/kfd", root, e))?;
    // Level 3 needs the runtime enabled (ROCr does it); a node without it keeps levels 1-2.
    let _ = kfd.runtime_enable(0, false);
    let spin = match kfd
        .gpu(gpu)
        .ok()
        .and_then(|n| n.prop("gfx_target_version"))
        .and_then(spin::code_object)
    {
        Some(image) => Some(Spin::load(&kfd, gpu, image)?),
        None => None,
    };
    let mut out = std::io::stdout();
    let say = |out: &mut std::io::Stdout, s: &str| -> R<()> {
        writeln!(out, "{s}")
            .and_then(|()| out.flush())
            .map_err(|e| CliError::Output(e.to_string()))
    };
    let mut lane = Lane::new(&kfd, gpu, 7, spin.as_ref())?;
    let progress = Signal::new(&kfd, gpu, 0).map_err(|e| kfd_error("a signal", root, e))?;
    say(&mut out, "ready")?;
    let mut lines = std::io::stdin().lock().lines();
    while let Some(Ok(line)) = lines.next() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let per = words.get(1).and_then(|p| p.parse::<f64>().ok());
        if let (Some(s), Some(per)) = (&spin, per) {
            s.ns_per_iteration.set(per);
        }
        match (role, words.first().copied()) {
            ("latency", Some("go")) => {
                progress
                    .set(i64::from(LATENCY_PACKETS))
                    .map_err(|e| kfd_error("a signal", root, e))?;
                let packet = lane.packet(WAVES, PACKET_NS)?.with_signal(&progress);
                let launch = victim::mono_ns();
                for _ in 0..LATENCY_PACKETS {
                    lane.queue
                        .submit(&packet)
                        .map_err(|e| lane.err("submitting the latency request", e))?;
                }
                wait_drained(&progress, root)?;
                say(&mut out, &format!("done {launch} {}", victim::mono_ns()))?;
            }
            ("batch", Some("stream")) => {
                wait_drained(&progress, root)?;
                progress
                    .set(i64::from(BATCH_PACKETS))
                    .map_err(|e| kfd_error("a signal", root, e))?;
                let packet = lane.packet(WAVES, PACKET_NS)?.with_signal(&progress);
                for _ in 0..BATCH_PACKETS {
                    lane.queue
                        .submit(&packet)
                        .map_err(|e| lane.err("submitting the batch stream", e))?;
                }
                let watch = Watch::default();
                let (changes, request) = std::thread::scope(|scope| {
                    let watcher =
                        scope.spawn(|| watch.run_from(&progress, i64::from(BATCH_PACKETS)));
                    let started = watch.wait_change_after(1);
                    let request = if started {
                        say(&mut out, "running").map(|()| lines.next())
                    } else {
                        say(&mut out, "error: the batch stream did not start").map(|()| None)
                    };
                    if let Ok(Some(Ok(r))) = &request {
                        // Wait for the completion after the latency work ended (the release).
                        let end = r.split_whitespace().nth(2).and_then(|t| t.parse().ok());
                        watch.wait_change_after(end.unwrap_or(0));
                    }
                    watch.stop();
                    (watcher.join().unwrap_or_default(), request)
                });
                let Some(Ok(request)) = request? else { break };
                match kfdq::reaction::parse_report(&request) {
                    Some((launch, end)) => {
                        say(&mut out, &kfdq::reaction::answer(&changes, launch, end))?
                    }
                    None => say(&mut out, "error: report LAUNCH_NS END_NS expected")?,
                }
            }
            (_, Some("quit")) => break,
            _ => say(&mut out, &format!("error: unknown request {line:?}"))?,
        }
    }
    Ok(())
}

/// Waits until every packet counted by `s` completed (its signal reached 0).
fn wait_drained(s: &Signal<'_>, root: &Root) -> R<()> {
    let deadline = Instant::now() + WAIT;
    while s
        .value()
        .map_err(|e| kfd_error("reading the batch signal", root, e))?
        > 0
    {
        if Instant::now() > deadline {
            return Err(CliError::Refused(
                "the batch helper's stream did not drain: the partition is stuck".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}
