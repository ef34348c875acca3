//! Tests of fakehip that need no emulator.
//!
//! * The built library: soname, symlink, symbol-version nodes and placement.
//! * Programs compiled with [`fakehip::compile_program`], run with `KFDQ_ROOT` pointing at
//!   an empty directory (no `/dev/kfd`: every device call fails with hipErrorNoDevice).
//! * The same programs run against `tests/support/kfdstub.c`, an in-process amdkfd test
//!   double loaded with `LD_PRELOAD` that enforces the KFD rules fakehip must follow
//!   (RUNTIME_ENABLE before queues, ACQUIRE_VM, 6.12 exact-size buffers, CWSR headers,
//!   doorbell mmap) and consumes AQL packets. It is not kfd-emu; emulator-backed tests
//!   live elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const MANIFEST: &str = env!("CARGO_MANIFEST_DIR");

/// gpu_ids of the stub topology's two GPU nodes (MI308X-like: 4 XCC x 20 CU).
const GPU0: u32 = 40001;
const GPU1: u32 = 40002;
const NODE_CWSR: u64 = 12_214_272;
const NODE_CTL: u64 = 8192;
/// ALIGN((cwsr + debug 25,600) * 4 XCC, 4096), kfd-interface.md §6.2.
const CWSR_BO: u64 = 48_959_488;

struct Built {
    dir: PathBuf,
}

impl Built {
    fn program(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
    fn stub(&self) -> PathBuf {
        self.dir.join("kfdstub.so")
    }
}

/// Compiles the test programs and the KFD stub once per test binary.
fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fakehip-tests");
        fs::create_dir_all(&dir).expect("create the test build dir");
        let programs = Path::new(MANIFEST).join("tests/programs");
        for name in ["basic", "nodevice", "scenarios"] {
            fakehip::compile_program(
                &programs.join(format!("{name}.c")),
                &dir.join(name),
                &["-Wextra", "-Werror"],
            )
            .unwrap_or_else(|e| panic!("{e}"));
        }
        let cc = std::env::var("CC")
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "cc".into());
        let out = Command::new(&cc)
            .args([
                "-std=gnu11",
                "-shared",
                "-fPIC",
                "-O2",
                "-g",
                "-Wall",
                "-Wextra",
                "-Werror",
            ])
            .arg(format!("-I{MANIFEST}/../../kfd-sys/include"))
            .arg(Path::new(MANIFEST).join("tests/support/kfdstub.c"))
            .arg("-o")
            .arg(dir.join("kfdstub.so"))
            .args(["-ldl", "-lpthread"])
            .output()
            .expect("run the C compiler");
        assert!(
            out.status.success(),
            "kfdstub build failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Built { dir }
    })
}

/// Runs a program with the given environment; kills it after `limit`.
fn run(program: &Path, args: &[&str], envs: &[(&str, String)], limit: Duration) -> Output {
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    for var in ["KFDQ_ROOT", "GPU_MAX_HW_QUEUES", "LD_PRELOAD"] {
        cmd.env_remove(var);
    }
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        stdout.read_to_end(&mut v).map(|_| v)
    });
    let err_reader = std::thread::spawn(move || {
        let mut v = Vec::new();
        stderr.read_to_end(&mut v).map(|_| v)
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the program") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} {:?} did not finish within {limit:?}",
                program.display(),
                args
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out_reader
            .join()
            .expect("stdout reader")
            .expect("read stdout"),
        stderr: err_reader
            .join()
            .expect("stderr reader")
            .expect("read stderr"),
    }
}

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

/// A KFDQ_ROOT tree: node 0 a CPU, then one GPU node per gpu_id.
fn make_root(dir: &Path, gpus: &[u32], properties: &str) {
    let topo = dir.join("sys/class/kfd/kfd/topology");
    fs::create_dir_all(dir.join("dev/dri")).expect("mkdir dev/dri");
    fs::write(dir.join("dev/kfd"), b"").expect("create dev/kfd");
    fs::create_dir_all(topo.join("nodes/0")).expect("mkdir node 0");
    fs::write(topo.join("generation_id"), "1\n").expect("write generation_id");
    fs::write(topo.join("nodes/0/gpu_id"), "0\n").expect("write gpu_id");
    fs::write(
        topo.join("nodes/0/properties"),
        "cpu_cores_count 16\nsimd_count 0\n",
    )
    .expect("write properties");
    for (i, id) in gpus.iter().enumerate() {
        let node = topo.join(format!("nodes/{}", i + 1));
        let minor = 128 + i;
        fs::create_dir_all(&node).expect("mkdir node");
        fs::write(node.join("gpu_id"), format!("{id}\n")).expect("write gpu_id");
        fs::write(
            node.join("properties"),
            format!("{properties}drm_render_minor {minor}\n"),
        )
        .expect("write properties");
        fs::write(dir.join(format!("dev/dri/renderD{minor}")), b"").expect("create render node");
    }
}

const MI308X_PROPS: &str = "cpu_cores_count 0\nsimd_count 320\nmem_banks_count 1\narray_count 16\n\
simd_arrays_per_engine 1\nsimd_per_cu 4\ngfx_target_version 90402\nnum_cp_queues 24\n\
cwsr_size 12214272\nctl_stack_size 8192\nnum_xcc 4\n";

/// A stub run: temp root + log, the program's output, and the parsed log.
struct StubRun {
    out: Output,
    log: Vec<LogLine>,
    _dir: tempfile::TempDir,
}

#[derive(Debug, Clone)]
struct LogLine {
    pid: u32,
    op: String,
    kv: BTreeMap<String, String>,
}

impl LogLine {
    fn get(&self, k: &str) -> u64 {
        self.kv
            .get(k)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("log line {self:?} lacks numeric {k}"))
    }
}

impl StubRun {
    fn stdout(&self) -> String {
        text(&self.out.stdout)
    }
    fn ops(&self, op: &str) -> Vec<&LogLine> {
        self.log.iter().filter(|l| l.op == op).collect()
    }
    fn position(&self, op: &str) -> Option<usize> {
        self.log.iter().position(|l| l.op == op)
    }
    fn assert_ok(&self) {
        assert!(
            self.out.status.success(),
            "program failed ({}):\nstdout:\n{}\nstderr:\n{}\nlog:\n{:#?}",
            self.out.status,
            self.stdout(),
            text(&self.out.stderr),
            self.log
        );
        assert!(
            self.position("REJECT").is_none(),
            "the KFD stub rejected a call: {:#?}",
            self.log
        );
    }
}

fn parse_log(s: &str) -> Vec<LogLine> {
    s.lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let pid = words.next()?.parse().ok()?;
            let op = words.next()?.to_string();
            let kv = words
                .filter_map(|w| {
                    w.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect();
            Some(LogLine { pid, op, kv })
        })
        .collect()
}

fn stub_run_with(
    program: &str,
    args: &[&str],
    gpus: &[u32],
    props: &str,
    envs: &[(&str, &str)],
) -> StubRun {
    let b = built();
    let dir = tempfile::tempdir().expect("temp dir");
    make_root(dir.path(), gpus, props);
    let log = dir.path().join("kfdstub.log");
    let mut all: Vec<(&str, String)> = vec![
        ("KFDQ_ROOT", dir.path().display().to_string()),
        ("KFDSTUB_LOG", log.display().to_string()),
        ("LD_PRELOAD", b.stub().display().to_string()),
    ];
    all.extend(envs.iter().map(|(k, v)| (*k, v.to_string())));
    let out = run(&b.program(program), args, &all, Duration::from_secs(120));
    let log = parse_log(&fs::read_to_string(&log).unwrap_or_default());
    StubRun {
        out,
        log,
        _dir: dir,
    }
}

fn scenario(name: &str, envs: &[(&str, &str)]) -> StubRun {
    stub_run_with("scenarios", &[name], &[GPU0, GPU1], MI308X_PROPS, envs)
}

/// "key value" lines of the program's stdout, by first word(s).
fn field(stdout: &str, prefix: &str) -> Vec<String> {
    stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix(prefix)
                .map(|rest| rest.split_whitespace().map(String::from).collect())
        })
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{stdout}"))
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
    ("fakehipStreamQueueId", "hip_6.3"),
    ("fakehipStreamQueueInfo", "hip_6.3"),
];

const NODES: &[&str] = &[
    "hip_4.2", "hip_4.3", "hip_4.4", "hip_4.5", "hip_5.0", "hip_5.1", "hip_5.2", "hip_5.3",
    "hip_5.5", "hip_5.6", "hip_6.0", "hip_6.1", "hip_6.2", "hip_6.3",
];

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
        if NODES.contains(&s.as_str()) {
            continue; // the version definitions' own ABS symbols
        }
        let (name, version) = s
            .split_once("@@")
            .unwrap_or_else(|| panic!("unversioned export {s}"));
        assert!(NODES.contains(&version), "{s} has an unexpected version");
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
    assert_eq!(&names[1..], NODES, "{v}");
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
    let out = run(
        &exe,
        &[],
        &[("KFDQ_ROOT", empty.display().to_string())],
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
}

// ---------------------------------------------------------------------------------------
// no device
// ---------------------------------------------------------------------------------------

#[test]
fn without_dev_kfd_every_device_call_returns_no_device() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(
        &built().program("nodevice"),
        &[],
        &[("KFDQ_ROOT", dir.path().display().to_string())],
        Duration::from_secs(30),
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    for call in [
        "hipGetDeviceCount",
        "hipStreamCreate",
        "hipLaunchKernel",
        "hipDeviceSynchronize",
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("{call} 100")),
            "{call}: {stdout}"
        );
    }
}

#[test]
fn basic_program_fails_cleanly_without_a_device() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(
        &built().program("basic"),
        &[],
        &[("KFDQ_ROOT", dir.path().display().to_string())],
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("hipErrorNoDevice (100)"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_topology_without_gpus_is_no_device() {
    let out = stub_run_with("nodevice", &[], &[], MI308X_PROPS, &[]);
    out.assert_ok();
    assert!(out.ops("CREATE_QUEUE").is_empty());
}

// ---------------------------------------------------------------------------------------
// against the in-process KFD stub
// ---------------------------------------------------------------------------------------

#[test]
fn basic_program_creates_one_queue_per_stream_with_rocr_priorities() {
    let r = stub_run_with(
        "basic",
        &[],
        &[GPU0],
        MI308X_PROPS,
        &[("FAKEHIP_DEBUG", "1")],
    );
    r.assert_ok();
    let mut seen = BTreeMap::new();
    for line in r.stdout().lines() {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            (w.len(), w[0], w[2], w[4]),
            (6, "stream", "queue", "prio"),
            "{line}"
        );
        seen.insert(
            w[1].to_string(),
            (
                w[3].parse::<u32>().expect("qid"),
                w[5].parse::<u32>().expect("prio"),
            ),
        );
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
    let qids: BTreeSet<u32> = seen.values().map(|v| v.0).collect();
    assert_eq!(qids.len(), 5, "five distinct queues: {seen:?}");

    // one debug line per queue creation
    let stderr = text(&r.out.stderr);
    let debug: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("fakehip: stream 0x"))
        .collect();
    assert_eq!(debug.len(), 5, "{stderr}");
    for l in &debug {
        let w: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(
            (w[3], w[4], w[6], w[7], w[8]),
            ("->", "queue", "gpu", "40001", "prio"),
            "{l}"
        );
    }

    // ROCr's order: RUNTIME_ENABLE, ACQUIRE_VM, then queues
    let first_queue = r.position("CREATE_QUEUE").expect("queues were created");
    assert!(r.position("RUNTIME_ENABLE").expect("RUNTIME_ENABLE") < first_queue);
    assert!(r.position("ACQUIRE_VM").expect("ACQUIRE_VM") < first_queue);
    assert_eq!(
        r.ops("DOORBELL_MMAP").len(),
        1,
        "one doorbell mapping per GPU"
    );
    for q in r.ops("CREATE_QUEUE") {
        assert_eq!(q.get("gpu"), u64::from(GPU0));
        assert_eq!(q.get("ring_size"), 65536);
        assert_eq!(q.get("pct"), 100);
        assert_eq!(q.get("ctx_size"), NODE_CWSR);
        assert_eq!(q.get("ctl"), NODE_CTL);
        assert_eq!(q.get("cwsr_bo"), CWSR_BO);
        assert_eq!(q.get("eop"), 0);
    }
    let kfd_prios: Vec<u64> = r
        .ops("CREATE_QUEUE")
        .iter()
        .map(|q| q.get("prio"))
        .collect();
    assert_eq!(kfd_prios, [11, 7, 0, 7, 7]);
    // the three user streams are destroyed; every packet was rung in and consumed
    let destroyed = r.ops("DESTROY_QUEUE");
    assert_eq!(destroyed.len(), 3);
    for d in destroyed {
        assert_eq!(d.get("consumed"), 1);
        assert_eq!(d.get("wptr"), 1);
        assert_eq!(d.get("doorbell"), 1, "doorbell carries the new write index");
    }
}

#[test]
fn cwsr_sizes_follow_the_formula_when_sysfs_lacks_them() {
    // MI300X SPX, the worked example of kfd-interface.md §6.2 (no cwsr_size/ctl_stack_size keys)
    let props = "simd_count 1216\narray_count 32\nsimd_arrays_per_engine 1\nsimd_per_cu 4\n\
                 gfx_target_version 90402\nnum_xcc 8\n";
    let r = stub_run_with("scenarios", &["clamp"], &[7], props, &[]);
    r.assert_ok();
    let q = r.ops("CREATE_QUEUE");
    assert_eq!(q.len(), 2);
    assert_eq!(q[0].get("ctx_size"), 23_203_840);
    assert_eq!(q[0].get("ctl"), 12_288);
    assert_eq!(q[0].get("cwsr_bo"), 186_019_840);
}

#[test]
fn pools_cap_queues_and_share_the_least_used() {
    let r = scenario("pools", &[("GPU_MAX_HW_QUEUES", "2")]);
    r.assert_ok();
    assert_eq!(r.ops("CREATE_QUEUE").len(), 2, "{:#?}", r.log);
    let mut users = BTreeMap::new();
    for l in r.stdout().lines() {
        let w: Vec<&str> = l.split_whitespace().collect();
        users.insert(w[3].to_string(), w[5].to_string());
    }
    let mut counts: Vec<String> = users.values().cloned().collect();
    counts.sort();
    assert_eq!(
        counts,
        ["2", "3"],
        "5 streams over 2 queues: {}",
        r.stdout()
    );
    // destroyed only when the last stream on each queue went
    assert_eq!(r.ops("DESTROY_QUEUE").len(), 2);
    let consumed: u64 = r
        .ops("DESTROY_QUEUE")
        .iter()
        .map(|d| d.get("consumed"))
        .sum();
    assert_eq!(consumed, 5);
}

#[test]
fn priorities_are_clamped_like_hip() {
    let r = scenario("clamp", &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(&s, "range "), ["1", "-1"]);
    assert_eq!(field(&s, "low hip "), ["1", "kfd", "0"]);
    assert_eq!(field(&s, "high hip "), ["-1", "kfd", "11"]);
    assert_eq!(field(&s, "high flags "), ["1"]);
}

#[test]
fn events_measure_the_emulated_kernel_time() {
    let r = scenario("elapsed", &[]);
    r.assert_ok();
    let s = r.stdout();
    for key in ["elapsed ", "ext_elapsed "] {
        let ms: f64 = field(&s, key)[0].parse().expect("a number");
        assert!(
            (15.0..200.0).contains(&ms),
            "{key}{ms} ms for a 20 ms kernel"
        );
    }
}

#[test]
fn strict_completion_mode_works() {
    let r = scenario("elapsed", &[("FAKEHIP_SYNC", "signal")]);
    r.assert_ok();
}

#[test]
fn waits_are_bounded() {
    let r = scenario(
        "timeout",
        &[
            ("KFDSTUB_STALL", "1"),
            ("FAKEHIP_TIMEOUT_MS", "300"),
            ("FAKEHIP_RING_SIZE", "4096"),
        ],
    );
    r.assert_ok();
    let s = r.stdout();
    let sync_ms: f64 = field(&s, "sync_ms ")[0].parse().expect("a number");
    assert!((250.0..5000.0).contains(&sync_ms), "{s}");
    // 64 packets fit a 4 KiB ring; the 65th waits for the timeout, then fails with 719
    assert_eq!(field(&s, "ring_full_after ")[..3], ["65", "code", "719"]);
}

#[test]
fn forked_child_reopens_kfd() {
    let r = scenario("fork", &[]);
    r.assert_ok();
    let opens = r.ops("OPEN_KFD");
    assert_eq!(opens.len(), 2, "{:#?}", r.log);
    assert_ne!(opens[0].pid, opens[1].pid);
    let creates = r.ops("CREATE_QUEUE");
    assert_eq!(creates.len(), 2);
    assert_ne!(creates[0].pid, creates[1].pid);
    assert!(
        r.position("EBADF").is_none(),
        "the child used the parent's kfd fd: {:#?}",
        r.log
    );
    // the child ran RUNTIME_ENABLE before its own queue too
    let child = opens[1].pid;
    let re = r
        .log
        .iter()
        .position(|l| l.pid == child && l.op == "RUNTIME_ENABLE")
        .expect("child RUNTIME_ENABLE");
    let cq = r
        .log
        .iter()
        .position(|l| l.pid == child && l.op == "CREATE_QUEUE")
        .expect("child queue");
    assert!(re < cq);
}

#[test]
fn cu_masked_streams_get_their_own_queue() {
    let r = scenario("cumask", &[]);
    r.assert_ok();
    let masks = r.ops("SET_CU_MASK");
    assert_eq!(masks.len(), 1);
    assert_eq!(masks[0].get("bits"), 64);
    let w = field(&r.stdout(), "cumask queue ");
    assert_ne!(
        w[0],
        w[3],
        "CU-masked stream shares a pool queue: {}",
        r.stdout()
    );
    assert_eq!(masks[0].get("qid").to_string(), w[0]);
}

#[test]
fn devices_map_to_gpu_nodes_in_order() {
    let r = scenario("multigpu", &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(&s, "devices "), ["2"]);
    assert_eq!(
        field(&s, "device "),
        [
            "1",
            "stream_device",
            "1",
            "gpu0",
            &GPU0.to_string(),
            "gpu1",
            &GPU1.to_string()
        ]
    );
    assert_eq!(r.ops("ACQUIRE_VM").len(), 2);
    assert_eq!(r.ops("DOORBELL_MMAP").len(), 2);
}

#[test]
fn graphs_and_capture_replay_kernels() {
    let r = scenario("graph", &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(&s, "after_graph write_index "), ["3"]);
    assert_eq!(field(&s, "capturing "), ["1"]);
    assert_eq!(
        field(&s, "after_capture write_index "),
        ["3"],
        "capture must not submit"
    );
    assert_eq!(
        field(&s, "after_replay write_index "),
        ["7", "read_index", "7"]
    );
}

#[test]
fn memory_operations_enqueue_barriers_and_create_the_null_queue_lazily() {
    let r = scenario("memops", &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(&s, "b0 "), ["7", "a0", "1", "a40", "7"]);
    assert_eq!(field(&s, "stream write_index "), ["2"]);
    assert_eq!(
        r.ops("CREATE_QUEUE").len(),
        3,
        "null, user and per-thread queues"
    );
}

#[test]
fn per_thread_streams_are_per_thread_and_released_at_exit() {
    let r = scenario("perthread", &[("GPU_MAX_HW_QUEUES", "8")]);
    r.assert_ok();
    let s = r.stdout();
    let t0 = field(&s, "thread 0 pts ");
    let t1 = field(&s, "thread 1 pts ");
    assert_ne!(t0[0], t1[0], "each thread has its own default stream: {s}");
    assert_eq!(t0[2], t1[2], "the legacy null stream is shared: {s}");
    assert_eq!(
        t0[2], t0[4],
        "NULL means the legacy stream outside _spt: {s}"
    );
    assert_eq!(field(&s, "main legacy "), [t0[2].clone()]);
    assert_eq!(r.ops("CREATE_QUEUE").len(), 3);
    let destroyed: BTreeSet<String> = r
        .ops("DESTROY_QUEUE")
        .iter()
        .map(|d| d.get("qid").to_string())
        .collect();
    assert_eq!(destroyed, BTreeSet::from([t0[0].clone(), t1[0].clone()]));
}

#[test]
fn device_reset_destroys_every_queue() {
    let r = scenario("reset", &[]);
    r.assert_ok();
    assert_eq!(r.ops("CREATE_QUEUE").len(), 5);
    assert_eq!(r.ops("DESTROY_QUEUE").len(), 4);
    let last_destroy = r
        .log
        .iter()
        .rposition(|l| l.op == "DESTROY_QUEUE")
        .expect("destroys");
    let last_create = r
        .log
        .iter()
        .rposition(|l| l.op == "CREATE_QUEUE")
        .expect("creates");
    assert!(last_destroy < last_create);
}

#[test]
fn misc_api_behaviour() {
    let r = scenario("misc", &[]);
    r.assert_ok();
    let s = r.stdout();
    assert_eq!(field(&s, "counter "), ["11"]);
    assert_eq!(field(&s, "popped "), ["1", "64", "16", "1"]);
}

#[test]
fn a_full_ring_waits_for_the_gpu() {
    let r = scenario("many", &[]);
    r.assert_ok();
    assert_eq!(
        field(&r.stdout(), "write_index "),
        ["3000", "read_index", "3000"]
    );
    assert_eq!(r.ops("DESTROY_QUEUE")[0].get("doorbell"), 3000);
}
