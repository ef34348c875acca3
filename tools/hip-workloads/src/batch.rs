//! The batch job (LP): launches its kernels on a created stream without end, an event after
//! every unit (a dispatch, or 256 of the training trace's kernels), at most [`IN_FLIGHT`] units
//! queued; says `ready` once the first unit is queued and `done <t_us>` as each completes, and
//! stops once the demo's stop file exists.

use std::collections::VecDeque;
use std::path::PathBuf;

use crate::shape;
use crate::{Gpu, WorkError, env, now_us, say};

/// Units of work queued at once (the demo's kfdq-flood: 4).
const IN_FLIGHT: usize = 4;

pub fn run(gpu: &Gpu) -> Result<(), WorkError> {
    let stop = PathBuf::from(env("KFDQ_DEMO_STOP")?);
    let (kernels, unit) = shape::batch(gpu.shape, gpu.scale);
    let stream = gpu.hip.stream()?;
    let mut queued = VecDeque::with_capacity(IN_FLIGHT);
    let mut next = 0usize;
    let mut first = true;
    while !stop.exists() {
        if queued.len() == IN_FLIGHT {
            let e = queued.pop_front().expect("IN_FLIGHT units queued");
            gpu.hip.wait(&e)?;
            gpu.hip.destroy_event(e);
            say(&format!("done {:.0}", now_us()))?;
            continue;
        }
        for _ in 0..unit {
            let l = kernels[next % kernels.len()];
            next += 1;
            gpu.hip
                .launch(gpu.spin, stream, l.groups, l.threads, l.iterations)?;
        }
        queued.push_back(gpu.hip.record(stream)?);
        if first {
            first = false;
            say("ready")?;
        }
    }
    // What is queued completes before the process exits (its queues then go empty).
    for e in queued {
        gpu.hip.wait(&e)?;
        gpu.hip.destroy_event(e);
    }
    Ok(())
}
