//! Ctrl-C, `kill`, a closed terminal: the demo stops like a failed phase, so every process it
//! started is stopped by its owner (`procs::Child`'s drop: SIGTERM, and kfdqd resumes what it
//! preempted as it exits; the workloads' queues go with them) and its own emulator is
//! unmounted — never a batch job left deactivated or suspended, nor a kfdqd or workload left
//! running on the GPU after the demo is gone.
//!
//! SIGINT, SIGTERM and SIGHUP set a flag (signal-hook's handlers: nothing blocked, so the
//! demo's children start with the default dispositions, exec resetting the handlers); every
//! wait of the demo ([`super::procs`]) checks [`check`] at least every 100 ms and returns the
//! error, which unwinds the phase. A second signal while stopping ends kfdq at once (status
//! 130): the person asked twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use nix::sys::signal::Signal;

use super::super::CliError;

const SIGNALS: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// The signal received (0: none), and whether the demo has said so.
struct Received {
    signal: Arc<AtomicUsize>,
    said: AtomicBool,
}

static RECEIVED: std::sync::OnceLock<Received> = std::sync::OnceLock::new();

/// Takes the signals from here on; one that cannot be taken keeps its default action (the
/// demo dies at once, as before).
pub(super) fn install() {
    let received = RECEIVED.get_or_init(|| Received {
        signal: Arc::new(AtomicUsize::new(0)),
        said: AtomicBool::new(false),
    });
    let armed = Arc::new(AtomicBool::new(false));
    for s in SIGNALS {
        let n = s as i32;
        // The shutdown first: on the first signal `armed` is still false.
        let _ = signal_hook::flag::register_conditional_shutdown(n, 130, Arc::clone(&armed));
        let _ = signal_hook::flag::register_usize(n, Arc::clone(&received.signal), n as usize);
        let _ = signal_hook::flag::register(n, Arc::clone(&armed));
    }
}

/// `Err` once a signal came: what the demo was doing ends, and its processes are stopped.
pub(super) fn check() -> Result<(), CliError> {
    let Some(r) = RECEIVED.get() else {
        return Ok(());
    };
    let n = r.signal.load(Ordering::SeqCst);
    if n == 0 {
        return Ok(());
    }
    let name = i32::try_from(n)
        .ok()
        .and_then(|n| Signal::try_from(n).ok())
        .map_or_else(|| n.to_string(), |s| s.to_string());
    if !r.said.swap(true, Ordering::SeqCst) {
        eprintln!(
            "\nkfdq demo: {name}: stopping the phase's processes (kfdqd resumes what it preempted); again to quit at once"
        );
    }
    Err(CliError::Usage(format!(
        "interrupted ({name}): the demo stopped its processes; no phase result is printed"
    )))
}
