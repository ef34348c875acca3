//! No crate of the workspace has modules that import each other in a circle, at any level of
//! its module tree (the check: tools/test-support/src/module_graph.rs).

use std::path::{Path, PathBuf};

use test_support::module_graph::assert_no_circles;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (crate sources, the fewest modules the check must read there).
const CRATES: &[(&str, usize)] = &[
    ("src", 40),
    ("shim/src", 10),
    ("device-plugin/src", 8),
    ("kfd-sys/src", 1),
    ("tools/kfd-emu/src", 30),
    ("tools/fakehip/src", 1),
    ("tools/gfx-model/src", 3),
    ("tools/preempt-lab/src", 3),
    ("tools/test-support/src", 6),
    ("tools/bench-hip/src", 2),
];

#[test]
fn no_crate_has_an_import_circle() {
    let failures: Vec<String> = CRATES
        .iter()
        .filter_map(|(src, min)| {
            std::panic::catch_unwind(|| assert_no_circles(&workspace().join(src), *min))
                .err()
                .map(|e| {
                    e.downcast_ref::<String>()
                        .cloned()
                        .unwrap_or_else(|| format!("{src}: the check failed"))
                })
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
