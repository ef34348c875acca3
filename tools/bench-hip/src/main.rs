//! `kfdq-bench-hip`: a helper of `kfdq bench`'s reaction chain on the node's own HIP runtime.
//! `kfdq bench --runtime hip` starts two of them under `kfdq run --class latency|batch` (the
//! shim, the agent's classes); each loads the committed spin kernel (`kernels/spin.hip`) for
//! the GPU's target with `hipModuleLoadData` and launches it with `hipModuleLaunchKernel` on a
//! stream, so the latency helper's launch is a launch edge the shim reports, and the batch
//! helper's work is what the agent preempts. The protocol on stdin/stdout is the raw helpers'
//! (`kfdq::reaction`); the batch helper reads its completions from one event per packet.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc;

use clap::Parser;
use kfdq::reaction::{self, BATCH_PACKETS, LATENCY_PACKETS, PACKET_NS, WAVES};

use kfdq_bench_hip::hip::{Event, Function, Hip, HipError, Stream};
use kfdq_bench_hip::{KERNEL, WAVE_SIZE, spin_code_object};

/// A helper of `kfdq bench`'s reaction chain on the node's HIP runtime (started by the bench,
/// not by hand: it reads the bench's requests on stdin, docs/hardware.md).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// `latency` (launches one request of 100 packets when told) or `batch` (runs a stream of
    /// 400 packets and reports when it was preempted).
    #[arg(long, value_parser = ["latency", "batch"])]
    role: String,
    /// The GPU's target: gfx942 or gfx90a (the spin code objects kfdq ships).
    #[arg(long)]
    target: String,
    /// The HIP runtime to load (libamdhip64.so.N; `kfdq bench` passes what `kfdq doctor` finds).
    #[arg(long, value_name = "PATH")]
    hip_runtime: PathBuf,
    /// The HIP device ordinal of the partition measured.
    #[arg(long, default_value_t = 0)]
    device: u32,
}

/// What stops the helper.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
enum HelperError {
    #[error(transparent)]
    Hip(#[from] HipError),
    #[error(
        "no spin code object for target {0:?}: kfdq ships gfx942 and gfx90a (scripts/kernels.sh)"
    )]
    Target(String),
    #[error("writing to the bench: {0}")]
    Io(#[from] std::io::Error),
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(&args) {
        // The bench shows this line (it reads the helper's answer and stderr).
        println!("error: {e}");
        eprintln!("kfdq-bench-hip: {e}");
        std::process::exit(1);
    }
}

fn say(line: &str) -> Result<(), HelperError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Iterations of the spin kernel for one packet, from the bench's calibration (ns per
/// iteration; 0 when it has none: one iteration per ns).
fn iterations(words: &[&str]) -> u64 {
    let per = words
        .get(1)
        .and_then(|p| p.parse::<f64>().ok())
        .filter(|p| *p > 0.0)
        .unwrap_or(1.0);
    ((PACKET_NS as f64 / per).round() as u64).max(1)
}

fn run(args: &Args) -> Result<(), HelperError> {
    let image =
        spin_code_object(&args.target).ok_or_else(|| HelperError::Target(args.target.clone()))?;
    let hip = Hip::load(&args.hip_runtime)?;
    hip.set_device(args.device)?;
    let f = hip.load_function(image, KERNEL)?;
    let stream = hip.stream()?;
    // Requests come on a thread of their own: the batch helper watches its events meanwhile.
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    say("ready")?;
    while let Ok(line) = rx.recv() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match (args.role.as_str(), words.first().copied()) {
            ("latency", Some("go")) => {
                let n = iterations(&words);
                let launch = reaction::mono_ns();
                for _ in 0..LATENCY_PACKETS {
                    hip.launch(f, stream, WAVES, WAVE_SIZE, n)?;
                }
                hip.synchronize(stream)?;
                say(&format!("done {launch} {}", reaction::mono_ns()))?;
            }
            ("batch", Some("stream")) => {
                let changes = stream_and_watch(&hip, f, stream, iterations(&words))?;
                let Ok(request) = rx.recv() else { break };
                match reaction::parse_report(&request) {
                    Some((launch, end)) => say(&reaction::answer(&changes, launch, end))?,
                    None => say("error: report LAUNCH_NS END_NS expected")?,
                }
            }
            (_, Some("quit")) => break,
            _ => say(&format!("error: unknown request {line:?}"))?,
        }
    }
    Ok(())
}

/// Launches the batch stream (an event after every packet) on a thread of its own — with the
/// batch class at level 1 its launches wait in the shim (a hold, the class's `window`) — and
/// watches it here: says `running` at its first completion and returns the time
/// (CLOCK_MONOTONIC) each completion was seen.
fn stream_and_watch(
    hip: &Hip,
    f: Function,
    stream: Stream,
    n: u64,
) -> Result<Vec<u64>, HelperError> {
    let (tx, rx) = mpsc::channel::<Event>();
    std::thread::scope(|scope| {
        let launcher = scope.spawn(move || -> Result<(), HipError> {
            for _ in 0..BATCH_PACKETS {
                hip.launch(f, stream, WAVES, WAVE_SIZE, n)?;
                if tx.send(hip.record(stream)?).is_err() {
                    break;
                }
            }
            Ok(())
        });
        let mut changes = Vec::with_capacity(BATCH_PACKETS as usize);
        // Events come in launch order; the channel closes when the launcher ends.
        while let Ok(e) = rx.recv() {
            // Poll (the resolution of the times), yielding on a busy host; the stream ends,
            // so every event completes.
            while !hip.done(&e)? {
                std::thread::yield_now();
            }
            changes.push(reaction::mono_ns());
            hip.destroy_event(e);
            if changes.len() == 1 {
                say("running")?;
            }
        }
        launcher
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))?;
        Ok(changes)
    })
}
