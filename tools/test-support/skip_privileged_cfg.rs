// Included by the build scripts of the packages with privileged tests (root, shim, kfd-emu,
// fakehip).
/// `KFDQ_SKIP_PRIVILEGED=1` compiles this package's privileged tests as ignored, so `cargo test`
/// lists them as skipped (the rule: tools/test-support/src/privileged.rs).
fn skip_privileged_cfg() {
    println!("cargo::rerun-if-env-changed=KFDQ_SKIP_PRIVILEGED");
    println!("cargo::rustc-check-cfg=cfg(kfdq_skip_privileged)");
    if std::env::var("KFDQ_SKIP_PRIVILEGED").as_deref() == Ok("1") {
        println!("cargo::rustc-cfg=kfdq_skip_privileged");
    }
}
