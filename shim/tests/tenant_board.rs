//! Tenants who do not cooperate, on the direct-edge board (issue 50 items 3, 4, 6; docs/agent.md
//! "Threat model: the direct-edge board and the guards"): a writer that truncates its board,
//! writes slots not its own, forges a busy slot or keeps writing after it lost its class; a
//! root watcher that re-modes and reopens its read-only board; an agent restart that numbers the
//! boards anew. Real processes under the real shim and the real agent on kfd-emu, beside a
//! forger that speaks the protocol itself (`common::forger`).

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::time::Duration;

use common::forger::Forger;
use common::kfdqd::{Agent, batch_flood, two_classes};
use common::*;
use kfdq::kfd::board::{BoardMap, seal_writes};
use kfdq::proto::board::SLOTS;
use kfdq::proto::control::{Reply, Request};
use kfdq::proto::{AgentMsg, ShimMsg};
use kfdq::{GpuId, Pid};
use test_support::wait::wait_until;

/// How long a "nothing happens" check watches: five of a watch thread's looks (it looks at
/// least every 100 ms, and at once on every change of the board's counter).
const NOTHING_FOR: Duration = Duration::from_millis(500);

fn config() -> String {
    two_classes("deactivate").replacen("[agent]\n", "[agent]\ndirect_edges = true\n", 1)
}

/// The idle latency client (`programs/latency.c`), a writer of its own board, waiting at
/// "ready".
fn idle_latency(emu: &Emu, agent: &Agent) -> App {
    latency_client(emu, agent, "1")
}

/// [`idle_latency`] with `requests` requests of one 40 ms dispatch, 300 ms apart.
fn latency_client(emu: &Emu, agent: &Agent, requests: &str) -> App {
    let mut hp = Launch::new(programs().get("latency"))
        .args([requests, "300", "1", "40000", "80"])
        .env("KFDQ_CLASS", "latency")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(emu);
    hp.wait_line("CHECKPOINT ready");
    agent.wait_connected(hp.pid, 1);
    hp
}

/// Lets the idle latency client run its request and exit, and stops the batch job.
fn end(hp: App, lp: App) {
    hp.release("ready");
    hp.release("done");
    hp.finish();
    lp.stop();
    lp.finish();
}

fn gpu_of(agent: &Agent, pid: u32) -> GpuId {
    agent.process(pid).unwrap().queues[0].gpu_id
}

/// A forger in class latency: its board's writable descriptor, mapped (and, like a shim,
/// sealed and said so: the agent then hands its board to watchers).
fn forging_writer(emu: &Emu, agent: &Agent, gpu: GpuId) -> (Forger, std::fs::File, u32, u32) {
    let mut f = Forger::connect(&agent.sock, "latency", emu.root(), gpu);
    let (board, slot) = f.until(|m| match m {
        AgentMsg::BoardWriter { board, slot } => Some((*board, *slot)),
        _ => None,
    });
    let fd = std::fs::File::from(f.fds.pop().expect("the writer's descriptor"));
    (f, fd, board, slot)
}

fn seal_and_say(f: &mut Forger, fd: &std::fs::File, board: u32) -> BoardMap {
    let map = BoardMap::map(fd, true).expect("the writer maps its board");
    // An agent that does not seal its boards refuses the seal; the forger goes on regardless.
    let _ = seal_writes(fd);
    f.send(&ShimMsg::BoardSealed { board });
    map
}

fn alive(app: &mut App) -> bool {
    app.child.try_wait().unwrap().is_none()
}

fn batch_preempted(emu: &Emu, pid: u32, q: u32) -> bool {
    !emu.queue(pid, q).active
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_writer_can_neither_resize_its_board_nor_raise_another_writers_slot() {
    let emu = mount();
    let agent = Agent::start(&emu, &config());
    let (mut lp, q) = batch_flood(&emu, &agent, "batch");
    let mut hp = idle_latency(&emu, &agent);
    let gpu = gpu_of(&agent, lp.pid);
    let (mut f, fd, board, slot) = forging_writer(&emu, &agent, gpu);
    let map = seal_and_say(&mut f, &fd, board);
    // The batch job watches the real latency client (and the forger).
    agent.wait("the batch job subscribed", |s| {
        s.counters.direct_subscriptions >= 1
    });
    wait_for("the batch queue active", || {
        !batch_preempted(&emu, lp.pid, q)
    });
    // (The latency client's start-up work may have preempted the batch job already.)
    let before = agent
        .wait("every self-preempt released", |s| {
            s.counters.direct_releases >= s.counters.direct_preempts
        })
        .counters;
    // Truncation (which made every mapper die of SIGBUS) and growth are refused.
    assert!(fd.set_len(0).is_err(), "ftruncate(0) of the writer's board");
    assert!(
        fd.set_len(1 << 20).is_err(),
        "ftruncate(1 MiB) of the board"
    );
    // Every slot but its own raised busy: none is another writer's.
    for i in (0..SLOTS).filter(|i| *i != slot) {
        map.flip(i, true);
    }
    assert!(
        !wait_until(NOTHING_FOR, || batch_preempted(&emu, lp.pid, q)),
        "the batch job preempted itself for slots the forger does not own"
    );
    // Nobody died: the batch job and the latency client (which map boards) are alive.
    assert!(alive(&mut lp) && alive(&mut hp), "a neighbour died");
    drop(f);
    let st = agent.status();
    assert_eq!(
        st.counters.direct_preempts, before.direct_preempts,
        "{:?}",
        st.counters
    );
    end(hp, lp);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_root_watcher_cannot_make_its_read_only_board_writable() {
    let emu = mount();
    let agent = Agent::start(&emu, &config());
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    let hp = idle_latency(&emu, &agent);
    let gpu = gpu_of(&agent, lp.pid);
    // A batch forger (root: the tests run as root) watches the latency client's board.
    let mut f = Forger::connect(&agent.sock, "batch", emu.root(), gpu);
    f.until(|m| matches!(m, AgentMsg::Watch { .. }).then_some(()));
    let ro = f.fds.pop().expect("the watch carries a descriptor");
    wait_for("the batch queue active", || {
        !batch_preempted(&emu, lp.pid, q)
    });
    // Root re-modes the memfd and reopens it read-write through /proc/self/fd.
    let chmod = nix::sys::stat::fchmod(&ro, nix::sys::stat::Mode::from_bits_truncate(0o600));
    let rw = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/self/fd/{}", ro.as_raw_fd()));
    // Whatever it got (the reopen may succeed), nothing writes the board.
    if let Ok(rw) = &rw {
        let wrote = rw.write_at(&1u32.to_ne_bytes(), 64);
        assert!(
            wrote.is_err(),
            "pwrite through the reopened board: {wrote:?}"
        );
        assert!(
            rw.set_len(0).is_err(),
            "ftruncate through the reopened board"
        );
        let mapped = BoardMap::map(rw, true);
        assert!(
            mapped.is_err(),
            "a writable shared mapping of the reopened board"
        );
    }
    eprintln!(
        "fchmod: {chmod:?}; reopen read-write: {:?}",
        rw.as_ref().err()
    );
    assert!(
        !wait_until(NOTHING_FOR, || batch_preempted(&emu, lp.pid, q)),
        "the batch job preempted itself"
    );
    drop(f);
    end(hp, lp);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_forged_busy_slot_is_cleared_and_the_watcher_runs_again() {
    let emu = mount();
    let agent = Agent::start(&emu, &config());
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    let gpu = gpu_of(&agent, lp.pid);
    let (mut f, fd, board, slot) = forging_writer(&emu, &agent, gpu);
    let map = seal_and_say(&mut f, &fd, board);
    agent.wait("the batch job subscribed to the forger's board", |s| {
        s.counters.direct_subscriptions >= 1
    });
    // Busy on the board, idle to the agent (no doorbell, no busy report): forged.
    assert!(map.flip(slot, true));
    wait_for("the batch job preempted itself for the forged slot", || {
        batch_preempted(&emu, lp.pid, q)
    });
    // The agent clears it (warns, counts) and the batch job runs again.
    let st = agent.wait("the forged slot cleared", |s| s.counters.direct_forged >= 1);
    let me = st
        .processes
        .iter()
        .find(|p| p.pid == Pid::this())
        .expect("the forger in the status");
    assert!(
        me.warnings.iter().any(|w| w.contains("forged")),
        "{:?}",
        me.warnings
    );
    wait_for("the batch queue active again", || {
        !batch_preempted(&emu, lp.pid, q)
    });
    drop(map);
    drop(f);
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_writer_moved_to_a_class_that_preempts_nobody_raises_nobody() {
    let emu = mount();
    let agent = Agent::start(&emu, &config());
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    let hp = idle_latency(&emu, &agent);
    let gpu = gpu_of(&agent, lp.pid);
    agent.wait("the batch job subscribed", |s| {
        s.counters.direct_subscriptions >= 1
    });
    wait_for("the batch queue active", || {
        !batch_preempted(&emu, lp.pid, q)
    });
    let (mut f, fd, board, _) = forging_writer(&emu, &agent, gpu);
    // The node admin moves the forger to batch (it preempts nobody now) before it sealed its
    // board: the agent takes its board back, and hands it to nobody.
    let r = agent.request(&Request::SetClass {
        pid: Pid::this(),
        class: "batch".into(),
    });
    assert!(matches!(r, Reply::Done { .. }), "{r:?}");
    f.until(|m| matches!(m, AgentMsg::Edges { on: false, .. }).then_some(()));
    let map = seal_and_say(&mut f, &fd, board);
    // The agent read the forger's line (a status request after it is answered after it).
    agent.wait("the forger in class batch", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid::this() && p.class == "batch")
    });
    // Every slot its old descriptor reaches, raised busy.
    for i in 0..SLOTS {
        map.flip(i, true);
    }
    assert!(
        !wait_until(NOTHING_FOR, || batch_preempted(&emu, lp.pid, q)),
        "the batch job preempted itself for a demoted writer's board"
    );
    drop(f);
    end(hp, lp);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_after_an_agent_restart_the_watch_maps_the_new_board() {
    let emu = mount();
    let mut agent = Agent::start(&emu, &config());
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    // Five requests: a watch thread starved past the agent's grace on a loaded host costs one.
    let mut hp = latency_client(&emu, &agent, "5");
    agent.wait("the batch job subscribed", |s| {
        s.counters.direct_subscriptions >= 1
    });
    // The agent killed and started again: every board is new, numbered from the start again.
    agent.signal(nix::sys::signal::Signal::SIGKILL);
    agent.restart();
    agent.wait_connected(lp.pid, 1);
    agent.wait_connected(hp.pid, 1);
    agent.wait("the batch job subscribed to the new agent's board", |s| {
        s.counters.direct_subscriptions >= 1
    });
    wait_for("the batch queue active", || {
        !batch_preempted(&emu, lp.pid, q)
    });
    // The latency request: the batch job preempts itself from the new board.
    hp.release("ready");
    hp.wait_line("latency ");
    let st = agent.wait("the batch job preempted itself", |s| {
        s.counters.direct_preempts >= 1
    });
    assert!(st.counters.direct_preempts >= 1);
    hp.release("done");
    hp.finish();
    lp.stop();
    lp.finish();
}
