//! Request hints (docs/shim.md, "Request hints"): a latency client that calls
//! `kfdq_request_begin` / `kfdq_request_end` through `shim/include/kfdq.h` (looked up at run
//! time; the program does not link the shim) next to a batch flood, under the real shim and
//! the real kfdqd on kfd-emu. The Python package (python/) runs the same steps through ctypes
//! (`python_*`, and the cases without an agent or without the shim).

mod common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::kfdqd::{Agent, agents_path, batch_flood, two_classes};
use common::*;
use kfdq::Pid;
use nix::sys::signal::Signal;

/// `kfdq_status` (shim/include/kfdq.h).
const OK: &str = "0";
const NO_SHIM: &str = "-1";
const NO_AGENT: &str = "-2";
const NOT_ALLOWED: &str = "-3";
const NOT_BEGUN: &str = "-4";

/// The hinting clients: `programs/hint.c` (C, through shim/include/kfdq.h) and
/// `programs/hint.py` (the Python package, python/, through ctypes), with the same steps.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Lang {
    C,
    Python,
}

/// What the clients are built into, once per test binary.
struct Built {
    hint: PathBuf,
    ops: PathBuf,
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kfdq-shim-hint-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("program dir");
        let hint = dir.join("hint");
        let include = format!("-I{}", manifest.join("include").display());
        fakehip::compile_program(
            &manifest.join("tests/programs/hint.c"),
            &hint,
            &["-Wextra", "-Werror", "-pthread", &include],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let ops = dir.join("libkfdqtest_hintops.so");
        fakehip::compile_program(
            &manifest.join("tests/programs/hintops.c"),
            &ops,
            &["-shared", "-fPIC", "-Wextra", "-Werror"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        Built { hint, ops }
    })
}

/// The client in `lang` with the request's shape (4 dispatches of 2560 work-groups x 2 ms).
fn launch(lang: Lang) -> Launch<'static> {
    let shape = ["4", "2000", "2560"];
    match lang {
        Lang::C => Launch::new(built().hint.clone()).args(shape),
        Lang::Python => {
            let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
            let repo = manifest.parent().expect("the shim is in the workspace");
            Launch::new(PathBuf::from("python3"))
                .arg(
                    manifest
                        .join("tests/programs/hint.py")
                        .display()
                        .to_string(),
                )
                .arg(built().ops.display().to_string())
                .args(shape)
                .env("PYTHONPATH", repo.join("python").display().to_string())
        }
    }
}

/// The latency class's hint bound for these tests: long enough that no hint expires while a
/// test looks (the expiry test keeps the default).
fn with_hint_timeout(config: String, ms: u32) -> String {
    config.replacen(
        "priority = 13\n",
        &format!("priority = 13\nhint_timeout_ms = {ms}\n"),
        1,
    )
}

/// The hinting client in `lang` and `class`, told `agent`'s socket if given (and, under the
/// shim, connected to it); returned once past its warm-up.
fn client(emu: &Emu, agent: Option<&Agent>, class: &str, preload: bool, lang: Lang) -> App {
    let mut l = launch(lang).env("KFDQ_CLASS", class);
    if let Some(a) = agent {
        l = l.env("KFDQ_SOCKET", a.sock.display().to_string());
        if preload {
            // The agent's allowance may be on its way when the test lets it begin.
            l = l.env("HINT_WAIT_AGENT", "1");
        }
    }
    l.preload = preload;
    let mut app = l.start(emu);
    app.wait_line("CHECKPOINT ready");
    if let Some(a) = agent.filter(|_| preload) {
        a.wait_connected(app.pid, 1);
    }
    app
}

/// The value a `<tag> <rc>` line printed.
fn rc(app: &mut App, tag: &str) -> String {
    let l = app.wait_line(&format!("{tag} "));
    l[tag.len() + 1..].to_string()
}

fn runs(q: QueueStats) -> bool {
    q.active && !q.suspended
}

fn process_running(agent: &Agent, pid: u32) {
    agent.wait(&format!("pid {pid} running in the agent's view"), |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(pid) && p.state == "running")
    });
}

/// The hint preempts the batch job before the client's first launch of the request (its
/// queue has completed nothing since its warm-up, the batch queue is off in the emulator), and
/// its end releases the batch job through the release rule.
fn preempts_before_the_first_launch(config: &str, lang: Lang) {
    let emu = mount();
    let agent = Agent::start(&emu, &with_hint_timeout(config.to_string(), 60_000));
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    let mut hp = client(&emu, Some(&agent), "latency", true, lang);
    assert_eq!(hp.wait_line("symbols"), "symbols 1 1");
    let hq = agent.process(hp.pid).unwrap().queues[0].queue_id.0;
    // (Its warm-up may have preempted the batch job already.)
    wait_for("the batch queue runnable", || runs(emu.queue(lp.pid, q)));
    let before = agent.status().counters;
    let done = emu.queue(hp.pid, hq).packets_done;
    hp.release("ready");
    assert_eq!(rc(&mut hp, "begin"), OK);
    wait_for("the batch queue preempted by the hint", || {
        !runs(emu.queue(lp.pid, q))
    });
    // No launch of the request yet: it waits at its "work" checkpoint.
    assert_eq!(emu.queue(hp.pid, hq).packets_done, done);
    let st = agent.wait("the hint taken", |s| s.counters.hints > before.hints);
    let p = st.processes.iter().find(|p| p.pid == Pid(hp.pid)).unwrap();
    assert!(p.queues.iter().all(|q| q.busy), "{p:?}");
    // The request runs and ends: the batch job runs again, and nothing expired.
    hp.release("work");
    hp.release("end");
    hp.wait_line("worked");
    assert_eq!(rc(&mut hp, "end"), OK);
    assert_eq!(rc(&mut hp, "end2"), NOT_BEGUN);
    wait_for("the batch queue runnable after the end", || {
        runs(emu.queue(lp.pid, q))
    });
    process_running(&agent, lp.pid);
    let c = agent.status().counters;
    assert_eq!(c.hint_expiries, before.hint_expiries, "{c:?}");
    // Eight threads hint 1000 times each: every begin is taken and matched, and the count
    // comes back to none open (an end more finds none).
    hp.release("threads");
    assert_eq!(
        hp.wait_line("threads"),
        "threads 8000 8000",
        "{:?}",
        agent.status().counters
    );
    assert_eq!(rc(&mut hp, "after"), NOT_BEGUN);
    hp.release("done");
    hp.finish();
    wait_for("the batch queue runnable at the end", || {
        runs(emu.queue(lp.pid, q))
    });
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_hint_preempts_before_the_first_launch_and_its_end_releases_direct_edges() {
    preempts_before_the_first_launch(&two_classes("deactivate"), Lang::C);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn python_a_hint_preempts_before_the_first_launch_and_its_end_releases() {
    preempts_before_the_first_launch(&two_classes("deactivate"), Lang::Python);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_hint_preempts_before_the_first_launch_and_its_end_releases_agents_commands() {
    preempts_before_the_first_launch(&agents_path("deactivate"), Lang::C);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_batch_process_hint_is_refused_and_preempts_nobody() {
    batch_refused(Lang::C);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn python_a_batch_process_hint_is_refused_and_preempts_nobody() {
    batch_refused(Lang::Python);
}

fn batch_refused(lang: Lang) {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    let mut hp = launch(lang)
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(&emu);
    hp.wait_line("CHECKPOINT ready");
    agent.wait_connected(hp.pid, 1);
    wait_for("the batch queue runnable", || runs(emu.queue(lp.pid, q)));
    hp.release("ready");
    assert_eq!(rc(&mut hp, "begin"), NOT_ALLOWED);
    let st = agent.status();
    assert_eq!((st.counters.hints, st.counters.preempts), (0, 0), "{st:?}");
    assert!(runs(emu.queue(lp.pid, q)));
    hp.go();
    assert_eq!(rc(&mut hp, "end"), NOT_BEGUN);
    hp.finish();
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_hint_never_followed_by_work_expires_and_the_batch_job_runs_again() {
    expires(Lang::C);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn python_a_hint_never_followed_by_work_expires_and_the_batch_job_runs_again() {
    expires(Lang::Python);
}

fn expires(lang: Lang) {
    let emu = mount();
    // The default bound (50 ms).
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    let mut hp = client(&emu, Some(&agent), "latency", true, lang);
    wait_for("the batch queue runnable", || runs(emu.queue(lp.pid, q)));
    let before = agent.status().counters;
    hp.release("ready");
    assert_eq!(rc(&mut hp, "begin"), OK);
    // The hint preempted it, then expired (the agent counts it, whichever side saw it
    // first), and the batch job runs again while the client still waits with its hint open.
    let st = agent.wait("the hint expired", |s| {
        s.counters.hint_expiries > before.hint_expiries
    });
    assert!(
        st.counters.direct_preempts + st.counters.preempts
            > before.direct_preempts + before.preempts,
        "the hint preempted nobody: {:?}",
        st.counters
    );
    wait_for("the batch queue runnable after the expiry", || {
        runs(emu.queue(lp.pid, q))
    });
    process_running(&agent, lp.pid);
    assert!(!hp.has_line("worked"));
    // Its end comes too late: no hint is open.
    hp.release("work");
    hp.release("end");
    assert_eq!(rc(&mut hp, "end"), NOT_BEGUN);
    hp.go();
    let (_, stderr) = hp.finish();
    assert!(stderr.contains("request hint was open"), "{stderr}");
    lp.stop();
    lp.finish();
}

/// A hinting client killed (SIGKILL) or stopped (SIGSTOP) with its hint open releases the
/// batch job: its connection closes, or its reports go stale (the bound is a minute here).
fn gone_while_hinting(sig: Signal, lang: Lang) {
    let emu = mount();
    let agent = Agent::start(&emu, &with_hint_timeout(two_classes("deactivate"), 60_000));
    let (lp, q) = batch_flood(&emu, &agent, "batch");
    let mut hp = client(&emu, Some(&agent), "latency", true, lang);
    wait_for("the batch queue runnable", || runs(emu.queue(lp.pid, q)));
    hp.release("ready");
    assert_eq!(rc(&mut hp, "begin"), OK);
    wait_for("the batch queue preempted by the hint", || {
        !runs(emu.queue(lp.pid, q))
    });
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(hp.pid as i32), sig).unwrap();
    wait_for("the batch queue runnable with the client gone", || {
        runs(emu.queue(lp.pid, q))
    });
    process_running(&agent, lp.pid);
    let c = agent.status().counters;
    if sig == Signal::SIGSTOP {
        assert!(c.stale_busy >= 1, "{c:?}");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(hp.pid as i32), Signal::SIGKILL).unwrap();
    }
    let _ = hp.child.wait();
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_client_killed_while_hinting_releases_everyone() {
    gone_while_hinting(Signal::SIGKILL, Lang::C);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn python_a_client_killed_while_hinting_releases_everyone() {
    gone_while_hinting(Signal::SIGKILL, Lang::Python);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_client_stopped_while_hinting_releases_everyone() {
    gone_while_hinting(Signal::SIGSTOP, Lang::C);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn without_an_agent_the_hint_says_so_and_changes_nothing() {
    for lang in [Lang::C, Lang::Python] {
        without_an_agent(lang);
    }
}

fn without_an_agent(lang: Lang) {
    let emu = mount();
    let mut hp = client(&emu, None, "latency", true, lang);
    assert_eq!(hp.wait_line("symbols"), "symbols 1 1");
    hp.go();
    assert_eq!(rc(&mut hp, "begin"), NO_AGENT);
    hp.wait_line("worked");
    assert_eq!(rc(&mut hp, "end"), NO_AGENT);
    assert_eq!(hp.wait_line("threads"), "threads 0 0");
    hp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn without_the_shim_the_helpers_say_so_with_or_without_an_agent() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    for (socket, lang) in [None, Some(&agent)]
        .into_iter()
        .flat_map(|s| [(s, Lang::C), (s, Lang::Python)])
    {
        let mut hp = client(&emu, socket, "latency", false, lang);
        assert_eq!(hp.wait_line("symbols"), "symbols 0 0");
        hp.go();
        assert_eq!(rc(&mut hp, "begin"), NO_SHIM);
        hp.wait_line("worked");
        assert_eq!(rc(&mut hp, "end"), NO_SHIM);
        assert_eq!(rc(&mut hp, "after"), NO_SHIM);
        hp.finish();
    }
}

#[test]
fn the_shim_exports_both_functions_unversioned() {
    let out = std::process::Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(shim_path())
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for f in ["kfdq_request_begin", "kfdq_request_end"] {
        assert!(
            text.lines().any(|l| l.ends_with(&format!(" T {f}"))),
            "{f} is not a defined function of the shim's dynamic symbols:\n{text}"
        );
    }
}
