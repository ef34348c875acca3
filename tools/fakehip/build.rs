//! Compiles fakehip's C library into `$OUT_DIR/libamdhip64.so.6` (+ a `libamdhip64.so`
//! symlink for `-lamdhip64`), with the real library's soname and symbol-version nodes.
//!
//! The sources are the C files of `LAYERS` (`layers.rs`, bottom layer first) in `src/`, which
//! share `src/fakehip_internal.h` (the header comment there says which file holds what). They are
//! compiled in one compiler run into `$OUT_DIR/obj/<name>.o` (kept: `tests/layers.rs` reads their
//! symbols to check the layers), then linked.
//!
//! The C compiler is `$CC`, else `cc`. The kfd ABI header comes from the sibling
//! `kfd-sys` crate (`kfd-sys/include/kfdq/kfd_abi.h`).

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

const SONAME: &str = "libamdhip64.so.6";

include!("layers.rs");

fn main() {
    skip_privileged_cfg();
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let src_dir = manifest.join("src");
    let listed: Vec<&str> = LAYERS.concat();
    let sources: Vec<PathBuf> = listed.iter().map(|f| src_dir.join(f)).collect();
    let internal_header = src_dir.join("fakehip_internal.h");
    let map = manifest.join("fakehip.map");
    let include = manifest.join("include");
    let header = include.join("hip/hip_runtime_api.h");
    let abi_include = manifest.join("../../kfd-sys/include");
    let abi_header = abi_include.join("kfdq/kfd_abi.h");

    for p in sources
        .iter()
        .chain([&internal_header, &map, &header, &abi_header])
    {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=layers.rs");
    println!("cargo:rerun-if-env-changed=CC");

    let mut found: Vec<String> = fs::read_dir(&src_dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", src_dir.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".c"))
        .collect();
    found.sort();
    let mut sorted = listed.clone();
    sorted.sort_unstable();
    assert_eq!(
        found,
        sorted,
        "the C files in {} and the LAYERS of layers.rs differ",
        src_dir.display()
    );
    assert!(
        abi_header.exists(),
        "kfd ABI header not found at {}",
        abi_header.display()
    );

    let cc = env::var("CC")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cc".to_string());
    // A fresh object directory: an object of a removed source must not linger for the layer test.
    let obj_dir = out_dir.join("obj");
    match fs::remove_dir_all(&obj_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot remove {}: {e}", obj_dir.display()),
    }
    fs::create_dir_all(&obj_dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", obj_dir.display()));
    let mut compile = Command::new(&cc);
    compile
        .current_dir(&obj_dir)
        .args([
            "-std=gnu11",
            "-fPIC",
            "-O2",
            "-g",
            "-Wall",
            "-Werror",
            "-fvisibility=hidden",
            "-c",
        ])
        .arg(format!("-I{}", include.display()))
        .arg(format!("-I{}", abi_include.display()))
        .args(&sources);
    run(&cc, compile, "compile fakehip's C files");
    let objects: Vec<PathBuf> = listed
        .iter()
        .map(|f| obj_dir.join(std::path::Path::new(f).with_extension("o")))
        .collect();

    let lib = out_dir.join(SONAME);
    let mut link = Command::new(&cc);
    link.args(["-shared", "-fPIC"])
        .arg(format!("-Wl,--version-script={}", map.display()))
        .arg(format!("-Wl,-soname,{SONAME}"))
        .arg("-o")
        .arg(&lib)
        .args(&objects)
        .args(["-ldl", "-lpthread"]);
    run(&cc, link, &format!("link {SONAME}"));

    let link = out_dir.join("libamdhip64.so");
    match fs::symlink_metadata(&link) {
        Ok(_) => fs::remove_file(&link).expect("remove stale libamdhip64.so"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("cannot inspect {}: {e}", link.display()),
    }
    std::os::unix::fs::symlink(SONAME, &link).expect("create the libamdhip64.so symlink");

    println!("cargo:rustc-env=FAKEHIP_LIB_DIR={}", out_dir.display());
    println!("cargo:rustc-env=FAKEHIP_OBJ_DIR={}", obj_dir.display());
}

/// Runs the C compiler; a failure stops the build with its output.
fn run(cc: &str, mut cmd: Command, what: &str) {
    let output = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    if !output.status.success() {
        panic!(
            "`{cc}` failed to {what} ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

include!("../test-support/skip_privileged_cfg.rs");
