//! Added cost of the shim per un-held `hipLaunchKernel` and per non-KFD `ioctl`.
//!
//! `cargo build --release -p kfd-emu --bin kfd-emu && cargo bench -p kfdq-shim` (as root: it
//! mounts kfd-emu, the binary in a process of its own, so that fakehip can create the stream's
//! queue). Compiles `launch_overhead.c` against fakehip, runs it twice in this one
//! run — without and with `LD_PRELOAD=libkfdq_shim.so` — with `FAKEHIP_NOOP_LAUNCH=1` (fakehip's
//! launch only validates its arguments), and prints ns/call and the ratio. Repeats the pair
//! `KFDQ_BENCH_ROUNDS` times (default 3) and reports each. The ioctl is measured twice: as is,
//! and with an idle helper thread started by the program in both runs (a real HIP runtime always
//! has threads; the shim's control thread alone makes a single-threaded program pay the kernel's
//! multi-threaded syscall cost). With `KFDQ_BENCH_BASELINE_SHIM=/path/to/libkfdq_shim.so` (an
//! earlier build), each round also runs the launches under that shim and prints this shim's
//! launch cost against it (the before/after of a change, in one run). Each round also runs the
//! launches while HIP's dynamic queues may move streams (`GPU_MAX_HW_QUEUES=0`: the stream's one
//! queue is over the runtime's cap, so the shim re-probes), with `KFDQ_REPROBE_EVERY=1` (a
//! write-index comparison at every launch, the behaviour before sampling), 4, the shim's default
//! and 64,
//! `KFDQ_BENCH_MOVE_CALLS` calls each (default 200000), and prints each against the first.
//! Numbers go to docs/performance.md; nothing here asserts a wall-clock threshold.

use std::path::{Path, PathBuf};
use std::process::Command;

use test_support::emu::{EmuConfig, Preset};

fn shim() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // Built next to this binary (target/<profile>/deps) before the benchmark runs.
    let p = exe
        .parent()
        .expect("target/<profile>/deps")
        .join("libkfdq_shim.so");
    assert!(p.is_file(), "{} not built", p.display());
    p
}

fn run(
    program: &Path,
    root: &Path,
    preload: Option<&Path>,
    calls: &str,
    helper_thread: bool,
    window: Option<&str>,
    env: &[(&str, &str)],
) -> (f64, f64) {
    let mut cmd = Command::new(program);
    cmd.env_remove("GPU_MAX_HW_QUEUES")
        .env_remove("KFDQ_REPROBE_EVERY")
        .envs(env.iter().copied());
    match window {
        Some(w) => cmd.env("KFDQ_WINDOW", w),
        None => cmd.env_remove("KFDQ_WINDOW"),
    };
    cmd.env("BENCH_HELPER_THREAD", if helper_thread { "1" } else { "0" });
    cmd.arg(calls)
        .env("KFDQ_ROOT", root)
        .env("FAKEHIP_NOOP_LAUNCH", "1")
        .env_remove("LD_PRELOAD")
        .env_remove("KFDQ_SOCKET")
        .env_remove("KFDQ_LOG");
    let state = tempfile::tempdir().expect("tempdir");
    cmd.env("KFDQ_STATE_DIR", state.path());
    if let Some(p) = preload {
        cmd.env("LD_PRELOAD", p);
    }
    let out = cmd.output().expect("run the bench program");
    assert!(
        out.status.success(),
        "bench program failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let get = |k: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {text}"))
    };
    (get("launch_ns "), get("ioctl_ns "))
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it in test mode: do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("launch_overhead needs root (FUSE mount of kfd-emu); skipped");
        std::process::exit(1);
    }
    let work = tempfile::tempdir().expect("tempdir");
    let program = work.path().join("launch_overhead");
    fakehip::compile_program(
        Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/benches/launch_overhead.c"
        )),
        &program,
        &["-O2"],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // The emulator in a process of its own, as the tests run it (test_support::emu_process).
    let emu = test_support::emu::mount(EmuConfig {
        preset: Preset::Mi308x,
        ..EmuConfig::default()
    });
    let shim = shim();
    let calls = std::env::var("KFDQ_BENCH_CALLS").unwrap_or_else(|_| "2000000".into());
    let move_calls = std::env::var("KFDQ_BENCH_MOVE_CALLS").unwrap_or_else(|_| "200000".into());
    let baseline = std::env::var_os("KFDQ_BENCH_BASELINE_SHIM").map(PathBuf::from);
    let rounds: usize = std::env::var("KFDQ_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    println!("shim: {}", shim.display());
    if let Some(b) = &baseline {
        assert!(
            b.is_file(),
            "KFDQ_BENCH_BASELINE_SHIM={} is no file",
            b.display()
        );
        println!("baseline shim: {}", b.display());
    }
    println!(
        "{:<6} {:<28} {:>12} {:>12} {:>10} {:>8}",
        "round", "call", "direct ns", "shim ns", "added ns", "ratio"
    );
    for round in 1..=rounds {
        let (l0, i0) = run(&program, emu.root(), None, &calls, false, None, &[]);
        let (l1, i1) = run(&program, emu.root(), Some(&shim), &calls, false, None, &[]);
        // A window in effect (FAKEHIP_NOOP_LAUNCH writes no packet: the queue is never at its
        // window, so this is the cost of checking it).
        let (w1, _) = run(
            &program,
            emu.root(),
            Some(&shim),
            &calls,
            false,
            Some("4"),
            &[],
        );
        let (_, t0) = run(&program, emu.root(), None, &calls, true, None, &[]);
        let (_, t1) = run(&program, emu.root(), Some(&shim), &calls, true, None, &[]);
        for (name, a, b) in [
            ("hipLaunchKernel (un-held)", l0, l1),
            ("hipLaunchKernel (window 4)", l0, w1),
            ("ioctl (non-KFD, TCGETS)", i0, i1),
            ("ioctl, app has 2nd thread", t0, t1),
        ] {
            println!(
                "{round:<6} {name:<28} {a:>12.2} {b:>12.2} {:>10.2} {:>8.3}",
                b - a,
                b / a
            );
        }
        // Streams may move: a comparison at every launch (as before sampling) against sampled
        // (`None`: the shim's default).
        let moving = |every: Option<&str>| {
            let mut env = vec![("GPU_MAX_HW_QUEUES", "0")];
            env.extend(every.map(|e| ("KFDQ_REPROBE_EVERY", e)));
            run(
                &program,
                emu.root(),
                Some(&shim),
                &move_calls,
                false,
                None,
                &env,
            )
            .0
        };
        let every_launch = moving(Some("1"));
        for every in [Some("4"), None, Some("64")] {
            let m = moving(every);
            println!(
                "{round:<6} {:<28} {every_launch:>12.2} {m:>12.2} {:>10.2} {:>8.3}  (every launch -> every {})",
                "hipLaunchKernel (may move)",
                m - every_launch,
                m / every_launch,
                every.unwrap_or("(default)")
            );
        }
        if let Some(b) = &baseline {
            let (lb, _) = run(&program, emu.root(), Some(b), &calls, false, None, &[]);
            let (wb, _) = run(&program, emu.root(), Some(b), &calls, false, Some("4"), &[]);
            for (name, before, after) in [
                ("hipLaunchKernel (un-held)", lb, l1),
                ("hipLaunchKernel (window 4)", wb, w1),
            ] {
                println!(
                    "{round:<6} {:<28} {before:>12.2} {after:>12.2} {:>10.2} {:>8.3}  (baseline shim -> this shim)",
                    name,
                    after - before,
                    after / before
                );
            }
        }
    }
    drop(emu);
}
