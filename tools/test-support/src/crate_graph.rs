//! Which crates a package's tree holds, as `cargo tree` resolves it, so that a test can refuse a
//! crate a layer must not link (the shim, injected into every GPU process, links none of the
//! agent's) or build against (the shim's suites, dev-dependencies included, hold neither the
//! partition model nor a TOML parser).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// The names of the crates `package` of the workspace at `manifest` links (itself included):
/// its normal dependencies, resolved with the features that package alone asks for
/// (`cargo tree -p PACKAGE -e normal`). Panics, saying why, when cargo fails.
pub fn normal_dependencies(manifest: &Path, package: &str) -> BTreeSet<String> {
    tree(manifest, package, &["-e", "normal"])
}

/// The names of every crate in `package`'s plain `cargo tree -p PACKAGE`: normal, build and
/// dev-dependencies, and theirs (what building its tests, benches and build script compiles).
/// Panics, saying why, when cargo fails.
pub fn all_dependencies(manifest: &Path, package: &str) -> BTreeSet<String> {
    tree(manifest, package, &[])
}

/// `cargo tree --offline -p PACKAGE EDGES --prefix none -f {p}`, as crate names.
fn tree(manifest: &Path, package: &str, edges: &[&str]) -> BTreeSet<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .arg("tree")
        .arg("--manifest-path")
        .arg(manifest)
        .args(["--offline", "-p", package])
        .args(edges)
        .args(["--prefix", "none"])
        .args(["-f", "{p}"])
        .output()
        .unwrap_or_else(|e| panic!("run {}: {e}", Path::new(&cargo).display()));
    assert!(
        out.status.success(),
        "cargo tree -p {package} {}: {}\n{}",
        edges.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    names(&String::from_utf8_lossy(&out.stdout))
}

/// The crate names of `cargo tree --prefix none -f {p}` lines (`name vX.Y.Z [(path)] [(*)]`).
pub fn names(tree: &str) -> BTreeSet<String> {
    tree.lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_from_tree_lines() {
        let tree =
            "kfdq-shim v0.1.0 (/w/shim)\nkfdq v0.1.0 (/w)\nlibc v0.2.177\nlibc v0.2.177 (*)\n\n";
        assert_eq!(
            names(tree),
            ["kfdq", "kfdq-shim", "libc"]
                .map(String::from)
                .into_iter()
                .collect()
        );
    }
}
