//! A tenant frees the memory of its queue's indices before the queue is destroyed (runtimes
//! have been seen to free ring memory before DESTROY_QUEUE), while the shim reads those indices:
//! under the registry lock, and without it, in the in-flight window's check; with
//! `process_vm_readv` available, and refused (a seccomp filter). The host process must never die
//! of the shim (issue 50 item 12). `programs/tenant_memory.c` tells a fault in the shim (exit
//! 86, "shim faulted") from one in the runtime (repaired by the program, which goes on).

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::*;

fn program() -> PathBuf {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kfdq-tenant-memory-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("create program dir");
        let out = dir.join("tenant_memory");
        fakehip::compile_program(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/programs/tenant_memory.c"),
            &out,
            &["-Wextra", "-Werror"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        out
    })
    .clone()
}

/// Runs the program in `mode` (with `refuse`, process_vm_readv refused) and checks that it
/// lived: exit 0, "launched" printed, no fault in the shim.
fn survives(mode: &str, refuse: bool, window: bool) {
    let emu = mount();
    let mut launch = Launch::new(program()).arg(mode);
    if refuse {
        launch = launch.arg("refuse");
    }
    if window {
        launch = launch.env("KFDQ_WINDOW", "2");
    }
    let mut app = launch.start(&emu);
    let ok = test_support::wait_until(std::time::Duration::from_secs(60), || {
        matches!(app.child.try_wait(), Ok(Some(_)))
    });
    assert!(ok, "the program did not end within 60 s");
    let (status, lines, stderr) = app.try_finish().expect("ended");
    assert!(
        status.success() && lines.iter().any(|l| l == "launched"),
        "the program died ({status}): {}\nstdout:\n{}\nstderr:\n{stderr}",
        if stderr.contains("shim faulted") {
            "the shim read freed memory"
        } else {
            "see its output"
        },
        lines.join("\n")
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_freeing_index_memory_under_the_registry_lock_does_not_kill_it() {
    survives("registry", false, false);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_freeing_index_memory_with_process_vm_readv_refused_does_not_kill_it() {
    survives("registry", true, false);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_freeing_index_memory_under_the_window_does_not_kill_it() {
    survives("window", false, true);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_freeing_index_memory_under_the_window_with_process_vm_readv_refused_does_not_kill_it() {
    survives("window", true, true);
}
