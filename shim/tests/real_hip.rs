//! Under Debian's real HIP runtime (`libamdhip64-5`, 5.2.3, version nodes hip_4.2 .. hip_5.2;
//! no GPU here): the program's HIP references bind to the shim, the shim forwards to the real
//! library (no recursion, no crash), and every call returns the real library's own code.

mod common;

use std::path::Path;
use std::process::Command;

const REAL_HIP: &str = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5";

fn run(program: &Path, preload: bool) -> (Vec<String>, String) {
    let mut cmd = Command::new(program);
    for k in [
        "LD_PRELOAD",
        "KFDQ_SOCKET",
        "KFDQ_ROOT",
        "HIP_VISIBLE_DEVICES",
    ] {
        cmd.env_remove(k);
    }
    let state = tempfile::tempdir().unwrap();
    cmd.env("KFDQ_STATE_DIR", state.path());
    if preload {
        cmd.env("LD_PRELOAD", common::shim_path());
    }
    let out = cmd.output().expect("run real_hip");
    assert!(
        out.status.success(),
        "real_hip (preload={preload}) failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    (lines, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn real_libamdhip64_5_through_the_shim() {
    assert!(
        Path::new(REAL_HIP).exists(),
        "{REAL_HIP} is missing: install Debian's libamdhip64-5 (`apt-get install -y libamdhip64-5`, scripts/setup.sh does it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("real_hip");
    let cc = std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into());
    let out = Command::new(cc)
        .args(["-std=gnu11", "-g", "-Wall", "-Werror"])
        .arg(format!("-I{}", fakehip::INCLUDE_DIR))
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/programs/real_hip.c"
        ))
        .arg("-o")
        .arg(&exe)
        .args(["-l:libamdhip64.so.5", "-ldl"])
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "building real_hip: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let (mut plain, _) = run(&exe, false);
    let (mut shimmed, stderr) = run(&exe, true);
    // A symbol the real runtime lacks: absent without the shim; with it, the wrapper returns
    // hipErrorNotSupported and warns once, without crashing.
    let gpa = |v: &mut Vec<String>| {
        let i = v
            .iter()
            .position(|l| l.starts_with("hipGetProcAddress "))
            .expect("hipGetProcAddress line");
        v.remove(i)
    };
    assert_eq!(gpa(&mut plain), "hipGetProcAddress absent");
    assert_eq!(gpa(&mut shimmed), "hipGetProcAddress 801");
    assert_eq!(
        stderr
            .matches("hipGetProcAddress@hip_6.1 is defined by no loaded HIP runtime")
            .count(),
        1,
        "warned once: {stderr}"
    );
    assert_eq!(plain[0], "bound hipLaunchKernel libamdhip64.so.5");
    assert_eq!(
        shimmed[0], "bound hipLaunchKernel libkfdq_shim.so",
        "under LD_PRELOAD the program's versioned reference binds to the shim"
    );
    assert_eq!(
        plain[1..],
        shimmed[1..],
        "the same return codes with and without the shim"
    );
    assert_eq!(shimmed.last().map(String::as_str), Some("done"));
    assert!(
        shimmed.contains(&"hipGetDeviceCount 100".to_string()),
        "hipErrorNoDevice without a GPU: {shimmed:?}"
    );
    // The wrapped entry points reached the real runtime and returned its error, not the
    // shim's hipErrorNotSupported (801), which would mean a failed resolution.
    for call in [
        "hipStreamCreate",
        "hipStreamCreateWithPriority",
        "hipLaunchKernel",
        "hipModuleLaunchKernel",
        "hipLaunchKernel_spt",
        // stream-ordered work and synchronisation
        "hipMemcpyAsync",
        "hipMemcpyAsync_spt",
        "hipMemsetAsync",
        "hipMemcpy",
        "hipMemcpy_spt",
        "hipMemset",
        "hipMemset_spt",
        "hipMemcpyWithStream",
        "hipMemcpyHtoDAsync",
        "hipMemcpyDtoHAsync",
        "hipMemcpyDtoDAsync",
        "hipMemcpyPeerAsync",
        "hipMemcpy2DAsync",
        "hipMemcpy2DToArrayAsync",
        "hipMemcpy2DFromArrayAsync",
        "hipMemcpyParam2DAsync",
        "hipMemcpy3DAsync",
        "hipDrvMemcpy3DAsync",
        "hipMemcpyToSymbolAsync",
        "hipMemcpyFromSymbolAsync",
        "hipMemsetD8Async",
        "hipMemsetD16Async",
        "hipMemsetD32Async",
        "hipMemset2DAsync",
        "hipMemset3DAsync",
        "hipStreamAddCallback",
        "hipEventRecord",
        "hipStreamWaitEvent",
        "hipStreamWaitEvent_spt",
        "hipStreamSynchronize",
        "hipStreamSynchronize_spt",
        "hipStreamQuery",
        "hipStreamQuery_spt",
        "hipEventSynchronize",
        "hipDeviceSynchronize",
        "hipCtxSynchronize",
    ] {
        let line = shimmed
            .iter()
            .find(|l| l.split_whitespace().next() == Some(call))
            .unwrap_or_else(|| panic!("no {call} line: {shimmed:?}"));
        let code: i32 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(
            code == 100 || code == 101,
            "{call} returned the runtime's no-device code, got {code}"
        );
    }
}
