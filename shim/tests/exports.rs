//! The shim's dynamic symbol table: HIP entry points under HIP's own version nodes (field
//! lesson 2: hipBLASLt binds `hipMalloc@@hip_4.2`-style references), `ioctl` unversioned so
//! that it satisfies libc's `ioctl@GLIBC_2.2.5` references.

mod common;

use std::process::Command;

fn dyn_syms() -> Vec<String> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(common::shim_path())
        .output()
        .expect("run readelf (binutils)");
    assert!(
        out.status.success(),
        "readelf failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            (f.len() >= 8 && f[3] == "FUNC" && f[4] == "GLOBAL" && f[6] != "UND")
                .then(|| f[7].to_string())
        })
        .collect()
}

#[test]
fn hip_entry_points_carry_hip_version_nodes() {
    let syms = dyn_syms();
    for want in [
        "hipLaunchKernel@@hip_4.2",
        "hipLaunchKernel_spt@@hip_5.2",
        "hipExtLaunchKernel@@hip_4.2",
        "hipLaunchCooperativeKernel@@hip_4.2",
        "hipLaunchCooperativeKernel_spt@@hip_5.2",
        "hipModuleLaunchKernel@@hip_4.2",
        "hipModuleLaunchCooperativeKernel@@hip_5.5",
        "hipGraphLaunch@@hip_4.3",
        "hipGraphLaunch_spt@@hip_5.3",
        "hipStreamCreate@@hip_4.2",
        "hipStreamCreateWithFlags@@hip_4.2",
        "hipStreamCreateWithPriority@@hip_4.2",
        "hipExtStreamCreateWithCUMask@@hip_4.2",
        "hipStreamDestroy@@hip_4.2",
        "hipGetProcAddress@@hip_6.1",
        // C++ only in ROCm, so only under its mangled name.
        "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j@@hip_4.2",
    ] {
        assert!(
            syms.iter().any(|s| s == want),
            "{want} missing from the shim's dynamic symbols: {syms:?}"
        );
    }
    assert!(
        !syms
            .iter()
            .any(|s| s.starts_with("hipExtModuleLaunchKernel")),
        "hipExtModuleLaunchKernel must not be exported unmangled"
    );
}

#[test]
fn ioctl_is_exported_unversioned() {
    let syms = dyn_syms();
    assert!(
        syms.iter().any(|s| s == "ioctl"),
        "ioctl (unversioned) missing: {syms:?}"
    );
    assert!(
        !syms.iter().any(|s| s.starts_with("ioctl@")),
        "ioctl must be unversioned so it satisfies ioctl@GLIBC_2.2.5 references: {syms:?}"
    );
}

#[test]
fn version_definitions_cover_the_hip_node_chain() {
    let out = Command::new("readelf")
        .args(["-V", "-W"])
        .arg(common::shim_path())
        .output()
        .expect("run readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    for node in [
        "hip_4.2", "hip_4.3", "hip_4.4", "hip_4.5", "hip_5.0", "hip_5.1", "hip_5.2", "hip_5.3",
        "hip_5.5", "hip_5.6", "hip_6.0", "hip_6.1", "hip_6.2", "hip_6.3",
    ] {
        assert!(
            text.contains(&format!("Name: {node}")),
            "version node {node} not defined:\n{text}"
        );
    }
}
