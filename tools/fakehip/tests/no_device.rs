//! fakehip without a device: programs compiled with [`fakehip::compile_program`] run with
//! `KFDQ_ROOT` pointing at an empty directory (no `/dev/kfd`: every device call fails with
//! hipErrorNoDevice), or at a copy of the emulator's topology without GPUs or without the CWSR
//! sizes a 6.12 kernel publishes (refused by name). The latter mount kfd-emu and need root.

use std::fs;
use std::path::Path;

#[macro_use]
mod common;

use common::{EmuConfig, Preset, TOPOLOGY, mi308x, node_properties, programs};

// ---------------------------------------------------------------------------------------
// no device
// ---------------------------------------------------------------------------------------

#[test]
fn without_dev_kfd_every_device_call_returns_no_device() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().display().to_string();
    let out = common::run(&programs().get("nodevice"), &[], &[("KFDQ_ROOT", &root)]);
    assert!(
        out.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        out.stdout,
        out.stderr
    );
    for call in [
        "hipGetDeviceCount",
        "hipStreamCreate",
        "hipLaunchKernel",
        "hipDeviceSynchronize",
    ] {
        assert!(
            out.stdout.lines().any(|l| l == format!("{call} 100")),
            "{call}: {}",
            out.stdout
        );
    }
}

#[test]
fn basic_program_fails_cleanly_without_a_device() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().display().to_string();
    let out = common::run(&programs().get("basic"), &[], &[("KFDQ_ROOT", &root)]);
    assert_eq!(out.status.code(), Some(1), "{}", out.stderr);
    assert!(
        out.stderr.contains("hipErrorNoDevice (100)"),
        "{}",
        out.stderr
    );
}

/// Makes `root` a tree for `KFDQ_ROOT` whose `dev/kfd` is the emulator's (GET_VERSION etc.
/// work) and whose topology holds copies of the emulator's nodes `nodes`, each node's
/// `properties` text passed through `edit`.
fn copy_topology(emu: &common::Emu, root: &Path, nodes: &[u32], edit: impl Fn(&str) -> String) {
    fs::create_dir_all(root.join("dev")).expect("mkdir dev");
    std::os::unix::fs::symlink(emu.root().join("dev/kfd"), root.join("dev/kfd"))
        .expect("symlink dev/kfd");
    let mut files = vec!["generation_id".to_string(), "system_properties".to_string()];
    for n in nodes {
        fs::create_dir_all(root.join(TOPOLOGY).join(format!("nodes/{n}"))).expect("mkdir a node");
        files.extend(["gpu_id", "name", "properties"].map(|f| format!("nodes/{n}/{f}")));
    }
    for f in &files {
        let from = emu.root().join(TOPOLOGY).join(f);
        let text =
            fs::read_to_string(&from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
        let text = if f.ends_with("/properties") {
            edit(&text)
        } else {
            text
        };
        fs::write(root.join(TOPOLOGY).join(f), text).expect("copy a topology file");
    }
}

/// Runs `nodevice` against the emulator with `envs`; at its checkpoint waits until the
/// emulator saw fakehip close /dev/kfd after its failed initialisation.
fn run_nodevice(emu: &common::Emu, envs: &[(&str, &str)]) -> common::EmuRun {
    emu.run_with("nodevice", &[], envs, |cp| {
        cp.emu
            .wait_stats("fakehip released /dev/kfd after failing", |s| {
                !s.processes.iter().any(|p| p.pid == cp.pid)
            });
    })
}

/// Every device call of `nodevice` returned hipErrorNoDevice (and its own checks passed).
fn assert_no_device(r: &common::EmuRun) {
    assert!(
        r.out.status.success(),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout(),
        r.stderr()
    );
    for call in ["hipGetDeviceCount", "hipStreamCreate", "hipLaunchKernel"] {
        assert!(
            r.stdout().lines().any(|l| l == format!("{call} 100")),
            "{call}: {}",
            r.stdout()
        );
    }
    assert!(r.queues_at("done").is_empty());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_topology_without_gpus_is_no_device() {
    let emu = common::mount(mi308x());
    // A root whose dev/kfd is the emulator's but whose topology lists only the emulator's
    // CPU node.
    let dir = tempfile::tempdir().expect("temp dir");
    copy_topology(&emu, dir.path(), &[0], str::to_string);
    let root = dir.path().display().to_string();
    let r = run_nodevice(&emu, &[("KFDQ_ROOT", &root), ("FAKEHIP_DEBUG", "1")]);
    r.assert_ok();
    assert_no_device(&r);
    // it got past GET_VERSION on the emulator's /dev/kfd and gave up on the topology
    assert!(
        r.stderr().contains("fakehip: no GPU nodes under"),
        "{}",
        r.stderr()
    );
}

/// fakehip refused GPU node 1 (`gpu_id`) for lacking `missing` in its sysfs properties: one
/// stderr line says so, without `FAKEHIP_DEBUG`, and names what fakehip needs.
fn assert_cwsr_refusal(r: &common::EmuRun, gpu_id: u32, missing: &str) {
    let lines: Vec<&str> = r.stderr().lines().collect();
    assert_eq!(lines.len(), 1, "one line, once per process: {}", r.stderr());
    let want = format!(
        "fakehip: GPU node 1 (gpu_id {gpu_id}) has no {missing} in its sysfs properties: fakehip \
         takes the CWSR sizes from sysfs only and needs a kernel or emulator that publishes \
         cwsr_size and ctl_stack_size (Linux 6.12+ or kfd-emu); read "
    );
    assert!(lines[0].starts_with(&want), "{}", lines[0]);
    assert!(lines[0].ends_with("/nodes/1/properties"), "{}", lines[0]);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_kernel_without_cwsr_sizes_in_sysfs_is_refused() {
    // A pre-6.12 kernel: sysfs has no cwsr_size/ctl_stack_size. fakehip does not compute them
    // (the kernel's formula lives in kfdq's Rust code): discovery fails, so does every device
    // call.
    let emu = common::mount(EmuConfig {
        preset: Preset::Mi300xSpx,
        buffer_checks: false,
        ..EmuConfig::default()
    });
    let props = node_properties(emu.root(), 1);
    assert!(
        !props.contains_key("cwsr_size") && !props.contains_key("ctl_stack_size"),
        "{props:?}"
    );
    let r = run_nodevice(&emu, &[("FAKEHIP_DEBUG", "0")]);
    assert_no_device(&r);
    assert_cwsr_refusal(&r, emu.gpu_ids()[0], "cwsr_size or ctl_stack_size");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_node_without_ctl_stack_size_is_refused_by_name() {
    // The emulator's 6.12 topology with node 1's ctl_stack_size line removed (cwsr_size kept).
    let emu = common::mount(mi308x());
    let dir = tempfile::tempdir().expect("temp dir");
    copy_topology(&emu, dir.path(), &[0, 1], |props| {
        props
            .lines()
            .filter(|l| !l.starts_with("ctl_stack_size "))
            .map(|l| format!("{l}\n"))
            .collect()
    });
    let props = node_properties(dir.path(), 1);
    assert!(
        props.contains_key("cwsr_size") && !props.contains_key("ctl_stack_size"),
        "{props:?}"
    );
    let root = dir.path().display().to_string();
    let r = run_nodevice(&emu, &[("KFDQ_ROOT", &root), ("FAKEHIP_DEBUG", "0")]);
    assert_no_device(&r);
    assert_cwsr_refusal(&r, emu.gpu_ids()[0], "ctl_stack_size");
}
