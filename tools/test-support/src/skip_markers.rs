//! Finds privileged tests that lack the skip marker ([`crate::privileged::SKIP_MARKER`]): a test
//! is privileged when its body calls, directly or through functions of its own file or of its
//! suite's `common/` harness, one of the calls that need root ([`PRIVILEGED_CALLS`]).
//!
//! The scan reads source text: a function is `fn name` up to the closing brace at its own
//! indentation; a call is the name followed by `(`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::privileged::SKIP_MARKER;

/// Calls that need root: mounting kfd-emu (test-support's `mount*`, the suites' wrappers of it,
/// `MountedEmu::mount`), the sid root, and the privileged rule itself.
pub const PRIVILEGED_CALLS: &[&str] = &[
    "require_root",
    "mount",
    "mount_preset",
    "mount_with",
    "mount_with_slots",
    "root",
];

/// A function in a source file.
#[derive(Debug, Clone)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// The line of `fn` (1-based).
    pub line: usize,
    /// Whether `#[test]` stands right above it (among its attributes).
    pub is_test: bool,
    /// Whether the skip marker stands among its attributes.
    pub marked: bool,
    /// Its text, signature and body.
    pub body: String,
}

/// The functions of `text`.
pub fn functions(text: &str) -> Vec<Function> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let indent = l.len() - t.len();
        let sig = t
            .strip_prefix("pub ")
            .or_else(|| t.strip_prefix("pub(crate) "))
            .unwrap_or(t);
        let Some(rest) = sig.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let mut attrs = Vec::new();
        let mut j = i;
        while j > 0 {
            let a = lines[j - 1].trim();
            if a.starts_with("#[") || a.starts_with("///") || a.starts_with("//") {
                attrs.push(a);
                j -= 1;
            } else {
                break;
            }
        }
        let close = format!("{}}}", " ".repeat(indent));
        let end = (i..lines.len())
            .find(|&k| lines[k] == close || (k == i && l.trim_end().ends_with('}')))
            .unwrap_or(lines.len() - 1);
        out.push(Function {
            name,
            line: i + 1,
            is_test: attrs.contains(&"#[test]"),
            marked: attrs.contains(&SKIP_MARKER),
            body: lines[i..=end].join("\n"),
        });
    }
    out
}

/// Whether `body` calls the function `name` (`name(` after a character that is neither part
/// of an identifier nor a method call's `.`).
fn calls(body: &str, name: &str) -> bool {
    let pat = format!("{name}(");
    body.match_indices(&pat).any(|(i, _)| {
        i > 0
            && !body[..i]
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            && !body[..i].ends_with("fn ")
    })
}

/// The `.rs` files directly in `dir`, and in its `common/` directory.
fn rust_files(dir: &Path) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let list = |d: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(d)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "rs"))
            .collect();
        v.sort();
        v
    };
    (list(dir), list(&dir.join("common")))
}

/// Names of the functions in `fns` that are privileged: they call a privileged call or another
/// privileged function.
fn privileged_names<'a>(fns: impl Iterator<Item = &'a Function> + Clone) -> BTreeSet<String> {
    let mut names: BTreeSet<String> = PRIVILEGED_CALLS.iter().map(|s| s.to_string()).collect();
    loop {
        let before = names.len();
        for f in fns.clone() {
            if !names.contains(&f.name) && names.iter().any(|n| calls(&f.body, n)) {
                names.insert(f.name.clone());
            }
        }
        if names.len() == before {
            return names;
        }
    }
}

/// The privileged tests without the skip marker in the test suite `dir` (a `tests/`
/// directory): `(file, line, test name)`.
pub fn unmarked(dir: &Path) -> Vec<(PathBuf, usize, String)> {
    let (files, common) = rust_files(dir);
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
    };
    let common_fns: Vec<Function> = common.iter().flat_map(|p| functions(&read(p))).collect();
    let mut out = Vec::new();
    for p in &files {
        let fns = functions(&read(p));
        let names = privileged_names(fns.iter().chain(common_fns.iter()));
        for f in fns.iter().filter(|f| f.is_test && !f.marked) {
            if names.iter().any(|n| calls(&f.body, n)) {
                out.push((p.clone(), f.line, f.name.clone()));
            }
        }
    }
    out
}

/// The privileged tests of the test suite `dir` (marked or not), by file.
pub fn privileged_tests(dir: &Path) -> BTreeMap<PathBuf, Vec<String>> {
    let (files, common) = rust_files(dir);
    let read = |p: &PathBuf| std::fs::read_to_string(p).unwrap_or_default();
    let common_fns: Vec<Function> = common.iter().flat_map(|p| functions(&read(p))).collect();
    let mut out = BTreeMap::new();
    for p in &files {
        let fns = functions(&read(p));
        let names = privileged_names(fns.iter().chain(common_fns.iter()));
        let tests: Vec<String> = fns
            .iter()
            .filter(|f| f.is_test && (f.marked || names.iter().any(|n| calls(&f.body, n))))
            .map(|f| f.name.clone())
            .collect();
        out.insert(p.clone(), tests);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_privileged_test_without_its_marker_is_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("common")).expect("mkdir");
        std::fs::write(
            dir.path().join("common/mod.rs"),
            "pub fn setup() -> Emu {\n    test_support::mount_preset(P)\n}\n",
        )
        .expect("write");
        let text = format!(
            "#[test]\nfn plain() {{\n    assert_eq!(1 + 1, 2);\n}}\n\n\
             #[test]\nfn through_common() {{\n    let e = setup();\n}}\n\n\
             fn helper() {{\n    test_support::require_root();\n}}\n\n\
             #[test]\nfn through_helper() {{\n    helper();\n}}\n\n\
             #[test]\n{SKIP_MARKER}\nfn marked() {{\n    let e = mount(c);\n}}\n"
        );
        std::fs::write(dir.path().join("suite.rs"), text).expect("write");
        let found: Vec<String> = unmarked(dir.path()).into_iter().map(|f| f.2).collect();
        assert_eq!(found, ["through_common", "through_helper"]);
        let all = privileged_tests(dir.path());
        assert_eq!(
            all.values().next().expect("one file"),
            &["through_common", "through_helper", "marked"]
        );
    }
}
