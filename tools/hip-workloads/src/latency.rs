//! The latency client (HP): after a warm-up request it says `ready`, waits for the demo's go
//! file, then issues `$KFDQ_DEMO_REQUESTS` requests open-loop at `$KFDQ_DEMO_RATE` per second
//! (request i due at start + i / rate), each its kernels on the null stream and a synchronize,
//! and prints `request <i> <latency_us> <start_us>` for each and the `window`.
//!
//! With `$KFDQ_DEMO_HINT=1` (`level2-hinted`) each request is hinted as shim/tests/programs/
//! latency.c hints it: `kfdq_request_begin()` at the request's due time, then
//! `$KFDQ_DEMO_HINT_LEAD_US` of host work (a sleep: the CPU stays free for the emulator), then
//! the launches, then `kfdq_request_end()` after the synchronize; the request is measured from
//! its first launch, and `hints <taken> of <N>` says how many begins the shim took.

use std::time::Duration;

use crate::hint::Hints;
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
    // The demo's own request when it gives one (one scale factor for both runtimes).
    let launches = match std::env::var("KFDQ_DEMO_KERNELS") {
        Ok(k) if !k.is_empty() => shape::from_kernels_arg(&k).map_err(WorkError::Setup)?,
        _ => shape::request(gpu.shape, gpu.scale),
    };
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
    let hints = gpu.hints.filter(Hints::present);
    if gpu.hints.is_some() && hints.is_none() {
        eprintln!(
            "kfdq-hipwork: KFDQ_DEMO_HINT=1 but kfdq_request_begin/end are not in the process (the shim is not preloaded): requests go unhinted"
        );
    }
    let lead = match hints {
        Some(_) => hint_lead()?,
        None => Duration::ZERO,
    };
    let gap_us = 1e6 / rate;
    let start = now_us();
    let (mut taken, mut refused) = (0u32, 0u32);
    for i in 0..n {
        let due = start + f64::from(i) * gap_us;
        let t = now_us();
        if t < due {
            std::thread::sleep(Duration::from_secs_f64((due - t) / 1e6));
        }
        let hinted = match &hints {
            Some(h) => match h.begin() {
                Some(0) => true,
                r => {
                    if refused == 0 {
                        eprintln!(
                            "kfdq-hipwork: kfdq_request_begin: {r:?} (docs/shim.md, \"Request hints\")"
                        );
                    }
                    refused += 1;
                    false
                }
            },
            None => false,
        };
        taken += u32::from(hinted);
        if hints.is_some() {
            // The host work between knowing of the request and its first launch.
            std::thread::sleep(lead);
        }
        let t0 = now_us();
        request(gpu, &launches)?;
        let latency = now_us() - t0;
        if let (true, Some(h)) = (hinted, &hints) {
            h.end();
        }
        say(&format!("request {i} {latency:.0} {t0:.0}"))?;
    }
    say(&format!("window {start:.0} {:.0}", now_us()))?;
    if hints.is_some() {
        say(&format!("hints {taken} of {n}"))?;
    }
    Ok(())
}

/// `$KFDQ_DEMO_HINT_LEAD_US`: the host work between a hint and the request's first launch
/// (default 1000 µs, as latency.c's).
fn hint_lead() -> Result<Duration, WorkError> {
    let Ok(v) = std::env::var("KFDQ_DEMO_HINT_LEAD_US") else {
        return Ok(Duration::from_micros(1000));
    };
    v.parse::<u64>()
        .ok()
        .filter(|us| *us <= 1_000_000)
        .map(Duration::from_micros)
        .ok_or_else(|| {
            WorkError::Setup(format!(
                "$KFDQ_DEMO_HINT_LEAD_US={v}: 0 to 1000000 µs (docs/demo.md, \"Your own workloads\")"
            ))
        })
}
