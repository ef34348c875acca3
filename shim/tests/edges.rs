//! Busy edges and leases at the shim, against the test's own agent end: the launch that makes a
//! process of a preempting class busy is reported without waiting for the activity sample, the
//! busy -> idle edge follows, and a preemption whose lease is not renewed is released by the
//! shim on its own.

mod common;

use std::time::{Duration, Instant};

use common::agent::{Conn, accept_with_lease, listen};
use common::*;
use kfdq::proto::{AgentMsg, Level, Target};

/// The activity period of these tests: the longest the shim accepts, so that a sampled report
/// would come up to 100 ms after the sample that follows a command.
const SLOW_SAMPLING_US: &str = "100000";

/// `latency N GAP_MS KERNELS WG_US WGS` under the shim, talking to the test's agent end.
fn latency_app(emu: &Emu, sock: &std::path::Path, args: [&str; 5]) -> App {
    Launch::new(programs().get("latency"))
        .args(args)
        .env("KFDQ_CLASS", "latency")
        .env("KFDQ_SOCKET", sock.display().to_string())
        .env("KFDQ_ACTIVITY_US", SLOW_SAMPLING_US)
        .start(emu)
}

/// Waits for the registry to show `n` queues; returns the first one's id.
fn first_queue(c: &mut Conn, n: usize) -> u32 {
    let reg = c.wait_registry(&format!("{n} queue(s)"), |r| r.queues.len() >= n);
    reg.queues[0].queue_id
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_busy_edge_is_reported_by_the_launch_not_the_next_sample() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (l, sock) = listen(dir.path());
    // One request: one dispatch of 80 work-groups x 50 ms (about 50 ms on the partition).
    let mut app = latency_app(&emu, &sock, ["1", "0", "1", "50000", "80"]);
    let mut c = accept_with_lease(&l, None);
    app.wait_line("CHECKPOINT ready");
    let q = first_queue(&mut c, 1);
    c.send(&AgentMsg::Edges { on: true });
    // The shim samples right after it answers a command: the next sample is 100 ms after
    // this ack, so a busy report before then came from the launch.
    c.ok(|seq| AgentMsg::Query { seq });
    let sampled = Instant::now();
    app.release("ready");
    c.wait_activity(q, true);
    let took = sampled.elapsed();
    assert!(
        took < Duration::from_millis(100),
        "the busy edge took {took:?}: no sooner than the 100 ms activity sample"
    );
    // The busy -> idle edge follows promptly too (sampled finely while busy).
    c.wait_activity(q, false);
    app.release("done");
    app.finish();
}

/// `flood WG_US WGS IN_FLIGHT STREAMS` in the batch class under the test's agent end.
fn flood_app(emu: &Emu, sock: &std::path::Path) -> App {
    let mut app = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2", "1"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", sock.display().to_string())
        .start(emu);
    app.wait_line("flooding");
    app
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_lease_that_is_not_renewed_releases_the_process_on_its_own() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (l, sock) = listen(dir.path());
    let app = flood_app(&emu, &sock);
    let mut c = accept_with_lease(&l, Some(300));
    let q = first_queue(&mut c, 1);
    c.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Deactivate,
        target: Target::All,
        grace_period: 0,
    });
    assert!(!emu.queue(app.pid, q).active, "deactivated by the command");
    // The agent says nothing more (hung): the shim releases on its own after the lease.
    let reg = c.wait_registry("a lease expiry", |r| r.lease_expiries == 1);
    assert!(
        reg.queues.iter().all(|x| !x.deactivated),
        "released: {reg:#?}"
    );
    assert!(
        reg.warnings.iter().any(|w| w.contains("lease expired")),
        "says so: {:?}",
        reg.warnings
    );
    wait_for("the batch queue active again", || {
        emu.queue(app.pid, q).active
    });
    let done = emu.queue(app.pid, q).packets_done;
    wait_for("the batch job completing work", || {
        emu.queue(app.pid, q).packets_done > done
    });
    // The agent may preempt it again: the lease starts anew, and an expiry is said once.
    c.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::All,
        grace_period: 0,
    });
    let reg = c.wait_registry("a second lease expiry", |r| r.lease_expiries == 2);
    assert!(reg.streams.iter().all(|s| !s.held), "{reg:#?}");
    assert_eq!(
        reg.warnings
            .iter()
            .filter(|w| w.contains("lease expired"))
            .count(),
        1,
        "the warning is said once: {:?}",
        reg.warnings
    );
    app.stop();
    app.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn renewals_keep_a_preemption_past_its_lease() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (l, sock) = listen(dir.path());
    let app = flood_app(&emu, &sock);
    // A lease of 1 s renewed every 100 ms, watched for 3 s (three leases).
    let mut c = accept_with_lease(&l, Some(1000));
    let q = first_queue(&mut c, 1);
    c.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Deactivate,
        target: Target::All,
        grace_period: 0,
    });
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        c.send(&AgentMsg::Renew {});
        assert!(
            !emu.queue(app.pid, q).active,
            "a renewed preemption holds"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    c.ok(|seq| AgentMsg::Query { seq });
    let reg = c.registry.clone().unwrap();
    assert_eq!(reg.lease_expiries, 0, "{reg:#?}");
    c.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Deactivate,
        target: Target::All,
    });
    assert!(emu.queue(app.pid, q).active);
    app.stop();
    app.finish();
}
