//! The level-3 path: DBG_TRAP SUSPEND_QUEUES / RESUME_QUEUES on a child process with a busy
//! queue, as kfdqd's tracer does it (ptrace seize, DBG_TRAP ENABLE, the queue snapshot that
//! clears `EC_QUEUE_NEW`).
//!
//! The child is this binary again (`kfdq bench --worker`, hidden): it enables the runtime
//! (RUNTIME_ENABLE, which suspend needs), creates a queue per `run` line on its stdin, starts
//! known-shape work on it and answers `running QID`.

use std::io::{BufRead, Write};
use std::process::Command;

use kfdq::kfd::{EXCEPTION_QUEUE_NEW, GpuId, Kfd, QueueId, Root};

use std::time::Instant;

use super::R;
use super::child::LineChild;
use super::plan::Plan;
use super::probe::{Lane, timed};
use super::report::Unavailable;
use super::samples::Samples;
use super::spin::{self, Spin};
use super::victim::{self, Stream, Watch};
use crate::{CliError, kfd_error};

/// Grace period passed to SUSPEND_QUEUES (1K GPU clocks; 0 is sent as 1 by the kernel): waves
/// are saved at once, so the stall is the save's, not the grace's.
const GRACE: u32 = 0;

/// The worker child (`kfdq bench --worker`): a process of its own whose queues the bench
/// suspends through the debugger API.
type Worker = LineChild;

fn spawn_worker(root: &Root, gpu: GpuId) -> R<Worker> {
    let exe = std::env::current_exe()
        .map_err(|e| CliError::Output(format!("finding kfdq's own binary: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("--root")
        .arg(root.path())
        .args(["bench", "--worker", "--gpu", &gpu.0.to_string()]);
    LineChild::spawn(cmd, "the level-3 worker", false)
}

/// Runs the level-3 samples; `Err(Unavailable)` inside when the node cannot give them.
pub fn run(plan: &Plan<'_>, out: &mut Samples) -> R<Result<(), Unavailable>> {
    let kfd = plan.kfd;
    let root = kfd.root();
    if !kfd.capabilities().debugger_api {
        return Ok(Err(Unavailable::new(
            "level 3",
            format!(
                "KFD {}.{} has no debugger API (RUNTIME_ENABLE and DBG_TRAP came with KFD 1.13)",
                kfd.version().major,
                kfd.version().minor
            ),
            "run a kernel whose amdkfd reports 1.13 or later (Linux 6.2+); `kfdq doctor` checks it",
        )));
    }
    let mut worker = spawn_worker(root, plan.gpu)?;
    let hello = worker.answer()?;
    if hello != "ready" {
        return Ok(Err(Unavailable::new(
            "level 3",
            format!("the worker could not enable the debugger runtime: {hello}"),
            "see `kfdq doctor` (debugger API, TRAP_DEBUG_FIRMWARE_SUPPORTED)",
        )));
    }
    let pid = worker.pid();
    if let Err(e) = kfdq::kfd::ptrace::seize(pid) {
        return Ok(Err(Unavailable::new(
            "level 3",
            format!("PTRACE_SEIZE of the worker was refused: {e}"),
            "run the bench as root, or allow tracing children (kernel.yama.ptrace_scope <= 1)",
        )));
    }
    let _attachment = match kfd.dbg_enable(pid, 0) {
        Ok(a) => a,
        Err(e) => {
            return Ok(Err(Unavailable::new(
                "level 3",
                format!("DBG_TRAP ENABLE on the worker failed: {e}"),
                "see `kfdq doctor` (debugger API)",
            )));
        }
    };
    let v = u64::from(plan.bystander_wgs);
    let mut bystander = Lane::new(kfd, plan.gpu, plan.priority, plan.spin)?;
    for &w in &plan.victim_waves {
        for i in 0..plan.repeat {
            plan.progress(&format!(
                "level 3, child with a busy queue of {w} waves: sample {}/{}",
                i + 1,
                plan.repeat
            ));
            let per = plan.spin.map_or(0.0, |s| s.ns_per_iteration.get());
            let qid =
                running_queue(&worker.ask(&format!("run {w} {} {per}", plan.victim_wg_ns()))?)?;
            kfd.queue_snapshot(pid, EXCEPTION_QUEUE_NEW)
                .map_err(|e| kfd_error("DBG_TRAP GET_QUEUE_SNAPSHOT", root, e))?;
            bystander.start(plan.bystander_wgs, plan.window_ns)?;
            let (r, us) = timed(|| kfd.suspend_queues(pid, &[qid], GRACE));
            let (n, _) = r.map_err(|e| kfd_error("DBG_TRAP SUSPEND_QUEUES", root, e))?;
            if n != 1 {
                return Err(CliError::Refused(format!(
                    "SUSPEND_QUEUES suspended {n} of the worker's 1 queue ({qid})"
                )));
            }
            out.call("l3_suspend_call", w, us);
            let stall = plan.stall(&bystander, Instant::now())?;
            let wv = u64::from(w);
            out.stall("l3_suspend_stall", w, (wv + v, v), stall);
            bystander.start(plan.bystander_wgs, plan.window_ns)?;
            let (r, us) = timed(|| kfd.resume_queues(pid, &[qid]));
            r.map_err(|e| kfd_error("DBG_TRAP RESUME_QUEUES", root, e))?;
            out.call("l3_resume_call", w, us);
            let stall = plan.stall(&bystander, Instant::now())?;
            out.stall("l3_resume_stall", w, (v, v + wv), stall);
            let answer = worker.ask("stop")?;
            if answer != "stopped" {
                return Err(CliError::Refused(format!("level-3 worker: {answer}")));
            }
        }
    }
    drop(bystander);
    victim_side(plan, &mut worker, out)?;
    let _ = kfd.dbg_disable(pid);
    Ok(Ok(()))
}

/// The victim's side of level 3: the child runs a stream of W waves and watches it; the
/// bench suspends and resumes it and the child answers the times until its work stopped and
/// resumed completing (`victim.rs`).
fn victim_side(plan: &Plan<'_>, worker: &mut Worker, out: &mut Samples) -> R<()> {
    let kfd = plan.kfd;
    let root = kfd.root();
    let pid = worker.pid();
    let mut probe = Lane::new(kfd, plan.gpu, plan.priority, plan.spin)?;
    plan.victim_samples(
        "level 3",
        ("l3_victim_stop", "l3_victim_resume"),
        out,
        |w| {
            let per = plan.spin.map_or(0.0, |s| s.ns_per_iteration.get());
            let qid = running_queue(&worker.ask(&format!("stream {w} {per}"))?)?;
            kfd.queue_snapshot(pid, EXCEPTION_QUEUE_NEW)
                .map_err(|e| kfd_error("DBG_TRAP GET_QUEUE_SNAPSHOT", root, e))?;
            let stop_at = victim::mono_ns();
            kfd.suspend_queues(pid, &[qid], GRACE)
                .map_err(|e| kfd_error("DBG_TRAP SUSPEND_QUEUES", root, e))?;
            victim::hold(&mut probe)?;
            let resume_at = victim::mono_ns();
            kfd.resume_queues(pid, &[qid])
                .map_err(|e| kfd_error("DBG_TRAP RESUME_QUEUES", root, e))?;
            let answer = worker.ask(&format!("report {stop_at} {resume_at}"))?;
            let words: Vec<&str> = answer.split_whitespace().collect();
            match words.as_slice() {
                ["times", stop, resume] => match (stop.parse(), resume.parse()) {
                    (Ok(stop), Ok(resume)) => Ok(Some((stop, resume))),
                    _ => Err(CliError::Refused(format!("level-3 worker: {answer}"))),
                },
                ["times", "none"] => Ok(None),
                _ => Err(CliError::Refused(format!("level-3 worker: {answer}"))),
            }
        },
    )
}

/// The queue of the worker's answer `running QUEUE_ID` (to `run` and `stream`).
fn running_queue(answer: &str) -> R<QueueId> {
    answer
        .strip_prefix("running ")
        .and_then(|q| q.parse().ok())
        .map(QueueId)
        .ok_or_else(|| CliError::Refused(format!("level-3 worker: {answer}")))
}

/// The worker's side (`kfdq bench --worker --gpu ID`): lines on stdin, answers on stdout.
pub fn worker(root: &Root, gpu: GpuId) -> R<()> {
    let kfd = Kfd::open(root).map_err(|e| kfd_error("opening /dev/kfd", root, e))?;
    let mut stdout = std::io::stdout();
    let say = |out: &mut std::io::Stdout, s: &str| -> R<()> {
        writeln!(out, "{s}")
            .and_then(|()| out.flush())
            .map_err(|e| CliError::Output(e.to_string()))
    };
    if let Err(e) = kfd.runtime_enable(0, false) {
        return say(&mut stdout, &format!("error: RUNTIME_ENABLE: {e}"));
    }
    let spin = match kfd
        .gpu(gpu)
        .ok()
        .and_then(|n| n.prop("gfx_target_version"))
        .and_then(spin::code_object)
    {
        Some(image) => Some(Spin::load(&kfd, gpu, image)?),
        None => None,
    };
    say(&mut stdout, "ready")?;
    let mut lane: Option<Lane<'_>> = None;
    let mut lines = std::io::stdin().lock().lines();
    while let Some(line) = lines.next() {
        let line = line.map_err(|e| CliError::Output(e.to_string()))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["stream", w, per] => {
                let (Ok(w), Ok(per)) = (w.parse(), per.parse::<f64>()) else {
                    say(&mut stdout, "error: stream WAVES NS_PER_ITERATION")?;
                    continue;
                };
                if let Some(s) = &spin {
                    s.ns_per_iteration.set(per);
                }
                drop(lane.take());
                let stream = Stream::start(&kfd, gpu, 7, spin.as_ref(), w)?;
                say(
                    &mut stdout,
                    &format!("running {}", stream.lane.queue.id().0),
                )?;
                let watch = Watch::default();
                let (changes, request) = std::thread::scope(|scope| {
                    let watcher = scope.spawn(|| watch.run(&stream.progress));
                    let request = lines.next();
                    if let Some(Ok(r)) = &request {
                        let resume_at = r
                            .split_whitespace()
                            .nth(2)
                            .and_then(|t| t.parse().ok())
                            .unwrap_or(0);
                        watch.wait_change_after(resume_at);
                    }
                    watch.stop();
                    (watcher.join().unwrap_or_default(), request)
                });
                stream.drain()?;
                drop(stream);
                let Some(Ok(request)) = request else { break };
                let times: Vec<u64> = request
                    .split_whitespace()
                    .skip(1)
                    .filter_map(|t| t.parse().ok())
                    .collect();
                match (request.starts_with("report "), times.as_slice()) {
                    (true, &[stop_at, resume_at]) => {
                        match victim::times(&changes, stop_at, resume_at) {
                            Some((s, r)) => say(&mut stdout, &format!("times {s} {r}"))?,
                            None => say(&mut stdout, "times none")?,
                        }
                    }
                    _ => say(&mut stdout, "error: report STOP_NS RESUME_NS expected")?,
                }
            }
            ["run", w, ns, per] => {
                let (Ok(w), Ok(ns), Ok(per)) = (w.parse(), ns.parse(), per.parse::<f64>()) else {
                    say(&mut stdout, "error: run WAVES WG_NS NS_PER_ITERATION")?;
                    continue;
                };
                if let Some(s) = &spin {
                    s.ns_per_iteration.set(per);
                }
                drop(lane.take());
                let mut l = Lane::new(&kfd, gpu, 7, spin.as_ref())?;
                l.start(w, ns)?;
                let id = l.queue.id().0;
                lane = Some(l);
                say(&mut stdout, &format!("running {id}"))?;
            }
            ["stop"] => {
                lane = None;
                say(&mut stdout, "stopped")?;
            }
            ["quit"] => break,
            _ => say(&mut stdout, &format!("error: unknown request {line:?}"))?,
        }
    }
    drop(lane);
    Ok(())
}
