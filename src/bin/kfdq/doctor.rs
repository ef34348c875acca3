//! `kfdq doctor`: prints what kfdq can do on this node (see [`kfdq::doctor`]).

use std::path::PathBuf;

use super::{CliError, print_json, table::Table};
use kfdq::doctor::{self, Options, Report, Status};
use kfdq::kfd::Root;

/// Options of `kfdq doctor`.
pub struct DoctorOptions {
    pub socket: Option<PathBuf>,
    pub hip_runtime: Option<PathBuf>,
    pub shim: Option<PathBuf>,
}

pub(super) fn run(root: &Root, o: DoctorOptions, json: bool) -> Result<(), CliError> {
    let options = Options {
        socket: o.socket,
        hip_runtime: o.hip_runtime,
        // Found as `kfdq run` finds it; not finding it is a finding, not an error.
        shim: super::run::find_shim(o.shim.as_deref()).ok(),
    };
    let report = doctor::inspect(root, &options);
    if json {
        print_json(&report)?;
    } else {
        print!("{}", render(&report));
    }
    let failed = report
        .findings
        .iter()
        .filter(|f| f.status == Status::Fail)
        .count();
    if failed > 0 {
        return Err(CliError::Findings(failed));
    }
    Ok(())
}

fn render(report: &Report) -> String {
    let mut out = format!("kfdq doctor: the node under {}\n\n", report.root.display());
    for f in &report.findings {
        out.push_str(&format!(
            "{:<5} {:<15} {}\n",
            f.status.label(),
            f.check,
            f.found
        ));
        if let Some(fix) = &f.fix {
            out.push_str(&format!("{:<21} fix: {fix}\n", ""));
        }
    }
    if report.partitions.is_empty() {
        out.push_str("\nno GPU partition could be read, so no level can be judged\n");
        return out;
    }
    out.push_str("\nwhat works per GPU partition:\n");
    let mut t = Table::new(&[
        "GPU_ID",
        "GFX",
        ">CUS",
        ">XCCS",
        ">RESIDENT",
        "L0",
        "L1",
        "L2",
        "L3",
        "TRACER",
    ]);
    for p in &report.partitions {
        let mut row = vec![
            p.gpu_id.to_string(),
            p.gfx.clone(),
            p.cus.to_string(),
            p.xccs.to_string(),
            p.resident_slots.to_string(),
        ];
        row.extend(
            p.levels
                .iter()
                .map(|l| if l.works { "yes" } else { "no" }.to_string()),
        );
        t.row(row);
    }
    out.push_str(&t.render());
    for p in &report.partitions {
        for l in &p.levels {
            let label = if l.level == "tracer" {
                "tracer".to_string()
            } else {
                format!("level {}", l.level)
            };
            out.push_str(&format!(
                "  {} {label} ({}): {}{}\n",
                p.gpu_id,
                l.name,
                if l.works { "" } else { "does not work: " },
                l.why
            ));
        }
    }
    out
}
