//! `kfdq bench`: what preemption costs on this node, per GPU partition (docs/hardware.md).
//!
//! | concern | file |
//! |---|---|
//! | refusals, partitions, output | `mod.rs` |
//! | the work-group sizes and the bystander's baseline | `plan.rs` |
//! | busy queues of a known shape, GPU timestamps | `probe.rs` |
//! | level 2 (UPDATE_QUEUE) | `level2.rs` |
//! | the victim's side: when its work stops and resumes completing | `victim.rs` |
//! | level 3 (DBG_TRAP on a child) and the child | `level3.rs` |
//! | arbitration between priority bands | `arbitration.rs` |
//! | the reaction chain through a running agent, and its raw helpers | `reaction.rs` |
//! | the helpers' runtime: HIP (`kfdq-bench-hip`) or raw | `runtime.rs` |
//! | p50/p99/spread, the CWSR fit | `stats.rs` |
//! | samples, table and JSON | `samples.rs`, `report.rs` |
//! | node identity, the calibration file | `identity.rs` |
//!
//! The busy queues are kfdq's raw queue layer (`kfdq::kfd`), not a HIP program under the shim:
//! the bench needs work of an exact shape (waves, work-group time) and the packet processor's
//! timestamps of one dispatch across one ioctl, which the raw layer gives directly. The
//! reaction chain runs on the node's HIP runtime under the shim when it can (`runtime.rs`).

mod arbitration;
mod child;
mod identity;
mod level2;
mod level3;
mod plan;
mod probe;
mod reaction;
mod report;
mod runtime;
mod samples;
mod spin;
mod stats;
mod victim;

use std::path::Path;

use kfdq::kfd::{GpuId, Kfd, Node, Root, procfs};

use crate::args::BenchArgs;
use crate::{CliError, kfd_error, print_json};
use plan::Plan;
use probe::{Lane, WorkSource};
use report::{PartitionReport, Unavailable};
use samples::Samples;

/// Results of the bench's steps.
pub type R<T> = Result<T, CliError>;

/// `kfdq bench`.
pub fn run(root: &Root, socket: &Path, args: BenchArgs, json: bool) -> R<()> {
    let want = args.gpu.as_deref().map(parse_gpu).transpose()?;
    if args.worker {
        let gpu = want.ok_or_else(|| CliError::Usage("--worker needs --gpu".into()))?;
        return level3::worker(root, gpu);
    }
    if let Some(role) = args.helper.as_deref() {
        let gpu = want.ok_or_else(|| CliError::Usage("--helper needs --gpu".into()))?;
        if role != "latency" && role != "batch" {
            return Err(CliError::Usage(format!(
                "--helper {role:?}: latency or batch"
            )));
        }
        return reaction::helper(root, gpu, role);
    }
    if args.repeat == 0 || args.repeat > 1000 {
        return Err(CliError::Usage(format!(
            "--repeat {} is out of range 1..=1000 (samples per measurement)",
            args.repeat
        )));
    }
    // Where the calibration goes, checked before minutes of measurement depend on it.
    if let Some(path) = &args.write {
        identity::check_write_target(path)?;
    }
    let kfd = Kfd::open(root).map_err(|e| kfd_error("opening /dev/kfd", root, e))?;
    let nodes: Vec<Node> = match want {
        Some(g) => vec![
            kfd.gpu(g)
                .map_err(|e| kfd_error("finding the partition", root, e))?
                .clone(),
        ],
        None => kfd.topology().gpus().cloned().collect(),
    };
    if nodes.is_empty() {
        return Err(CliError::Refused(
            "the topology has no GPU partition to measure".into(),
        ));
    }
    for n in &nodes {
        check_target(n)?;
        check_alone(root, n, args.force)?;
    }
    // The reaction chain's helpers, chosen before anything is measured (`--runtime hip` that
    // cannot run is refused here).
    let mut helpers = Vec::new();
    for n in &nodes {
        // The partition's HIP device ordinal: its place among the topology's GPUs.
        let device = kfd
            .topology()
            .gpus()
            .position(|g| g.gpu_id == n.gpu_id)
            .unwrap_or(0);
        helpers.push(runtime::choose(
            root,
            args.runtime,
            n.prop("gfx_target_version").unwrap_or(0),
            &identity::target_name(n),
            u32::try_from(device).unwrap_or(0),
            false,
        )?);
    }
    let mut reports = Vec::new();
    for (n, h) in nodes.iter().zip(&helpers) {
        reports.push(measure(&kfd, n, &args, socket, h)?);
    }
    // A calibration that cannot be written (a disk full, a directory gone since the check)
    // never drops the finished table: it is printed, then the write's error.
    let written = match &args.write {
        Some(path) => {
            let measured: Vec<_> = nodes.iter().zip(&reports).collect();
            let cal = identity::calibration(&kfd, &measured)?;
            Some(std::fs::write(path, cal.to_toml()).map_err(|e| {
                CliError::Output(format!(
                    "writing the calibration to {}: {e}; the measurements are printed above, the file was not written (run kfdq bench --write again with a writable FILE)",
                    path.display()
                ))
            }))
        }
        None => None,
    };
    if json {
        print_json(&reports)?;
    } else {
        for r in &reports {
            print!("{}", report::render(r));
        }
    }
    if let Some(Err(e)) = written {
        return Err(e);
    }
    // On stderr, also beside --json (stdout is the JSON).
    if let Some(path) = &args.write {
        let gpus: Vec<String> = reports.iter().map(|r| r.gpu_id.to_string()).collect();
        eprintln!(
            "kfdq bench: wrote the calibration of gpu {} to {}",
            gpus.join(", "),
            path.display()
        );
    }
    Ok(())
}

fn parse_gpu(s: &str) -> R<GpuId> {
    let r = match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map(GpuId).map_err(|_| {
        CliError::Usage(format!(
            "--gpu {s:?} is not a gpu_id (decimal or 0x-hex; see `kfdq topology`)"
        ))
    })
}

/// Refuses a partition whose GPU the model does not describe.
fn check_target(n: &Node) -> R<()> {
    let v = n.prop("gfx_target_version").unwrap_or(0) as u32;
    if identity::KNOWN_TARGETS.contains(&v) {
        return Ok(());
    }
    Err(CliError::Refused(format!(
        "gpu {}: {} is not a GPU kfdq bench knows (gfx90a, gfx940, gfx941, gfx942): its context-save layout and scheduler may differ from the partition model's, so the figures would not mean what the calibration says; pass --gpu with a known partition",
        n.gpu_id.map_or(0, |g| g.0),
        identity::target_name(n)
    )))
}

/// Refuses a partition where other processes have queues, unless `force`.
fn check_alone(root: &Root, n: &Node, force: bool) -> R<()> {
    let Some(gpu) = n.gpu_id else { return Ok(()) };
    let me = std::process::id();
    let others: Vec<u32> = procfs::processes(root)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.pid != me && p.queues.iter().any(|q| q.gpu_id == gpu))
        .map(|p| p.pid)
        .collect();
    if others.is_empty() || force {
        return Ok(());
    }
    Err(CliError::Refused(format!(
        "gpu {gpu} is in use: processes {others:?} have queues on it. The bench preempts the whole partition hundreds of times (every UPDATE_QUEUE and SUSPEND_QUEUES saves and restores their waves too) and its figures would include their work; stop them, or pass --force to disturb them anyway"
    )))
}

fn measure(
    kfd: &Kfd,
    n: &Node,
    args: &BenchArgs,
    socket: &Path,
    helpers: &runtime::HelperRuntime,
) -> R<PartitionReport> {
    let gpu = n
        .gpu_id
        .ok_or_else(|| CliError::Refused("a CPU node has no queues".into()))?;
    let waves_per_cu =
        n.prop("max_waves_per_simd").unwrap_or(8) * n.prop("simd_per_cu").unwrap_or(4);
    let slots = u32::try_from(u64::from(n.cu_count()) * waves_per_cu).unwrap_or(u32::MAX);
    if slots < 8 {
        return Err(CliError::Refused(format!(
            "gpu {gpu} reports {slots} wave slots (CUs x max_waves_per_simd x simd_per_cu): too few to place a bystander and a busy queue; check `kfdq topology`"
        )));
    }
    let spin = match n.prop("gfx_target_version").and_then(spin::code_object) {
        Some(image) => Some(spin::Spin::load(kfd, gpu, image)?),
        None => None,
    };
    let plan = Plan::new(
        kfd,
        gpu,
        spin.as_ref(),
        slots,
        args.repeat,
        args.window_ms,
        false,
    );
    let target = identity::target_name(n);
    let mut samples = Samples::default();
    let mut unavailable = Vec::new();
    let mut fit = None;
    let mut arbitration = None;
    let mut agent_level = None;
    let mut agent_runtime = None;
    match WorkSource::detect(kfd.root(), &target, spin.is_some()) {
        WorkSource::Known => {
            plan.calibrate_spin()?;
            if !args.reaction_only {
                plan.progress("the bystander alone (baseline)");
                let mut bystander = Lane::new(kfd, gpu, plan.priority, plan.spin)?;
                for us in plan.measure_baseline(&mut bystander)? {
                    samples.call("bystander_alone", 0, us / 1e3);
                }
                drop(bystander);
                level2::run(&plan, &mut samples)?;
                if let Err(u) = level3::run(&plan, &mut samples)? {
                    unavailable.push(u);
                }
                let cwsr = std::fs::read_to_string(
                    kfd.root()
                        .path()
                        .join("sys/module/amdgpu/parameters/cwsr_enable"),
                );
                match stats::fit(&samples.all_stalls()) {
                Ok(_) if cwsr.is_ok_and(|v| v.trim() == "0") => unavailable.push(Unavailable::new(
                    "CWSR fit",
                    "amdgpu's cwsr_enable is 0: a preempt waits for running waves to end instead of saving them, so the stalls measure draining, not CWSR",
                    "boot with amdgpu.cwsr_enable=1 (the default), as levels 2 and 3 need",
                )),
                Ok(f) => fit = Some(f),
                Err(e) => unavailable.push(Unavailable::new(
                    "CWSR fit",
                    e.to_string(),
                    "raise --repeat or check that the busy queues ran",
                )),
            }
                arbitration = arbitration::run(&plan)?;
                if arbitration.is_none() {
                    unavailable.push(Unavailable::new(
                    "arbitration",
                    "every race was discarded: the high queue did not start when the gate ended",
                    "raise --window-ms so the packet processor sees both queues before the gate ends",
                ));
                }
            }
            let per = spin.as_ref().map_or(0.0, |s| s.ns_per_iteration.get());
            match reaction::run(
                kfd.root(),
                socket,
                gpu,
                helpers,
                plan.repeat,
                per,
                plan.quiet,
                &mut samples,
            )? {
                Ok(level) => {
                    agent_level = Some(level);
                    agent_runtime = Some(helpers.name());
                }
                Err(u) => unavailable.push(u),
            }
        }
        WorkSource::None { why } => {
            level2::calls_only(&plan, &mut samples)?;
            for m in [
                "stalls and the CWSR fit",
                "level 3 on busy queues",
                "arbitration",
            ] {
                unavailable.push(Unavailable::new(m, why.clone(), "see docs/hardware.md"));
            }
        }
    }
    Ok(PartitionReport {
        gpu_id: gpu.0,
        gfx_target: target,
        cus: n.cu_count(),
        wave_slots: slots,
        bystander_waves: plan.bystander_wgs,
        victim_waves: plan.victim_waves.clone(),
        samples_per_measurement: plan.repeat,
        discarded_samples: plan.discarded_late.get() + plan.discarded_victim.get(),
        discarded_late: plan.discarded_late.get(),
        discarded_victim: plan.discarded_victim.get(),
        spin_ns_per_iteration: spin.as_ref().map(|s| s.ns_per_iteration.get()),
        rows: report::rows(&samples),
        fit,
        arbitration,
        agent_level,
        agent_runtime,
        unavailable,
    })
}
