//! Tests of fakehip's built library: soname, symlink, symbol-version nodes and placement (no
//! emulator). Also the other files of the suite: `no_device.rs` (no GPU, or a kernel fakehip
//! refuses), `queues.rs` (queues, priorities, completion, waits), `processes.rs` (fork,
//! devices, graphs, memory operations, per-thread streams, reset, rings), all sharing `common`.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;

#[macro_use]
mod common;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tool(name: &str, args: &[&str]) -> String {
    let out = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

// ---------------------------------------------------------------------------------------
// the library file
// ---------------------------------------------------------------------------------------

#[test]
fn library_is_built_with_real_soname() {
    let lib = Path::new(fakehip::LIB_PATH);
    assert!(lib.is_file(), "{} missing", lib.display());
    assert_eq!(lib.parent(), Some(Path::new(fakehip::LIB_DIR)));
    let link = Path::new(fakehip::LIB_DIR).join("libamdhip64.so");
    assert_eq!(
        fs::read_link(&link).expect("libamdhip64.so symlink"),
        Path::new("libamdhip64.so.6")
    );
    let dynamic = tool("readelf", &["-d", "-W", fakehip::LIB_PATH]);
    assert!(
        dynamic.contains("Library soname: [libamdhip64.so.6]"),
        "{dynamic}"
    );
    assert!(
        Path::new(fakehip::INCLUDE_DIR)
            .join("hip/hip_runtime_api.h")
            .is_file()
    );
}

/// (symbol, node) pairs from ROCm's hip_hcc.map.in for what fakehip implements.
const PLACEMENT: &[(&str, &str)] = &[
    ("hipLaunchKernel", "hip_4.2"),
    ("hipModuleLaunchKernel", "hip_4.2"),
    ("hipExtLaunchKernel", "hip_4.2"),
    ("hipLaunchCooperativeKernel", "hip_4.2"),
    ("hipStreamCreate", "hip_4.2"),
    ("hipStreamCreateWithFlags", "hip_4.2"),
    ("hipStreamCreateWithPriority", "hip_4.2"),
    ("hipExtStreamCreateWithCUMask", "hip_4.2"),
    ("hipStreamDestroy", "hip_4.2"),
    ("hipStreamSynchronize", "hip_4.2"),
    ("hipStreamQuery", "hip_4.2"),
    ("hipStreamWaitEvent", "hip_4.2"),
    ("hipStreamGetPriority", "hip_4.2"),
    ("hipStreamAddCallback", "hip_4.2"),
    ("hipDeviceGetStreamPriorityRange", "hip_4.2"),
    ("hipMalloc", "hip_4.2"),
    ("hipMemcpy", "hip_4.2"),
    ("hipMemcpyAsync", "hip_4.2"),
    ("hipMemsetAsync", "hip_4.2"),
    ("hipEventRecord", "hip_4.2"),
    ("hipEventElapsedTime", "hip_4.2"),
    ("hipGetDeviceCount", "hip_4.2"),
    ("hipDeviceSynchronize", "hip_4.2"),
    ("hipCtxSynchronize", "hip_4.2"),
    ("__hipPushCallConfiguration", "hip_4.2"),
    ("__hipPopCallConfiguration", "hip_4.2"),
    ("__hipRegisterFatBinary", "hip_4.2"),
    ("__hipRegisterFunction", "hip_4.2"),
    (fakehip::EXT_MODULE_LAUNCH_KERNEL_SYMBOL, "hip_4.2"),
    ("hipGraphLaunch", "hip_4.3"),
    ("hipGraphCreate", "hip_4.3"),
    ("hipGraphInstantiate", "hip_4.3"),
    ("hipStreamBeginCapture", "hip_4.3"),
    ("hipStreamEndCapture", "hip_4.3"),
    ("hipGraphAddEmptyNode", "hip_4.4"),
    ("hipGraphInstantiateWithFlags", "hip_4.5"),
    ("hipThreadExchangeStreamCaptureMode", "hip_5.0"),
    ("hipMallocAsync", "hip_5.1"),
    ("hipFreeAsync", "hip_5.1"),
    ("hipLaunchKernel_spt", "hip_5.2"),
    ("hipLaunchCooperativeKernel_spt", "hip_5.2"),
    ("hipMemcpy_spt", "hip_5.2"),
    ("hipMemcpyAsync_spt", "hip_5.2"),
    ("hipMemset_spt", "hip_5.2"),
    ("hipStreamSynchronize_spt", "hip_5.2"),
    ("hipStreamQuery_spt", "hip_5.2"),
    ("hipStreamWaitEvent_spt", "hip_5.2"),
    ("hipStreamGetPriority_spt", "hip_5.2"),
    ("hipStreamGetFlags_spt", "hip_5.2"),
    ("hipEventRecord_spt", "hip_5.2"),
    ("hipGraphLaunch_spt", "hip_5.3"),
    ("hipMemsetAsync_spt", "hip_5.3"),
    ("hipLaunchHostFunc", "hip_5.3"),
    ("hipLaunchHostFunc_spt", "hip_5.3"),
    ("hipStreamAddCallback_spt", "hip_5.3"),
    ("hipStreamBeginCapture_spt", "hip_5.3"),
    ("hipModuleLaunchCooperativeKernel", "hip_5.5"),
    ("hipExtGetLastError", "hip_6.0"),
    ("hipGetProcAddress", "hip_6.1"),
    ("hipGraphExecGetFlags", "hip_6.2"),
    ("hipEventRecordWithFlags", "hip_6.4"),
    ("fakehipStreamQueueId", "FAKEHIP_1"),
    ("fakehipStreamQueueInfo", "FAKEHIP_1"),
];

const NODES: &[&str] = &[
    "hip_4.2", "hip_4.3", "hip_4.4", "hip_4.5", "hip_5.0", "hip_5.1", "hip_5.2", "hip_5.3",
    "hip_5.5", "hip_5.6", "hip_6.0", "hip_6.1", "hip_6.2", "hip_6.4",
];

/// The node of fakehip's own extensions (outside HIP's chain).
const EXT_NODE: &str = "FAKEHIP_1";

/// Defined dynamic symbols as "name@@version" strings.
fn defined_dyn_syms() -> BTreeSet<String> {
    tool("readelf", &["--dyn-syms", "-W", fakehip::LIB_PATH])
        .lines()
        .filter(|l| !l.contains(" UND "))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let numbered = cols.first()?.strip_suffix(':')?.parse::<u32>().is_ok();
            (numbered && cols.len() >= 8).then(|| cols[7].to_string())
        })
        .collect()
}

#[test]
fn exports_carry_the_real_version_nodes() {
    let syms = defined_dyn_syms();
    for (name, node) in PLACEMENT {
        let want = format!("{name}@@{node}");
        assert!(
            syms.contains(&want),
            "{want} not exported; have:\n{syms:#?}"
        );
    }
    for s in &syms {
        if NODES.contains(&s.as_str()) || s == EXT_NODE {
            continue; // the version definitions' own ABS symbols
        }
        let (name, version) = s
            .split_once("@@")
            .unwrap_or_else(|| panic!("unversioned export {s}"));
        assert!(
            NODES.contains(&version) || (version == EXT_NODE && name.starts_with("fakehip")),
            "{s} has an unexpected version"
        );
        assert!(
            name.starts_with("hip")
                || name.starts_with("__hip")
                || name.starts_with("fakehip")
                || name.starts_with("_Z24hipExtModuleLaunchKernel"),
            "unexpected export {s}"
        );
    }
    // C++ only, like ROCm's library
    assert!(
        !syms
            .iter()
            .any(|s| s.starts_with("hipExtModuleLaunchKernel@")),
        "{syms:#?}"
    );
}

#[test]
fn version_nodes_form_the_real_chain() {
    let v = tool("readelf", &["-V", "-W", fakehip::LIB_PATH]);
    let defs = v
        .split("Version definition section")
        .nth(1)
        .expect("a .gnu.version_d section");
    let defs = defs.split("Version needs section").next().unwrap_or(defs);
    let mut names = Vec::new();
    let mut parents = BTreeMap::new();
    for line in defs.lines() {
        if let Some(i) = line.find("Name: ") {
            names.push(line[i + 6..].trim().to_string());
        } else if let Some(i) = line.find("Parent 1: ") {
            let child = names.last().expect("a parent follows its node").clone();
            parents.insert(child, line[i + 10..].trim().to_string());
        }
    }
    assert_eq!(
        names.first().map(String::as_str),
        Some("libamdhip64.so.6"),
        "{v}"
    );
    assert_eq!(&names[1..names.len() - 1], NODES, "{v}");
    assert_eq!(names.last().map(String::as_str), Some(EXT_NODE), "{v}");
    assert!(
        !parents.contains_key(EXT_NODE),
        "the extensions' node is outside HIP's chain"
    );
    for pair in NODES.windows(2) {
        assert_eq!(
            parents.get(pair[1]).map(String::as_str),
            Some(pair[0]),
            "{v}"
        );
    }
}

#[test]
fn cxx_callers_bind_to_the_mangled_hip_ext_module_launch_kernel() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("ext.cpp");
    fs::write(
        &src,
        "#include <hip/hip_runtime_api.h>\n\
         int main() {\n\
           static fakehip_kernel k = FAKEHIP_KERNEL(1000);\n\
           return hipExtModuleLaunchKernel((hipFunction_t)&k, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,\n\
                                           nullptr) == hipErrorNoDevice ? 0 : 1;\n\
         }\n",
    )
    .expect("write ext.cpp");
    let exe = dir.path().join("ext");
    if let Err(e) = fakehip::compile_program(&src, &exe, &["-Werror"]) {
        if e.kind() == std::io::ErrorKind::NotFound {
            eprintln!("skipped: no C++ compiler ({e})");
            return;
        }
        panic!("{e}");
    }
    let needed = tool(
        "nm",
        &["-D", "--undefined-only", &exe.display().to_string()],
    );
    assert!(
        needed.contains(fakehip::EXT_MODULE_LAUNCH_KERNEL_SYMBOL),
        "{needed}"
    );
    let empty = dir.path().join("root");
    fs::create_dir_all(&empty).expect("mkdir");
    let root = empty.display().to_string();
    let out = common::run(&exe, &[], &[("KFDQ_ROOT", &root)]);
    assert!(out.status.success(), "{}", out.stderr);
}
