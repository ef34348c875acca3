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
