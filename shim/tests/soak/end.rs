//! The soak's end: the processes stopped and the node consistent, then its summary.

use std::time::Duration;

use nix::sys::signal::Signal;

use super::Soak;
use super::common::soak::{cli_status, signal};
use super::common::wait_for;

impl Soak<'_> {
    /// Wind down: everything continued and stopped; the node ends consistent. Each program that
    /// was asked to stop must exit well with its output.
    pub(super) fn wind_down(&mut self) {
        if self.agent_stopped_until.is_some() {
            self.agent.signal(Signal::SIGCONT);
        }
        let _ = std::fs::write(self.emu.path("kfd-emu/faults"), "clear\n");
        for mut app in self.dying.drain(..) {
            let _ = app.child.wait();
        }
        for p in &self.procs {
            if p.stopped_until.is_some() {
                signal(p.app.pid, Signal::SIGCONT);
            }
            p.app.stop();
        }
        let t = &mut self.t;
        for p in self.procs.drain(..) {
            let (class, pid) = (p.class, p.app.pid);
            let mut app = p.app;
            let exited = test_support::wait_until(Duration::from_secs(60), || {
                matches!(app.child.try_wait(), Ok(Some(_)))
            });
            assert!(exited, "pid {pid} ({class}) did not stop");
            let Some((status, lines, stderr)) = app.try_finish() else {
                unreachable!("exited")
            };
            t.exit(
                class,
                (status, &lines, &stderr),
                self.last_fault_activity,
                format!("pid {pid} ({class}) at the end:"),
            );
        }
        let (agent, emu) = (&self.agent, self.emu);
        wait_for(
            "no queue preempted and the agent agreeing at the end",
            || {
                cli_status(agent).is_some_and(|s| {
                    s.processes
                        .iter()
                        .all(|p| p.queues.iter().all(|q| q.preempted.is_none()))
                }) && emu.stats().queues.iter().all(|q| q.active && !q.suspended)
            },
        );
    }

    /// The summary (printed, and written to `KFDQ_SOAK_JSON` if set), with the events and agent
    /// log lines of the worst cases when they passed the bound.
    pub(super) fn report(&self, rss_end: u64, fds_end: usize) {
        let (t, bound) = (&self.t, self.bound);
        let (rss0, fds0, rss_max, fds_max) = (self.rss0, self.fds0, self.rss_max, self.fds_max);
        let summary = serde_json::json!({
            "seconds": self.seconds,
            "seed": self.seed,
            "processes": t.started,
            "exited_well": t.exited_well,
            "failed_by_injected_fault": t.failed_by_fault,
            "killed": t.killed,
            "stopped_and_continued": t.stopped,
            "faults_injected": t.faults,
            "calls_failed_by_faults": self.failed_before + self.faults_failed,
            "agent_kills": t.agent_kills,
            "agent_stops": t.agent_stops,
            "status_checks": t.checks,
            "sample_gaps": t.gaps,
            "worst_starvation_ms": t.worst_starvation.as_millis() as u64,
            "worst_disagreement_ms": t.worst_disagreement.as_millis() as u64,
            "bound_ms": bound.as_millis() as u64,
            "agent_rss_kib": { "start": rss0, "max": rss_max, "end": rss_end },
            "agent_fds": { "start": fds0, "max": fds_max, "end": fds_end },
            "violations": t.violations,
        });
        eprintln!(
            "soak summary: {} s, {} processes ({} exited well, {} failed by an injected fault, {} killed -9, {} stopped/continued), {} faults injected ({} calls failed), agent killed {} and stopped {} times; worst starvation {} ms, worst disagreement {} ms (bound {} ms); agent RSS {} -> max {} KiB, fds {} -> max {}",
            self.seconds,
            t.started,
            t.exited_well,
            t.failed_by_fault,
            t.killed,
            t.stopped,
            t.faults,
            self.failed_before + self.faults_failed,
            t.agent_kills,
            t.agent_stops,
            t.worst_starvation.as_millis(),
            t.worst_disagreement.as_millis(),
            bound.as_millis(),
            rss0,
            rss_max,
            fds0,
            fds_max
        );
        if let Ok(path) = std::env::var("KFDQ_SOAK_JSON") {
            std::fs::write(path, format!("{summary:#}\n")).expect("write the soak summary");
        }
        for detail in [
            (t.worst_starvation > bound).then_some(&t.worst_detail),
            (t.worst_disagreement > bound).then_some(&t.disagreement_detail),
        ]
        .into_iter()
        .flatten()
        {
            eprintln!("soak: {detail}");
            let pid = detail
                .split(['(', ','])
                .nth(1)
                .unwrap_or("")
                .trim()
                .to_string();
            for e in t
                .events
                .iter()
                .filter(|e| e.contains(&pid) || e.contains("agent") || e.contains("loop"))
            {
                eprintln!("event: {e}");
            }
            for l in self.agent.log_text().lines().filter(|l| l.contains(&pid)) {
                eprintln!("agent log: {l}");
            }
        }
    }
}
