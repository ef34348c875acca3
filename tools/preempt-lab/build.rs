//! `KFDQ_SKIP_PRIVILEGED=1` compiles the privileged tests (`preempt-lab run` on kfd-emu) as
//! ignored.

fn main() {
    skip_privileged_cfg();
}

include!("../test-support/skip_privileged_cfg.rs");
