//! The level-2 path: UPDATE_QUEUE to inactive and back, on an idle queue and on a busy one.
//!
//! Each sample runs a bystander dispatch (V waves) that spans the call; its delay on the GPU's
//! clock is the stall the call's device-wide preempt caused (saved and restored waves known
//! from the shapes: the fit in `stats.rs` separates the fixed and per-wave costs).

use std::time::Instant;

use super::R;
use super::plan::Plan;
use super::probe::{Lane, timed};
use super::samples::Samples;
use super::victim::{self, Stream, Watch};
use crate::kfd_error;

/// Runs the level-2 samples on `plan`'s partition.
pub fn run(plan: &Plan<'_>, out: &mut Samples) -> R<()> {
    let kfd = plan.kfd;
    let root = kfd.root();
    let v = u64::from(plan.bystander_wgs);
    let mut bystander = Lane::new(kfd, plan.gpu, plan.priority, plan.spin)?;
    let mut idle = Lane::new(kfd, plan.gpu, plan.priority, plan.spin)?;
    for i in 0..plan.repeat {
        plan.progress(&format!(
            "level 2, idle queue: sample {}/{}",
            i + 1,
            plan.repeat
        ));
        bystander.start(plan.bystander_wgs, plan.window_ns)?;
        let (r, us) = timed(|| idle.queue.deactivate());
        r.map_err(|e| kfd_error("UPDATE_QUEUE to inactive", root, e))?;
        out.call("l2_idle_deactivate_call", 0, us);
        let stall = plan.stall(&bystander, Instant::now())?;
        out.stall("l2_idle_deactivate_stall", 0, (v, v), stall);
        bystander.start(plan.bystander_wgs, plan.window_ns)?;
        let (r, us) = timed(|| idle.queue.activate());
        r.map_err(|e| kfd_error("UPDATE_QUEUE to active", root, e))?;
        out.call("l2_idle_activate_call", 0, us);
        let stall = plan.stall(&bystander, Instant::now())?;
        out.stall("l2_idle_activate_stall", 0, (v, v), stall);
    }
    for &w in &plan.victim_waves {
        for i in 0..plan.repeat {
            plan.progress(&format!(
                "level 2, busy queue of {w} waves: sample {}/{}",
                i + 1,
                plan.repeat
            ));
            let mut victim = Lane::new(kfd, plan.gpu, plan.priority, plan.spin)?;
            victim.start(w, plan.victim_wg_ns())?;
            bystander.start(plan.bystander_wgs, plan.window_ns)?;
            let (r, us) = timed(|| victim.queue.deactivate());
            r.map_err(|e| kfd_error("UPDATE_QUEUE to inactive", root, e))?;
            out.call("l2_busy_deactivate_call", w, us);
            let stall = plan.stall(&bystander, Instant::now())?;
            let wv = u64::from(w);
            out.stall("l2_busy_deactivate_stall", w, (wv + v, v), stall);
            bystander.start(plan.bystander_wgs, plan.window_ns)?;
            let (r, us) = timed(|| victim.queue.activate());
            r.map_err(|e| kfd_error("UPDATE_QUEUE to active", root, e))?;
            out.call("l2_busy_activate_call", w, us);
            let stall = plan.stall(&bystander, Instant::now())?;
            out.stall("l2_busy_activate_stall", w, (v, v + wv), stall);
            // Destroying the victim drops its remaining work (nothing is measured meanwhile).
            victim
                .queue
                .destroy()
                .map_err(|e| kfd_error("destroying the busy queue", root, e))?;
        }
    }
    drop(bystander);
    victim_side(plan, &mut idle, out)
}

/// The victim's side of level 2: a busy stream of W waves deactivated and reactivated, the
/// times until its work stops and resumes completing (`victim.rs`).
fn victim_side(plan: &Plan<'_>, probe: &mut Lane<'_>, out: &mut Samples) -> R<()> {
    let kfd = plan.kfd;
    let root = kfd.root();
    plan.victim_samples(
        "level 2",
        ("l2_victim_stop", "l2_victim_resume"),
        out,
        |w| {
            let mut s = Stream::start(kfd, plan.gpu, plan.priority, plan.spin, w)?;
            let watch = Watch::default();
            let (changes, calls) = std::thread::scope(|scope| {
                let progress = &s.progress;
                let watcher = scope.spawn(|| watch.run(progress));
                let result = (|| -> R<(u64, u64)> {
                    let stop_at = victim::mono_ns();
                    s.lane
                        .queue
                        .deactivate()
                        .map_err(|e| kfd_error("UPDATE_QUEUE to inactive", root, e))?;
                    victim::hold(probe)?;
                    let resume_at = victim::mono_ns();
                    s.lane
                        .queue
                        .activate()
                        .map_err(|e| kfd_error("UPDATE_QUEUE to active", root, e))?;
                    watch.wait_change_after(resume_at);
                    Ok((stop_at, resume_at))
                })();
                watch.stop();
                (watcher.join().unwrap_or_default(), result)
            });
            let (stop_at, resume_at) = calls?;
            let times = victim::times(&changes, stop_at, resume_at);
            s.drain()?;
            s.lane
                .queue
                .destroy()
                .map_err(|e| kfd_error("destroying the victim's queue", root, e))?;
            Ok(times)
        },
    )
}

/// Without work of a known shape (real hardware until kfdq ships spinning kernels): the call
/// times of UPDATE_QUEUE on an idle queue only.
pub fn calls_only(plan: &Plan<'_>, out: &mut Samples) -> R<()> {
    let root = plan.kfd.root();
    let mut idle = Lane::new(plan.kfd, plan.gpu, plan.priority, plan.spin)?;
    for i in 0..plan.repeat {
        plan.progress(&format!(
            "level 2, idle queue: sample {}/{}",
            i + 1,
            plan.repeat
        ));
        let (r, us) = timed(|| idle.queue.deactivate());
        r.map_err(|e| kfd_error("UPDATE_QUEUE to inactive", root, e))?;
        out.call("l2_idle_deactivate_call", 0, us);
        let (r, us) = timed(|| idle.queue.activate());
        r.map_err(|e| kfd_error("UPDATE_QUEUE to active", root, e))?;
        out.call("l2_idle_activate_call", 0, us);
    }
    Ok(())
}
