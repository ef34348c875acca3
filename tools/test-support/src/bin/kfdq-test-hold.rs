//! `kfdq-test-hold` — a separate process that owns KFD queues, for tests: it creates them
//! through kfdq's safe layer, optionally submits packets, prints
//! `{"pid":..,"gpu_id":..,"queues":[..]}` on one stdout line and keeps everything until stdin
//! says `exit` or closes. Tests point kfdq, kfdqd or a debugger at it.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use kfdq::kfd::{DispatchPacket, GpuId, Kfd, Priority, QueueSpec, Root};

/// Create KFD queues and keep them until stdin closes (test support).
#[derive(Parser)]
#[command(name = "kfdq-test-hold", max_term_width = 100)]
struct Args {
    /// Root prefix for /dev/kfd and sysfs (a kfd-emu mount point).
    #[arg(long, env = "KFDQ_ROOT", default_value = "/")]
    root: PathBuf,
    /// Number of queues.
    #[arg(long, default_value_t = 1)]
    queues: u32,
    /// KFD priority of the queues (0..=15).
    #[arg(long, default_value_t = 7)]
    priority: u32,
    /// Call RUNTIME_ENABLE first (as ROCr does), so a debugger can suspend the queues.
    #[arg(long)]
    runtime_enable: bool,
    /// Packets to submit to each queue.
    #[arg(long, default_value_t = 0)]
    packets: u32,
    /// Modelled duration of each packet in microseconds (kfd-emu).
    #[arg(long, default_value_t = 1000)]
    packet_us: u64,
}

fn hold(args: &Args) -> Result<(), String> {
    let root = Root::new(&args.root);
    let kfd =
        Kfd::open(&root).map_err(|e| format!("opening {}: {e}", root.kfd_device().display()))?;
    let gpu: GpuId = kfd
        .topology()
        .gpus()
        .find_map(|n| n.gpu_id)
        .ok_or("the topology has no GPU node")?;
    if args.runtime_enable {
        kfd.runtime_enable(0, false).map_err(|e| e.to_string())?;
    }
    let prio = Priority::new(args.priority).map_err(|e| e.to_string())?;
    let mut qs = Vec::new();
    for _ in 0..args.queues {
        qs.push(
            kfd.create_queue(QueueSpec::aql(gpu).priority(prio))
                .map_err(|e| e.to_string())?,
        );
    }
    for q in &mut qs {
        for _ in 0..args.packets {
            q.submit(
                &DispatchPacket::new(0xdead_0000, 64, 64).with_duration_ns(args.packet_us * 1000),
            )
            .map_err(|e| e.to_string())?;
        }
    }
    let ids: Vec<u32> = qs.iter().map(|q| q.id().0).collect();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}",
        serde_json::json!({ "pid": std::process::id(), "gpu_id": gpu.0, "queues": ids })
    )
    .map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        match line {
            Ok(l) if l.trim() == "exit" => break,
            Ok(_) => {}
            Err(_) => break,
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match hold(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kfdq-test-hold: {e}");
            ExitCode::FAILURE
        }
    }
}
