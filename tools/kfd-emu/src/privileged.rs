//! The rule every kfdq test suite applies before it mounts kfd-emu: run as root, or fail and say
//! why, unless `KFDQ_SKIP_PRIVILEGED=1` asks to skip (then say that it was skipped).

/// Environment variable that skips privileged tests instead of failing them.
pub const SKIP_PRIVILEGED_ENV: &str = "KFDQ_SKIP_PRIVILEGED";

/// Whether test `test`, which mounts kfd-emu (FUSE with allow_other; the emulator reads and
/// writes client memory with process_vm_readv/writev, and some tests ptrace), may run.
///
/// As root: `true`. Otherwise, with `KFDQ_SKIP_PRIVILEGED=1`: prints `SKIPPED <test>: ...` and
/// returns `false`. Otherwise panics with the reason and the fix: a privileged test never
/// passes silently.
pub fn privileged_test(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var(SKIP_PRIVILEGED_ENV).as_deref() == Ok("1") {
        eprintln!(
            "SKIPPED {test}: it mounts kfd-emu over FUSE, which needs root ({SKIP_PRIVILEGED_ENV}=1)"
        );
        return false;
    }
    panic!(
        "{test} must run as root: it mounts kfd-emu over FUSE (allow_other), the emulator reads \
         and writes the client's memory with process_vm_readv/writev, and some tests ptrace. Run \
         the tests as root, or set {SKIP_PRIVILEGED_ENV}=1 to skip the privileged tests."
    );
}
