//! Build script of kfd-emu: only the privileged-test cfg of its test suite.

fn main() {
    skip_privileged_cfg();
}

include!("../test-support/skip_privileged_cfg.rs");
