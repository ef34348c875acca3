//! systemd's readiness protocol (`sd_notify(3)`): a datagram to `$NOTIFY_SOCKET` (a path, or an
//! abstract name written with a leading `@`). Without the variable it does nothing.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (`READY=1`, `STOPPING=1`, `STATUS=...`, lines joined by `\n`) to systemd.
pub fn notify(state: &str) {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let target = target.to_string_lossy().into_owned();
    let addr = match target.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(&target),
    };
    let sent = addr.and_then(|a| {
        let s = UnixDatagram::unbound()?;
        s.send_to_addr(state.as_bytes(), &a)
    });
    if let Err(e) = sent {
        tracing::warn!("sd_notify to {target}: {e}");
    }
}

/// systemd's watchdog (`WatchdogSec=` in the unit): systemd sets `WATCHDOG_USEC` (and
/// `WATCHDOG_PID`), and kills the service if no `WATCHDOG=1` arrives within it. The event loop
/// calls [`Watchdog::progress`] once per turn, so a loop that stops turning (a deadlock, a
/// stalled write, SIGSTOP) stops the pings and systemd kills and restarts the agent — which
/// also releases the tracer's processes (the kernel drops ptrace and the debug trap).
#[derive(Debug)]
pub struct Watchdog {
    every: Option<std::time::Duration>,
    next: std::time::Instant,
}

impl Watchdog {
    /// From the environment: pings at half of `WATCHDOG_USEC` (systemd's advice), or never
    /// without it (or when `WATCHDOG_PID` names another process).
    pub fn from_env(now: std::time::Instant) -> Watchdog {
        let usec = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|u| *u > 0);
        let ours = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
            .is_none_or(|p| p == std::process::id());
        Watchdog {
            every: usec
                .filter(|_| ours)
                .map(|u| std::time::Duration::from_micros(u / 2)),
            next: now,
        }
    }

    /// When the loop must turn next for the watchdog, if it is on.
    pub fn deadline(&self) -> Option<std::time::Instant> {
        self.every.map(|_| self.next)
    }

    /// The loop turned: pings if a ping is due.
    pub fn progress(&mut self, now: std::time::Instant) {
        if let Some(every) = self.every
            && now >= self.next
        {
            notify("WATCHDOG=1");
            self.next = now + every;
        }
    }
}
