//! Tenants who do not cooperate, at the tracer (issue 50 item 10; docs/agent.md "Processes
//! without the shim"): a process that asked not to be traced — non-dumpable, root's too — is
//! left alone, with the reason shown. (The tracer also checks, once it seized a pid, that it is the
//! process discovery found: its start time, `src/agent/tracer/attach.rs`.)

mod common;

use common::kfdqd::Agent;
use common::traced::CONFIG;
use common::*;
use kfdq::proto::control::Control;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_non_dumpable_process_is_left_alone_by_the_tracer() {
    // A user other than root: its /proc entry turns root's.
    non_dumpable_left_alone(Some(65534));
}

/// Root's non-dumpable process: its /proc entry is root's either way; the kernel's pidfd
/// answer (`PIDFD_GET_INFO`, Linux 6.16) tells it.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_non_dumpable_process_of_root_is_left_alone_by_the_tracer() {
    non_dumpable_left_alone(None);
}

/// A flood without the shim that makes itself non-dumpable (as ssh-agent or a set-id program
/// is), run as `uid` (root if `None`), is left alone with the reason and traced by nobody.
fn non_dumpable_left_alone(uid: Option<u32>) {
    let emu = mount();
    let agent = Agent::start(&emu, CONFIG);
    let mut l = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_FLOOD_NODUMP", "1");
    if let Some(u) = uid {
        l = l.uid(u);
    }
    l.preload = false;
    let mut app = l.start(&emu);
    app.wait_line("flooding");
    {
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(format!("/proc/{}/status", app.pid))
            .unwrap()
            .uid();
        assert_eq!(owner, 0, "non-dumpable: its /proc files are root's");
    }
    let fd = kfdq::kfd::pidfd::open(app.pid).unwrap();
    if uid.is_none() && kfdq::kfd::pidfd::dumpable(&fd).is_none() {
        // Nothing tells it apart on this kernel: docs/agent.md says it is traced as before.
        panic!("this kernel (before Linux 6.16) does not tell root's non-dumpable processes apart");
    }
    let s = agent.wait("the non-dumpable flood left alone", |s| {
        s.left_alone.iter().any(|l| l.pid.0 == app.pid)
    });
    let l = s.left_alone.iter().find(|l| l.pid.0 == app.pid).unwrap();
    assert!(l.reason.contains("not dumpable"), "{l:?}");
    assert!(
        s.processes
            .iter()
            .all(|p| p.pid.0 != app.pid || p.control != Control::Tracer),
        "{:?}",
        s.processes
    );
    assert_eq!(
        kfdq::kfd::ptrace::tracer_of(app.pid),
        Some(0),
        "nobody traces it"
    );
    app.stop();
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(app.pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    let _ = app.child.wait();
}

/// The tracer's start-time check (`TracerError::Reused`, `src/agent/tracer/attach.rs`) with real
/// processes: discovery finds a GPU process without the shim and hands its pid to the tracer;
/// before the tracer seizes it, the process exits and another takes its pid (clone3
/// `set_tid`, `programs/reuse.c`). The tracer must detach the newcomer at once and leave it
/// unharmed. The race is made certain by holding the agent's tracer thread — only it — in a
/// ptrace stop of this test's while discovery hands over the pid and the pid changes hands.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_pid_reused_before_the_tracer_seizes_it_is_left_unharmed() {
    use nix::sys::ptrace;
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    use nix::unistd::Pid as NixPid;

    let emu = mount();
    let agent = Agent::start(&emu, CONFIG);
    // A first process without the shim: the agent starts its tracer thread for it.
    let mut first = common::traced::shimless_ahead(&emu, "batch", 2);
    agent.wait("the first flood traced", |s| {
        s.processes
            .iter()
            .any(|p| p.pid.0 == first.pid && p.control == Control::Tracer)
    });
    let tracer = std::fs::read_dir(format!("/proc/{}/task", agent.child.id()))
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "kfdqd-tracer")
        })
        .expect("kfdqd's tracer thread")
        .file_name()
        .to_string_lossy()
        .parse::<i32>()
        .unwrap();
    let tracer = NixPid::from_raw(tracer);
    // Hold the tracer thread (the rest of kfdqd runs on: its scans, its socket).
    ptrace::seize(tracer, ptrace::Options::empty()).expect("seize kfdqd's tracer thread");
    ptrace::interrupt(tracer).expect("PTRACE_INTERRUPT");
    match waitpid(tracer, Some(WaitPidFlag::__WALL)).expect("wait for its stop") {
        WaitStatus::PtraceEvent(..) | WaitStatus::Stopped(..) => {}
        other => panic!("the tracer thread did not stop: {other:?}"),
    }
    // The process discovery will find, under a launcher that can give its pid to another.
    let mut l = Launch::new(programs().get("reuse"))
        .arg(programs().get("flood").display().to_string())
        .args(["2000", "64", "2"])
        .env("KFDQ_CLASS", "batch");
    l.preload = false;
    let mut app = l.start(&emu);
    let num = |l: String| -> u32 { l.split_whitespace().nth(1).unwrap().parse().unwrap() };
    let pid = num(app.wait_line("first "));
    app.wait_line("flooding");
    // Discovery settled on it and handed its pid (and start time) to the held tracer thread.
    let handed = format!("pid={pid}");
    test_support::wait::wait_state(
        "discovery to hand the pid to the tracer",
        WAIT_LIMIT,
        || agent.log_text(),
        |log| {
            log.lines()
                .any(|l| l.contains("tracer: seizing") && l.split_whitespace().any(|w| w == handed))
        },
    );
    // Now the process exits and another takes its pid.
    app.release("reuse");
    let second = num(app.wait_line("second "));
    assert_eq!(second, pid, "clone3 set_tid gave the newcomer the pid");
    ptrace::detach(tracer, None).expect("let the tracer thread go");
    let s = agent.wait("the newcomer left alone as another process", |s| {
        s.left_alone.iter().any(|l| l.pid.0 == pid)
    });
    let left = s.left_alone.iter().find(|l| l.pid.0 == pid).unwrap();
    assert!(left.reason.contains("reused"), "{left:?}");
    // Unharmed: traced by nobody, not stopped, and it runs to its end and exits 0.
    assert_eq!(
        kfdq::kfd::ptrace::tracer_of(pid),
        Some(0),
        "nobody traces it"
    );
    let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let state = state.rsplit(") ").next().unwrap().chars().next().unwrap();
    assert!(
        !matches!(state, 't' | 'T'),
        "the newcomer is stopped ({state})"
    );
    app.release("end");
    assert_eq!(app.wait_line("second exited "), "second exited 0");
    assert!(
        agent
            .status()
            .processes
            .iter()
            .all(|p| p.pid.0 != pid || p.control != Control::Tracer),
        "the newcomer is not controlled"
    );
    app.finish();
    first.stop();
    let _ = first.child.kill();
    let _ = first.child.wait();
}
