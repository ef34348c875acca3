//! The HIP runtime on this node and whether the shim covers its entry points.

use std::path::{Path, PathBuf};

use super::symbols::{self, VersionedSymbols};
use super::{Finding, Options, Status};
use crate::kfd::Root;

/// Directories searched for `libamdhip64.so.*`, in order (after `$ROCM_PATH/lib`).
const SEARCH: &[&str] = &[
    "/opt/rocm/lib",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/local/lib",
];
/// Sonames tried in each directory, newest first.
const SONAMES: &[&str] = &["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"];

/// The HIP runtime the doctor checks (and `kfdq bench`'s HIP helpers load): `explicit`, else
/// the first soname found on the search path.
pub fn find_runtime(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    let rocm = std::env::var_os("ROCM_PATH").map(|p| PathBuf::from(p).join("lib"));
    rocm.into_iter()
        .chain(SEARCH.iter().map(PathBuf::from))
        .flat_map(|dir| SONAMES.iter().map(move |s| dir.join(s)))
        .find(|p| p.exists())
}

/// `hip_6.4` -> (6, 4), for picking the newest node.
fn node_version(node: &str) -> Option<(u32, u32)> {
    let (major, minor) = node.strip_prefix("hip_")?.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

pub(super) fn inspect(_root: &Root, options: &Options, out: &mut Vec<Finding>) {
    let Some(runtime_path) = find_runtime(options.hip_runtime.as_deref()) else {
        out.push(
            Finding::new(
                "hip-runtime",
                Status::Warn,
                format!(
                    "no HIP runtime (libamdhip64.so.5/6/7) in $ROCM_PATH/lib, {}",
                    SEARCH.join(", ")
                ),
            )
            .fix("install ROCm's HIP runtime where GPU programs find it, or pass --hip-runtime PATH; kfdqd itself does not need it"),
        );
        return;
    };
    let runtime = match VersionedSymbols::read(&runtime_path) {
        Ok(r) => r,
        Err(e) => {
            out.push(Finding::new("hip-runtime", Status::Warn, e.to_string()));
            return;
        }
    };
    let real = std::fs::canonicalize(&runtime_path).unwrap_or_else(|_| runtime_path.clone());
    let newest = runtime
        .nodes
        .iter()
        .filter_map(|n| Some((node_version(n)?, n)))
        .max()
        .map(|(_, n)| n.clone())
        .unwrap_or_else(|| "no hip_* node".into());
    out.push(Finding::new(
        "hip-runtime",
        Status::Ok,
        format!(
            "HIP runtime {} ({}): {} version nodes, newest {newest}, {} entry points",
            runtime_path.display(),
            real.display(),
            runtime.nodes.len(),
            runtime.defined.len()
        ),
    ));

    let Some(shim_path) = options.shim.as_deref() else {
        out.push(
            Finding::new(
                "shim",
                Status::Warn,
                "libkfdq_shim.so not found: `kfdq run` cannot start programs under the shim",
            )
            .fix("install kfdq's package, set KFDQ_SHIM, or pass --shim PATH"),
        );
        return;
    };
    let shim = match VersionedSymbols::read(shim_path) {
        Ok(s) => s,
        Err(e) => {
            out.push(Finding::new("shim", Status::Warn, e.to_string()));
            return;
        }
    };
    let cov = symbols::coverage(&runtime, &shim);
    if cov.mismatched.is_empty() {
        out.push(Finding::new(
            "shim",
            Status::Ok,
            format!(
                "{} wraps {} of the runtime's entry points, each at the runtime's version node",
                shim_path.display(),
                cov.covered.len()
            ),
        ));
    } else {
        let list: Vec<String> = cov
            .mismatched
            .iter()
            .map(|(n, r, w)| format!("{n} (runtime {r}, shim {w})"))
            .collect();
        out.push(
            Finding::new(
                "shim",
                Status::Warn,
                format!(
                    "{} wraps {} entry points at the runtime's node, but {} at another node, which programs linked against this runtime bypass: {}",
                    shim_path.display(),
                    cov.covered.len(),
                    cov.mismatched.len(),
                    list.join(", ")
                ),
            )
            .fix("use a kfdq built for this HIP version (the shim's version nodes must follow the runtime's map)"),
        );
    }
    if !cov.missing_nodes.is_empty() {
        out.push(Finding::new(
            "shim-nodes",
            Status::Info,
            format!(
                "version nodes of the runtime the shim does not define: {} (entry points there are not wrapped; calls pass straight to the runtime)",
                cov.missing_nodes.join(", ")
            ),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::node_version;

    #[test]
    fn nodes_order_by_version_not_text() {
        assert!(node_version("hip_6.10") > node_version("hip_6.4"));
        assert_eq!(node_version("hip_4.2"), Some((4, 2)));
        assert_eq!(node_version("GLIBC_2.2.5"), None);
    }
}
