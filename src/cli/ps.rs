//! `kfdq ps`.

use serde::Serialize;

use super::table::Table;
use super::{CliError, kfd_error, print_json};
use crate::kfd::Root;
use crate::kfd::procfs::{self, ProcQueue};

#[derive(Serialize)]
struct QueueView<'a> {
    #[serde(flatten)]
    queue: &'a ProcQueue,
    type_name: &'static str,
}

#[derive(Serialize)]
struct ProcessView<'a> {
    pid: u32,
    command: Option<String>,
    queues: Vec<QueueView<'a>>,
}

fn command_of(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|s| s.trim().to_string())
}

pub(super) fn run(root: &Root, json: bool) -> Result<(), CliError> {
    let procs = procfs::processes(root).map_err(|e| kfd_error("listing KFD processes", root, e))?;
    let views: Vec<ProcessView<'_>> = procs
        .iter()
        .map(|p| ProcessView {
            pid: p.pid,
            command: command_of(p.pid),
            queues: p.queues.iter().map(|q| QueueView { queue: q, type_name: q.type_name() }).collect(),
        })
        .collect();
    if json {
        return print_json(&views);
    }
    let mut t = Table::new(&[">PID", "COMMAND", ">QUEUE", "GPU_ID", "TYPE", ">RING_BYTES"]);
    for p in &views {
        let cmd = p.command.clone().unwrap_or_else(|| "?".into());
        if p.queues.is_empty() {
            t.row(vec![p.pid.to_string(), cmd.clone(), "-".into(), "-".into(), "-".into(), "-".into()]);
        }
        for q in &p.queues {
            t.row(vec![
                p.pid.to_string(),
                cmd.clone(),
                q.queue.queue_id.0.to_string(),
                format!("{:#06x}", q.queue.gpu_id.0),
                q.type_name.into(),
                q.queue.ring_size.to_string(),
            ]);
        }
    }
    print!("{}", t.render());
    let nq: usize = views.iter().map(|p| p.queues.len()).sum();
    println!("{} process(es) with KFD state, {nq} queue(s).", views.len());
    Ok(())
}
