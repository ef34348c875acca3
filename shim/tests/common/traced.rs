//! Processes without the shim, taken by kfdqd's tracer (classes with `control = "tracer"`): the
//! configuration the tracer tests share, the launch and the emulator's view of suspension.

use super::{App, Emu, Launch, programs};

/// `batch` (rank 0, level 3) takes processes without the shim through the tracer; `latency`
/// (rank 2) does not. Scans every 100 ms.
pub const CONFIG: &str = "[agent]\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\n\n[tracer]\nscan_ms = 100\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"suspend\"\ncontrol = \"tracer\"\nmatch = { env = true }\n";

/// [`CONFIG`] with `keys` (lines ending in a newline) added to its `[agent]` table.
pub fn config_with(keys: &str) -> String {
    CONFIG.replacen("[agent]\n", &format!("[agent]\n{keys}"), 1)
}

/// A flood without the shim: 2 ms work-groups, 64 per dispatch, `in_flight` dispatches queued;
/// started and flooding.
pub fn shimless_ahead(emu: &Emu, class: &str, in_flight: u32) -> App {
    let mut l = Launch::new(programs().get("flood"))
        .args(["2000", "64"])
        .arg(in_flight.to_string())
        .env("KFDQ_CLASS", class);
    l.preload = false;
    let mut app = l.start(emu);
    app.wait_line("flooding");
    app
}

/// True when `pid` has queues and every one is suspended (`want`) or every one runs.
pub fn all_suspended(emu: &Emu, pid: u32, want: bool) -> bool {
    let qs = emu.queues_of(pid);
    !qs.is_empty() && qs.iter().all(|q| q.suspended == want)
}
