//! Preempting a program that floods kfd-emu's partition with long many-work-group dispatches,
//! with real processes: the test-side agent deactivates (level 2) or suspends (level 3) its
//! queue through the shim; its running work-groups are context-saved, not waited for, it
//! completes nothing while a latency client runs its requests next to it, and it resumes on
//! release. What that is worth in latency is measured by
//! `cargo bench -p kfdq-shim --bench contention` (docs/gfx-model.md).

mod common;

use common::agent::*;
use common::*;
use kfdq::proto::Level;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn preempting_a_flooding_program_saves_its_running_work_and_holds_it_while_others_run() {
    let emu = mount();
    let mut flood = Flood::start(&emu, CONTENTION_FLOOD);
    let (pid, lp) = (flood.app.pid, flood.queue);
    for level in [Level::Deactivate, Level::Suspend] {
        let saved_before = emu.queue(pid, lp).workgroups_saved;
        flood.preempt(level);
        let q = emu.queue(pid, lp);
        assert!(!q.active, "{level:?}: the flood's queue is off: {q:?}");
        assert!(
            q.workgroups_saved > saved_before,
            "{level:?}: the flood's running work-groups were saved: {q:?}"
        );
        // The latency client's requests on the same partition are the window.
        let l = latency_client(&emu, CONTENTION_CLIENT, None);
        assert!(l.max > 0.0, "{l:?}");
        assert_eq!(
            emu.queue(pid, lp).packets_done,
            q.packets_done,
            "{level:?}: the flood completed nothing while preempted"
        );
        flood.release(level);
        wait_for("the flood's queue back", || emu.queue(pid, lp).active);
        wait_for("the flood completing dispatches again", || {
            emu.queue(pid, lp).packets_done > q.packets_done
        });
    }
    flood.app.stop();
    flood.app.finish();
}
