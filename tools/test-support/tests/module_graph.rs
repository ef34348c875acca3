//! No crate of the workspace has modules that import each other in a circle, at any level of
//! its module tree (the check: tools/test-support/src/module_graph.rs). kfdq's layers hold
//! (docs/architecture.md, "Layering"): the core names neither the agent nor the doctor, and the
//! shim and the device plugin link none of the agent's crates, and the shim's whole tree (its
//! suites' dev-dependencies included) holds neither the simulator nor an agent-only crate
//! (tools/test-support/src/crate_graph.rs).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use test_support::crate_graph::{all_dependencies, normal_dependencies};
use test_support::module_graph::{assert_no_circles, crossings};

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
    ("tools/kfd-emu-api/src", 5),
    ("tools/fakehip/src", 1),
    ("tools/gfx-model/src", 3),
    ("tools/calibration/src", 1),
    ("tools/trace/src", 6),
    ("tools/preempt-lab/src", 3),
    ("tools/test-support/src", 6),
    ("tools/bench-hip/src", 2),
    ("tools/hip-workloads/src", 5),
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

/// kfdq's core: what the shim and the device plugin link (`default-features = false`).
const CORE: &[&str] = &[
    "",
    "ids",
    "kfd",
    "policy",
    "proto",
    "allocation",
    "chain",
    "stats",
    "reaction",
    "replace",
    "procfs",
];

#[test]
fn kfdq_layers_refer_down_only() {
    let src = workspace().join("src");
    let rules: &[(&[&str], &[&str], &str)] = &[
        (
            CORE,
            &["agent", "doctor", "capability"],
            "the core (built without features, linked by the shim) names the agent, the doctor or the capability checks",
        ),
        (
            &["capability"],
            &["agent", "doctor"],
            "the capability checks (shared by the agent and the doctor) name one of their users",
        ),
        (&["agent"], &["doctor"], "the agent takes from the doctor"),
        (&["doctor"], &["agent"], "the doctor takes from the agent"),
    ];
    let mut broken = Vec::new();
    for (from, to, rule) in rules {
        let found = crossings(&src, from, to);
        if !found.is_empty() {
            broken.push(format!("{rule}: {found:?}"));
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    // The check reads the layers it names.
    assert!(!crossings(&src, &["agent"], &["proto"]).is_empty());
}

/// Crates only the agent, the doctor, the command lines or the partition model need.
const AGENT_ONLY: &[&str] = &[
    "gfx-model",
    "kfdq-calibration",
    "kfdq-trace",
    "csv",
    "prometheus-client",
    "toml",
    "rustix",
    "clap",
    "tracing-subscriber",
    "tempfile",
];

/// Those of `crates` that `tree` holds.
fn held<'a>(tree: &BTreeSet<String>, crates: &[&'a str]) -> Vec<&'a str> {
    crates
        .iter()
        .copied()
        .filter(|c| tree.contains(*c))
        .collect()
}

#[test]
fn the_shim_and_the_device_plugin_link_no_agent_crate() {
    let manifest = workspace().join("Cargo.toml");
    let shim = normal_dependencies(&manifest, "kfdq-shim");
    assert!(
        shim.contains("kfdq") && shim.contains("kfd-sys"),
        "the shim's tree: {shim:?}"
    );
    let linked = held(&shim, AGENT_ONLY);
    assert!(
        linked.is_empty(),
        "the shim (injected into every GPU process) links {linked:?}: depend on kfdq with default-features = false and keep these behind kfdq's `agent`/`doctor`/`cli` features"
    );
    let plugin = normal_dependencies(&manifest, "kfdq-device-plugin");
    let linked = held(
        &plugin,
        &[
            "gfx-model",
            "kfdq-calibration",
            "prometheus-client",
            "object",
        ],
    );
    assert!(
        plugin.contains("kfdq") && linked.is_empty(),
        "the device plugin links {linked:?} (its tree: {plugin:?})"
    );
}

/// Crates the shim's plain `cargo tree` (dev-dependencies included) must not hold: the emulator
/// and the partition model (the shim's suites run the `kfd-emu` binary as a process and name its
/// types from `kfd-emu-api`), and the agent's metrics and configuration parsers (issue 54).
const NOT_IN_THE_SHIMS_TREE: &[&str] = &["kfd-emu", "gfx-model", "prometheus-client", "toml"];

#[test]
fn the_shims_whole_tree_holds_neither_the_simulator_nor_the_agents_parsers() {
    let manifest = workspace().join("Cargo.toml");
    let tree = all_dependencies(&manifest, "kfdq-shim");
    assert!(
        tree.contains("kfdq-test-support") && tree.contains("kfd-emu-api"),
        "`cargo tree -p kfdq-shim` should list the suites' dev-dependencies: {tree:?}"
    );
    let listed = held(&tree, NOT_IN_THE_SHIMS_TREE);
    assert!(
        listed.is_empty(),
        "`cargo tree -p kfdq-shim` lists {listed:?}: the shim's dev-dependencies (kfdq-test-support) \
         name the emulator's types from kfd-emu-api and run the `kfd-emu` binary as a process; \
         see `cargo tree -p kfdq-shim -i CRATE` for the path that brings each in"
    );
}
