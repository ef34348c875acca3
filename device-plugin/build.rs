//! Compiles the kubelet's APIs (`proto/`) to Rust with tonic, parsing the .proto files with the
//! pure-Rust protox (no system `protoc` needed), and sets the privileged-test cfg.

fn main() {
    skip_privileged_cfg();
    let files = ["proto/deviceplugin.proto", "proto/podresources.proto"];
    for f in files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"]).unwrap_or_else(|e| panic!("proto/: {e}"));
    tonic_prost_build::configure()
        .compile_fds(fds)
        .unwrap_or_else(|e| panic!("generating the gRPC code: {e}"));
}

include!("../tools/test-support/skip_privileged_cfg.rs");
