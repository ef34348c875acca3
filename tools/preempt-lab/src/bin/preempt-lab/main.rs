//! `preempt-lab`: what each preemption level buys, simulated on the partition model with kfdq's
//! real policy. docs/experiments.md explains the model and the results.

mod calibration;
mod cli;
mod release;
mod sim;

use std::process::ExitCode;

use clap::Parser;
use preempt_lab::real_run;
use preempt_lab::scenario::parse_control;
use preempt_lab::workload::Shape;

use crate::cli::{Cli, Cmd};

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("preempt-lab: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Validate { results, traces } => {
            let v = preempt_lab::validate::run(&results, &traces, |what| {
                eprint!("\rpreempt-lab: replaying {what}                    ")
            })
            .map_err(|e| e.to_string())?;
            eprintln!();
            print!("{}", v.table());
            Ok(())
        }
        Cmd::Shapes => {
            for s in Shape::ALL {
                let w = preempt_lab::workload::Workload::new(
                    s,
                    None,
                    preempt_lab::workload::Arrival::ClosedLoop { depth: 1 },
                );
                let k = &w.kernels[0];
                println!(
                    "{:<16} {:>5} kernels x {:>6} work-groups x {} waves x {:>6.0} us; {:.2} ms alone on an MI308X partition",
                    s.name(),
                    w.kernels.len(),
                    k.workgroups,
                    k.waves_per_wg,
                    k.wg_ns as f64 / 1e3,
                    w.alone_ns(80 * 32) as f64 / 1e6
                );
            }
            Ok(())
        }
        Cmd::Run {
            controls,
            repeat,
            requests,
            rate,
            hp_command,
            lp_command,
            kfdq,
            json,
            csv,
            demo_args,
        } => {
            let opts = real_run::RunOptions {
                kfdq,
                controls: controls
                    .iter()
                    .map(|c| parse_control(c))
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?,
                repeat,
                requests,
                rate,
                hp_command,
                lp_command,
                demo_args,
            };
            let report = real_run::run(&opts, |l| eprintln!("{l}")).map_err(|e| e.to_string())?;
            print_report(&report, json, csv)
        }
        Cmd::Sim(args) => sim::run(args),
    }
}

/// Prints a report as JSON, CSV or the table.
fn print_report(report: &preempt_lab::report::Report, json: bool, csv: bool) -> Result<(), String> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).map_err(|e| e.to_string())?
        );
    } else if csv {
        print!("{}", report.csv());
    } else {
        print!("{}", report.table());
    }
    Ok(())
}
