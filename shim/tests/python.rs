//! The shim on Python's import path: HIP reached through a CPython extension module (imported
//! normally) and through a library ctypes loads `RTLD_LOCAL` — so the runtime is not in the
//! global scope — with fakehip on kfd-emu and with Debian's real `libamdhip64.so.5`. Every
//! return code equals the run without the shim; the streams are managed.

mod common;

use kfdq::QueueId;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;

/// Debian's interpreter (python3-dev's headers match it), not whatever `python3` is on PATH.
const PYTHON: &str = "/usr/bin/python3";

struct Built {
    ops: PathBuf,
    ext_dir: PathBuf,
    real: PathBuf,
}

fn python_include() -> String {
    let out = Command::new(PYTHON)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['include'])",
        ])
        .output()
        .unwrap_or_else(|e| {
            panic!("{PYTHON}: {e} (Debian's python3; scripts/setup.sh installs it)")
        });
    let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        Path::new(&dir).join("Python.h").exists(),
        "{dir}/Python.h is missing: install Debian's python3-dev (scripts/setup.sh does)"
    );
    dir
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("kfdq-python-{}", std::process::id()));
        let ext_dir = dir.join("ext");
        std::fs::create_dir_all(&ext_dir).unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs");
        let ops = dir.join("libkfdqtest_ops.so");
        fakehip::compile_program(
            &src.join("pyops.c"),
            &ops,
            &["-shared", "-fPIC", "-Wextra", "-Werror"],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let include = format!("-I{}", python_include());
        fakehip::compile_program(
            &src.join("pyops.c"),
            &ext_dir.join("kfdqtest_ext.so"),
            &["-shared", "-fPIC", "-DKFDQ_PY_EXT", &include],
        )
        .unwrap_or_else(|e| panic!("{e}"));
        // real_hip.c as a library ctypes loads, linked with Debian's real runtime.
        let real = dir.join("libkfdqtest_realhip.so");
        let cc = std::env::var("CC")
            .ok()
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "cc".into());
        let out = Command::new(cc)
            .args(["-std=gnu11", "-g", "-Wall", "-shared", "-fPIC"])
            .arg("-Dmain=kfdq_real_main")
            .arg(format!("-I{}", fakehip::INCLUDE_DIR))
            .arg(src.join("real_hip.c"))
            .arg("-o")
            .arg(&real)
            .args(["-l:libamdhip64.so.5", "-ldl"])
            .output()
            .expect("run cc");
        assert!(
            out.status.success(),
            "building libkfdqtest_realhip.so: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Built { ops, ext_dir, real }
    })
}

/// Runs `script` (after a prelude that waits at a checkpoint at the end) in Debian's python3.
fn python(emu: &Emu, script: &str, shim: bool) -> App {
    let full = format!(
        "import ctypes, os, sys, time\n{script}\nsys.stdout.flush()\nprint('CHECKPOINT end', os.getpid(), flush=True)\ngo = os.environ.get('KFDQ_TEST_GO')\nwhile go and not os.path.exists(go):\n    time.sleep(0.005)\n"
    );
    let mut l = Launch::new(PathBuf::from(PYTHON))
        .args(["-c", &full])
        .env("KFDQ_CLASS", "latency");
    l.preload = shim;
    l.start(emu)
}

/// The "<call> <code>" lines of a run.
fn codes(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| l.starts_with("hip"))
        .cloned()
        .collect()
}

/// Runs `script` with and without the shim; checks codes, the registry and `kfdq ps`.
fn managed_like_a_linked_program(script: &str) {
    let emu = mount();
    let mut plain = python(&emu, script, false);
    plain.wait_line("CHECKPOINT end");
    plain.go();
    let (plain_lines, _) = plain.finish();
    let expected = codes(&plain_lines);
    assert_eq!(expected.len(), 12, "{plain_lines:?}");
    assert!(
        expected.iter().all(|l| l.ends_with(" 0")),
        "fakehip answers every call: {expected:?}"
    );

    let mut app = python(&emu, script, true);
    app.wait_line("CHECKPOINT end");
    let q = app.queues();
    let (null, s, hi) = (q["null"].queue_id, q["s"].queue_id, q["hi"].queue_id);
    let mut ids: Vec<u32> = q.values().map(|x| x.queue_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        (q.len(), ids.len()),
        (8, 8),
        "the first call was unwrapped, yet the null stream and each of 7 created streams have queues of their own: {q:?}"
    );
    let pid = app.pid;
    let reg = app.wait_registry(pid, "eight streams on their queues", |r| {
        r.streams.iter().filter(|x| x.queue_id.is_some()).count() >= 8
    });
    for qid in [null, s, hi] {
        let e = effective(&reg, qid);
        assert!((11..=15).contains(&e), "queue {qid}: latency band, got {e}");
    }
    assert!(
        reg.streams
            .iter()
            .any(|x| x.kind == kfdq::proto::StreamKind::Null && x.queue_id == Some(QueueId(null))),
        "{reg:?}"
    );
    let table = app.kfdq_ps(&emu);
    assert!(
        table.lines().any(|l| l.starts_with("gpu ")
            && l.contains(": 8 queue(s), 8 active, ")
            && l.contains(" resident slots")),
        "kfdq ps shows the partition's queues against its resident slots:\n{table}"
    );
    for qid in [null, s, hi] {
        assert!(
            table.lines().any(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.first() == Some(&pid.to_string().as_str())
                    && f.get(2) == Some(&"latency")
                    && f.get(3) == Some(&qid.to_string().as_str())
            }),
            "kfdq ps shows queue {qid} of {pid} in class latency:\n{table}"
        );
    }
    app.go();
    let (lines, stderr) = app.finish();
    assert_eq!(
        codes(&lines),
        expected,
        "every return code equal to the run without the shim"
    );
    assert!(
        !stderr.contains("defined by no loaded HIP runtime"),
        "{stderr}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_ctypes_library_loaded_rtld_local_is_managed() {
    let ops = built().ops.display().to_string();
    managed_like_a_linked_program(&format!(
        "lib = ctypes.CDLL({ops:?})\nprint('bad', lib.kfdq_ops_run(), flush=True)"
    ));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_cpython_extension_module_is_managed() {
    let dir = built().ext_dir.display().to_string();
    managed_like_a_linked_program(&format!(
        "sys.path.insert(0, {dir:?})\nimport kfdqtest_ext\nprint('bad', kfdqtest_ext.run(), flush=True)"
    ));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn debian_s_real_runtime_loaded_rtld_local_returns_its_own_codes() {
    let emu = mount();
    let real = built().real.display().to_string();
    let script = format!("lib = ctypes.CDLL({real:?})\nlib.kfdq_real_main()");
    let run = |shim: bool| {
        let mut app = python(&emu, &script, shim);
        app.wait_line("CHECKPOINT end");
        app.go();
        app.finish()
    };
    let (plain, _) = run(false);
    let (shimmed, stderr) = run(true);
    let body = |v: &[String]| -> Vec<String> {
        v.iter()
            .filter(|l| l.starts_with("hip") && !l.starts_with("hipGetProcAddress "))
            .cloned()
            .collect()
    };
    assert!(
        plain.contains(&"hipGetDeviceCount 100".to_string()),
        "hipErrorNoDevice without a GPU: {plain:?}"
    );
    assert_eq!(
        body(&shimmed),
        body(&plain),
        "the real runtime's own codes through the shim (no 801, no recursion)"
    );
    assert!(
        !stderr.contains("hipLaunchKernel@hip_4.2 is defined by no loaded HIP runtime"),
        "{stderr}"
    );
}
