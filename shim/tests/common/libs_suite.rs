//! The tests of the ROCm math libraries — rocBLAS, hipBLAS, hipBLASLt, MIOpen — on the real
//! runtime on an emulated MI210 (gfx90a: the libraries ship no gfx942 kernels), with and without
//! the shim, shared by the roots: `sid_libs.rs` runs them on ROCm 6.4 (Debian sid), `sid7_libs.rs`
//! on ROCm 7.2.4 (Debian experimental), each test a function of the root ([`Libs`]). A program and
//! a CPython extension create the handles, run GEMMs on the null stream and on a created stream,
//! a hipBLASLt matmul and a MIOpen convolution with its find step, and destroy everything. Every
//! library status is the same with the shim as without it; `kfdq ps` shows the libraries'
//! streams on queues; every launch reaches a queue and completes; the real agent's level 1 holds
//! the libraries' work (handle creation, a GEMM loop, two threads) and releases it, levels 2 and 3
//! stop their queues and resume them, and everything completes with unchanged statuses.
//!
//! Kernels do not execute on the emulator: results are not checked, statuses and queues are.
#![allow(dead_code)]

use kfdq::Pid;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::kfdqd::{Agent, two_classes, two_classes_with_hysteresis};
use super::sid::{self, Running};
use super::sid_libs::{self as libs, Built, Libs, Shimmed};
use super::{Emu, shim_path, wait_for};

/// What a test needs: an emulated MI210 and the libraries' root with the programs built.
fn setup(l: &'static Libs) -> (Emu, PathBuf, &'static Built) {
    let root = l.root();
    let emu = libs::mount();
    let built = l.built(&emu, &root);
    (emu, root, built)
}

/// The status lines of `argv` run to its end without the shim.
fn plain_statuses(l: &Libs, emu: &Emu, root: &Path, built: &Built, argv: &[&str]) -> Vec<String> {
    let out = libs::in_work(emu, root, built, argv)
        .output()
        .expect("run in the libs root");
    let text = l.finished(&argv.join(" "), out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.contains(&"libs_check: done"),
        "{text}\n{}",
        l.packages()
    );
    libs::statuses(&lines)
}

/// The same under `LD_PRELOAD` of the shim (no agent), with `KFDQ_PASSTHROUGH` as given.
fn preload_statuses(
    l: &Libs,
    emu: &Emu,
    root: &Path,
    built: &Built,
    passthrough: Option<&str>,
    argv: &[&str],
) -> Vec<String> {
    let shim = shim_path();
    let dir = shim.parent().unwrap().to_path_buf();
    let mut cmd = sid::command(
        emu,
        root,
        &[(built.dir.path(), Path::new("/work")), (&dir, &dir)],
        Path::new("/work"),
        argv,
    );
    cmd.envs(libs::ENV).env("LD_PRELOAD", &shim);
    if let Some(p) = passthrough {
        cmd.env("KFDQ_PASSTHROUGH", p);
    }
    let out = cmd.output().expect("run under the shim");
    let text = l.finished(&format!("{} under the shim", argv.join(" ")), out);
    let lines: Vec<&str> = text.lines().collect();
    libs::statuses(&lines)
}

/// rocminfo (ROCr of the root) lists the emulated MI210.
pub fn rocminfo_lists_the_emulated_mi210(l: &Libs) {
    let root = l.root();
    let emu = libs::mount();
    let out = sid::command(&emu, &root, &[], Path::new("/"), &["rocminfo"])
        .output()
        .expect("run rocminfo");
    let text = l.finished("rocminfo", out);
    for want in [
        "Name:                    gfx90a",
        "Marketing Name:          AMD Instinct MI210",
        "Compute Unit:            104",
        "Chip ID:                 29711(0x740f)",
        "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-",
    ] {
        assert!(
            text.contains(want),
            "rocminfo lacks {want:?}:\n{text}\n{}",
            l.packages()
        );
    }
}

/// Every library status of the program and of the CPython extension is the same with the shim
/// (passthrough list default and empty) as without it.
pub fn statuses_are_equal_with_and_without_the_shim(l: &'static Libs) {
    let (emu, root, built) = setup(l);
    let program = ["./libs_check"];
    let python = ["python3", "libsext_check.py"];
    let plain = plain_statuses(l, &emu, &root, built, &program);
    assert!(
        plain
            .iter()
            .any(|l| l == "status miopenConvolutionForward 0")
            && plain.iter().any(|l| l == "status hipblasLtMatmul 0"),
        "{plain:#?}"
    );
    for passthrough in [None, Some("")] {
        let shimmed = preload_statuses(l, &emu, &root, built, passthrough, &program);
        assert_eq!(
            shimmed, plain,
            "the program's statuses under the shim (KFDQ_PASSTHROUGH {passthrough:?})"
        );
    }
    // The CPython extension: the libraries loaded RTLD_LOCAL as dependencies of a module.
    let py_plain = plain_statuses(l, &emu, &root, built, &python);
    assert_eq!(py_plain, plain, "the extension runs the same workload");
    let py_shim = preload_statuses(l, &emu, &root, built, Some(""), &python);
    assert_eq!(py_shim, plain, "the extension under the shim");
}

/// Every kernel the libraries launched reached a queue of the process and completed: the
/// emulator saw rocBLAS's and hipBLASLt's Tensile GEMM kernels among the process's dispatches,
/// and every queue's read index reached its write index.
fn every_launch_completed(emu: &Emu, pid: u32) -> String {
    let st = emu.stats();
    let p = st
        .processes
        .iter()
        .find(|x| x.pid == pid)
        .expect("the process in the emulator");
    let by = &p.dispatches_by_kernel;
    let tensile = by
        .iter()
        .filter(|(k, _)| k.starts_with("Cijk_"))
        .map(|(_, n)| n)
        .sum::<u64>();
    assert!(tensile >= 4, "Tensile GEMM kernels among {by:#?}");
    wait_for("every queue of the process drained", || {
        emu.queues_of(pid)
            .iter()
            .all(|q| q.read_index == q.write_index && !q.stopped)
    });
    format!("{by:?}")
}

/// Under the shim every kernel the libraries launch reaches a queue and completes.
pub fn every_launch_reaches_a_queue_and_completes_under_the_shim(l: &'static Libs) {
    let (emu, root, built) = setup(l);
    let shim = shim_path();
    let dir = shim.parent().unwrap().to_path_buf();
    let mut cmd = sid::command(
        &emu,
        &root,
        &[(built.dir.path(), Path::new("/work")), (&dir, &dir)],
        Path::new("/work"),
        &["./libs_check", "--hold"],
    );
    cmd.envs(libs::ENV)
        .env("LD_PRELOAD", &shim)
        .env("KFDQ_PASSTHROUGH", "");
    let mut p = Running::start(cmd);
    p.wait_line("libs_check: holding");
    every_launch_completed(&emu, p.pid);
    let lines = p.finish();
    assert_eq!(lines.last().map(String::as_str), Some("libs_check: done"));
}

/// `kfdq run --class batch` of `argv` (which holds before destroying), `kfdq ps` while it
/// holds, and the statuses at its end.
fn under_batch(l: &'static Libs, argv: &[&str], hold_line: &str) {
    let (emu, root, built) = setup(l);
    let plain = plain_statuses(l, &emu, &root, built, argv);
    let agent = Agent::start(&emu, &two_classes("hold"));
    let mut args = argv.to_vec();
    args.push("--hold");
    let Shimmed { mut p, state } =
        libs::under_kfdq(&emu, &root, built, &agent, "batch", &[], &args);
    p.wait_line(hold_line);
    let st = agent.wait_connected(p.pid, 2);
    assert_eq!(st.class, "batch", "{st:?}");
    let entry = libs::ps_entry(&emu, &agent, state.path(), p.pid);
    assert_eq!(entry["class"], "batch", "{entry:#}");
    let kinds = libs::ps_stream_kinds(&entry);
    for kind in ["null", "created"] {
        assert!(
            kinds.iter().any(|k| k.iter().any(|x| x == kind)),
            "kfdq ps shows the {kind} stream the libraries ran on, on a queue: {entry:#}"
        );
    }
    every_launch_completed(&emu, p.pid);
    let lines = p.finish();
    assert_eq!(
        libs::statuses(&lines),
        plain,
        "statuses under kfdq run --class batch"
    );
    assert_eq!(agent.status().counters.command_failures, 0);
}

/// `kfdq run --class batch` of the program: `kfdq ps` shows the libraries' streams on queues.
pub fn under_kfdq_run_batch_ps_shows_the_libraries_streams(l: &'static Libs) {
    under_batch(l, &["./libs_check"], "libs_check: holding");
}

/// The same for the CPython extension.
pub fn a_python_extension_under_kfdq_run_batch(l: &'static Libs) {
    under_batch(l, &["python3", "libsext_check.py"], "libs_check: holding");
}

/// What level 1 did to a batch job using the libraries: the status lines it printed while held,
/// and whether it had finished then.
#[derive(Debug)]
struct Held {
    while_held: Vec<String>,
    finished_while_held: bool,
    /// Tensile GEMM kernels (`Cijk_*`) the emulator dispatched for the job while it was held
    /// (`None`: it had ended, and the emulator forgot it).
    gemms_while_held: Option<u64>,
}

/// The Tensile GEMM kernels (`Cijk_*`) the emulator has dispatched for `pid` (`None`: no such
/// process any more).
fn tensile_dispatches(emu: &Emu, pid: u32) -> Option<u64> {
    emu.stats()
        .processes
        .iter()
        .find(|x| x.pid == pid)
        .map(|p| {
            p.dispatches_by_kernel
                .iter()
                .filter(|(k, _)| k.starts_with("Cijk_"))
                .map(|(_, n)| *n)
                .sum()
        })
}

/// A batch job running `args` (which pause at `pause` until released), held by the real agent
/// at level 1 while a latency job is busy, released when it ends: everything completes with the
/// statuses of a run without the shim, within bounded waits (no deadlock).
fn level_1(l: &'static Libs, args: &[&str], pause: &str, passthrough: Option<&str>) -> Held {
    let (emu, root, built) = setup(l);
    let plain = plain_statuses(l, &emu, &root, built, args);
    // The latency job stays busy until told to stop, but a loaded machine can starve it for
    // longer than the usual 20 ms hysteresis, and the agent would release and re-hold the batch
    // job meanwhile: a 1 s hysteresis keeps one hold for the whole test, and the window below
    // checks that no command was sent during it.
    let agent = Agent::start(&emu, &two_classes_with_hysteresis("hold", 1000));
    let mut argv = args.to_vec();
    argv.extend_from_slice(&["--pause", pause]);
    let Shimmed {
        p: mut batch,
        state: bs,
    } = libs::under_kfdq(
        &emu,
        &root,
        built,
        &agent,
        "batch",
        &passthrough
            .map(|p| vec![("KFDQ_PASSTHROUGH", p)])
            .unwrap_or_default(),
        &argv,
    );
    batch.wait_line(&format!("libs_check: paused {pause}"));
    agent.wait_connected(batch.pid, 1);
    let Shimmed {
        p: latency,
        state: _ls,
    } = libs::busy_latency(&emu, &root, built, &agent);
    agent.wait("the batch job held at level 1", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(batch.pid) && p.level.is_some())
    });
    wait_for(
        "every used stream of the batch job held in its shim",
        || {
            libs::registry(bs.path(), batch.pid).is_some_and(|r| {
                let used: Vec<_> = r.streams.iter().filter(|s| s.queue_id.is_some()).collect();
                !used.is_empty() && used.iter().all(|s| s.held)
            })
        },
    );
    // Go on into the libraries while held, until the job either waits in the shim for the
    // release (a call of it counted in the registry's `held_calls`) or has run to its end.
    let gemms_before = tensile_dispatches(&emu, batch.pid);
    batch.release();
    let mut while_held: Vec<String> = Vec::new();
    let pid = batch.pid;
    let blocked = |bs: &Path| {
        libs::registry(bs, pid).is_some_and(|r| r.streams.iter().any(|s| s.held_calls > 0))
    };
    wait_for("the held job to wait in the shim or to end", || {
        while_held.extend(batch.lines_so_far());
        blocked(bs.path()) || while_held.iter().any(|l| l == "libs_check: done")
    });
    let finished_while_held = while_held.iter().any(|l| l == "libs_check: done");
    if !finished_while_held {
        // Held means held: over a window in which another process's queue runs 100 ms of
        // packets, no GEMM of the job reaches the GPU and it does not end.
        let gemms_blocked = tensile_dispatches(&emu, batch.pid);
        let commands = agent.status().counters.commands;
        test_support::hold::cp_witness(&emu, 50, 2000);
        assert_eq!(
            agent.status().counters.commands,
            commands,
            "the agent changed its commands during the window (the latency job looked idle \
             for the hysteresis): the window does not show one hold"
        );
        while_held.extend(batch.lines_so_far());
        assert!(
            !while_held.iter().any(|l| l == "libs_check: done"),
            "the job ended while a call of it waited for the release: {while_held:?}"
        );
        assert_eq!(
            tensile_dispatches(&emu, batch.pid),
            gemms_blocked,
            "GEMMs dispatched while the job waited in the shim"
        );
    }
    let gemms_while_held = tensile_dispatches(&emu, batch.pid)
        .zip(gemms_before)
        .map(|(after, before)| after - before);
    let lines = latency.finish();
    assert_eq!(lines.last().map(String::as_str), Some("hip_check: done"));
    agent.wait("the batch job released", |s| {
        s.processes
            .iter()
            .all(|p| p.pid != Pid(batch.pid) || p.level.is_none())
    });
    let lines = batch.finish();
    assert_eq!(
        lines.last().map(String::as_str),
        Some("libs_check: done"),
        "{lines:?}"
    );
    assert_eq!(libs::statuses(&lines), plain, "statuses after the hold");
    assert_eq!(agent.status().counters.command_failures, 0);
    Held {
        while_held: libs::statuses(&while_held),
        finished_while_held,
        gemms_while_held,
    }
}

/// The passthrough list kfdq shipped before the math libraries were tried (and that the peer
/// uses): their calls are never held.
const OLD_LIST: &str = "libhipblas,librocblas,libhipblaslt,libMIOpen";

/// Runs `args` held at level 1 with the default passthrough list (the math libraries' calls are
/// held like the application's) and with the old list, and checks what must hold in both:
/// everything completes after the release with the statuses of a run without the shim, within
/// bounded waits. With the default list the job waits in the shim inside the libraries and no
/// GEMM reaches the GPU while it waits; what ran while held is printed (docs/real-rocm.md
/// records it).
fn level_1_both_ways(l: &'static Libs, args: &[&str], pause: &str) {
    let default = level_1(l, args, pause, None);
    eprintln!(
        "{args:?} held at {pause}, default list: {} status lines and {:?} Tensile GEMM \
         dispatches while held, the last line {:?}",
        default.while_held.len(),
        default.gemms_while_held,
        default.while_held.last()
    );
    assert!(
        !default.finished_while_held,
        "with the default list level 1 holds the job inside the libraries: {default:#?}"
    );
    assert_eq!(
        default.gemms_while_held,
        Some(0),
        "with the default list no GEMM of a held job reaches the GPU: {default:#?}"
    );
    let old = level_1(l, args, pause, Some(OLD_LIST));
    eprintln!(
        "{args:?} held at {pause}, KFDQ_PASSTHROUGH={OLD_LIST}: {} status lines and {:?} \
         Tensile GEMM dispatches while held, finished: {}",
        old.while_held.len(),
        old.gemms_while_held,
        old.finished_while_held
    );
    assert!(
        old.finished_while_held || old.gemms_while_held.is_some_and(|n| n > 0),
        "the old list lets the libraries' work through a hold: {old:#?}"
    );
}

/// Level 1 holds the libraries' handle creation and releases it.
pub fn level_1_holds_handle_creation_and_releases_it(l: &'static Libs) {
    level_1_both_ways(l, &["./libs_check"], "create");
}

/// Level 1 holds a GEMM loop and releases it.
pub fn level_1_holds_a_gemm_loop_and_releases_it(l: &'static Libs) {
    level_1_both_ways(l, &["./libs_check", "--loop", "200"], "gemm");
}

/// Level 1 holds two threads using the libraries and releases them.
pub fn level_1_holds_two_threads_using_the_libraries_and_releases_them(l: &'static Libs) {
    level_1_both_ways(
        l,
        &["./libs_check", "--threads", "2", "--loop", "50"],
        "create",
    );
}

/// Whether every compute queue of `pid` is stopped at `level` (`deactivate`: inactive;
/// `suspend`: suspended), and there is one.
fn queues_stopped(emu: &Emu, pid: u32, level: &str) -> bool {
    let qs = emu.queues_of(pid);
    let compute: Vec<_> = qs
        .iter()
        .filter(|q| q.queue_type == "compute_aql")
        .collect();
    !compute.is_empty()
        && compute.iter().all(|q| match level {
            "deactivate" => !q.active,
            _ => q.suspended,
        })
}

/// A batch job whose GEMM loop waits at its start until released, under the real agent at
/// `level` (2 `deactivate` or 3 `suspend`) while a latency job is busy: its compute queues are
/// stopped; released into the loop meanwhile, over a window in which another process's queue
/// runs 100 ms of packets none of its GEMMs reaches the GPU and it does not end; when the
/// latency job ends it runs again and ends with the statuses of a run without the shim.
fn stopped_at(l: &'static Libs, level: &str) {
    let (emu, root, built) = setup(l);
    let args = ["./libs_check", "--loop", "200"];
    let plain = plain_statuses(l, &emu, &root, built, &args);
    // A 1 s hysteresis keeps one preemption for the whole window on a loaded machine (as in
    // `level_1`): the window checks that no command was sent during it.
    let agent = Agent::start(&emu, &two_classes_with_hysteresis(level, 1000));
    let mut argv = args.to_vec();
    argv.extend_from_slice(&["--pause", "gemm"]);
    let Shimmed {
        p: mut batch,
        state: _bs,
    } = libs::under_kfdq(&emu, &root, built, &agent, "batch", &[], &argv);
    batch.wait_line("libs_check: paused gemm");
    agent.wait_connected(batch.pid, 1);
    let Shimmed {
        p: latency,
        state: _ls,
    } = libs::busy_latency(&emu, &root, built, &agent);
    let pid = batch.pid;
    agent.wait(&format!("the batch job preempted at {level}"), |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(pid) && p.level.is_some())
    });
    wait_for(
        &format!("the batch job's queues stopped at {level}"),
        || queues_stopped(&emu, pid, level),
    );
    let gemms = tensile_dispatches(&emu, pid);
    let commands = agent.status().counters.commands;
    batch.release();
    test_support::hold::cp_witness(&emu, 50, 2000);
    assert_eq!(
        agent.status().counters.commands,
        commands,
        "the agent changed its commands during the window: it does not show one preemption"
    );
    assert!(
        queues_stopped(&emu, pid, level),
        "{level}: the queues stayed stopped: {:#?}",
        emu.queues_of(pid)
    );
    assert_eq!(
        tensile_dispatches(&emu, pid),
        gemms,
        "{level}: GEMMs dispatched while the job's queues were stopped\n{}",
        l.packages()
    );
    let while_stopped = batch.lines_so_far();
    assert!(
        !while_stopped.iter().any(|x| x == "libs_check: done"),
        "{level}: the job ended while its queues were stopped: {while_stopped:?}"
    );
    let lines = latency.finish();
    assert_eq!(lines.last().map(String::as_str), Some("hip_check: done"));
    agent.wait("the batch job running again", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(pid) && p.level.is_none())
    });
    let lines = batch.finish();
    assert_eq!(
        lines.last().map(String::as_str),
        Some("libs_check: done"),
        "{lines:?}"
    );
    assert_eq!(
        libs::statuses(&lines),
        plain,
        "{level}: statuses after the preemption"
    );
    assert_eq!(agent.status().counters.command_failures, 0);
}

/// Levels 2 and 3 stop a GEMM loop's queues and resume them; the statuses are unchanged.
pub fn levels_2_and_3_stop_a_gemm_loop_and_resume_it(l: &'static Libs) {
    for level in ["deactivate", "suspend"] {
        stopped_at(l, level);
    }
}

/// The HIP functions `lib` imports from libamdhip64, as "name@node".
fn hip_imports(lib: &Path) -> Vec<String> {
    let out = Command::new("nm")
        .args(["-D", "--undefined-only", "--with-symbol-versions"])
        .arg(lib)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}", lib.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|s| s.starts_with("hip") && s.contains("@hip_"))
        .map(str::to_string)
        .collect()
}

/// The shim's HIP functions as "name@node".
fn shim_exports() -> Vec<String> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only", "--with-symbol-versions"])
        .arg(shim_path())
        .output()
        .expect("run nm (binutils)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|s| s.starts_with("hip"))
        .map(|s| s.replace("@@", "@"))
        .collect()
}

fn library(root: &Path, name: &str) -> PathBuf {
    root.join("usr/lib/x86_64-linux-gnu").join(name)
}

/// Every HIP entry point the libraries import at a node the shim's wrapper carries too, and none
/// newer than the runtime's newest node.
pub fn every_hip_entry_point_the_libraries_import_that_the_shim_wraps_binds_to_it(l: &Libs) {
    let root = l.root();
    let shim = shim_exports();
    let shim_names: std::collections::BTreeMap<&str, &str> =
        shim.iter().filter_map(|s| s.split_once('@')).collect();
    for name in l.libraries {
        for import in hip_imports(&library(&root, name)) {
            let (sym, node) = import.split_once('@').unwrap();
            // The nodes they import exist in the root's HIP (sid's hipBLASLt 7.1.1 was built
            // against HIP 6.4.3: hip_4.2 and hip_6.0, nothing newer than hip_6.4).
            let (major, minor) = node
                .trim_start_matches("hip_")
                .split_once('.')
                .map(|(a, b)| (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap()))
                .unwrap();
            assert!((major, minor) <= l.newest_node, "{name} imports {import}");
            if let Some(shim_node) = shim_names.get(sym) {
                assert_eq!(
                    *shim_node, node,
                    "{name} imports {import}: the shim's wrapper must carry the same node or the \
                     reference binds past it"
                );
            }
        }
    }
}

/// The launch entry points the libraries import must reach the shim's gate, or their kernels
/// (rocBLAS's and hipBLASLt's Tensile GEMMs, MIOpen's convolutions) are never held.
pub fn every_launch_entry_point_the_libraries_import_is_wrapped(l: &Libs) {
    let root = l.root();
    let shim = shim_exports();
    let mut missing = Vec::new();
    for name in l.libraries {
        for import in hip_imports(&library(&root, name)) {
            let sym = import.split_once('@').unwrap().0;
            if sym.contains("Launch") && !shim.contains(&import) {
                missing.push(format!("{name}: {import}"));
            }
        }
    }
    assert!(missing.is_empty(), "not wrapped: {missing:#?}");
}
