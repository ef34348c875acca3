//! `kfdq-selftest` — exercises kfdq's safe KFD layer end to end and fails if it misbehaves:
//! queues at several priorities, a deactivation that visibly stops one queue (no packet
//! consumed while inactive), reactivation and drain. Works on kfd-emu and on hardware. Not
//! `kfdq demo` (the latency client next to a batch job under the agent).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use kfdq::kfd::{DispatchPacket, GpuId, Kfd, Priority, Queue, QueueSpec, Root};

/// Exercise amdkfd queues through kfdq's safe layer.
#[derive(Parser)]
#[command(name = "kfdq-selftest", version, max_term_width = 100)]
struct Args {
    /// Root prefix for /dev/kfd and sysfs (a kfd-emu mount point).
    #[arg(long, global = true, env = "KFDQ_ROOT", default_value = "/")]
    root: PathBuf,
    /// gpu_id to use (decimal or 0x-hex); default: the first GPU node.
    #[arg(long, global = true, value_parser = parse_gpu)]
    gpu: Option<u32>,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create queues at priorities 0, 7, 11 and 15, run packets, deactivate and reactivate one.
    Queues {
        /// Keep the queues alive this long at the end (for `kfdq ps` from another shell).
        #[arg(long, default_value_t = 0.0)]
        hold_secs: f64,
        /// Create this file once the queues exist and are held.
        #[arg(long)]
        ready_file: Option<PathBuf>,
    },
}

fn parse_gpu(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a gpu_id (decimal or 0x-hex; see `kfdq topology`)"))
}

fn pick_gpu(kfd: &Kfd, want: Option<u32>) -> Result<GpuId, String> {
    match want {
        Some(g) => kfd
            .gpu(GpuId(g))
            .map(|_| GpuId(g))
            .map_err(|e| e.to_string()),
        None => kfd
            .topology()
            .gpus()
            .find_map(|n| n.gpu_id)
            .ok_or_else(|| "the topology has no GPU node".to_string()),
    }
}

fn submit(q: &mut Queue<'_>, n: u32, us: u64) -> Result<(), String> {
    for _ in 0..n {
        q.submit(&DispatchPacket::new(0xdead_0000, 64, 64).with_duration_ns(us * 1000))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn queues(
    kfd: &Kfd,
    gpu: GpuId,
    hold_secs: f64,
    ready_file: Option<PathBuf>,
) -> Result<(), String> {
    let node = kfd.gpu(gpu).map_err(|e| e.to_string())?;
    println!(
        "kfd {}.{}, gpu {gpu}: {} CUs, {} XCCs, {} resident queue slots",
        kfd.version().major,
        kfd.version().minor,
        node.cu_count(),
        node.num_xcc(),
        node.resident_queue_limit()
    );
    let mut qs = Vec::new();
    for p in [0, 7, 11, 15] {
        let prio = Priority::new(p).map_err(|e| e.to_string())?;
        let q = kfd
            .create_queue(QueueSpec::aql(gpu).priority(prio))
            .map_err(|e| format!("creating a priority-{p} queue: {e}"))?;
        println!(
            "  created {} priority {p:>2} ({})",
            q.id(),
            prio.pipe_priority()
        );
        qs.push(q);
    }
    let per_queue = 20;
    let packet_us = 500;
    qs[0].deactivate().map_err(|e| e.to_string())?;
    println!(
        "  deactivated {} (priority 0): its waves are saved and it leaves the runlist",
        qs[0].id()
    );
    for q in &mut qs {
        submit(q, per_queue, packet_us)?;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while qs[1..]
        .iter()
        .any(|q| q.read_index().unwrap_or(0) < u64::from(per_queue))
    {
        if Instant::now() > deadline {
            return Err("active queues did not drain within 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    for q in &qs {
        println!(
            "  {} priority {:>2}: {}/{} packets done{}",
            q.id(),
            q.priority(),
            q.read_index().unwrap_or(0),
            q.write_index().unwrap_or(0),
            if q.is_active() {
                ""
            } else {
                "  (inactive: no progress)"
            }
        );
    }
    if qs[0].read_index().unwrap_or(0) != 0 {
        return Err(format!("{} consumed packets while inactive", qs[0].id()));
    }
    qs[0].activate().map_err(|e| e.to_string())?;
    println!("  reactivated {}", qs[0].id());
    qs[0]
        .wait_idle(Duration::from_secs(30))
        .map_err(|e| e.to_string())?;
    println!(
        "  {} drained: {}/{} packets done",
        qs[0].id(),
        qs[0].read_index().unwrap_or(0),
        per_queue
    );
    if let Some(f) = ready_file {
        std::fs::write(&f, format!("{}\n", std::process::id()))
            .map_err(|e| format!("{}: {e}", f.display()))?;
    }
    if hold_secs > 0.0 {
        println!(
            "  holding {} queues for {hold_secs} s (pid {})",
            qs.len(),
            std::process::id()
        );
        std::thread::sleep(Duration::from_secs_f64(hold_secs));
    }
    for q in qs {
        q.destroy().map_err(|e| e.to_string())?;
    }
    println!("  destroyed all queues");
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    let root = Root::new(&args.root);
    let run = || -> Result<(), String> {
        let kfd = Kfd::open(&root)
            .map_err(|e| format!("opening {}: {e}", root.kfd_device().display()))?;
        let gpu = pick_gpu(&kfd, args.gpu)?;
        match args.command {
            Cmd::Queues {
                hold_secs,
                ready_file,
            } => queues(&kfd, gpu, hold_secs, ready_file),
        }
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kfdq-selftest: {e}");
            ExitCode::FAILURE
        }
    }
}
