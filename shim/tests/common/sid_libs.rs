//! The libraries' roots: `sid-libs-root` (`scripts/sid-root.sh --libs`: the 6.4 root plus
//! rocBLAS, hipBLAS, hipBLASLt and MIOpen with their headers) and `sid-rocm72-libs-root`
//! (`--rocm72 --libs`: the same libraries at 7.2.4 from Debian experimental). Their kernels are
//! for gfx90a (neither hipBLASLt ships gfx942 kernels), so the emulator runs the `mi210` preset.
//! The programs (libs_check, the libsext CPython extension, hip_check for gfx90a as the latency
//! job) are compiled once per test binary and root. [`ROCM64`] and [`ROCM72`] name a root; the
//! tests are shared (`super::libs_suite`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use super::kfdqd::Agent;
use super::sid::{self, Running};
pub use super::sid::{Built, Shimmed};
use super::{Emu, EmuConfig, Preset, mount_with, workspace_bin};

/// One of the libraries' roots.
pub struct Libs {
    /// Its directory in the cache.
    pub name: &'static str,
    /// What `scripts/sid-root.sh` is given to build it (then `--versions` lists its packages).
    pub flags: &'static [&'static str],
    /// A file that is there once the libraries' headers are (the programs compile against them).
    pub ready: &'static str,
    /// What building it costs (for the message when it is missing).
    pub cost: &'static str,
    /// The libraries' sonames: rocBLAS, hipBLAS, hipBLASLt, MIOpen.
    pub libraries: [&'static str; 4],
    /// The newest HIP version node the runtime the libraries were built against has: none of
    /// their imports may name a newer one.
    pub newest_node: (u32, u32),
    packages: OnceLock<String>,
    built: OnceLock<Built>,
}

/// ROCm 6.4 (Debian sid): rocBLAS 6.4.4, hipBLAS 6.4.4, hipBLASLt 7.1.1 (built against HIP
/// 6.4.3), MIOpen 6.4.3.
pub static ROCM64: Libs = Libs {
    name: "sid-libs-root",
    flags: &["--libs"],
    ready: "usr/include/miopen/miopen.h",
    cost: "about 100 s, 690 MB download, 5.5 GB",
    libraries: [
        "librocblas.so.4",
        "libhipblas.so.2",
        "libhipblaslt.so.1",
        "libMIOpen.so.1",
    ],
    newest_node: (6, 4),
    packages: OnceLock::new(),
    built: OnceLock::new(),
};

/// ROCm 7.2.4 (Debian experimental on sid): rocBLAS 5 and hipBLAS 3 (7.2.4), hipBLASLt and MIOpen
/// 7.2.4 on HIP 7.2.
pub static ROCM72: Libs = Libs {
    name: "sid-rocm72-libs-root",
    flags: &["--rocm72", "--libs"],
    ready: "usr/include/miopen/miopen.h",
    cost: "about 130 s, 1.6 GB download, 4.6 GB",
    libraries: [
        "librocblas.so.5",
        "libhipblas.so.3",
        "libhipblaslt.so.1",
        "libMIOpen.so.1",
    ],
    newest_node: (7, 2),
    packages: OnceLock::new(),
    built: OnceLock::new(),
};

impl Libs {
    /// The root. Missing: the test fails and says how to build it.
    pub fn root(&self) -> PathBuf {
        test_support::require_root();
        let root = sid::cache_dir().join(self.name);
        assert!(
            root.join(self.ready).is_file(),
            "{}: the Debian root with the ROCm math libraries is missing at {}: build it with \
             `scripts/sid-root.sh {}` as root ({}; scripts/test.sh does), or set \
             KFDQ_SKIP_PRIVILEGED=1 to skip",
            test_support::privileged::current_test(),
            root.display(),
            self.flags.join(" "),
            self.cost,
        );
        root
    }

    /// The package versions the root holds and what moved (`scripts/sid-root.sh FLAGS
    /// --versions`).
    pub fn packages(&self) -> &str {
        self.packages.get_or_init(|| {
            let mut args = self.flags.to_vec();
            args.push("--versions");
            sid::versions_text(self.name, &args)
        })
    }

    /// Compiles libs_check, the libsext extension and hip_check (gfx90a) in `root` (once).
    pub fn built(&self, emu: &Emu, root: &Path) -> &Built {
        self.built.get_or_init(|| {
            let script = "set -e; L='-lrocblas -lhipblas -lhipblaslt -lMIOpen -lpthread'; \
                hipcc -O1 -o libs_check libs_check.cpp $L; \
                hipcc -O1 -shared -fPIC $(python3-config --includes) \
                  -o libsext$(python3-config --extension-suffix) libsext.cpp $L; \
                hipcc --offload-arch=gfx90a -O2 -o hip_check hip_check.hip";
            Built {
                dir: sid::compile_in_root(
                    emu,
                    root,
                    &[
                        "libs_check.cpp",
                        "libsext.cpp",
                        "libsext_check.py",
                        "hip_check.hip",
                    ],
                    script,
                    self.packages(),
                ),
            }
        })
    }

    /// The outcome of a program that ran to its end: stdout; panics with both streams (and the
    /// root's packages) when it failed.
    pub fn finished(&self, what: &str, out: Output) -> String {
        sid::finished_in(what, out, self.packages()).0
    }
}

/// An emulated MI210 (gfx90a).
pub fn mount() -> Emu {
    mount_with(EmuConfig {
        preset: Preset::Mi210,
        ..EmuConfig::default()
    })
}

/// The environment every library run gets. `HOME=/tmp`: MIOpen's user databases and comgr's
/// cache go to the run's private /tmp, not into the shared root. MIOpen: only the GEMM solvers
/// (rocBLAS), because Debian's MIOpen 6.4.3 cannot build its other solvers' kernels at run time
/// (HIP kernels: `-isystem /usr/include` hides math.h from libstdc++'s <cmath>; OpenCL kernels:
/// the compiler path is the build tree's) and its find step then fails with
/// miopenStatusUnknownError, with or without the shim.
pub const ENV: [(&str, &str); 5] = [
    ("HOME", "/tmp"),
    ("MIOPEN_DEBUG_CONV_DIRECT", "0"),
    ("MIOPEN_DEBUG_CONV_WINOGRAD", "0"),
    ("MIOPEN_DEBUG_CONV_IMPLICIT_GEMM", "0"),
    ("MIOPEN_DEBUG_CONV_FFT", "0"),
];

/// `argv` in the root, the programs' directory as `/work` (the working directory), with [`ENV`].
pub fn in_work(emu: &Emu, root: &Path, built: &Built, argv: &[&str]) -> Command {
    let mut cmd = sid::command(
        emu,
        root,
        &[(built.dir.path(), Path::new("/work"))],
        Path::new("/work"),
        argv,
    );
    cmd.envs(ENV);
    cmd
}

/// The "status <step> <value>" lines of an output, in order (with several threads, sorted: the
/// threads interleave).
pub fn statuses<S: AsRef<str>>(lines: &[S]) -> Vec<String> {
    let mut v: Vec<String> = lines
        .iter()
        .map(|l| l.as_ref())
        .filter(|l| l.starts_with("status ") || l.contains("] status "))
        .map(str::to_string)
        .collect();
    if v.iter().any(|l| l.starts_with('[')) {
        v.sort();
    }
    v
}

/// `kfdq run --class CLASS` of `argv` inside the libraries' root, reaching `agent`, with
/// [`ENV`] and `env`.
pub fn under_kfdq(
    emu: &Emu,
    root: &Path,
    built: &Built,
    agent: &Agent,
    class: &str,
    env: &[(&str, &str)],
    argv: &[&str],
) -> Shimmed {
    let all: Vec<(&str, &str)> = ENV.iter().chain(env).copied().collect();
    sid::under_kfdq(emu, root, built.dir.path(), agent, class, &all, argv)
}

/// `hip_check --busy` (gfx90a) under `kfdq run --class latency`, reaching `agent`, once it is
/// busy: the latency job beside the libraries' batch jobs.
pub fn busy_latency(emu: &Emu, root: &Path, built: &Built, agent: &Agent) -> Shimmed {
    let mut l = under_kfdq(
        emu,
        root,
        built,
        agent,
        "latency",
        &[],
        &["./hip_check", "--busy"],
    );
    l.p.wait_line("hip_check: busy");
    l
}

pub use super::sid::ps_entry;

/// The stream kinds (`null`, `created`, ...) `kfdq ps` lists on each queue of an entry.
pub fn ps_stream_kinds(entry: &serde_json::Value) -> Vec<Vec<String>> {
    entry["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| {
            q["streams"]
                .as_array()
                .map(|s| {
                    s.iter()
                        .filter_map(|x| x["kind"].as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// The registry the shim of `pid` published in `state`.
pub fn registry(state: &Path, pid: u32) -> Option<kfdq::proto::Registry> {
    let text = std::fs::read_to_string(state.join(format!("shim-{pid}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}
