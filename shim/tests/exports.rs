//! The shim's dynamic symbol table: HIP entry points under HIP's own version nodes (field
//! lesson 2: hipBLASLt binds `hipMalloc@@hip_4.2`-style references), `ioctl` unversioned so
//! that it satisfies libc's `ioctl@GLIBC_2.2.5` references.

mod common;

use std::process::Command;

/// The shim's global functions as "name@@node" (or a bare name when unversioned).
fn dyn_syms() -> Vec<String> {
    common::elf::defined_functions(&common::shim_path())
        .into_iter()
        .filter(|(bind, _)| bind == "GLOBAL")
        .map(|(_, name)| name)
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
        // Stream-ordered work (held and attributed like launches).
        "hipMemcpyAsync@@hip_4.2",
        "hipMemcpyAsync_spt@@hip_5.2",
        "hipMemsetAsync@@hip_4.2",
        "hipMemsetAsync_spt@@hip_5.3",
        "hipMemcpy@@hip_4.2",
        "hipMemcpy_spt@@hip_5.2",
        "hipMemset@@hip_4.2",
        "hipMemset_spt@@hip_5.2",
        "hipMemcpyWithStream@@hip_4.2",
        "hipMemcpyHtoDAsync@@hip_4.2",
        "hipMemcpyDtoHAsync@@hip_4.2",
        "hipMemcpyDtoDAsync@@hip_4.2",
        "hipMemcpyPeerAsync@@hip_4.2",
        "hipMemcpy2DAsync@@hip_4.2",
        "hipMemcpy2DAsync_spt@@hip_5.3",
        "hipMemcpy2DToArrayAsync@@hip_4.3",
        "hipMemcpy2DToArrayAsync_spt@@hip_5.3",
        "hipMemcpy2DFromArrayAsync@@hip_4.2",
        "hipMemcpy2DFromArrayAsync_spt@@hip_5.3",
        "hipMemcpyParam2DAsync@@hip_4.2",
        "hipMemcpy3DAsync@@hip_4.2",
        "hipMemcpy3DAsync_spt@@hip_5.3",
        "hipDrvMemcpy3DAsync@@hip_4.2",
        "hipMemcpyToSymbolAsync@@hip_4.2",
        "hipMemcpyToSymbolAsync_spt@@hip_5.3",
        "hipMemcpyFromSymbolAsync@@hip_4.2",
        "hipMemcpyFromSymbolAsync_spt@@hip_5.3",
        "hipMemcpyAtoHAsync@@hip_6.2",
        "hipMemcpyHtoAAsync@@hip_6.2",
        "hipMemsetD8Async@@hip_4.2",
        "hipMemsetD16Async@@hip_4.2",
        "hipMemsetD32Async@@hip_4.2",
        "hipMemset2DAsync@@hip_4.2",
        "hipMemset2DAsync_spt@@hip_5.3",
        "hipMemset3DAsync@@hip_4.2",
        "hipMemset3DAsync_spt@@hip_5.3",
        "hipLaunchHostFunc@@hip_5.3",
        "hipLaunchHostFunc_spt@@hip_5.3",
        "hipStreamAddCallback@@hip_4.2",
        "hipStreamAddCallback_spt@@hip_5.3",
        "hipEventRecord@@hip_4.2",
        "hipEventRecord_spt@@hip_5.2",
        "hipEventRecordWithFlags@@hip_6.4",
        "hipStreamBatchMemOp@@hip_6.4",
        "hipStreamWaitEvent@@hip_4.2",
        "hipStreamWaitEvent_spt@@hip_5.2",
        // Synchronisation and queries (never held).
        "hipStreamSynchronize@@hip_4.2",
        "hipStreamSynchronize_spt@@hip_5.2",
        "hipStreamQuery@@hip_4.2",
        "hipStreamQuery_spt@@hip_5.2",
        "hipEventSynchronize@@hip_4.2",
        "hipDeviceSynchronize@@hip_4.2",
        "hipCtxSynchronize@@hip_4.2",
        // Exported under both names by ROCm 6.x (C++ only before): the math libraries import
        // the C names (docs/real-rocm.md, "The libraries' root").
        "_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j@@hip_4.2",
        "hipExtModuleLaunchKernel@@hip_4.2",
        "_Z24hipHccModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_@@hip_4.2",
        "hipHccModuleLaunchKernel@@hip_4.2",
    ] {
        assert!(
            syms.iter().any(|s| s == want),
            "{want} missing from the shim's dynamic symbols: {syms:?}"
        );
    }
    // Each wrapper exactly once, at its one node (no second, unversioned or other-node copy).
    for s in &syms {
        let name = s.split('@').next().unwrap();
        assert_eq!(
            syms.iter()
                .filter(|x| x.split('@').next() == Some(name))
                .count(),
            1,
            "{name} exported more than once: {syms:?}"
        );
    }
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
        "hip_5.5", "hip_5.6", "hip_6.0", "hip_6.1", "hip_6.2", "hip_6.4",
    ] {
        assert!(
            text.contains(&format!("Name: {node}")),
            "version node {node} not defined:\n{text}"
        );
    }
    for absent in ["hip_5.4", "hip_6.3"] {
        assert!(
            !text.contains(&format!("Name: {absent}")),
            "{absent} is not a node of ROCm's runtime:\n{text}"
        );
    }
}

/// `name -> node` of every default-versioned function a library defines.
fn default_versions(lib: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    common::elf::defined_functions(lib)
        .into_iter()
        .filter_map(|(_, name)| {
            name.split_once("@@")
                .map(|(n, v)| (n.to_string(), v.to_string()))
        })
        .collect()
}

/// Every HIP function the shim exports that `real` also defines carries the node the real
/// library gives it; returns the shim's exports `real` lacks, with their nodes.
fn check_against(real: &std::path::Path) -> Vec<(String, String)> {
    let shim = default_versions(&common::shim_path());
    let lib = default_versions(real);
    let mut absent = Vec::new();
    for (name, node) in &shim {
        match lib.get(name) {
            Some(real_node) => assert_eq!(
                node,
                real_node,
                "{name}: the shim exports it at {node}, {} at {real_node}",
                real.display()
            ),
            None => absent.push((name.clone(), node.clone())),
        }
    }
    absent
}

/// `hip_X.Y` as (X, Y).
fn node_version(node: &str) -> (u32, u32) {
    let v = node.trim_start_matches("hip_");
    let (a, b) = v.split_once('.').unwrap_or((v, "0"));
    (a.parse().unwrap_or(0), b.parse().unwrap_or(0))
}

#[test]
fn nodes_match_debians_real_hip_5_2_3() {
    let real = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libamdhip64.so.5");
    assert!(
        real.exists(),
        "{} is missing: install Debian's libamdhip64-5 (scripts/setup.sh does)",
        real.display()
    );
    // What 5.2.3 lacks is newer than it (nodes after hip_5.2), except hipEventRecord_spt, which
    // ROCm placed in hip_5.2 after Debian's 5.2.3 was released (docs/shim.md), and the C names
    // of the module launches, which ROCm 6 added under hip_4.2 (5.2.3 has them in C++ only).
    const LATER_IN_OLD_NODES: [&str; 3] = [
        "hipEventRecord_spt",
        "hipExtModuleLaunchKernel",
        "hipHccModuleLaunchKernel",
    ];
    for (name, node) in check_against(real) {
        assert!(
            node_version(&node) > (5, 2) || LATER_IN_OLD_NODES.contains(&name.as_str()),
            "{name}@@{node} is missing from HIP 5.2.3 although its node is not newer"
        );
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_nodes_match_debians_real_hip_6_4_3() {
    let root = common::sid::root();
    let real = root.join("usr/lib/x86_64-linux-gnu/libamdhip64.so.6");
    // What 6.4.3 lacks is HIP 7's (nodes after hip_6.4; shim/tests/sid7_exports.rs checks
    // those against HIP 7.2.4).
    let absent: Vec<_> = check_against(&real)
        .into_iter()
        .filter(|(_, node)| node_version(node) <= (6, 4))
        .collect();
    assert!(
        absent.is_empty(),
        "HIP 6.4.3 defines every function the shim wraps at a 6.x node; missing: {absent:?}\n{}",
        common::sid::packages()
    );
    // The same node chain: the nodes the real library defines are the shim's first ones ...
    let nodes = |p: &std::path::Path| -> Vec<String> {
        let out = Command::new("readelf")
            .args(["-V", "-W"])
            .arg(p)
            .output()
            .expect("readelf -V");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let defs = text
            .split("Version definition section")
            .nth(1)
            .unwrap_or("")
            .to_string();
        let defs = defs
            .split("Version needs section")
            .next()
            .unwrap_or("")
            .to_string();
        defs.lines()
            .filter_map(|l| l.split("Name: ").nth(1))
            .map(|n| n.trim().to_string())
            .filter(|n| n.starts_with("hip_"))
            .collect()
    };
    // ... followed by HIP 7.2's hip_6.5, hip_7.1 and hip_7.2.
    let mut want = nodes(&real);
    want.extend(["hip_6.5", "hip_7.1", "hip_7.2"].map(String::from));
    assert_eq!(
        nodes(&common::shim_path()),
        want,
        "{}",
        common::sid::packages()
    );
}
