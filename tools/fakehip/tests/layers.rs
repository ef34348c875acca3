//! fakehip's C files call each other in one direction only: a file uses functions and variables
//! of the layers below its own ([`fakehip::LAYERS`]), never of its own layer or one above. The
//! check reads the object files the build script keeps ([`fakehip::OBJ_DIR`]): a symbol one
//! object leaves undefined and another defines is a call (or a variable use) from the first
//! file into the second.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use object::{Object, ObjectSymbol};
use test_support::module_graph::circles;

/// One file using a symbol another file defines.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Use {
    from: String,
    to: String,
    symbol: String,
}

/// (global symbols defined, symbols left undefined) of an object file.
fn symbols(path: &Path) -> (BTreeSet<String>, BTreeSet<String>) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file = object::File::parse(&*data)
        .unwrap_or_else(|e| panic!("parse {} as an object file: {e}", path.display()));
    let mut defined = BTreeSet::new();
    let mut undefined = BTreeSet::new();
    for sym in file.symbols() {
        let Ok(name) = sym.name() else { continue };
        if name.is_empty() {
            continue;
        }
        if sym.is_undefined() {
            undefined.insert(name.to_string());
        } else if sym.is_global() {
            defined.insert(name.to_string());
        }
    }
    (defined, undefined)
}

/// Every use of one file's symbol by another, among `objects` (file name -> object path).
fn uses(objects: &BTreeMap<String, PathBuf>) -> Vec<Use> {
    let syms: BTreeMap<&String, _> = objects.iter().map(|(f, p)| (f, symbols(p))).collect();
    let mut owner: BTreeMap<&str, &str> = BTreeMap::new();
    for (file, (defined, _)) in &syms {
        for s in defined {
            if let Some(other) = owner.insert(s, file) {
                panic!("{s} is defined in both {other} and {file}");
            }
        }
    }
    let mut out = Vec::new();
    for (file, (_, undefined)) in &syms {
        for s in undefined {
            if let Some(to) = owner.get(s.as_str()) {
                out.push(Use {
                    from: file.to_string(),
                    to: to.to_string(),
                    symbol: s.clone(),
                });
            }
        }
    }
    out.sort();
    out
}

/// The uses that do not go to a lower layer, each as `from -> to (symbol): why`.
fn violations(layers: &[&[&str]], uses: &[Use]) -> Vec<String> {
    let layer_of = |f: &str| layers.iter().position(|l| l.contains(&f));
    uses.iter()
        .filter_map(|u| {
            let (from, to) = (layer_of(&u.from)?, layer_of(&u.to)?);
            let why = if from == to {
                format!("both in layer {from}")
            } else if to > from {
                format!("layer {from} uses layer {to}, above it")
            } else {
                return None;
            };
            Some(format!("{} -> {} ({}): {why}", u.from, u.to, u.symbol))
        })
        .collect()
}

/// The circles among the files (for the failure message).
fn file_circles(uses: &[Use]) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for u in uses {
        graph
            .entry(u.from.clone())
            .or_default()
            .insert(u.to.clone());
    }
    circles(&graph)
}

/// Fails naming every use that breaks the layers of `layers`, and the circles they make.
fn assert_layered(layers: &[&[&str]], objects: &BTreeMap<String, PathBuf>) -> Vec<Use> {
    let found = uses(objects);
    let bad = violations(layers, &found);
    assert!(
        bad.is_empty(),
        "files that use their own layer or one above (layers bottom first: {layers:?}):\n{}\ncircles: {:?}",
        bad.join("\n"),
        file_circles(&found)
    );
    found
}

#[test]
fn every_file_uses_only_the_layers_below_it() {
    let dir = Path::new(fakehip::OBJ_DIR);
    let objects: BTreeMap<String, PathBuf> = fakehip::LAYERS
        .concat()
        .into_iter()
        .map(|f| {
            let o = dir.join(Path::new(f).with_extension("o"));
            assert!(
                o.is_file(),
                "{} is missing (build.rs keeps it)",
                o.display()
            );
            (f.to_string(), o)
        })
        .collect();
    let found = assert_layered(fakehip::LAYERS, &objects);
    // The check saw the library's structure: every file above the bottom layer that calls
    // another file does so, and the top layer reaches the bottom.
    let callers: BTreeSet<&str> = found.iter().map(|u| u.from.as_str()).collect();
    for f in [
        "queue.c",
        "event.c",
        "stream.c",
        "init.c",
        "submit.c",
        "hip_stream.c",
    ] {
        assert!(callers.contains(f), "no use read from {f}: {found:?}");
    }
    assert!(
        found
            .iter()
            .any(|u| u.from == "hip_device.c" && u.to == "runtime.c"),
        "{found:?}"
    );
}

/// `$CC`, else `cc` (as the build script).
fn cc() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into())
}

#[test]
fn a_call_into_a_higher_layer_or_the_same_layer_is_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = [
        (
            "low.c",
            "int high(void);\nint low(void) { return high(); }\n",
        ),
        (
            "high.c",
            "int low(void);\nint high(void) { return 1; }\nint top(void) { return low(); }\n",
        ),
        (
            "peer.c",
            "int high(void);\nint peer(void) { return high(); }\n",
        ),
    ];
    let mut objects = BTreeMap::new();
    for (name, text) in src {
        let c = dir.path().join(name);
        std::fs::write(&c, text).expect("write C file");
        let o = c.with_extension("o");
        let st = std::process::Command::new(cc())
            .args(["-c", "-fPIC", "-o"])
            .arg(&o)
            .arg(&c)
            .status()
            .expect("run the C compiler");
        assert!(st.success(), "compiling {name}");
        objects.insert(name.to_string(), o);
    }
    let layers: &[&[&str]] = &[&["low.c"], &["high.c", "peer.c"]];
    let found = uses(&objects);
    assert_eq!(
        violations(layers, &found),
        vec![
            "low.c -> high.c (high): layer 0 uses layer 1, above it".to_string(),
            "peer.c -> high.c (high): both in layer 1".to_string(),
        ]
    );
    assert_eq!(
        file_circles(&found),
        vec![vec!["high.c".to_string(), "low.c".to_string()]]
    );
    let caught = std::panic::catch_unwind(|| assert_layered(layers, &objects));
    assert!(caught.is_err(), "assert_layered must fail on these files");
}
