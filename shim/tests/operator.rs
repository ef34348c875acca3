//! What a new operator hits (issue 32), each through the real binaries: kfdqd on kfd-emu, the
//! `kfdq` CLI as a process, programs under the shim. Classes the configuration defines work
//! through `kfdq run --class`, `KFDQ_CLASS` and `kfdq class`; the configured priority is what
//! the queues get, also after a move and back; `kfdq run` says which class a command gets or
//! why not before it runs it; a reload that moves a process says so. The rest of what an
//! operator hits is in `operator_cli.rs`; the fixture in `common/operator.rs`.

mod common;

use std::path::Path;

use common::kfdqd::{Agent, text};
use common::operator::{CUSTOM, kfdq, ok, worker};
use common::*;
use nix::sys::signal::Signal;

/// The built-in names with a configured priority that is not the shim's band middle
/// (latency 15, not 13), and two that are (normal 8, batch 3).
const BUILTIN_NAMES: &str = "[agent]\nhysteresis_ms = 20\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 15\nmatch = { env = true }\n\n[[class]]\nname = \"normal\"\nrank = 1\npriority = 8\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nmatch = { env = true }\n";

/// The KFD priorities of `pid`'s compute queues in the emulator (the kernel's view), sorted.
fn priorities(emu: &Emu, pid: u32) -> Vec<u32> {
    let mut v: Vec<u32> = emu
        .stats()
        .queues
        .into_iter()
        .filter(|q| q.pid == pid && q.queue_type.starts_with("compute"))
        .map(|q| q.priority)
        .collect();
    v.sort();
    v
}

fn wait_priorities(emu: &Emu, pid: u32, want: &[u32]) {
    test_support::wait::wait_state(
        &format!("pid {pid}'s queues at priorities {want:?}"),
        WAIT_LIMIT,
        || priorities(emu, pid),
        |p| p == want,
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn configured_classes_work_through_kfdq_run_the_environment_and_kfdq_class() {
    let emu = mount();
    let agent = Agent::start(&emu, CUSTOM);
    let sock = agent.sock.display().to_string();

    // KFDQ_CLASS with a name only the configuration has: the shim passes it on.
    let env = worker(&emu, &agent, &[("KFDQ_CLASS", "inference")]);
    let p = agent.wait_connected(env.pid, 3);
    assert_eq!(p.class, "inference", "{p:?}");
    wait_priorities(&emu, env.pid, &[12, 12, 12]);

    // kfdq run --class: asked first, printed, then run under the shim.
    let shim = shim_path().display().to_string();
    let w = programs().get("worker").display().to_string();
    let mut run = Launch::new(workspace_bin("kfdq")).args([
        "--agent",
        &sock,
        "run",
        "--class",
        "inference",
        "--shim",
        &shim,
        "--",
        &w,
        "300",
    ]);
    run.preload = false;
    let mut run = run.start(&emu);
    run.wait_line("READY");
    let p = agent.wait_connected(run.pid, 3);
    assert_eq!(p.class, "inference", "{p:?}");

    // kfdq class moves it into the other configured class and back; the kernel's queues
    // follow each time.
    let o = agent.kfdq(&["class", &run.pid.to_string(), "train"], None);
    assert!(ok(&o), "{}", text(&o));
    wait_priorities(&emu, run.pid, &[2, 2, 2]);
    let o = agent.kfdq(&["class", &run.pid.to_string(), "inference"], None);
    assert!(ok(&o), "{}", text(&o));
    wait_priorities(&emu, run.pid, &[12, 12, 12]);

    run.stop();
    let (_, stderr) = run.finish();
    assert!(
        stderr.contains("kfdq run: class inference (KFDQ_CLASS=inference): KFD priority 12"),
        "kfdq run says what the process gets: {stderr}"
    );
    env.stop();
    env.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn configured_priorities_hold_for_built_in_names_and_after_a_move_and_back() {
    let emu = mount();
    let mut agent = Agent::start(&emu, BUILTIN_NAMES);
    // latency is configured at 15: every queue gets 15, not the shim's band middle 13.
    let hp = worker(&emu, &agent, &[("KFDQ_CLASS", "latency")]);
    wait_priorities(&emu, hp.pid, &[15, 15, 15]);
    let ps = hp.kfdq_ps(&emu);
    assert!(
        !ps.contains(" 13 "),
        "kfdq ps shows the configured priority: {ps}"
    );

    // batch is configured at its band's middle: the shim's band stands (lo 0, null 3, hi 6).
    let lp = worker(&emu, &agent, &[("KFDQ_CLASS", "batch")]);
    agent.wait_connected(lp.pid, 3);
    wait_priorities(&emu, lp.pid, &[0, 3, 6]);
    let pid = lp.pid.to_string();
    let o = agent.kfdq(&["class", &pid, "normal"], None);
    assert!(ok(&o), "{}", text(&o));
    wait_priorities(&emu, lp.pid, &[8, 8, 8]);
    // Back in batch: compared with what the shim reports (8), not assumed (the band).
    let o = agent.kfdq(&["class", &pid, "batch"], None);
    assert!(ok(&o), "{}", text(&o));
    assert!(!text(&o).contains("nothing to send"), "{}", text(&o));
    wait_priorities(&emu, lp.pid, &[3, 3, 3]);

    // A restarted agent compares too: a queue left at another priority gets its class's.
    let o = agent.kfdq(&["set-priority", &pid, "9"], None);
    assert!(ok(&o), "{}", text(&o));
    wait_priorities(&emu, lp.pid, &[9, 9, 9]);
    agent.signal(Signal::SIGKILL);
    agent.restart();
    agent.wait_connected(lp.pid, 3);
    wait_priorities(&emu, lp.pid, &[3, 3, 3]);
    wait_priorities(&emu, hp.pid, &[15, 15, 15]);
    for app in [hp, lp] {
        app.stop();
        app.finish();
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn kfdq_run_says_the_class_or_why_not_before_it_runs_the_command() {
    let emu = mount();
    // latency only for uid 4242; batch for anyone; the default class is batch.
    let agent = Agent::start(
        &emu,
        "[agent]\nhysteresis_ms = 20\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { uids = [4242] }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"deactivate\"\nmatch = { env = true }\n",
    );
    let sock = agent.sock.display().to_string();
    let scratch = tempfile::tempdir().unwrap();
    std::fs::set_permissions(
        scratch.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let shim = shim_path().display().to_string();
    let run = |class: &str, socket: &str, marker: &Path, uid: Option<u32>| {
        let m = marker.display().to_string();
        kfdq(
            &emu,
            &[
                "--agent", socket, "run", "--class", class, "--shim", &shim, "--", "touch", &m,
            ],
            uid,
        )
    };

    let m = scratch.path().join("unknown");
    let o = run("gold", &sock, &m, None);
    assert!(
        !ok(&o) && !m.exists(),
        "an unknown class runs nothing: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("KFDQ_CLASS=gold is not a configured class (classes: latency, batch)"),
        "{}",
        text(&o)
    );

    let m = scratch.path().join("user");
    let o = run("latency", &sock, &m, Some(65534));
    assert!(
        !ok(&o) && !m.exists(),
        "a refused class runs nothing: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("above this process's class batch")
            && text(&o).contains("ask the node's admin"),
        "{}",
        text(&o)
    );
    let m = scratch.path().join("root");
    let o = run("latency", &sock, &m, None);
    assert!(!ok(&o) && !m.exists(), "{}", text(&o));
    assert!(
        !text(&o).contains("ask the node's admin") && text(&o).contains("kfdq class"),
        "root is told what root can do: {}",
        text(&o)
    );

    let m = scratch.path().join("granted");
    let o = run("batch", &sock, &m, None);
    assert!(ok(&o) && m.exists(), "{}", text(&o));
    assert!(
        text(&o).contains("class batch (KFDQ_CLASS=batch): KFD priority 3, deactivated (level 2)"),
        "{}",
        text(&o)
    );

    let m = scratch.path().join("no-agent");
    let missing = scratch.path().join("none.sock").display().to_string();
    let o = run("batch", &missing, &m, None);
    assert!(
        ok(&o) && m.exists(),
        "no agent: a warning, and the command runs: {}",
        text(&o)
    );
    assert!(
        text(&o).contains("warning") && text(&o).contains("uncontrolled"),
        "{}",
        text(&o)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_process_moved_by_a_reload_says_so_in_kfdq_status() {
    let emu = mount();
    let first = BUILTIN_NAMES.replace("[agent]\n", "[agent]\ndefault_class = \"batch\"\n");
    let agent = Agent::start(&emu, &first);
    let app = worker(&emu, &agent, &[]);
    let p = agent.wait_connected(app.pid, 3);
    assert_eq!(p.class, "batch");
    let cfg = std::fs::read_to_string(&agent.config).unwrap();
    std::fs::write(
        &agent.config,
        cfg.replace("default_class = \"batch\"", "default_class = \"normal\""),
    )
    .unwrap();
    agent.signal(Signal::SIGHUP);
    let st = agent.wait("the process moved to normal", |s| {
        s.processes
            .iter()
            .any(|p| p.pid.0 == app.pid && p.class == "normal")
    });
    let p = st.processes.iter().find(|p| p.pid.0 == app.pid).unwrap();
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("class batch -> normal by the reloaded configuration")),
        "{p:?}"
    );
    let o = agent.kfdq(&["status"], None);
    assert!(
        text(&o).contains("by the reloaded configuration"),
        "{}",
        text(&o)
    );
    app.stop();
    app.finish();
}
