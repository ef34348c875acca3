//! No launch escapes silently (issue 52, item 3): every launch-, graph-, stream-, capture- or
//! entry-point-like function that an installed HIP runtime exports — HIP 6.4.3
//! (`libamdhip64.so.6` in the sid root) and HIP 7.2.4 (`libamdhip64.so.7` in the ROCm 7.2 root) —
//! is either wrapped by the shim under the runtime's own version node, or listed below as
//! harmless with the reason. A new runtime that exports a new launch path fails this test until
//! the shim wraps it or someone writes down why it need not.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// name -> version node of every function `lib` defines (`readelf --dyn-syms`); `@@` and `@`
/// both count (a hidden old version is still bindable by name and version).
fn functions(lib: &Path) -> BTreeMap<String, String> {
    common::elf::defined_functions(lib)
        .into_iter()
        .filter(|(bind, _)| bind == "GLOBAL")
        .filter_map(|(_, sym)| {
            let (name, node) = sym.split_once('@')?;
            Some((name.to_string(), node.trim_start_matches('@').to_string()))
        })
        .collect()
}

/// Whether a runtime export is the kind of function through which work can reach a queue or a
/// stream can come to exist: the ones this check is about.
fn launch_like(name: &str) -> bool {
    [
        "Launch",
        "Graph",
        "Stream",
        "EntryPoint",
        "ProcAddress",
        "Capture",
    ]
    .iter()
    .any(|w| name.contains(w))
        || name.ends_with("Async")
        || name.ends_with("_spt")
}

/// Why an unwrapped launch-like export is harmless; `None`: it is not, and must be wrapped.
fn harmless(name: &str) -> Option<&'static str> {
    const GRAPH: &str = "builds, instantiates, edits, clones or queries a graph: its work reaches a \
         queue only through hipGraphLaunch / hipGraphLaunch_spt / hipGraphUpload (wrapped)";
    const QUERY: &str = "a query of a stream or the device: enqueues nothing";
    const CAPTURE: &str = "stream capture records the stream's later calls into a graph (each \
         still passes its own wrapper); nothing runs until the graph is launched (wrapped)";
    const ATTR: &str = "a stream's attributes (its priority among them) reach the GPU only as a \
         queue's priority, and every CREATE_QUEUE / UPDATE_QUEUE passes the shim's ioctl hook, \
         which sets the class's priority; a kernel launched with them passes its launch wrapper";
    const GRAPH_MEM: &str = "graph memory-pool attributes and trimming: no packet";
    const GL: &str = "OpenGL interop registration and queries: no packet (the map/unmap calls, \
         which take a stream, are wrapped)";
    const ATTACH: &str = "managed-memory attachment to a stream: metadata, no packet";
    match name {
        "hipGraphLaunch" | "hipGraphLaunch_spt" | "hipGraphUpload" => None,
        "hipGraphicsMapResources" | "hipGraphicsUnmapResources" => None,
        "hipGraphInstantiateWithParams" => None,
        n if n.starts_with("hipGraphics") => Some(GL),
        n if n.starts_with("hipGraph") || n.starts_with("hipDrvGraph") => Some(GRAPH),
        "hipDeviceGetGraphMemAttribute"
        | "hipDeviceSetGraphMemAttribute"
        | "hipDeviceGraphMemTrim" => Some(GRAPH_MEM),
        "hipStreamBeginCapture"
        | "hipStreamBeginCapture_spt"
        | "hipStreamBeginCaptureToGraph"
        | "hipStreamEndCapture"
        | "hipStreamEndCapture_spt"
        | "hipStreamUpdateCaptureDependencies"
        | "hipStreamUpdateCaptureDependencies_v2"
        | "hipThreadExchangeStreamCaptureMode" => Some(CAPTURE),
        n if n.starts_with("hipStreamGet") || n.starts_with("hipStreamIsCapturing") => Some(QUERY),
        "hipDeviceGetStreamPriorityRange" | "hipGetStreamDeviceId" | "hipExtStreamGetCUMask" => {
            Some(QUERY)
        }
        "hipStreamSetAttribute" | "hipStreamCopyAttributes" => Some(ATTR),
        "hipStreamAttachMemAsync" => Some(ATTACH),
        _ => None,
    }
}

/// The installed HIP runtimes: (what, path). A missing root fails the test and says how to
/// build it (scripts/test.sh builds both).
fn runtimes() -> Vec<(&'static str, PathBuf)> {
    test_support::require_root();
    let cache = common::sid::cache_dir();
    let libs = [
        (
            "HIP 6.4.3 (sid root)",
            cache.join("sid-root/usr/lib/x86_64-linux-gnu/libamdhip64.so.6"),
            "scripts/sid-root.sh",
        ),
        (
            "HIP 7.2.4 (ROCm 7.2 root)",
            cache.join("sid-rocm72-root/usr/lib/x86_64-linux-gnu/libamdhip64.so.7"),
            "scripts/sid-root.sh --rocm72",
        ),
    ];
    libs.into_iter()
        .map(|(what, path, build)| {
            assert!(
                path.exists(),
                "{what} is missing at {}: build it with `{build}` as root (scripts/test.sh does)",
                path.display()
            );
            (what, path)
        })
        .collect()
}

/// Every launch-like export of `runtime` that the shim neither wraps (at the same node) nor
/// lists as harmless, with what is wrong.
fn escapes(runtime: &BTreeMap<String, String>, shim: &BTreeMap<String, String>) -> Vec<String> {
    runtime
        .iter()
        .filter(|(name, _)| launch_like(name))
        .filter_map(|(name, node)| match shim.get(name) {
            Some(n) if n == node => None,
            Some(n) => Some(format!(
                "{name}@{node}: the shim exports it at {n}, so references to {name}@{node} bind past it"
            )),
            None if harmless(name).is_some() => None,
            None => Some(format!(
                "{name}@{node}: neither wrapped nor listed as harmless"
            )),
        })
        .collect()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_every_launch_like_export_of_hip_6_4_and_7_2_is_wrapped_or_listed_harmless() {
    let shim = functions(&common::shim_path());
    let mut report = Vec::new();
    let mut checked = 0;
    for (what, lib) in runtimes() {
        let rt = functions(&lib);
        assert!(
            rt.len() > 400,
            "{what}: only {} functions in {}",
            rt.len(),
            lib.display()
        );
        checked += rt.keys().filter(|n| launch_like(n)).count();
        for e in escapes(&rt, &shim) {
            report.push(format!("{what}: {e}"));
        }
    }
    assert!(checked > 300, "only {checked} launch-like exports found");
    assert!(
        report.is_empty(),
        "launch paths that escape the shim (wrap them in shim/src/exports.rs at the runtime's node, \
         or list them in harmless() with the reason):\n{}",
        report.join("\n")
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_the_new_launch_paths_of_hip_7_2_are_wrapped_at_their_nodes() {
    let shim = functions(&common::shim_path());
    let (_, lib) = runtimes().pop().expect("HIP 7.2");
    let rt = functions(&lib);
    for name in [
        "hipLaunchKernelExC",
        "hipDrvLaunchKernelEx",
        "hipGetDriverEntryPoint",
        "hipGetDriverEntryPoint_spt",
        "hipMemcpyBatchAsync",
        "hipMemsetD2D32Async",
    ] {
        let node = rt
            .get(name)
            .unwrap_or_else(|| panic!("HIP 7.2 lacks {name}"));
        assert!(
            node.starts_with("hip_6.5") || node.starts_with("hip_7."),
            "{name}@{node}: a HIP 7 node"
        );
        assert_eq!(
            shim.get(name),
            Some(node),
            "the shim wraps {name} at {node}"
        );
    }
    // The check itself: an unwrapped launch and a node mismatch are both caught.
    let mut without = shim.clone();
    without.remove("hipLaunchKernelExC");
    assert_eq!(
        escapes(&rt, &without),
        vec!["hipLaunchKernelExC@hip_6.5: neither wrapped nor listed as harmless".to_string()]
    );
    let mut moved = shim.clone();
    moved.insert("hipDrvLaunchKernelEx".into(), "hip_4.2".into());
    assert_eq!(escapes(&rt, &moved).len(), 1, "{:?}", escapes(&rt, &moved));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_hip_7_2_defines_every_function_the_shim_wraps_at_the_shims_node() {
    let shim = functions(&common::shim_path());
    let (_, lib) = runtimes().pop().expect("HIP 7.2");
    let rt = functions(&lib);
    let wrong: Vec<String> = shim
        .iter()
        .filter(|(name, _)| name.starts_with("hip") || name.starts_with("_Z"))
        .filter(|(name, node)| rt.get(*name) != Some(*node))
        .map(|(name, node)| format!("{name}@{node}: HIP 7.2.4 has {:?}", rt.get(name)))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
}
