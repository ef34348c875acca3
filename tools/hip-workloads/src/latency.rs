//! The latency client (HP): after a warm-up request it says `ready`, waits for the demo's go
//! file, then issues `$KFDQ_DEMO_REQUESTS` requests open-loop at `$KFDQ_DEMO_RATE` per second
//! (request i due at start + i / rate), each its kernels on the null stream and a synchronize,
//! and prints `request <i> <latency_us> <start_us>` for each and the `window`.

use std::time::Duration;

use crate::shape::{self, Launch};
use crate::{Gpu, WorkError, env, exists_soon, now_us, say};

/// How long the demo may take to create the go file.
const GO_WAIT: Duration = Duration::from_secs(300);

/// One request: every launch on the null stream, then a synchronize.
fn request(gpu: &Gpu, launches: &[Launch]) -> Result<(), WorkError> {
    let s = gpu.hip.null_stream();
    for l in launches {
        gpu.hip
            .launch(gpu.spin, s, l.groups, l.threads, l.iterations)?;
    }
    gpu.hip.synchronize(s)?;
    Ok(())
}

pub fn run(gpu: &Gpu) -> Result<(), WorkError> {
    let n: u32 = env("KFDQ_DEMO_REQUESTS")?
        .parse()
        .map_err(|_| WorkError::Setup("$KFDQ_DEMO_REQUESTS is not a count".into()))?;
    let rate: f64 = env("KFDQ_DEMO_RATE")?
        .parse()
        .ok()
        .filter(|r: &f64| r.is_finite() && *r > 0.0)
        .ok_or_else(|| WorkError::Setup("$KFDQ_DEMO_RATE is not a rate above 0".into()))?;
    let go = std::path::PathBuf::from(env("KFDQ_DEMO_GO")?);
    let launches = shape::request(gpu.shape, gpu.scale);
    // Warm-up: the null stream's queue exists before the first timed request.
    request(gpu, &launches[..1])?;
    say("ready")?;
    if !exists_soon(&go, GO_WAIT) {
        return Err(WorkError::Setup(format!(
            "the go file {} did not appear within {} s",
            go.display(),
            GO_WAIT.as_secs()
        )));
    }
    let gap_us = 1e6 / rate;
    let start = now_us();
    for i in 0..n {
        let due = start + f64::from(i) * gap_us;
        let t = now_us();
        if t < due {
            std::thread::sleep(Duration::from_secs_f64((due - t) / 1e6));
        }
        let t0 = now_us();
        if let Some(h) = &gpu.hints {
            h.begin();
        }
        request(gpu, &launches)?;
        if let Some(h) = &gpu.hints {
            h.end();
        }
        say(&format!("request {i} {:.0} {t0:.0}", now_us() - t0))?;
    }
    say(&format!("window {start:.0} {:.0}", now_us()))
}
