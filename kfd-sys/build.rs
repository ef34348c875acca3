//! Generates the amdkfd bindings with bindgen.
//!
//! Supported: KFD interface 1.17 and newer within major version 1 (1.17 is the first with the
//! 96-byte create-queue arguments and everything else the safe layer uses; 1.13-1.16 have the
//! debugger API but not all of it compiles against kfdq). Header choice, in order:
//! 1. `KFD_IOCTL_H=/path/to/kfd_ioctl.h` if set — it must be a supported version, or the build
//!    stops and says so;
//! 2. the system `linux/kfd_ioctl.h` when it declares a supported version;
//! 3. otherwise kfdq's own ABI header, `include/kfdq/kfd_abi.h` (KFD 1.17 layout).
//!
//! The chosen header is reported as a cargo warning and exported to the crate as
//! `KFD_SYS_HEADER` / `KFD_SYS_HEADER_MINOR`.
//!
//! The structs named in `build/derives.rs` also derive zerocopy's byte conversions (the rule is
//! there); the same list works for every supported header.

#[path = "build/derives.rs"]
mod derives;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

const SYSTEM_HEADER: &str = "/usr/include/linux/kfd_ioctl.h";
/// The oldest KFD interface the bindings and the safe layer are written for.
const MIN_MINOR: u32 = 17;
/// The only major version there has been.
const MAJOR: u32 = 1;

fn declared(header: &Path, name: &str) -> Option<u32> {
    let text = fs::read_to_string(header).ok()?;
    text.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#define"), Some(n), Some(v)) if n == name => v.parse().ok(),
            _ => None,
        }
    })
}

/// The header's (major, minor), if it declares both.
fn declared_version(header: &Path) -> Option<(u32, u32)> {
    Some((
        declared(header, "KFD_IOCTL_MAJOR_VERSION")?,
        declared(header, "KFD_IOCTL_MINOR_VERSION")?,
    ))
}

fn supported((major, minor): (u32, u32)) -> bool {
    major == MAJOR && minor >= MIN_MINOR
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
    println!("cargo:rerun-if-changed=build/derives.rs");

    let (header, why) = match env::var_os("KFD_IOCTL_H") {
        Some(p) => {
            let p = PathBuf::from(p);
            match declared_version(&p) {
                Some(v) if supported(v) => (p, "KFD_IOCTL_H override".to_string()),
                Some((major, minor)) => panic!(
                    "KFD_IOCTL_H={} declares KFD {major}.{minor}; kfd-sys supports {MAJOR}.{MIN_MINOR} and newer \
                     within major {MAJOR}: point KFD_IOCTL_H at a newer linux/kfd_ioctl.h, or unset it to use \
                     kfdq's own 1.{MIN_MINOR} header",
                    p.display()
                ),
                None => panic!(
                    "KFD_IOCTL_H={} declares no KFD_IOCTL_MAJOR_VERSION/KFD_IOCTL_MINOR_VERSION: is it a \
                     linux/kfd_ioctl.h? Unset KFD_IOCTL_H to use the system header or kfdq's own",
                    p.display()
                ),
            }
        }
        None => match declared_version(Path::new(SYSTEM_HEADER)) {
            Some(v) if supported(v) => (
                PathBuf::from(SYSTEM_HEADER),
                format!("system header is KFD {}.{}", v.0, v.1),
            ),
            Some((major, minor)) => (
                own.clone(),
                format!("system header is KFD {major}.{minor}, not {MAJOR}.{MIN_MINOR} or newer"),
            ),
            None => (own.clone(), "no system kfd_ioctl.h".to_string()),
        },
    };
    let minor = declared(&header, "KFD_IOCTL_MINOR_VERSION").unwrap_or_else(|| {
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
    let byte_derives = derives::ByteDerives::default();
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
        // Unsafe operations inside generated unsafe fns (`__IncompleteArrayField` of
        // `kfd_ioctl_svm_args` in real headers) get their own unsafe blocks, as Rust 2024's
        // unsafe_op_in_unsafe_fn wants.
        .wrap_unsafe_ops(true)
        .parse_callbacks(Box::new(byte_derives.clone()))
        .generate()
        .unwrap_or_else(|e| panic!("bindgen failed on {}: {e}", header.display()));
    let missing = byte_derives.missing();
    assert!(
        missing.is_empty(),
        "{} declares no struct {} named in kfd-sys/build/derives.rs",
        header.display(),
        missing.join(", ")
    );
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs to OUT_DIR");
}
