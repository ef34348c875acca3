// The command-line definitions of `kfdq`: clap types and nothing else, so that the root
// package's build.rs can `include!` this file to generate the man page and the shell completions
// (they cannot drift from `--help`). Only `clap` and `std` may be used here.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// kfdq — GPU queue priorities and preemption for AMD Instinct nodes.
///
/// Reads and controls amdkfd user-mode queues through the upstream /dev/kfd interface. Every
/// device and sysfs path is resolved under --root (default /), so the same commands work on a
/// kfd-emu mount.
#[derive(Debug, Parser)]
#[command(name = "kfdq", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// Root prefix for /dev/kfd, /dev/dri and /sys/class/kfd (a kfd-emu mount point in tests).
    #[arg(
        long,
        global = true,
        env = "KFDQ_ROOT",
        value_name = "DIR",
        default_value = "/"
    )]
    pub root: PathBuf,

    /// Print JSON instead of tables (stable field names, for scripts).
    #[arg(long, global = true)]
    pub json: bool,

    /// The agent's socket (kfdqd), for every command: status and control, the agent's
    /// columns of ps, the class `run` asks for (and the socket its command's shim connects
    /// to), the socket doctor checks. `--socket PATH` is the same option. Default:
    /// $KFDQ_SOCKET, else /run/kfdq/kfdq.sock. Status and control go to the agent's admin
    /// socket instead (`--admin PATH`, $KFDQ_ADMIN_SOCKET, or /run/kfdqd/admin.sock when it
    /// lets this user in and no --agent names another agent).
    #[arg(
        long,
        visible_alias = "socket",
        global = true,
        value_name = "PATH",
        env = "KFDQ_SOCKET"
    )]
    pub agent: Option<PathBuf>,

    /// The agent's admin socket (`[agent] admin_socket`: root only, never mounted into pods)
    /// for status and control as a node admin, from inside the agent's own pod for example.
    /// Default: $KFDQ_ADMIN_SOCKET, else /run/kfdqd/admin.sock when it lets this user in and
    /// no --agent / $KFDQ_SOCKET names another agent. Hidden from the synopses (it is on
    /// kfdq(1) through --agent's text and in docs/operations.md).
    #[arg(
        long = "admin",
        global = true,
        hide = true,
        value_name = "PATH",
        env = "KFDQ_ADMIN_SOCKET"
    )]
    pub admin_socket: Option<PathBuf>,

    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// kfdq subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// GPUs and partitions: gfx target, CUs, XCCs, hardware queue slots, CWSR size per queue.
    ///
    /// A partition keeps `resident` active queues on the hardware (num_cp_queues; each queue
    /// of an N-XCC partition takes one HQD per XCC). Beyond that the scheduler time-slices the
    /// runlist and queue priority stops mattering.
    Topology,
    /// Processes with KFD queues: per queue its GPU, type, ring size, priority and state.
    ///
    /// Read from /sys/class/kfd/kfd/proc, which is world-readable, joined with what the shim
    /// publishes; when the agent (kfdqd) answers, its class, state and busy columns are added.
    Ps,
    /// The agent's view: partitions, classes, who is preempted at which level and why,
    /// device-wide preempts per second, decision latency.
    ///
    /// Without a running agent it says so and shows `kfdq ps` instead.
    Status,
    /// `kfdq status`, redrawn in place (with --json: one JSON object per line).
    ///
    /// An agent that goes away after the first frame (a restart) is waited for: one line says
    /// so (--json: `{"type": "error", ...}`), and the frames go on once it answers again.
    Watch {
        /// Seconds between frames.
        #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
        interval: f64,
        /// Stop after this many frames (default: until Ctrl-C).
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Set the KFD priority (0..=15) of every queue of a process (level 0).
    ///
    /// What a priority buys depends on the kernel (see `kfdq status`): since Linux 7.0 only the
    /// pipe priority counts (0-6 low, 7-10 medium, 11-15 high). Users may set their own
    /// processes up to their class's max_priority; root and the admin group any.
    SetPriority {
        /// The process.
        pid: u32,
        /// 0..=15.
        priority: u32,
    },
    /// Preempt a process by hand until `kfdq resume` (overrides the policy).
    ///
    /// Levels: hold (1: the shim holds its launches; running work drains), deactivate (2: its
    /// queues leave the runlist; running waves are context-saved), suspend (3: the debugger
    /// API suspends its queues). Users may preempt their own processes.
    Suspend {
        /// The process.
        pid: u32,
        /// hold | deactivate | suspend (or 1 | 2 | 3).
        #[arg(long, default_value = "deactivate", value_enum)]
        level: LevelArg,
    },
    /// Undo `kfdq suspend`: the policy decides for the process again.
    Resume {
        /// The process.
        pid: u32,
    },
    /// Move a process to another class until it exits.
    ///
    /// Any class of the agent's configuration (`kfdq status` lists them), not only the
    /// built-in names. Users may move their own processes down, or into classes anyone may
    /// ask for; root and the admin group anywhere.
    Class {
        /// The process.
        pid: u32,
        /// A class of the agent's configuration (`kfdq status` lists them).
        class: String,
    },
    /// The main job: a latency client next to a batch job, uncontrolled and under each
    /// preemption level, in one table.
    ///
    /// Without an AMD GPU it mounts the built-in emulator (kfd-emu, mi308x preset) and runs the
    /// workloads on fakehip; every phase runs real processes under the shim with a real kfdqd.
    /// Phases: HP alone, LP alone, HP+LP uncontrolled, priorities only, levels 1, 2 and 3, and
    /// level 2 with the latency client hinting its requests (level2-hinted).
    /// Prints HP P50/P99/max relative to alone, LP throughput relative to alone, preemption
    /// latency and device-wide preempts per second (--json: the same numbers).
    Demo(DemoArgs),
    /// Run a command under the launch shim (LD_PRELOAD libkfdq_shim.so) with a class or priority.
    ///
    /// The shim maps every HIP stream, the null stream included, to a managed KFD queue and
    /// connects to the agent (--agent/--socket, $KFDQ_SOCKET, or /run/kfdq/kfdq.sock when an
    /// agent listens there). Before it runs the command, kfdq asks the agent which class the
    /// process will get and prints it with its priority and level on stderr; a class the
    /// agent's configuration does not have, or one this user may not ask for, fails with the
    /// rule and the fix, and nothing runs. Without an agent it warns and runs the command with
    /// the shim's built-in bands only: latency (KFD 11..=15), normal (7..=10), batch (0..=6),
    /// HIP stream priorities inside the band.
    /// With an agent, the runtime's hardware queues per priority pool (GPU_MAX_HW_QUEUES) are
    /// the agent's `hw_queues` for the class; otherwise the shim's default for the class
    /// (latency 8, normal and batch 4, ROCclr's own 4 without a class). A GPU_MAX_HW_QUEUES
    /// already in the environment always wins.
    /// Example: `kfdq run --class latency -- ./inference-server`.
    Run {
        /// Class of the process: any class of the agent's configuration (`kfdq status` lists
        /// them); without an agent, latency, normal or batch.
        #[arg(long, value_name = "CLASS")]
        class: Option<String>,
        /// Force this KFD priority (0..=15) on every queue instead of a class band.
        #[arg(long, value_name = "0..=15")]
        priority: Option<u32>,
        /// Shim library (default: $KFDQ_SHIM, next to kfdq, ../lib/kfdq from kfdq, /usr/local/lib/kfdq,
        /// /usr/lib/kfdq).
        #[arg(long, value_name = "PATH")]
        shim: Option<PathBuf>,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Measure what preemption costs on this node, per GPU partition (root; docs/hardware.md).
    ///
    /// Level 2 (UPDATE_QUEUE to inactive and back on an idle and a busy queue), level 3
    /// (DBG_TRAP SUSPEND/RESUME_QUEUES on a child process with a busy queue), the stall a
    /// bystander's running dispatch suffers per device-wide preempt, the CWSR save and restore
    /// cost per wave (a fit over two busy-queue sizes, with its error) and the arbitration
    /// between priority bands (equal, pipe, strict or none of these), the victim's side (when a
    /// preempted queue's work stops and resumes completing, as its process sees it) and, when
    /// an agent answers at --agent / KFDQ_SOCKET, the reaction chain through it (a latency
    /// launch under `kfdq run` -> the batch helper stopped). Call times are on the host's
    /// clock, stalls on the GPU's (the packet processor's dispatch timestamps). Each
    /// measurement is repeated (--repeat) and shown as p50, p99 and spread; what the node
    /// cannot give is named with its fix. Refuses partitions other processes use (--force) and
    /// GPUs the partition model does not describe. --write FILE keeps every partition's result
    /// as the model's parameters. Example: `kfdq bench --write node.toml`.
    Bench(BenchArgs),
    /// Inspect this node: what kfdq can do on each GPU partition, and why not.
    ///
    /// Checks the KFD interface version and the debugger API, amdgpu's sched_policy and
    /// cwsr_enable, whether the kernel programs per-queue priority (Linux 7.0 stopped), Yama's
    /// ptrace_scope (the tracer path), the HIP runtime and whether the shim covers its symbol
    /// versions, the resident queue slots, and the permissions of /dev/kfd and the agent's
    /// socket. Every finding that limits kfdq comes with its fix. Exits 1 when a check FAILs.
    Doctor {
        /// The HIP runtime to check (default: libamdhip64.so.7/6/5 in $ROCM_PATH/lib,
        /// /opt/rocm/lib and the system library directories).
        #[arg(long, value_name = "PATH")]
        hip_runtime: Option<PathBuf>,
        /// The shim library to check (default: as `kfdq run` finds it).
        #[arg(long, value_name = "PATH")]
        shim: Option<PathBuf>,
    },
    /// Write one archive to send with a question or a result: versions, doctor, topology, and
    /// optionally the bench, the demo's output and the agent's configuration, nothing secret.
    ///
    /// What: a .tar.gz with versions.json (kernel, amdgpu and its firmware where sysfs or
    /// debugfs shows them, the HIP runtime found as `kfdq doctor` finds it, ROCm's version file,
    /// kfdq), `kfdq --json doctor`, `kfdq --json topology`, with --bench `kfdq --json bench` and
    /// its calibration, with --demo-json the demo's output, and the agent's configuration
    /// (--agent-config, default /etc/kfdq/kfdq.toml) without comments and with secret-named keys
    /// redacted; MANIFEST.txt lists it all, and what was left out with why. The same list is
    /// printed. Why: the project (or a vendor) can read what this node did and why without a
    /// login to it. Nothing secret: no environment is archived, any value of this process's
    /// environment found in a part is replaced by its name (<$NAME>), and allocation tokens
    /// (KFDQ_ALLOCATION, the allocations file) are never read and any token-shaped string is
    /// replaced. How to send: attach the file to an issue of the project (docs/hardware.md,
    /// "Sharing results") with what else ran on the node. Example: `kfdq --json demo >
    /// demo.json; sudo kfdq report --bench --demo-json demo.json`.
    Report(ReportArgs),
}

/// `kfdq report`'s options.
#[derive(Debug, Clone, Args)]
pub struct ReportArgs {
    /// The archive to write (default: kfdq-report-<UNIX_TIME>.tar.gz here). An existing file
    /// is refused, before anything runs.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also run `kfdq bench --write` and add its JSON and calibration: minutes, root, an idle
    /// node (it preempts every partition hundreds of times); its progress is shown.
    #[arg(long, overrides_with = "no_bench")]
    pub bench: bool,
    /// Do not run the bench (the default; the last of --bench and --no-bench wins).
    #[arg(long, overrides_with = "bench")]
    pub no_bench: bool,
    /// The demo's output to add: the file `kfdq --json demo > FILE` wrote (or the table of
    /// `kfdq demo > FILE`, kept as text).
    #[arg(long, value_name = "FILE")]
    pub demo_json: Option<PathBuf>,
    /// kfdqd's configuration file (default /etc/kfdq/kfdq.toml; not there: left out, said so).
    #[arg(long, value_name = "FILE")]
    pub agent_config: Option<PathBuf>,
}

/// `kfdq bench`'s options.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// The partition to measure (gpu_id, decimal or 0x-hex; default: every GPU partition).
    #[arg(long, value_name = "GPU_ID")]
    pub gpu: Option<String>,
    /// Samples per measurement (the table shows p50, p99 and spread).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub repeat: u32,
    /// Work-group time of the bystander dispatch that spans each call, ms: it must outlast the
    /// call and its stall (the arbitration's gate takes four windows, its rounds a twentieth of one).
    #[arg(long, default_value_t = 50, value_name = "MS")]
    pub window_ms: u64,
    /// Measure even when other processes have queues on the partition (they are preempted
    /// with every sample, and their work skews the figures).
    #[arg(long)]
    pub force: bool,
    /// Write the calibration of every measured partition here (TOML, docs/hardware.md), for
    /// `kfd-emu --calibration`, `preempt-lab sim --calibration` and kfdqd's `calibration` key.
    #[arg(long, value_name = "FILE")]
    pub write: Option<PathBuf>,
    /// The reaction chain's helpers: `hip` (kfdq-bench-hip on the node's HIP runtime: the
    /// latency launch is a launch edge the shim reports) or `raw` (kfdq's own KFD queues: the
    /// shim sees them only in its activity samples). Default: hip when kfdq-bench-hip is beside
    /// kfdq and a HIP runtime is found, else raw (with a line saying why).
    #[arg(long, value_enum, value_name = "RUNTIME")]
    pub runtime: Option<BenchRuntime>,
    /// Measure only the reaction chain through the agent (after calibrating the spin kernel).
    #[arg(long)]
    pub reaction_only: bool,
    /// Internal: the level-3 measurement's child process (reads requests on stdin).
    #[arg(long, hide = true)]
    pub worker: bool,
    /// Internal: a helper of the reaction chain (`latency` or `batch`), run under the shim.
    #[arg(long, hide = true, value_name = "ROLE")]
    pub helper: Option<String>,
}

/// The runtime of `kfdq bench`'s reaction-chain helpers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchRuntime {
    /// The node's HIP runtime (kfdq-bench-hip).
    Hip,
    /// kfdq's raw KFD queue layer (`kfdq bench --helper`).
    Raw,
}

/// `kfdq demo`'s options.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Requests of the latency client per phase (200: the nearest-rank P99 is then the 198th
    /// request, not the slowest; with 100 or fewer it is the maximum).
    #[arg(long, default_value_t = 200, value_name = "N")]
    pub requests: u32,
    /// Latency requests per second (the field's ResNet-18 service: 10-20/s).
    #[arg(long, default_value_t = 15.0, value_name = "PER_S")]
    pub rate: f64,
    /// Phases to run, comma-separated (default: all but `level2-traced`, in this order).
    #[arg(long, value_delimiter = ',', value_enum)]
    pub phases: Vec<Phase>,
    /// Mount the emulator even if --root has a /dev/kfd.
    #[arg(long)]
    pub emulator: bool,
    /// Emulator preset (mi308x, mi300x-spx, mi300x-cpx).
    #[arg(long, default_value = "mi308x")]
    pub preset: String,
    /// Directory holding the workloads kfdq-latency and kfdq-flood (default: next to kfdq;
    /// scripts/run.sh builds them there against fakehip).
    #[arg(long, value_name = "DIR")]
    pub workloads: Option<PathBuf>,
    /// Keep every process's stderr here (default: a temporary directory, removed when the demo
    /// succeeds and kept, with its path printed, when it fails).
    #[arg(long, value_name = "DIR")]
    pub log_dir: Option<PathBuf>,
    /// The latency-critical (HP) workload as one command line, run instead of kfdq-latency
    /// (split into words without a shell; '...' and "..." quote). It prints `ready`, waits for
    /// the file $KFDQ_DEMO_GO, then issues $KFDQ_DEMO_REQUESTS requests at $KFDQ_DEMO_RATE per
    /// second, printing `request <i> <latency_us>` for each (docs/demo.md, "Your own workloads").
    #[arg(long, value_name = "\"CMD ARGS\"")]
    pub hp_command: Option<String>,
    /// The batch (LP) workload as one command line, run instead of kfdq-flood. It prints
    /// `ready` once its work is queued, `done <t_us>` (CLOCK_MONOTONIC) per unit of work
    /// completed, and exits once the file $KFDQ_DEMO_STOP exists.
    #[arg(long, value_name = "\"CMD ARGS\"")]
    pub lp_command: Option<String>,
    /// Run the phases this many times (each repetition against its own alone phases); the
    /// table shows medians and the P99 ratio's spread, --json every repetition.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub repeat: u32,
    /// The HIP runtime the built-in workloads run on: hip (the real one: kfdq-hipwork loads
    /// libamdhip64.so.7 or .so.6; on the emulator the ROCm of a Debian sid root, through
    /// kfd-emu run) or fakehip (kfdq's stand-in, emulator only, fast). Default: hip on a GPU
    /// node, fakehip on the emulator; scripts/run.sh passes hip.
    #[arg(long, value_enum)]
    pub runtime: Option<DemoRuntime>,
    /// With --runtime hip on the emulator: the root holding the HIP runtime (default
    /// $KFDQ_CACHE/sid-root, built by scripts/sid-root.sh; ROCm 7.2: sid-rocm72-root).
    #[arg(long, value_name = "DIR")]
    pub hip_root: Option<PathBuf>,
    /// The latency client's request: `synthetic` (4 dispatches of 80 work-groups x 2 ms) or
    /// `resnet18` (the 145 kernels of an H100 ResNet-18 batch-1 inference, scaled to the
    /// emulator's speed); given to your workloads as $KFDQ_DEMO_SHAPE (docs/demo.md).
    #[arg(long, value_enum, default_value_t = RequestShape::Synthetic)]
    pub request_shape: RequestShape,
    /// In level2-hinted: µs of host work between a request's kfdq_request_begin() and its
    /// first launch ($KFDQ_DEMO_HINT_LEAD_US). Default: the field's 500 µs on the request's
    /// time scale (resnet18: x10 = 5000; synthetic: x3 = 1500; docs/demo.md).
    #[arg(long, value_name = "US")]
    pub hint_lead_us: Option<u32>,
}

/// The demo's HIP runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DemoRuntime {
    /// The real HIP runtime (kfdq-hipwork).
    Hip,
    /// kfdq's stand-in (kfdq-latency, kfdq-flood).
    Fakehip,
}

/// The demo latency client's request (`kfdq demo --request-shape`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RequestShape {
    /// A few long dispatches of large work-groups (8 ms alone on the emulator).
    Synthetic,
    /// Many short kernels: ResNet-18 batch 1 as traced on an H100, scaled to the emulator.
    Resnet18,
}

/// One phase of the demo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Phase {
    /// The latency client alone.
    Alone,
    /// The batch job alone.
    LpAlone,
    /// Both, no agent, no classes: the runtime's priorities.
    Uncontrolled,
    /// Both under the agent with class priorities and no preemption (level 0).
    Priority,
    /// Level 1: the batch job's launches held while latency work is busy.
    Level1,
    /// Level 2 by the agent's commands: the batch job's queues deactivated when the agent hears
    /// the busy edge (busy edges, the cost-aware release rule, `direct_edges = false`).
    Level2,
    /// Level 2 as `level2` (the agent's commands), and the latency client hints each request
    /// ($KFDQ_DEMO_HINT=1: kfdq_request_begin() a lead before its first launch, the host work
    /// an inference server does, kfdq_request_end() after its last).
    Level2Hinted,
    /// Level 2 with the batch job held off throughout (`kfdq suspend --level 2` before the
    /// latency client starts, resumed after it): the latency client with the GPU to itself
    /// beside the batch job's process, the floor the host sets for every controlled row.
    Level2Held,
    /// Level 2 as the agent runs by default (direct edges): the batch job deactivates itself on
    /// the latency launch's edge on the agent's board, without the agent's hop.
    Level2Direct,
    /// Level 2 with the latency client not under the shim (run only when named): the agent's
    /// tracer samples its queues (`control = "tracer"` on its class), so its busy edge comes at
    /// the next activity sample (2 ms) and its idle edge within 250 µs; the batch job under the
    /// shim. Needs the right to ptrace the client (root, or Yama's ptrace_scope 0).
    Level2Traced,
    /// Level 3 by the agent's commands: the batch job's queues suspended (debugger API; busy
    /// edges, the release rule, `direct_edges = false`).
    Level3,
    /// Level 3 as the agent runs by default (direct edges): the batch job suspends itself on
    /// the latency launch's board edge.
    Level3Direct,
}

/// A preemption level as `kfdq suspend --level` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LevelArg {
    /// Level 1: the shim holds the process's launches; running work drains.
    #[value(alias = "1")]
    Hold,
    /// Level 2: the process's queues leave the runlist; running waves are context-saved.
    #[value(alias = "2")]
    Deactivate,
    /// Level 3: the debugger API suspends the process's queues.
    #[value(alias = "3")]
    Suspend,
}
