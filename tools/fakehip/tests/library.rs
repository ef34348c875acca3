//! Tests of fakehip.
//!
//! * The built library: soname, symlink, symbol-version nodes and placement (no emulator).
//! * Programs compiled with [`fakehip::compile_program`] run with `KFDQ_ROOT` pointing at an
//!   empty directory: no `/dev/kfd`, every device call fails with hipErrorNoDevice (no
//!   emulator).
//! * The same programs (`tests/programs/*.c`) run against a private kfd-emu mount per test
//!   (`KFDQ_ROOT=<mount>`), through real open/ioctl/mmap syscalls on the FUSE tree. Each test
//!   checks both sides: what the program prints, and the emulator's stats read while the
//!   program is parked at its checkpoints (queues and their KFD priorities, packets consumed,
//!   queues destroyed, CU masks, GPUs, processes). The emulator enforces the kernel's rules
//!   (ACQUIRE_VM before queues, RUNTIME_ENABLE before the first queue, the 6.12 exact-size
//!   queue buffers, EBADF on a KFD fd used after fork), so a fakehip that broke them would
//!   fail there. These tests mount FUSE and need root (see `test_support::require_root`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Command;

#[macro_use]
mod common;

use common::{EmuConfig, Preset, QueueStats, field, mi308x, programs, queues_of};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn tool(name: &str, args: &[&str]) -> String {
    let out = Command::new(name)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?} failed: {}",
        text(&out.stderr)
    );
    text(&out.stdout)
}

// ---------------------------------------------------------------------------------------
// the library file
// ---------------------------------------------------------------------------------------

#[test]
fn library_is_built_with_real_soname() {
    let lib = Path::new(fakehip::LIB_PATH);
    assert!(lib.is_file(), "{} missing", lib.display());
    assert_eq!(lib.parent(), Some(Path::new(fakehip::LIB_DIR)));
    let link = Path::new(fakehip::LIB_DIR).join("libamdhip64.so");
    assert_eq!(
        fs::read_link(&link).expect("libamdhip64.so symlink"),
        Path::new("libamdhip64.so.6")
    );
    let dynamic = tool("readelf", &["-d", "-W", fakehip::LIB_PATH]);
    assert!(
        dynamic.contains("Library soname: [libamdhip64.so.6]"),
        "{dynamic}"
    );
    assert!(
        Path::new(fakehip::INCLUDE_DIR)
            .join("hip/hip_runtime_api.h")
            .is_file()
    );
}

/// (symbol, node) pairs from ROCm's hip_hcc.map.in for what fakehip implements.
const PLACEMENT: &[(&str, &str)] = &[
    ("hipLaunchKernel", "hip_4.2"),
    ("hipModuleLaunchKernel", "hip_4.2"),
    ("hipExtLaunchKernel", "hip_4.2"),
    ("hipLaunchCooperativeKernel", "hip_4.2"),
    ("hipStreamCreate", "hip_4.2"),
    ("hipStreamCreateWithFlags", "hip_4.2"),
    ("hipStreamCreateWithPriority", "hip_4.2"),
    ("hipExtStreamCreateWithCUMask", "hip_4.2"),
    ("hipStreamDestroy", "hip_4.2"),
    ("hipStreamSynchronize", "hip_4.2"),
    ("hipStreamQuery", "hip_4.2"),
    ("hipStreamWaitEvent", "hip_4.2"),
    ("hipStreamGetPriority", "hip_4.2"),
    ("hipStreamAddCallback", "hip_4.2"),
    ("hipDeviceGetStreamPriorityRange", "hip_4.2"),
    ("hipMalloc", "hip_4.2"),
    ("hipMemcpy", "hip_4.2"),
    ("hipMemcpyAsync", "hip_4.2"),
    ("hipMemsetAsync", "hip_4.2"),
    ("hipEventRecord", "hip_4.2"),
    ("hipEventElapsedTime", "hip_4.2"),
    ("hipGetDeviceCount", "hip_4.2"),
    ("hipDeviceSynchronize", "hip_4.2"),
    ("hipCtxSynchronize", "hip_4.2"),
    ("__hipPushCallConfiguration", "hip_4.2"),
    ("__hipPopCallConfiguration", "hip_4.2"),
    ("__hipRegisterFatBinary", "hip_4.2"),
    ("__hipRegisterFunction", "hip_4.2"),
    (fakehip::EXT_MODULE_LAUNCH_KERNEL_SYMBOL, "hip_4.2"),
    ("hipGraphLaunch", "hip_4.3"),
    ("hipGraphCreate", "hip_4.3"),
    ("hipGraphInstantiate", "hip_4.3"),
    ("hipStreamBeginCapture", "hip_4.3"),
    ("hipStreamEndCapture", "hip_4.3"),
    ("hipGraphAddEmptyNode", "hip_4.4"),
    ("hipGraphInstantiateWithFlags", "hip_4.5"),
    ("hipThreadExchangeStreamCaptureMode", "hip_5.0"),
    ("hipMallocAsync", "hip_5.1"),
    ("hipFreeAsync", "hip_5.1"),
    ("hipLaunchKernel_spt", "hip_5.2"),
    ("hipLaunchCooperativeKernel_spt", "hip_5.2"),
    ("hipMemcpy_spt", "hip_5.2"),
    ("hipMemcpyAsync_spt", "hip_5.2"),
    ("hipMemset_spt", "hip_5.2"),
    ("hipStreamSynchronize_spt", "hip_5.2"),
    ("hipStreamQuery_spt", "hip_5.2"),
    ("hipStreamWaitEvent_spt", "hip_5.2"),
    ("hipStreamGetPriority_spt", "hip_5.2"),
    ("hipStreamGetFlags_spt", "hip_5.2"),
    ("hipEventRecord_spt", "hip_5.2"),
    ("hipGraphLaunch_spt", "hip_5.3"),
    ("hipMemsetAsync_spt", "hip_5.3"),
    ("hipLaunchHostFunc", "hip_5.3"),
    ("hipLaunchHostFunc_spt", "hip_5.3"),
    ("hipStreamAddCallback_spt", "hip_5.3"),
    ("hipStreamBeginCapture_spt", "hip_5.3"),
    ("hipModuleLaunchCooperativeKernel", "hip_5.5"),
    ("hipExtGetLastError", "hip_6.0"),
    ("hipGetProcAddress", "hip_6.1"),
    ("hipGraphExecGetFlags", "hip_6.2"),
    ("hipEventRecordWithFlags", "hip_6.4"),
    ("fakehipStreamQueueId", "FAKEHIP_1"),
    ("fakehipStreamQueueInfo", "FAKEHIP_1"),
];

const NODES: &[&str] = &[
    "hip_4.2", "hip_4.3", "hip_4.4", "hip_4.5", "hip_5.0", "hip_5.1", "hip_5.2", "hip_5.3",
    "hip_5.5", "hip_5.6", "hip_6.0", "hip_6.1", "hip_6.2", "hip_6.4",
];

/// The node of fakehip's own extensions (outside HIP's chain).
const EXT_NODE: &str = "FAKEHIP_1";

/// Defined dynamic symbols as "name@@version" strings.
fn defined_dyn_syms() -> BTreeSet<String> {
    tool("readelf", &["--dyn-syms", "-W", fakehip::LIB_PATH])
        .lines()
        .filter(|l| !l.contains(" UND "))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let numbered = cols.first()?.strip_suffix(':')?.parse::<u32>().is_ok();
            (numbered && cols.len() >= 8).then(|| cols[7].to_string())
        })
        .collect()
}

#[test]
fn exports_carry_the_real_version_nodes() {
    let syms = defined_dyn_syms();
    for (name, node) in PLACEMENT {
        let want = format!("{name}@@{node}");
        assert!(
            syms.contains(&want),
            "{want} not exported; have:\n{syms:#?}"
        );
    }
    for s in &syms {
        if NODES.contains(&s.as_str()) || s == EXT_NODE {
            continue; // the version definitions' own ABS symbols
        }
        let (name, version) = s
            .split_once("@@")
            .unwrap_or_else(|| panic!("unversioned export {s}"));
        assert!(
            NODES.contains(&version) || (version == EXT_NODE && name.starts_with("fakehip")),
            "{s} has an unexpected version"
        );
        assert!(
            name.starts_with("hip")
                || name.starts_with("__hip")
                || name.starts_with("fakehip")
                || name.starts_with("_Z24hipExtModuleLaunchKernel"),
            "unexpected export {s}"
        );
    }
    // C++ only, like ROCm's library
    assert!(
        !syms
            .iter()
            .any(|s| s.starts_with("hipExtModuleLaunchKernel@")),
        "{syms:#?}"
    );
}

#[test]
fn version_nodes_form_the_real_chain() {
    let v = tool("readelf", &["-V", "-W", fakehip::LIB_PATH]);
    let defs = v
        .split("Version definition section")
        .nth(1)
        .expect("a .gnu.version_d section");
    let defs = defs.split("Version needs section").next().unwrap_or(defs);
    let mut names = Vec::new();
    let mut parents = BTreeMap::new();
    for line in defs.lines() {
        if let Some(i) = line.find("Name: ") {
            names.push(line[i + 6..].trim().to_string());
        } else if let Some(i) = line.find("Parent 1: ") {
            let child = names.last().expect("a parent follows its node").clone();
            parents.insert(child, line[i + 10..].trim().to_string());
        }
    }
    assert_eq!(
        names.first().map(String::as_str),
        Some("libamdhip64.so.6"),
        "{v}"
    );
    assert_eq!(&names[1..names.len() - 1], NODES, "{v}");
    assert_eq!(names.last().map(String::as_str), Some(EXT_NODE), "{v}");
    assert!(
        !parents.contains_key(EXT_NODE),
        "the extensions' node is outside HIP's chain"
    );
    for pair in NODES.windows(2) {
        assert_eq!(
            parents.get(pair[1]).map(String::as_str),
            Some(pair[0]),
            "{v}"
        );
    }
}

#[test]
fn cxx_callers_bind_to_the_mangled_hip_ext_module_launch_kernel() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path().join("ext.cpp");
    fs::write(
        &src,
        "#include <hip/hip_runtime_api.h>\n\
         int main() {\n\
           static fakehip_kernel k = FAKEHIP_KERNEL(1000);\n\
           return hipExtModuleLaunchKernel((hipFunction_t)&k, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr,\n\
                                           nullptr) == hipErrorNoDevice ? 0 : 1;\n\
         }\n",
    )
    .expect("write ext.cpp");
    let exe = dir.path().join("ext");
    if let Err(e) = fakehip::compile_program(&src, &exe, &["-Werror"]) {
        if e.kind() == std::io::ErrorKind::NotFound {
            eprintln!("skipped: no C++ compiler ({e})");
            return;
        }
        panic!("{e}");
    }
    let needed = tool(
        "nm",
        &["-D", "--undefined-only", &exe.display().to_string()],
    );
    assert!(
        needed.contains(fakehip::EXT_MODULE_LAUNCH_KERNEL_SYMBOL),
        "{needed}"
    );
    let empty = dir.path().join("root");
    fs::create_dir_all(&empty).expect("mkdir");
    let root = empty.display().to_string();
    let out = common::run(&exe, &[], &[("KFDQ_ROOT", &root)]);
    assert!(out.status.success(), "{}", out.stderr);
}

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

// ---------------------------------------------------------------------------------------
// against kfd-emu
// ---------------------------------------------------------------------------------------

/// The queue with id `qid` among `qs`.
fn queue(qs: &[QueueStats], qid: u32) -> &QueueStats {
    qs.iter()
        .find(|q| q.queue_id == qid)
        .unwrap_or_else(|| panic!("the emulator has no queue {qid}: {qs:#?}"))
}

fn qids(qs: &[QueueStats]) -> BTreeSet<u32> {
    qs.iter().map(|q| q.queue_id).collect()
}

fn sorted_priorities(qs: &[QueueStats]) -> Vec<u32> {
    let mut p: Vec<u32> = qs.iter().map(|q| q.priority).collect();
    p.sort_unstable();
    p
}

fn packets_done(qs: &[QueueStats]) -> u64 {
    qs.iter().map(|q| q.packets_done).sum()
}

fn num<T: std::str::FromStr>(s: &str) -> T {
    s.parse()
        .unwrap_or_else(|_| panic!("{s:?} is not a number of the expected kind"))
}

const TOPOLOGY: &str = "sys/class/kfd/kfd/topology";

/// The `properties` of topology node `node` under `root`, as (key, value) pairs.
fn node_properties(root: &Path, node: u32) -> BTreeMap<String, u64> {
    let path = root.join(TOPOLOGY).join(format!("nodes/{node}/properties"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
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

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn basic_program_creates_one_queue_per_stream_with_rocr_priorities() {
    let emu = common::mount(mi308x());
    let gpu = emu.gpu_ids()[0];
    let r = emu.run("basic", &[], &[("FAKEHIP_DEBUG", "1")]);
    r.assert_ok();

    // the program's view: stream -> (queue id, KFD priority)
    let mut seen = BTreeMap::new();
    for line in r.stdout().lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (w.len(), w[0], w[2], w[4]),
            (6, "stream", "queue", "prio"),
            "{line}"
        );
        seen.insert(w[1].to_string(), (num::<u32>(w[3]), num::<u32>(w[5])));
    }
    let prios: BTreeMap<&str, u32> = seen.iter().map(|(k, v)| (k.as_str(), v.1)).collect();
    assert_eq!(
        prios,
        BTreeMap::from([
            ("high", 11),
            ("low", 0),
            ("normal", 7),
            ("null", 7),
            ("per-thread", 7)
        ])
    );
    let program_queues: BTreeMap<u32, u32> = seen.values().copied().collect();
    assert_eq!(program_queues.len(), 5, "five distinct queues: {seen:?}");

    // one debug line per queue creation, naming the emulator's GPU
    let debug: Vec<&str> = r
        .stderr()
        .lines()
        .filter(|l| l.starts_with("fakehip: stream 0x"))
        .collect();
    assert_eq!(debug.len(), 5, "{}", r.stderr());
    for l in &debug {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(
            (w[3], w[4], w[6], w[7], w[8]),
            ("->", "queue", "gpu", gpu.to_string().as_str(), "prio"),
            "{l}"
        );
    }

    // the emulator's view: exactly those queues, with those priorities, each having run
    // its one launch
    let qs = r.queues_at("queues");
    let emu_queues: BTreeMap<u32, u32> = qs.iter().map(|q| (q.queue_id, q.priority)).collect();
    assert_eq!(emu_queues, program_queues);
    for q in &qs {
        assert_eq!(q.gpu_id, gpu, "{q:?}");
        assert_eq!(q.queue_type, "compute_aql", "{q:?}");
        assert_eq!(q.percentage, 100, "{q:?}");
        assert!(q.active && !q.suspended, "{q:?}");
        assert_eq!(q.ring_size, 65536, "{q:?}");
        assert_eq!(
            (q.packets_done, q.read_index, q.write_index),
            (1, 1, 1),
            "{q:?}"
        );
    }
    // RUNTIME_ENABLE came before the first queue (the emulator refuses it afterwards)
    let proc = r
        .at("queues")
        .processes
        .iter()
        .find(|p| p.pid == r.pid)
        .expect("the program's KFD process");
    assert!(proc.runtime_enabled, "{proc:?}");
    assert_eq!(proc.queues, 5);

    // hipStreamDestroy of the three user streams destroyed their queues
    assert_eq!(
        qids(&r.queues_at("destroyed")),
        BTreeSet::from([seen["null"].0, seen["per-thread"].0])
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn cwsr_sizes_come_from_sysfs_and_pass_the_6_12_checks() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["cwsr"], &[]);
    r.assert_ok();
    // MI308X node: cwsr_size / ctl_stack_size from sysfs; CWSR area =
    // ALIGN((cwsr + debug 25,600) * 4 XCC, 4096) (docs/kernel-interface.md §3)
    assert_eq!(
        field(r.stdout(), "cwsr "),
        [
            "ctx_save_restore_size",
            "12214272",
            "ctl_stack_size",
            "8192",
            "bytes",
            "48959488"
        ]
    );
    // ... which are node 1's sysfs properties
    let props = node_properties(emu.root(), 1);
    assert_eq!(
        (props["cwsr_size"], props["ctl_stack_size"]),
        (12_214_272, 8_192),
        "{props:?}"
    );
    // the emulator validates exactly these sizes at CREATE_QUEUE (6.12 rules)
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(qs[0].packets_done, 1);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn pools_cap_queues_and_share_the_least_used() {
    let emu = common::mount(mi308x());
    let r = emu.run_with(
        "scenarios",
        &["pools"],
        &[("GPU_MAX_HW_QUEUES", "2")],
        |cp| {
            if cp.name == "launched" {
                cp.emu.wait_stats("the five launches consumed", |s| {
                    packets_done(&queues_of(s, cp.pid)) == 5
                });
            }
        },
    );
    r.assert_ok();
    // "stream <i> queue <qid> users <n>"
    let streams: Vec<(u32, u32)> = r
        .stdout()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            assert_eq!((w[0], w[2], w[4]), ("stream", "queue", "users"), "{l}");
            (num(w[3]), num(w[5]))
        })
        .collect();
    assert_eq!(streams.len(), 5, "{}", r.stdout());
    let users: BTreeMap<u32, u32> = streams.iter().copied().collect();
    let mut counts: Vec<u32> = users.values().copied().collect();
    counts.sort_unstable();
    assert_eq!(counts, [2, 3], "5 streams over 2 queues: {}", r.stdout());

    // the emulator: two normal-priority queues, each ran one launch per stream on it
    let qs = r.queues_at("launched");
    assert_eq!(qids(&qs), users.keys().copied().collect());
    for q in &qs {
        assert_eq!(q.priority, 7, "{q:?}");
        assert_eq!(q.packets_done, u64::from(users[&q.queue_id]), "{q:?}");
    }
    // a queue goes only when the last stream on it is destroyed
    for i in 0..5 {
        let remaining: BTreeSet<u32> = streams[i + 1..].iter().map(|s| s.0).collect();
        assert_eq!(
            qids(&r.queues_at(&format!("destroyed{i}"))),
            remaining,
            "after destroying stream {i}"
        );
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn priorities_are_clamped_like_hip() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["clamp"], &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "range "), ["1", "-1"]);
    assert_eq!(field(s, "low hip "), ["1", "kfd", "0"]);
    assert_eq!(field(s, "high hip "), ["-1", "kfd", "11"]);
    assert_eq!(field(s, "high flags "), ["1"]);
    assert_eq!(sorted_priorities(&r.queues_at("streams")), [0, 11]);
}

/// elapsed <= the host time bracketing the records and the synchronisation, and > 0.
fn assert_event_times(stdout: &str) {
    for (elapsed, wall) in [("elapsed ", "wall "), ("ext_elapsed ", "ext_wall ")] {
        let ms: f64 = num(&field(stdout, elapsed)[0]);
        let wall_ms: f64 = num(&field(stdout, wall)[0]);
        assert!(
            ms > 0.0 && ms <= wall_ms + 0.01,
            "{elapsed}{ms} ms, host {wall}{wall_ms} ms:\n{stdout}"
        );
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn events_measure_the_emulated_kernel_time() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["elapsed"], &[]);
    r.assert_ok();
    assert_event_times(r.stdout());
    // two launches (event records add no packet)
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!((qs[0].packets_done, qs[0].write_index), (2, 2));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn strict_completion_mode_works() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["elapsed"], &[("FAKEHIP_SYNC", "signal")]);
    r.assert_ok();
    assert_event_times(r.stdout());
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(qs[0].packets_done, 2);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn waits_are_bounded() {
    let emu = common::mount(mi308x());
    let r = emu.run_with(
        "scenarios",
        &["timeout"],
        &[("FAKEHIP_TIMEOUT_MS", "300"), ("FAKEHIP_RING_SIZE", "4096")],
        |cp| {
            cp.emu
                .wait_stats("the CP saw the 64 published packets", |s| {
                    queues_of(s, cp.pid).iter().any(|q| q.write_index == 64)
                });
        },
    );
    r.assert_ok();
    let s = r.stdout();
    // the wait gave up, and not before FAKEHIP_TIMEOUT_MS
    let sync_ms: f64 = num(&field(s, "sync_ms ")[0]);
    assert!(sync_ms >= 300.0, "{s}");
    // a 4 KiB ring holds 64 packets; the 65th waits for the timeout, then fails with 719
    let full = field(s, "ring_full_after ");
    assert_eq!(full[..3], ["65", "code", "719"], "{s}");
    assert!(num::<f64>(&full[4]) >= 300.0, "{s}");
    // the emulator: the hour-long first kernel holds the queue; nothing completed
    let qs = r.queues_at("stalled");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    let q = &qs[0];
    assert_eq!(q.ring_size, 4096, "{q:?}");
    assert!(q.active, "{q:?}");
    assert_eq!(
        (q.packets_done, q.read_index, q.write_index),
        (0, 0, 64),
        "{q:?}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn forked_child_reopens_kfd() {
    let emu = common::mount(mi308x());
    let r = emu.run_with("scenarios", &["fork"], &[], |cp| {
        // (a child that failed printed no pid: the exit status below tells)
        let child = cp.stdout.lines().find_map(|l| l.strip_prefix("child pid "));
        if let (Some(line), "parent") = (child, cp.name) {
            let child: u32 = num(line.split_whitespace().next().unwrap_or_default());
            cp.emu
                .wait_stats("the exited child's KFD process is gone", |s| {
                    !s.processes.iter().any(|p| p.pid == child)
                });
        }
    });
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "child exit "), ["0"]);
    let parent_q: u32 = num(&field(s, "parent queue ")[0]);
    let child_line = field(s, "child pid ");
    assert_eq!(child_line[1], "queue", "{s}");
    let (child, child_q): (u32, u32) = (num(&child_line[0]), num(&child_line[2]));
    assert_ne!(child, r.pid);

    // The child is a KFD process of its own (an ioctl on the inherited fd would have been
    // EBADF): runtime-enabled, with its queue that ran its launch; the parent's queue is
    // untouched.
    let at_child = r.at("child");
    let child_proc = at_child
        .processes
        .iter()
        .find(|p| p.pid == child)
        .unwrap_or_else(|| panic!("no KFD process for the child {child}: {at_child:#?}"));
    assert!(child_proc.runtime_enabled, "{child_proc:?}");
    let cq = queues_of(at_child, child);
    assert_eq!(qids(&cq), BTreeSet::from([child_q]));
    assert_eq!(cq[0].packets_done, 1);
    let pq = queues_of(at_child, r.pid);
    assert_eq!(qids(&pq), BTreeSet::from([parent_q]));
    assert_eq!(pq[0].packets_done, 1);

    // after the child exited the parent still works with its own queue
    let at_parent = r.at("parent");
    assert!(!at_parent.processes.iter().any(|p| p.pid == child));
    assert_eq!(
        queue(&queues_of(at_parent, r.pid), parent_q).packets_done,
        2
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn cu_masked_streams_get_their_own_queue() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["cumask"], &[]);
    r.assert_ok();
    let w = field(r.stdout(), "cumask queue ");
    assert_eq!(w[1..3], ["plain", "queue"], "{}", r.stdout());
    let (masked, plain): (u32, u32) = (num(&w[0]), num(&w[3]));
    assert_ne!(masked, plain, "CU-masked stream shares a pool queue");
    let qs = r.queues_at("masked");
    assert_eq!(qids(&qs), BTreeSet::from([masked, plain]));
    // SET_CU_MASK with 64 bits: words {0x0000ffff, 0}
    let m = queue(&qs, masked);
    assert_eq!(m.cu_mask.as_deref(), Some(&[0x0000_ffff, 0][..]), "{m:?}");
    assert_eq!((m.priority, m.packets_done), (7, 1), "{m:?}");
    let p = queue(&qs, plain);
    assert_eq!(p.cu_mask, None, "{p:?}");
    assert_eq!(p.priority, 7, "{p:?}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn devices_map_to_gpu_nodes_in_order() {
    let emu = common::mount(EmuConfig {
        gpus: 2,
        ..mi308x()
    });
    let gpus = emu.gpu_ids();
    assert_eq!(gpus.len(), 2);
    let r = emu.run("scenarios", &["multigpu"], &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "devices "), ["2"]);
    assert_eq!(
        field(s, "device "),
        [
            "1".to_string(),
            "stream_device".into(),
            "1".into(),
            "gpu0".into(),
            gpus[0].to_string(),
            "gpu1".into(),
            gpus[1].to_string()
        ]
    );
    // one queue on each GPU, each ran its launch
    let at = r.at("synced");
    let qs = queues_of(at, r.pid);
    let per_gpu: BTreeMap<u32, u64> = qs.iter().map(|q| (q.gpu_id, q.packets_done)).collect();
    assert_eq!(qs.len(), 2, "{qs:#?}");
    assert_eq!(per_gpu, BTreeMap::from([(gpus[0], 1), (gpus[1], 1)]));
    for p in &at.partitions {
        assert_eq!(p.active_queues, 1, "{p:?}");
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn graphs_and_capture_replay_kernels() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["graph"], &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "after_graph write_index "), ["3"]);
    assert_eq!(field(s, "capturing "), ["1"]);
    assert_eq!(
        field(s, "after_capture write_index "),
        ["3"],
        "capture must not submit"
    );
    assert_eq!(
        field(s, "after_replay write_index "),
        ["7", "read_index", "7"]
    );
    // three graph kernels + two replays of the two captured ones
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(
        (qs[0].packets_done, qs[0].read_index, qs[0].write_index),
        (7, 7, 7)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn memory_operations_enqueue_barriers_and_create_the_null_queue_lazily() {
    let emu = common::mount(mi308x());
    let r = emu.run_with("scenarios", &["memops"], &[], |cp| {
        cp.emu.wait_stats("the four barrier packets consumed", |s| {
            packets_done(&queues_of(s, cp.pid)) == 4
        });
    });
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(s, "b0 "), ["7", "a0", "1", "a40", "7"]);
    assert_eq!(field(s, "stream write_index "), ["2"]);
    let null_q: u32 = num(&field(s, "null queue after memset ")[0]);
    let pts_q: u32 = num(&field(s, "per-thread queue ")[0]);
    // null (hipMemset), user stream (memcpy + memset async), per-thread (hipMemcpy_spt)
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 3, "{qs:#?}");
    assert_eq!(queue(&qs, null_q).packets_done, 1);
    assert_eq!(queue(&qs, pts_q).packets_done, 1);
    let user: Vec<&QueueStats> = qs
        .iter()
        .filter(|q| q.queue_id != null_q && q.queue_id != pts_q)
        .collect();
    assert_eq!(user.len(), 1, "{qs:#?}");
    assert_eq!(user[0].packets_done, 2);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn per_thread_streams_are_per_thread_and_released_at_exit() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["perthread"], &[("GPU_MAX_HW_QUEUES", "8")]);
    r.assert_ok();
    let s = r.stdout();
    let t0 = field(s, "thread 0 pts ");
    let t1 = field(s, "thread 1 pts ");
    assert_ne!(t0[0], t1[0], "each thread has its own default stream: {s}");
    assert_eq!(t0[2], t1[2], "the legacy null stream is shared: {s}");
    assert_eq!(
        t0[2], t0[4],
        "NULL means the legacy stream outside _spt: {s}"
    );
    assert_eq!(field(s, "main legacy "), [t0[2].clone()]);
    let (pts0, pts1, legacy): (u32, u32, u32) = (num(&t0[0]), num(&t1[0]), num(&t0[2]));
    // while the threads live: their two per-thread queues (two launches each) and the
    // legacy queue (one launch per thread)
    let qs = r.queues_at("running");
    assert_eq!(qids(&qs), BTreeSet::from([pts0, pts1, legacy]));
    for q in &qs {
        assert_eq!((q.priority, q.packets_done), (7, 2), "{q:?}");
    }
    // thread exit destroyed the per-thread queues
    assert_eq!(qids(&r.queues_at("joined")), BTreeSet::from([legacy]));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn device_reset_destroys_every_queue() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["reset"], &[]);
    r.assert_ok();
    // three streams at HIP priorities -1/0/1 and the null stream
    assert_eq!(
        sorted_priorities(&r.queues_at("before_reset")),
        [0, 7, 7, 11]
    );
    assert!(r.queues_at("after_reset").is_empty());
    // the KFD process (fd, VM) survives the reset
    assert!(r.at("after_reset").processes.iter().any(|p| p.pid == r.pid));
    let again: u32 = num(&field(r.stdout(), "after reset queue ")[0]);
    let qs = r.queues_at("recreated");
    assert_eq!(qids(&qs), BTreeSet::from([again]));
    assert_eq!(qs[0].packets_done, 1);
}

/// `host_cb` of the `misc` scenario (tests/programs/scenarios.c), run by hipLaunchHostFunc,
/// adds 1 to the scenario's counter.
const MISC_HOST_FN_ADDS: u32 = 1;
/// `stream_cb`, run by hipStreamAddCallback (with hipSuccess), adds 10: the printed sum tells
/// that each ran exactly once.
const MISC_STREAM_CALLBACK_ADDS: u32 = 10;
/// `misc` pushes `__hipPushCallConfiguration(G1, B64, 16, s)`: grid {1,1,1}, block {64,1,1},
/// 16 bytes of dynamic shared memory, stream `s`; it prints "popped <grid.x> <block.x>
/// <shared memory> <1 if the popped stream is s>".
const MISC_PUSHED_GRID_X: u32 = 1;
const MISC_PUSHED_BLOCK_X: u32 = 64;
const MISC_PUSHED_SHARED_MEM: usize = 16;
/// The launches of `misc` that succeed, each one AQL kernel-dispatch packet on `s`'s queue. Its
/// four invalid launches (2048-thread block, NULL function, NULL module function, unknown
/// stream) submit nothing; event records, host functions and callbacks add no packet, and
/// waiting on an event from the null stream creates no queue.
const MISC_SUCCESSFUL_LAUNCHES: [&str; 8] = [
    "hipLaunchKernel(k_20ms)",
    "hipLaunchKernel(k_short)",
    "hipExtModuleLaunchKernel(k_short)",
    "hipModuleLaunchCooperativeKernel(k_short)",
    "hipLaunchCooperativeKernel(k_short)",
    "hipLaunchCooperativeKernel_spt(k_short)",
    "hipLaunchKernel(a plain function: FAKEHIP_KERNEL_NS)",
    "hipLaunchKernel(a wild pointer)",
];

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn misc_api_behaviour() {
    let emu = common::mount(mi308x());
    let r = emu.run("scenarios", &["misc"], &[]);
    r.assert_ok();
    let s = r.stdout();
    // the host function and the callback each ran once, before hipStreamQuery
    assert_eq!(
        field(s, "counter "),
        [(MISC_HOST_FN_ADDS + MISC_STREAM_CALLBACK_ADDS).to_string()]
    );
    // the call configuration pops as pushed
    assert_eq!(
        field(s, "popped "),
        [
            MISC_PUSHED_GRID_X.to_string(),
            MISC_PUSHED_BLOCK_X.to_string(),
            MISC_PUSHED_SHARED_MEM.to_string(),
            "1".to_string()
        ]
    );
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    let launches = MISC_SUCCESSFUL_LAUNCHES.len() as u64;
    assert_eq!(
        (qs[0].packets_done, qs[0].write_index),
        (launches, launches),
        "one packet per successful launch: {MISC_SUCCESSFUL_LAUNCHES:?}"
    );
}

fn full_ring(emu: &common::Emu, ring: Option<&str>, ring_size: u32) {
    let envs: Vec<(&str, &str)> = ring.map(|r| ("FAKEHIP_RING_SIZE", r)).into_iter().collect();
    let r = emu.run("scenarios", &["many"], &envs);
    r.assert_ok();
    assert_eq!(
        field(r.stdout(), "write_index "),
        ["3000", "read_index", "3000"]
    );
    let qs = r.queues_at("done");
    assert_eq!(qs.len(), 1, "{qs:#?}");
    assert_eq!(qs[0].ring_size, ring_size);
    assert_eq!((qs[0].packets_done, qs[0].read_index), (3000, 3000));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_full_ring_waits_for_the_gpu() {
    // 3000 launches through the default 1024-packet ring
    let emu = common::mount(mi308x());
    full_ring(&emu, None, 65536);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_small_ring_applies_back_pressure() {
    // FAKEHIP_RING_SIZE=4096: 64 packets, wrapped about 47 times
    let emu = common::mount(mi308x());
    full_ring(&emu, Some("4096"), 4096);
}
