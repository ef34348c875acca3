//! Generates the amdkfd bindings with bindgen.
//!
//! Header choice, in order:
//! 1. `KFD_IOCTL_H=/path/to/kfd_ioctl.h` if set;
//! 2. the system `linux/kfd_ioctl.h` when it declares `KFD_IOCTL_MINOR_VERSION >= 13`
//!    (the debugger API);
//! 3. otherwise kfdq's own ABI header, `include/kfdq/kfd_abi.h` (KFD 1.17 layout).
//!
//! The chosen header is reported as a cargo warning and exported to the crate as
//! `KFD_SYS_HEADER` / `KFD_SYS_HEADER_MINOR`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const SYSTEM_HEADER: &str = "/usr/include/linux/kfd_ioctl.h";
const MIN_SYSTEM_MINOR: u32 = 13;

fn declared_minor(header: &Path) -> Option<u32> {
    let text = fs::read_to_string(header).ok()?;
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#define"), Some("KFD_IOCTL_MINOR_VERSION"), Some(v)) => v.parse().ok(),
            _ => None,
        }
    })
}

fn main() {
    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let own = manifest.join("include/kfdq/kfd_abi.h");
    let stub = manifest.join("include/stub");
    println!("cargo:rerun-if-env-changed=KFD_IOCTL_H");
    println!("cargo:rerun-if-changed={}", own.display());
    println!("cargo:rerun-if-changed={SYSTEM_HEADER}");
    println!("cargo:rerun-if-changed=build.rs");

    let (header, why) = match env::var_os("KFD_IOCTL_H") {
        Some(p) => (PathBuf::from(p), "KFD_IOCTL_H override".to_string()),
        None => match declared_minor(Path::new(SYSTEM_HEADER)) {
            Some(m) if m >= MIN_SYSTEM_MINOR => (
                PathBuf::from(SYSTEM_HEADER),
                format!("system header is KFD 1.{m}"),
            ),
            Some(m) => (
                own.clone(),
                format!("system header is KFD 1.{m}, older than 1.{MIN_SYSTEM_MINOR}"),
            ),
            None => (own.clone(), "no system kfd_ioctl.h".to_string()),
        },
    };
    let minor = declared_minor(&header).unwrap_or_else(|| {
        panic!(
            "{} does not declare KFD_IOCTL_MINOR_VERSION; is it a kfd_ioctl.h?",
            header.display()
        )
    });
    println!(
        "cargo:warning=kfd-sys binds {} (KFD 1.{minor}; {why})",
        header.display()
    );
    println!("cargo:rustc-env=KFD_SYS_HEADER={}", header.display());
    println!("cargo:rustc-env=KFD_SYS_HEADER_MINOR={minor}");
    println!("cargo:include={}", manifest.join("include/kfdq").display());

    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{}", stub.display()))
        .allowlist_type("kfd_.*")
        .allowlist_var("(AMDKFD|KFD)_.*")
        .allowlist_var("EC_.*")
        .allowlist_var("DEBUG_RUNTIME_STATE_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .clang_macro_fallback()
        .clang_macro_fallback_build_dir(&out)
        .generate_comments(false)
        .layout_tests(true)
        .derive_default(true)
        .derive_debug(true)
        .derive_copy(true)
        .derive_eq(true)
        .impl_debug(false)
        .use_core()
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs to OUT_DIR");
}
