//! What the report says about the node's software: the kernel, amdgpu and its firmware, the HIP
//! runtime (found as `kfdq doctor` finds it) and kfdq itself. Everything that cannot be read is
//! named with why, so a reader knows it was looked for.

use std::path::{Path, PathBuf};

use serde::Serialize;

use kfdq::kfd::Root;

/// One value read from a file, or why it could not be.
#[derive(Debug, Serialize)]
pub struct Read {
    /// The file (under --root where the node's files are).
    pub path: PathBuf,
    /// Its trimmed text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Why there is no value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

impl Read {
    fn of(path: PathBuf) -> Read {
        match std::fs::read_to_string(&path) {
            Ok(t) => Read {
                path,
                value: Some(t.trim().to_string()),
                unreadable: None,
            },
            Err(e) => Read {
                path,
                value: None,
                unreadable: Some(e.to_string()),
            },
        }
    }
}

/// The running kernel (uname(2); the node name is left out).
#[derive(Debug, Serialize)]
pub struct Kernel {
    pub sysname: String,
    pub release: String,
    pub version: String,
    pub machine: String,
}

/// The HIP runtime `kfdq doctor` checks.
#[derive(Debug, Serialize)]
pub struct Hip {
    /// The soname found (None: none on the doctor's search path).
    pub path: Option<PathBuf>,
    /// The file it resolves to (its name carries the full version, libamdhip64.so.6.4.60403).
    pub file: Option<PathBuf>,
    /// ROCm's own version file (`$ROCM_PATH/.info/version`, else /opt/rocm's).
    pub rocm_info: Read,
}

/// Every version the report records.
#[derive(Debug, Serialize)]
pub struct Versions {
    pub kfdq: &'static str,
    pub kernel: Option<Kernel>,
    /// amdgpu's `version` and `srcversion` (an in-tree driver has no `version`).
    pub amdgpu: Vec<Read>,
    /// Per DRM card, amdgpu's `fw_version/*` files (sysfs, world-readable).
    pub firmware: Vec<Read>,
    /// amdgpu's firmware table in debugfs (root, debugfs mounted).
    pub firmware_debugfs: Vec<Read>,
    pub hip: Hip,
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// `card0`, `card1`... (not `card0-DP-1`, not `renderD128`).
fn is_card(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("card"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `found`, or one entry saying where nothing was found and why that may be.
fn or_none(found: Vec<Read>, dir: PathBuf, why: &str) -> Vec<Read> {
    if !found.is_empty() {
        return found;
    }
    vec![Read {
        path: dir,
        value: None,
        unreadable: Some(why.into()),
    }]
}

/// Reads every version under `root` (the kernel's is the running one's).
pub fn read(root: &Root) -> Versions {
    let under = |p: &str| root.path().join(p);
    let kernel = nix::sys::utsname::uname().ok().map(|u| Kernel {
        sysname: u.sysname().to_string_lossy().into(),
        release: u.release().to_string_lossy().into(),
        version: u.version().to_string_lossy().into(),
        machine: u.machine().to_string_lossy().into(),
    });
    let amdgpu = ["sys/module/amdgpu/version", "sys/module/amdgpu/srcversion"]
        .into_iter()
        .map(|p| Read::of(under(p)))
        .collect();
    let firmware = or_none(
        files_in(&under("sys/class/drm"))
            .into_iter()
            .filter(|c| is_card(c))
            .flat_map(|c| files_in(&c.join("device/fw_version")))
            .map(Read::of)
            .collect(),
        under("sys/class/drm"),
        "no card*/device/fw_version files (no amdgpu card, or a kernel without them)",
    );
    let firmware_debugfs = or_none(
        files_in(&under("sys/kernel/debug/dri"))
            .into_iter()
            .map(|d| d.join("amdgpu_firmware_info"))
            .filter(|p| p.exists())
            .map(Read::of)
            .collect(),
        under("sys/kernel/debug/dri"),
        "no */amdgpu_firmware_info (debugfs needs root and a mount at /sys/kernel/debug)",
    );
    let path = kfdq::doctor::find_hip_runtime(None);
    let file = path.as_deref().and_then(|p| std::fs::canonicalize(p).ok());
    let rocm = std::env::var_os("ROCM_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/opt/rocm"));
    Versions {
        kfdq: env!("CARGO_PKG_VERSION"),
        kernel,
        amdgpu,
        firmware,
        firmware_debugfs,
        hip: Hip {
            path,
            file,
            rocm_info: Read::of(rocm.join(".info/version")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::is_card;
    use std::path::Path;

    #[test]
    fn only_cards_not_connectors_or_render_nodes() {
        assert!(is_card(Path::new("/sys/class/drm/card0")));
        assert!(is_card(Path::new("/sys/class/drm/card12")));
        assert!(!is_card(Path::new("/sys/class/drm/card0-DP-1")));
        assert!(!is_card(Path::new("/sys/class/drm/renderD128")));
        assert!(!is_card(Path::new("/sys/class/drm/card")));
    }
}
