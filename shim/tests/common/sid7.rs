//! The ROCm 7.2 root (`scripts/sid-root.sh --rocm72`: sid plus Debian experimental's ROCm 7.2.4)
//! and the programs its hipcc 7.2.4 builds, for the `sid7_*` tests. Programs run in it exactly
//! as in the 6.4 root (`super::sid`: `kfd-emu run`, `kfdq run`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::Emu;
use super::sid;

/// The ROCm 7.2 root. Missing: the test fails and says how to build it.
pub fn root() -> PathBuf {
    test_support::require_root();
    let root = sid::cache_dir().join("sid-rocm72-root");
    assert!(
        root.join("usr/lib/x86_64-linux-gnu/libamdhip64.so.7")
            .exists(),
        "{}: the ROCm 7.2 root is missing at {}: build it with `scripts/sid-root.sh --rocm72` as \
         root (scripts/test.sh does), or set KFDQ_SKIP_PRIVILEGED=1 to skip",
        test_support::privileged::current_test(),
        root.display()
    );
    root
}

/// The package versions the ROCm 7.2 root holds and what moved (for failure messages).
pub fn packages() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| sid::versions_text("ROCm 7.2 root", &["--rocm72", "--versions"]))
}

/// The committed code object `launch7 module` loads (kernels/, built by scripts/kernels.sh).
const SPIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kernels/spin-gfx942.co");

/// `hip_check` and `launch7` built by hipcc 7.2.4 (once per test binary), with the spin code
/// object beside them.
pub fn built(emu: &Emu, root: &Path) -> &'static sid::Built {
    static BUILT: OnceLock<sid::Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let script = "set -e; \
            hipcc --offload-arch=gfx942 -O2 -o hip_check hip_check.hip; \
            hipcc --offload-arch=gfx942 -O2 -o launch7 launch7.hip";
        let dir = sid::compile_in_root(
            emu,
            root,
            &["hip_check.hip", "launch7.hip"],
            script,
            packages(),
        );
        std::fs::copy(SPIN, dir.path().join("spin-gfx942.co")).expect("copy the spin code object");
        sid::Built { dir }
    })
}

/// What a test needs: an emulator and the ROCm 7.2 root with the programs built.
pub fn setup() -> (Emu, PathBuf, &'static sid::Built) {
    let root = root();
    let emu = super::mount();
    let built = built(&emu, &root);
    (emu, root, built)
}
