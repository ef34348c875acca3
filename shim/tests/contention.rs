//! Preempting a program that floods kfd-emu's partition with long many-work-group dispatches,
//! with real processes: the test-side agent deactivates (level 2) or suspends (level 3) its
//! queue through the shim; its running work-groups are context-saved, not waited for, it
//! completes nothing while a latency client runs its requests next to it, and it resumes on
//! release. What that is worth in latency is measured by
//! `cargo bench -p kfdq-shim --bench contention` (docs/gfx-model.md).

mod common;

use common::agent::*;
use common::*;
use kfdq::proto::{AgentMsg, Level, Target};

/// Requests per phase, 10 per second; each request is 4 dispatches of 80 work-groups of 2 ms
/// (8 ms alone on an MI308X partition: 80 x 4 waves fit its 2560 wave slots at once).
const REQUESTS: &str = "12";
const GAP_MS: &str = "100";
const HP_KERNELS: &str = "4";
const HP_WG_US: &str = "2000";
const HP_WGS: &str = "80";
/// The flood: 2560 work-groups of 4 waves and 20 ms each (four rounds of the whole partition,
/// 80 ms a dispatch), 4 in flight.
const LP_WG_US: &str = "20000";
const LP_WGS: &str = "2560";
const LP_IN_FLIGHT: &str = "4";

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn preempting_a_flooding_program_saves_its_running_work_and_holds_it_while_others_run() {
    let emu = mount();
    let mut flood = Flood::start(&emu, [LP_WG_US, LP_WGS, LP_IN_FLIGHT]);
    let (pid, lp) = (flood.app.pid, flood.queue);
    for level in [Level::Deactivate, Level::Suspend] {
        let saved_before = emu.queue(pid, lp).workgroups_saved;
        flood.conn.ok(|seq| AgentMsg::Preempt {
            seq,
            level,
            target: Target::All,
            grace_period: 0,
        });
        let q = emu.queue(pid, lp);
        assert!(!q.active, "{level:?}: the flood's queue is off: {q:?}");
        assert!(
            q.workgroups_saved > saved_before,
            "{level:?}: the flood's running work-groups were saved: {q:?}"
        );
        // The latency client's requests on the same partition are the window.
        let l = latency_client(&emu, [REQUESTS, GAP_MS, HP_KERNELS, HP_WG_US, HP_WGS], None);
        assert!(l.max > 0.0, "{l:?}");
        assert_eq!(
            emu.queue(pid, lp).packets_done,
            q.packets_done,
            "{level:?}: the flood completed nothing while preempted"
        );
        flood.conn.ok(|seq| AgentMsg::Release {
            seq,
            level,
            target: Target::All,
        });
        wait_for("the flood's queue back", || emu.queue(pid, lp).active);
        wait_for("the flood completing dispatches again", || {
            emu.queue(pid, lp).packets_done > q.packets_done
        });
    }
    flood.app.stop();
    flood.app.finish();
}
