//! Direct edges (`[agent] direct_edges = true`, docs/agent.md "Direct edges"): the latency
//! launch publishes its busy edge on the agent's edge board and the batch job, subscribed by
//! the agent, deactivates itself without the agent's hop; the agent's view follows its
//! reports. Real processes under the real shim and the real agent, on kfd-emu.

mod common;

use std::os::fd::AsRawFd;

use common::forger::Forger;
use common::kfdqd::{Agent, batch_flood, two_classes};
use common::*;
use kfdq::Pid;
use kfdq::proto::AgentMsg;
use nix::sys::signal::Signal;

/// The activity period of these tests: the longest the shim accepts, so that a sampled report
/// would come up to 100 ms after the sample that follows a command.
const SLOW_SAMPLING_US: &str = "100000";

/// Two classes (latency over batch at level 2) with direct edges on.
fn direct_config() -> String {
    direct_config_at("deactivate")
}

/// Two classes (latency over batch at `level`) with direct edges on.
fn direct_config_at(level: &str) -> String {
    two_classes(level).replacen("[agent]\n", "[agent]\ndirect_edges = true\n", 1)
}

/// The latency client (`programs/latency.c` with `args`) in class `latency`, sampled every
/// 100 ms, waiting at its "ready" checkpoint; returned once the agent has it.
fn latency_client(emu: &Emu, agent: &Agent, args: [&str; 5]) -> App {
    let mut hp = Launch::new(programs().get("latency"))
        .args(args)
        .env("KFDQ_CLASS", "latency")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .env("KFDQ_ACTIVITY_US", SLOW_SAMPLING_US)
        .start(emu);
    hp.wait_line("CHECKPOINT ready");
    agent.wait_connected(hp.pid, 1);
    hp
}

/// The batch job's watch of the latency board is in place (a subscription sent, and the
/// batch job's shim has it: its watch thread reports through its control thread, which
/// listens from then on).
fn wait_subscribed(agent: &Agent, n: u64) {
    agent.wait("the batch job subscribed to the latency board", |s| {
        s.counters.direct_subscriptions >= n
    });
}

/// `pid`'s watch thread (`kfdq-shim-watch`) exists and sleeps in `FUTEX_WAIT` on the board:
/// the next busy edge wakes it, instead of finding it still starting (its thread created, the
/// board mapped) on a loaded host.
fn wait_watching(pid: u32) {
    let watching = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        tasks.flatten().any(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            // The first field of `syscall` is the number of the call the thread blocks in.
            let call = std::fs::read_to_string(t.path().join("syscall")).unwrap_or_default();
            comm.trim() == "kfdq-shim-watch"
                && call.split(' ').next() == Some(&libc::SYS_futex.to_string())
        })
    };
    wait_for(
        "the batch job's watch thread waiting on the board",
        watching,
    );
}

/// How many of `p`'s warnings say that its watch was late and the agent preempted it (the
/// agent's fallback after `SELF_GRACE`, docs/agent.md "Direct edges").
fn late_watches(p: &kfdq::proto::control::ProcessStatus) -> usize {
    p.warnings
        .iter()
        .filter(|w| w.contains("did not deactivate"))
        .count()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_batch_job_deactivates_itself_on_the_latency_launch() {
    preempts_itself("deactivate");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_batch_job_suspends_itself_on_the_latency_launch() {
    preempts_itself("suspend");
}

/// Three latency requests; the batch job, at `level`, preempts and releases itself for each.
fn preempts_itself(level: &str) {
    let emu = mount();
    let agent = Agent::start(&emu, &direct_config_at(level));
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    // Three requests of one 40 ms dispatch, 300 ms apart, sampled every 100 ms.
    let mut hp = latency_client(&emu, &agent, ["3", "300", "1", "40000", "80"]);
    wait_subscribed(&agent, 1);
    wait_watching(lp.pid);
    // (Its start-up work may have preempted the batch job already.)
    let runs = |q: QueueStats| q.active && !q.suspended;
    wait_for("the batch queue runnable", || runs(emu.queue(lp.pid, q)));
    let before = agent.status();
    let late_before = late_watches(
        before
            .processes
            .iter()
            .find(|p| p.pid == Pid(lp.pid))
            .unwrap(),
    );
    let before = before.counters;
    hp.release("ready");
    hp.wait_line("latency ");
    // Each request: the batch job deactivated itself and reactivated itself (its reports).
    let st = agent.wait("three self-preempts and self-releases", |s| {
        s.counters.direct_preempts >= before.direct_preempts + 3
            && s.counters.direct_releases >= before.direct_releases + 3
    });
    // The agent heard every busy edge (the relay rang the doorbell) and sent no command of
    // its own — no preempt, no release — except where a watch had not reported within
    // `SELF_GRACE` (a loaded host can delay the watch's wake-up and ioctl that long): then
    // the agent preempted it and said so, once per such request, and the watch's own report
    // still came (counted above).
    let p = st.processes.iter().find(|p| p.pid == Pid(lp.pid)).unwrap();
    let late = late_watches(p) - late_before;
    assert_eq!(
        st.counters.commands - before.commands,
        late as u64,
        "every command of the agent's is an announced fallback: {st:#?}"
    );
    assert!(
        st.counters.doorbell_edges >= before.doorbell_edges + 3,
        "{:?}",
        st.counters
    );
    let lp_class = st.classes.iter().find(|c| c.name == "batch").unwrap();
    assert!(lp_class.preempted_s > 0.0, "{lp_class:?}");
    wait_for("the batch queue runnable after the last request", || {
        runs(emu.queue(lp.pid, q))
    });
    agent.wait("the batch job running in the agent's view", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(lp.pid) && p.state == "running")
    });
    hp.release("done");
    hp.finish();
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_batch_process_cannot_write_the_board_it_watches() {
    let emu = mount();
    let agent = Agent::start(&emu, &direct_config());
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    // An idle latency process: a writer of the latency board.
    let hp = latency_client(&emu, &agent, ["1", "0", "1", "40000", "80"]);
    let gpu = agent.process(lp.pid).unwrap().queues[0].gpu_id;
    let mut forger = Forger::connect(&agent.sock, "batch", emu.root(), gpu);
    // The agent subscribes the forger too: a watch with a read-only descriptor.
    let slots = loop {
        if let AgentMsg::Watch { slots, .. } = forger.next() {
            break slots;
        }
    };
    assert!(!slots.is_empty());
    let fd = forger.fds.pop().expect("the watch carries a descriptor");
    // The latency job's start-up work is over (it may have preempted the batch job).
    wait_for("the batch queue active", || emu.queue(lp.pid, q).active);
    let before = agent
        .wait("every self-preempt released", |s| {
            s.counters.direct_releases >= s.counters.direct_preempts
        })
        .counters;
    // Raising a slot through the descriptor or a writable mapping of it fails.
    let file = std::fs::File::from(fd);
    let wrote = std::os::unix::fs::FileExt::write_at(&file, &1u32.to_ne_bytes(), 64);
    assert!(
        wrote.is_err(),
        "pwrite on the watcher's descriptor: {wrote:?}"
    );
    // SAFETY: a fresh mapping request (null hint); it is expected to fail.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_eq!(
        p,
        libc::MAP_FAILED,
        "a writable shared mapping of the board"
    );
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EACCES)
    );
    // Nor can it reopen the descriptor writable through /proc/self/fd (the memfd's mode is
    // 0400), as a process of another uid: a child that becomes nobody tries.
    let path = std::ffi::CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).unwrap();
    // SAFETY: the child calls only async-signal-safe functions (setgid, setuid, prctl, open,
    // _exit) on data prepared before the fork.
    let child = unsafe { libc::fork() };
    assert!(child >= 0);
    if child == 0 {
        // SAFETY: see above.
        unsafe {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                libc::_exit(2);
            }
            // Its own /proc entries stay its own after the uid change.
            libc::prctl(libc::PR_SET_DUMPABLE, 1);
            let fd = libc::open(path.as_ptr(), libc::O_RDWR);
            let e = *libc::__errno_location();
            libc::_exit(if fd >= 0 {
                1
            } else if e == libc::EACCES {
                0
            } else {
                3
            });
        }
    }
    let mut status = 0;
    // SAFETY: waits for the child just forked; `status` is a valid out pointer.
    assert_eq!(unsafe { libc::waitpid(child, &mut status, 0) }, child);
    assert!(libc::WIFEXITED(status));
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "reopening the board writable as another uid: 0 = refused (EACCES), 1 = it opened, 2 = no setuid, 3 = another error"
    );
    // Nobody was preempted: the batch job's queue active, no self-preempt counted.
    let st = agent.status();
    assert_eq!(
        st.counters.direct_preempts, before.direct_preempts,
        "{:?}",
        st.counters
    );
    assert!(emu.queue(lp.pid, q).active);
    drop(forger);
    hp.release("ready");
    hp.release("done");
    hp.finish();
    lp.stop();
    lp.finish();
}

/// The batch job deactivated by a busy latency flood, through its own watch; returns
/// (latency, batch, batch queue).
fn latency_over_batch(emu: &Emu, agent: &Agent) -> (App, App, u32) {
    let (lp, q) = batch_flood(emu, agent, "batch");
    let (hp, _) = batch_flood(emu, agent, "latency");
    wait_for("the batch queue deactivated", || {
        !emu.queue(lp.pid, q).active
    });
    agent.wait("the batch job's own watch applied it", |s| {
        s.counters.direct_preempts >= 1
    });
    (hp, lp, q)
}

fn wait_running(agent: &Agent, pid: u32) {
    agent.wait("the batch job running in the agent's view", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(pid) && p.state == "running")
    });
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_latency_process_killed_while_busy_releases_the_watching_batch_job() {
    let emu = mount();
    let agent = Agent::start(&emu, &direct_config());
    let (mut hp, lp, q) = latency_over_batch(&emu, &agent);
    hp.child.kill().unwrap();
    let _ = hp.child.wait();
    wait_for("the batch queue active again", || {
        emu.queue(lp.pid, q).active
    });
    wait_running(&agent, lp.pid);
    let st = agent.status();
    assert!(st.counters.direct_cleared >= 1, "{:?}", st.counters);
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_latency_process_stopped_while_busy_releases_the_watching_batch_job() {
    let emu = mount();
    let agent = Agent::start(&emu, &direct_config());
    let (hp, lp, q) = latency_over_batch(&emu, &agent);
    let hp_pid = nix::unistd::Pid::from_raw(hp.pid as i32);
    nix::sys::signal::kill(hp_pid, Signal::SIGSTOP).unwrap();
    let stopped = std::time::Instant::now();
    wait_for("the batch queue active again", || {
        emu.queue(lp.pid, q).active
    });
    let took = stopped.elapsed();
    let st = agent.status();
    assert!(st.counters.stale_busy >= 1, "{:?}", st.counters);
    assert!(st.counters.direct_cleared >= 1, "{:?}", st.counters);
    // The bound: the stale reports (100 ms) and the release rule's hold (20 ms here); the rest
    // is the machine's, so only the lower end is asserted.
    assert!(took >= std::time::Duration::from_millis(100), "{took:?}");
    // Continued, it is busy again and preempts again.
    nix::sys::signal::kill(hp_pid, Signal::SIGCONT).unwrap();
    wait_for("the batch queue deactivated again", || {
        !emu.queue(lp.pid, q).active
    });
    hp.stop();
    hp.finish();
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_agent_killed_releases_the_watching_batch_job() {
    let emu = mount();
    let mut agent = Agent::start(&emu, &direct_config());
    let (hp, mut lp, q) = latency_over_batch(&emu, &agent);
    agent.child.kill().unwrap();
    let _ = agent.child.wait();
    // The session ends with the connection: the watch ends and everything is released,
    // although the latency job is still busy on the board.
    wait_for("the batch queue active again", || {
        emu.queue(lp.pid, q).active
    });
    // The shim writes its registry after the reactivation returned: waited for, not read at once.
    lp.wait_registry(lp.pid, "no queue deactivated in the shim's registry", |r| {
        r.queues.iter().all(|x| !x.deactivated)
    });
    hp.stop();
    hp.finish();
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_hung_agent_leaves_the_watching_batch_job_preempted_no_longer_than_its_lease() {
    let emu = mount();
    let agent = Agent::start(&emu, &direct_config());
    let (mut hp, mut lp, q) = latency_over_batch(&emu, &agent);
    // The agent hangs, then the latency job dies busy: its slot stays busy on the board, and
    // the stopped agent cannot clear it. Only the lease ends the watch's deactivation.
    agent.signal(Signal::SIGSTOP);
    hp.child.kill().unwrap();
    let _ = hp.child.wait();
    let stopped = std::time::Instant::now();
    wait_for("the batch queue active again (the lease ran out)", || {
        emu.queue(lp.pid, q).active
    });
    let took = stopped.elapsed();
    let reg = lp
        .wait_registry(lp.pid, "a lease expiry", |r| r.lease_expiries >= 1)
        .clone();
    assert_eq!(reg.lease_expiries, 1, "one expiry, counted once");
    assert!(
        reg.warnings.iter().any(|w| w.contains("lease expired")),
        "{:?}",
        reg.warnings
    );
    // Renewed every quarter lease (1 s) until the stop: not before three quarters of it.
    assert!(took >= std::time::Duration::from_millis(500), "{took:?}");
    // The agent comes back: it clears the dead writer's slot and sees the batch job running.
    // (Its first renewal may come before it reads the dead connection's end: the watch then
    // acts on the slot still busy on the board once more, until the agent clears it.)
    agent.signal(Signal::SIGCONT);
    agent.wait("the dead writer's slot cleared", |s| {
        s.counters.direct_cleared >= 1
    });
    wait_for("the batch queue active after the agent came back", || {
        emu.queue(lp.pid, q).active
    });
    wait_running(&agent, lp.pid);
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_batch_jobs_own_deactivate_timing_out_is_reported_and_leaves_nobody_preempted() {
    let emu = mount();
    let agent = Agent::start(&emu, &direct_config());
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    let mut hp = latency_client(&emu, &agent, ["3", "300", "1", "40000", "80"]);
    wait_subscribed(&agent, 1);
    wait_for("the batch queue runnable", || {
        let k = emu.queue(lp.pid, q);
        k.active && !k.suspended
    });
    // The next deactivate (the batch job's own, on the latency launch) times out: ETIME, and
    // the partition's reset loses its queues.
    std::fs::write(
        emu.path("kfd-emu/faults"),
        "update_queue=preempt-timeout,times=1",
    )
    .unwrap();
    let before = agent.status().counters;
    hp.release("ready");
    let s = agent.wait("the watch's failed deactivate reported", |s| {
        s.counters.command_failures > before.command_failures
    });
    let p = s.processes.iter().find(|p| p.pid.0 == lp.pid).unwrap();
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("watch of the edge board failed")
                && (w.contains("imer expired") || w.contains("ETIME"))),
        "{:?}",
        p.warnings
    );
    assert_eq!(emu.stats().partitions[0].resets, 1);
    // The latency job's work is lost with the reset: it ends here. Nobody stays preempted.
    hp.child.kill().unwrap();
    let _ = hp.child.wait();
    wait_running(&agent, lp.pid);
    // The agent's view turns to running when it decides; the shim's reactivation reaches the
    // queue after (on a loaded host, seen after the check): wait for it (a queue left
    // deactivated fails the wait).
    wait_for("the batch queue runnable after the reset", || {
        let k = emu.queue(lp.pid, q);
        k.active && !k.suspended
    });
    drop(lp);
}
