//! The rule every privileged test follows: it runs as root, or it fails and says why.
//!
//! Tests that mount kfd-emu need root (FUSE with `allow_other`; the emulator reads and writes
//! its clients' memory with `process_vm_readv`/`writev`; some tests ptrace). Where root is not
//! available, `KFDQ_SKIP_PRIVILEGED=1` skips them *visibly*: each test package's build script
//! turns the variable into the `kfdq_skip_privileged` cfg, and each privileged test carries
//!
//! ```text
//! #[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
//! ```
//!
//! so `cargo test` lists it as `ignored, needs root (KFDQ_SKIP_PRIVILEGED=1)` and counts it
//! among the ignored tests. A privileged test that lacks the marker fails when skipping is
//! asked for (see [`require_root`]), and the `skip_markers` test of this crate finds such a test
//! in the sources before that.

/// The environment variable that skips the privileged tests.
pub const SKIP_ENV: &str = "KFDQ_SKIP_PRIVILEGED";

/// The cfg the test packages' build scripts set when [`SKIP_ENV`] is `1`.
pub const SKIP_CFG: &str = "kfdq_skip_privileged";

/// The marker each privileged test carries (checked by this crate's `skip_markers` test).
pub const SKIP_MARKER: &str =
    r#"#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]"#;

/// The running test's name: libtest names each test's thread after the test.
pub fn current_test() -> String {
    std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string()
}

/// Returns when the test may do privileged work (it runs as root); otherwise fails the test
/// with the reason and the fix. Never returns quietly without root: a privileged test cannot
/// pass without having run.
pub fn require_root() {
    if nix::unistd::geteuid().is_root() {
        return;
    }
    let test = current_test();
    if std::env::var(SKIP_ENV).as_deref() == Ok("1") {
        panic!(
            "{test} needs root but was not compiled as ignored: give it the marker \
             {SKIP_MARKER} (and its package's build script the {SKIP_CFG} cfg), so that \
             {SKIP_ENV}=1 shows it as skipped"
        );
    }
    panic!(
        "{test} must run as root: it mounts kfd-emu over FUSE (allow_other), the emulator reads \
         and writes the client's memory with process_vm_readv/writev, and some tests ptrace. \
         Run the tests as root (scripts/test.sh does), or set {SKIP_ENV}=1 to skip the \
         privileged tests (they are then listed as ignored)."
    );
}
