//! Programs nobody here wrote, unmodified, on the emulator: Debian sid's `rocblas-bench`
//! (`librocblas4-bench`) and `hipblaslt-bench` (`libhipblaslt1-bench`) run a GEMM on an emulated
//! MI210, alone and then under the shim in the batch class beside a latency client, held by the
//! real kfdqd at levels 1, 2 and 3 and released: each completes with its exit status and printed
//! lines unchanged (timings aside: they are the model's), the emulator dispatches their Tensile
//! kernels, and nothing of theirs runs while they are held. `rocm-smi` and `amd-smi` list the
//! emulated GPUs; Debian 12's `rocminfo` 5.2.3 (an older ROCr) lists the gfx90a preset.
//!
//! Both benchmarks initialise ROCm SMI, which needs the topology's IO links and the GPUs' DRM
//! sysfs (docs/real-rocm.md); before kfd-emu had them they aborted, and an aborting benchmark
//! hung in D state until FUSE_INTERRUPT was answered (tools/kfd-emu/tests/interrupts.rs).

mod common;

use kfdq::Pid;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitStatus;
use std::time::Duration;

use common::kfdqd::{Agent, two_classes_with_hysteresis};
use common::sid::{self, Running};
use common::sid_libs::{self as libs, Libs, Shimmed};
use common::{Emu, EmuConfig, Preset, mount_with, shim_path};

/// How long a benchmark may take to run to its end: rocblas-bench loads every Tensile code
/// object of rocBLAS (about 40 s here, the runtime's blit copies on the model included).
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// A benchmark: its command line and how many trailing fields of its result row are timings.
struct Bench {
    argv: &'static [&'static str],
    timing_fields: usize,
}

const ROCBLAS: Bench = Bench {
    argv: &[
        "/usr/libexec/rocm/librocblas4-bench/rocblas-bench",
        "-f",
        "gemm",
        "-r",
        "s",
        "-m",
        "512",
        "-n",
        "512",
        "-k",
        "512",
        "-i",
        "1",
        "-j",
        "1",
    ],
    // rocblas-Gflops, us
    timing_fields: 2,
};

const HIPBLASLT: Bench = Bench {
    argv: &[
        "/usr/libexec/rocm/libhipblaslt1-bench/hipblaslt-bench",
        "-m",
        "512",
        "-n",
        "512",
        "-k",
        "512",
        "-i",
        "1",
        "-j",
        "1",
    ],
    // hipblaslt-Gflops, hipblaslt-GB/s, us
    timing_fields: 3,
};

/// What a benchmark printed, its result rows without the timing fields (the model's numbers)
/// and rocBLAS's initialization line without its milliseconds.
fn printed(bench: &Bench, lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let fields: Vec<&str> = l.trim().split(',').collect();
            let row = fields.len() > 10 && matches!(fields[0], "N" | "T" | "C");
            if row {
                fields[..fields.len() - bench.timing_fields].join(",")
            } else if l.contains("Time taken to complete rocBLAS library initialization")
                || l.contains("maximum library size per device is")
            {
                // rocBLAS's start-up time: a timing too; and the size of the code objects it
                // had loaded by then, which differs from run to run (0.57 and 0.72 GB seen).
                l.split(" is ").next().unwrap_or(l).to_string()
            } else {
                l.clone()
            }
        })
        .collect()
}

/// Kernel dispatches of `pid` by kernel name, as the emulator counts them.
fn dispatches(emu: &Emu, pid: u32) -> BTreeMap<String, u64> {
    emu.stats()
        .processes
        .into_iter()
        .find(|p| p.pid == pid)
        .map(|p| p.dispatches_by_kernel)
        .unwrap_or_default()
}

/// Tensile GEMM dispatches (`Cijk_*` kernels) of `pid`.
fn gemms(emu: &Emu, pid: u32) -> u64 {
    dispatches(emu, pid)
        .iter()
        .filter(|(k, _)| k.starts_with("Cijk_"))
        .map(|(_, n)| n)
        .sum()
}

/// Packets the emulator has run for `pid`'s queues, and packets submitted to them.
fn packets(emu: &Emu, pid: u32) -> (u64, u64) {
    emu.queues_of(pid)
        .iter()
        .fold((0, 0), |(d, w), q| (d + q.packets_done, w + q.write_index))
}

/// Waits for `p` to end, noting the most Tensile GEMMs the emulator counted for it meanwhile
/// (its counters go with the process); returns the exit status, every stdout line and that
/// count.
fn run_to_end(emu: &Emu, p: &mut Running) -> (ExitStatus, Vec<String>, u64) {
    let mut most = 0;
    let mut status = None;
    let ended = test_support::wait_until(RUN_LIMIT, || {
        most = most.max(gemms(emu, p.pid));
        status = p.child.try_wait().expect("wait for the benchmark");
        status.is_some()
    });
    assert!(ended, "the benchmark did not end within {RUN_LIMIT:?}");
    p.drain();
    (status.unwrap(), p.seen.clone(), most)
}

/// The benchmark alone (no shim): its exit status and printed lines, and that the emulator ran
/// its GEMM kernels.
fn alone(emu: &Emu, root: &Path, bench: &Bench) -> (ExitStatus, Vec<String>) {
    alone_or_preloaded(emu, root, bench, false)
}

/// [`alone`], or under `LD_PRELOAD` of the shim with no agent (`preload`).
fn alone_or_preloaded(
    emu: &Emu,
    root: &Path,
    bench: &Bench,
    preload: bool,
) -> (ExitStatus, Vec<String>) {
    let shim = shim_path();
    let dir = shim.parent().expect("the shim's directory").to_path_buf();
    let binds: Vec<(&Path, &Path)> = if preload {
        vec![(&dir, &dir)]
    } else {
        Vec::new()
    };
    let mut cmd = sid::command(emu, root, &binds, Path::new("/tmp"), bench.argv);
    cmd.envs(libs::ENV);
    if preload {
        cmd.env("LD_PRELOAD", &shim);
    }
    let mut p = Running::start(cmd);
    let (status, lines, gemms) = run_to_end(emu, &mut p);
    assert!(
        status.success(),
        "{} alone: {status}\n{lines:#?}",
        bench.argv[0]
    );
    assert!(
        gemms > 0,
        "the emulator dispatched no Tensile GEMM of {}: {lines:#?}",
        bench.argv[0]
    );
    eprintln!("{} alone: {gemms} Tensile GEMM dispatches", bench.argv[0]);
    (status, printed(bench, &lines))
}

/// Whether the held `pid` stopped at its hold: at level 1 it waits in its shim, at levels 2
/// and 3 its queues are off the runlist (inactive or suspended).
fn stopped_at_hold(emu: &Emu, state: &Path, pid: u32, level: &str) -> bool {
    if level == "hold" {
        libs::registry(state, pid).is_some_and(|r| r.streams.iter().any(|s| s.held_calls > 0))
    } else {
        let qs = emu.queues_of(pid);
        !qs.is_empty() && qs.iter().all(|q| !q.active || q.suspended)
    }
}

/// The benchmark under `kfdq run --class batch` beside a busy latency client, held by the
/// real agent at `level` and released when the client ends: same exit status and lines as
/// alone, and nothing of it runs while it is held.
fn held(emu: &Emu, root: &Path, bench: &Bench, level: &str, expected: &(ExitStatus, Vec<String>)) {
    let built = libs::ROCM64.built(emu, root);
    // 1 s hysteresis: a starved latency client does not release the hold during the window.
    let agent = Agent::start(emu, &two_classes_with_hysteresis(level, 1000));
    let Shimmed {
        p: latency,
        state: _ls,
    } = libs::busy_latency(emu, root, built, &agent);
    let Shimmed {
        p: mut batch,
        state: bs,
    } = libs::under_kfdq(emu, root, built, &agent, "batch", &[], bench.argv);
    let pid = batch.pid;
    agent.wait("the benchmark held", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(pid) && p.level.is_some())
    });
    // rocblas-bench loads its code objects (tens of seconds) before its first launch.
    let mut ended = false;
    let stopped = test_support::wait_until(RUN_LIMIT, || {
        ended = batch.child.try_wait().is_ok_and(|s| s.is_some());
        ended || stopped_at_hold(emu, bs.path(), pid, level)
    });
    if ended {
        // Fails with its output when it failed.
        let lines = batch.finish();
        panic!("{} ended before it was held: {lines:#?}", bench.argv[0]);
    }
    assert!(
        stopped,
        "the benchmark did not stop at its hold within {RUN_LIMIT:?}"
    );
    let (done, _) = packets(emu, pid);
    let gemms_before = gemms(emu, pid);
    test_support::hold::cp_witness(emu, 50, 2000);
    assert!(
        agent.process(pid).is_some_and(|p| p.level.is_some()),
        "the agent released the benchmark during the window"
    );
    assert_eq!(
        packets(emu, pid).0,
        done,
        "packets of the benchmark ran while it was held at {level}"
    );
    assert_eq!(gemms(emu, pid), gemms_before, "GEMMs dispatched while held");
    assert!(
        batch.child.try_wait().unwrap().is_none(),
        "it ended while held"
    );
    let lines = latency.finish();
    assert_eq!(lines.last().map(String::as_str), Some("hip_check: done"));
    let (status, lines, gemms) = run_to_end(emu, &mut batch);
    assert_eq!(
        (status.code(), printed(bench, &lines)),
        (expected.0.code(), expected.1.clone()),
        "{} held at {level} and released: exit status and printed lines as alone",
        bench.argv[0]
    );
    assert!(gemms > gemms_before, "its GEMMs ran after the release");
    assert_eq!(agent.status().counters.command_failures, 0);
    eprintln!(
        "{} held at {level}: {} packets before the hold, none during a 100 ms window, {gemms} \
         Tensile GEMMs after the release",
        bench.argv[0], done
    );
}

fn bench_alone_and_held(bench: &Bench) {
    let root = libs::ROCM64.root();
    let emu = libs::mount();
    let expected = alone(&emu, &root, bench);
    for level in ["hold", "deactivate", "suspend"] {
        held(&emu, &root, bench, level, &expected);
    }
}

/// rocblas-bench alone and under `LD_PRELOAD` of the shim: same exit status and lines.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_tools_rocblas_bench_alone_and_under_the_shim() {
    let root = libs::ROCM64.root();
    let emu = libs::mount();
    let expected = alone(&emu, &root, &ROCBLAS);
    let shimmed = alone_or_preloaded(&emu, &root, &ROCBLAS, true);
    assert_eq!(
        (shimmed.0.code(), shimmed.1),
        (expected.0.code(), expected.1),
        "rocblas-bench under the shim: exit status and printed lines as alone"
    );
}

/// rocblas-bench alone, then held at levels 1 to 3 beside a busy latency client and released.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_tools_rocblas_bench_alone_and_held_at_levels_1_to_3() {
    bench_alone_and_held(&ROCBLAS);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_tools_hipblaslt_bench_alone_and_held_at_levels_1_to_3() {
    bench_alone_and_held(&HIPBLASLT);
}

/// `argv` in the libraries' root `l` on `emu`, to its end; its stdout.
fn output(l: &Libs, emu: &Emu, root: &Path, argv: &[&str]) -> String {
    let out = sid::command(emu, root, &[], Path::new("/tmp"), argv)
        .env("HOME", "/tmp")
        .output()
        .expect("run in the root");
    l.finished(&argv.join(" "), out)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_tools_rocm_smi_and_amd_smi_list_the_emulated_gpus() {
    smi_lists_the_emulated_gpus(&libs::ROCM64, "N/A,");
}

/// rocm-smi 7.2.4 (Debian experimental) and amd-smi in the ROCm 7.2 libraries' root.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid7_tools_rocm_smi_7_2_and_amd_smi_list_the_emulated_gpus() {
    // rocm-smi 7.2.4 shows the device id on every partition of a CPX GPU, where 6.4.1 shows N/A
    // for all but the first: a change of the tool, the emulator's files are the same.
    smi_lists_the_emulated_gpus(&libs::ROCM72, "0x74a1,");
}

/// rocm-smi and amd-smi of the root `l` list one MI210, two MI300X in SPX mode and one MI300X in
/// CPX mode, whose partitions after the first show `partition_did` as their device id.
fn smi_lists_the_emulated_gpus(l: &Libs, partition_did: &str) {
    let root = l.root();
    // One MI210.
    let emu = libs::mount();
    let text = output(l, &emu, &root, &["rocm-smi"]);
    let rows: Vec<&str> = text
        .lines()
        .filter(|r| r.split_whitespace().nth(2) == Some("0x740f,"))
        .collect();
    assert_eq!(rows.len(), 1, "rocm-smi lists the MI210 once:\n{text}");
    assert!(!text.contains("ERROR"), "{text}");
    let text = output(
        l,
        &emu,
        &root,
        &["rocm-smi", "--showbus", "--showmeminfo", "vram"],
    );
    assert!(
        text.to_lowercase().contains("pci bus: 0000:0c:00.0"),
        "the PCI bus of the GPU:\n{text}"
    );
    assert!(text.contains("68719476736"), "64 GiB of VRAM:\n{text}");
    drop(emu);
    // Two MI300X in SPX mode: two devices, their partitions shown.
    let emu = mount_with(EmuConfig {
        preset: Preset::Mi300xSpx,
        gpus: 2,
        ..EmuConfig::default()
    });
    let text = output(l, &emu, &root, &["rocm-smi"]);
    let rows: Vec<&str> = text.lines().filter(|r| r.contains("0x74a1,")).collect();
    assert_eq!(rows.len(), 2, "rocm-smi lists both GPUs:\n{text}");
    assert!(
        rows.iter().all(|r| r.contains("NPS1, SPX")),
        "their memory and compute partitions:\n{text}"
    );
    let text = output(l, &emu, &root, &["amd-smi", "list"]);
    assert_eq!(
        text.matches("BDF:").count(),
        2,
        "amd-smi lists both GPUs:\n{text}"
    );
    drop(emu);
    cpx_partitions_listed(l, &root, partition_did);
}

/// One MI300X in CPX mode: 8 partitions, each on its own KFD node with its own gpu_id (GUID) and
/// partition id, as ROCm SMI 6.4.1 maps them (KFD nodes by `location_id`, devices by
/// `renderD<drm_render_minor>`). Only the first partition, the PCI function, shows the partition
/// modes (and with ROCm SMI 6.4.1 the device id; the others show `partition_did`): amdgpu's
/// `amdgpu_xcp_<n>` devices hold no such files, and rocm_smi_lib's changelog for 6.4.1 shows real
/// CPX output with N/A in those columns.
fn cpx_partitions_listed(l: &Libs, root: &Path, partition_did: &str) {
    let emu = mount_with(EmuConfig {
        preset: Preset::Mi300xCpx,
        ..EmuConfig::default()
    });
    let out = sid::command(&emu, root, &[], Path::new("/tmp"), &["rocm-smi"])
        .output()
        .expect("run rocm-smi in the root");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = l.finished("rocm-smi", out);
    assert_eq!(stderr, "", "rocm-smi wrote to stderr:\n{text}");
    // Device, Node, DID, GUID, Temp, Power, then the partitions: Mem, Compute, ID.
    let rows: Vec<Vec<&str>> = text
        .lines()
        .map(|r| r.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > 8 && f[0].parse::<u32>().is_ok())
        .collect();
    assert_eq!(rows.len(), 8, "rocm-smi lists 8 partitions:\n{text}");
    for (k, row) in rows.iter().enumerate() {
        let node = k + 1;
        let gpu_id = std::fs::read_to_string(
            emu.root()
                .join(format!("sys/class/kfd/kfd/topology/nodes/{node}/gpu_id")),
        )
        .unwrap();
        let want_ids = [k.to_string(), node.to_string()];
        assert_eq!(row[..2], want_ids, "device {k} on KFD node {node}:\n{text}");
        assert_eq!(row[3], gpu_id.trim(), "device {k}'s GUID:\n{text}");
        let (did, mem, compute) = if k == 0 {
            ("0x74a1,", "NPS1,", "CPX,")
        } else {
            (partition_did, "N/A,", "N/A,")
        };
        let want = [did, mem, compute, &k.to_string()].map(str::to_string);
        let got = [row[2], row[6], row[7], row[8]].map(str::to_string);
        assert_eq!(
            got, want,
            "device {k}: DID, partitions, partition id:\n{text}"
        );
    }
    let text = output(l, &emu, root, &["amd-smi", "list"]);
    for k in 0..8 {
        for want in [
            format!("GPU: {k}\n    BDF: 0000:0c:00.{k}\n"),
            format!("NODE_ID: {}\n    PARTITION_ID: {k}\n", k + 1),
        ] {
            assert!(text.contains(&want), "amd-smi lacks {want:?}:\n{text}");
        }
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sid_tools_bookworm_rocminfo_lists_the_gfx90a_preset() {
    test_support::require_root();
    assert!(
        Path::new("/usr/bin/rocminfo").is_file(),
        "Debian 12's rocminfo is missing: run scripts/setup.sh --tests as root"
    );
    let emu = libs::mount();
    // rocminfo 5.x runs `lsmod | grep amdgpu`; lsmod reads /proc/modules, which `kfd-emu run`
    // extends with the emulator's amdgpu. A kernel without module support (this CI machine's)
    // has no /proc/modules to extend, and rocminfo 5.x refuses any GPU there, a built-in amdgpu
    // included: then the test gives it an lsmod that prints the emulator's module list, in
    // /var/tmp. Not under the target directory: with the host as its root the sandbox mounts a
    // fresh /tmp over the host's, which hides the target directory whenever the checkout lies
    // under /tmp (as a fresh clone there does), and no bind can reach it after that.
    let lsmod = tempfile::Builder::new()
        .prefix("kfdq-lsmod-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let mut cmd = sid::command(&emu, Path::new("/"), &[], Path::new("/"), &["rocminfo"]);
    if !Path::new("/proc/modules").exists() {
        let script = lsmod.path().join("lsmod");
        let modules = std::fs::read_to_string(emu.root().join("proc/modules")).unwrap();
        std::fs::write(&script, format!("#!/bin/sh\nprintf '%s' '{modules}'\n")).unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", lsmod.path().display()));
    }
    let out = cmd.output().expect("run rocminfo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "rocminfo 5.2.3: {}\n{text}",
        out.status
    );
    for want in [
        "ROCk module is loaded",
        "gfx90a",
        "AMD Instinct MI210",
        "Compute Unit:            104",
    ] {
        assert!(
            text.contains(want),
            "rocminfo 5.2.3 lacks {want:?}:\n{text}"
        );
    }
}
