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
