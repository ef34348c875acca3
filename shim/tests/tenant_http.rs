//! Tenants against kfdqd's HTTP endpoint and its tracer (issue 50 item 9), with a real kfdqd on
//! kfd-emu: clients that open connections and send nothing, or trickle a request head, do not
//! delay another client's scrape and are closed; the liveness answer (`/healthz`) says whether
//! the event loop turns, not merely whether the HTTP thread answers; and a process the tracer
//! suspended is resumed when its lease runs out because the event loop stopped renewing it.
//!
//! An event loop that stalls is made here as a stuck loop looks from outside: kfdqd's main
//! thread (and only it: ptrace is per thread) is stopped with `PTRACE_INTERRUPT`, while its
//! metrics and tracer threads run on.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::kfdqd::{Agent, text, two_classes};
use common::prom::{free_port, get};
use common::traced::{self, all_suspended};
use common::*;
use kfdq::proto::control::Control;
use nix::sys::ptrace;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// A connection from `source` (another loopback address than the test's own scrapes).
fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    let from: SocketAddr = format!("{source}:0").parse().unwrap();
    s.bind(&from.into()).unwrap();
    s.connect(&to.into()).unwrap();
    s.into()
}

/// True once the server closed `s` (a read sees the end or a reset), waiting at most `limit`.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            // A reply (431, 408) before the end is still the server ending it.
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return true,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false;
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

/// One GET with its own read deadline; the status line and body, or None when the answer did
/// not come within `limit`.
fn get_within(addr: SocketAddr, path: &str, limit: Duration) -> Option<(String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, limit).ok()?;
    s.set_read_timeout(Some(limit)).unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// kfdqd (two classes) serving metrics on a free loopback port.
fn agent_with_metrics(emu: &Emu) -> (Agent, SocketAddr) {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = format!("{}\n[metrics]\nlisten = \"{addr}\"\n", two_classes("hold"));
    (Agent::start(emu, &config), addr)
}

/// kfdqd's main thread, stopped (ptrace-stop) until dropped: the event loop does not turn.
struct Stalled {
    tid: Pid,
}

impl Stalled {
    fn main_thread_of(agent: &Agent) -> Stalled {
        let tid = Pid::from_raw(agent.child.id() as i32);
        ptrace::seize(tid, ptrace::Options::empty()).expect("PTRACE_SEIZE kfdqd's main thread");
        ptrace::interrupt(tid).expect("PTRACE_INTERRUPT");
        match waitpid(tid, Some(WaitPidFlag::__WALL)).expect("waitpid") {
            WaitStatus::PtraceEvent(..) | WaitStatus::Stopped(..) => {}
            other => panic!("kfdqd's main thread: {other:?}"),
        }
        Stalled { tid }
    }
}

impl Drop for Stalled {
    fn drop(&mut self) {
        let _ = ptrace::detach(self.tid, None);
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_clients_that_hold_metrics_connections_delay_no_scrape_and_are_closed() {
    let emu = mount();
    let (_agent, addr) = agent_with_metrics(&emu);

    // One client trickles a request head, a byte a second, for as long as it is let.
    let mut trickle = connect_from("127.0.0.2", addr);
    trickle.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
    let mut writer = trickle.try_clone().unwrap();
    let trickler = std::thread::spawn(move || {
        for _ in 0..120 {
            if writer.write_all(b"X").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    });
    // Then holds 30 more connections and says nothing on them.
    let mut idle: Vec<TcpStream> = (0..30).map(|_| connect_from("127.0.0.2", addr)).collect();

    // Another client's scrape is answered meanwhile (the old endpoint served one connection
    // at a time, 5 s per read: the trickle held it for good).
    let (status, body) = get_within(addr, "/metrics", Duration::from_secs(10))
        .expect("a scrape while another client holds connections");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("kfdq_agent_build_info"), "{body}");

    // The holder keeps at most its share: the connections over it are closed at once.
    let closed = idle
        .iter_mut()
        .filter_map(|s| closed_within(s, Duration::from_millis(500)).then_some(()))
        .count();
    assert!(
        closed >= 30 + 1 - 8,
        "{closed} of 30 idle connections closed: one client held more than 8"
    );
    // And the trickle is ended by the whole-request deadline (10 s), head or no head.
    assert!(
        closed_within(&mut trickle, Duration::from_secs(30)),
        "a request head trickled for 30 s was not cut off"
    );
    drop(trickle);
    trickler.join().unwrap();
    // Served still.
    assert!(get(addr, "/metrics").0.contains("200"));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_liveness_fails_while_the_event_loop_is_stalled_and_metrics_still_answer() {
    let emu = mount();
    let (agent, addr) = agent_with_metrics(&emu);
    let (status, body) = get(addr, "/healthz");
    assert!(status.contains("200"), "{status} {body}");
    assert!(body.contains("event loop turned"), "{body}");
    // A first scrape, so a stale one exists to serve.
    assert!(get(addr, "/metrics").0.contains("200"));

    let stalled = Stalled::main_thread_of(&agent);
    let asked = Instant::now();
    let (status, body) = get_within(addr, "/healthz", Duration::from_secs(30))
        .expect("/healthz answers while the event loop is stalled");
    assert!(status.contains("503"), "{status} {body}");
    assert!(body.contains("did not turn"), "{body}");
    assert!(
        asked.elapsed() < Duration::from_secs(30),
        "the probe took {:?}",
        asked.elapsed()
    );
    // The scrape comes back (the previous one) rather than hanging.
    let (status, body) = get_within(addr, "/metrics", Duration::from_secs(30))
        .expect("/metrics answers while the event loop is stalled");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("kfdq_agent_build_info"), "{body}");

    drop(stalled);
    test_support::wait::wait_for("/healthz to answer 200 once the loop turns again", || {
        get(addr, "/healthz").0.contains("200")
    });
    assert_eq!(agent.status().agent_pid, kfdq::Pid(agent.child.id()));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_traced_process_is_resumed_when_a_stalled_agent_stops_renewing_its_suspension() {
    let emu = mount();
    // The default lease, said: 1 s (renewed every 250 ms).
    let agent = Agent::start(&emu, &traced::config_with("lease_ms = 1000\n"));
    let lp = traced::shimless_ahead(&emu, "batch", 2);
    agent.wait(&format!("pid {} traced", lp.pid), |s| {
        s.processes.iter().any(|p| {
            p.pid == kfdq::Pid(lp.pid) && p.control == Control::Tracer && !p.queues.is_empty()
        })
    });
    let o = agent.kfdq(
        &["suspend", &lp.pid.to_string(), "--level", "suspend"],
        None,
    );
    assert!(o.status.success(), "{}", text(&o));
    wait_for("the traced process suspended", || {
        all_suspended(&emu, lp.pid, true)
    });
    // While the event loop turns, the lease is renewed: suspended throughout three leases.
    let renewed = Instant::now();
    while renewed.elapsed() < Duration::from_secs(3) {
        assert!(
            all_suspended(&emu, lp.pid, true),
            "a renewed suspension lapsed after {:?}: {}",
            renewed.elapsed(),
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // The event loop stalls: nothing renews the lease, and the tracer thread resumes the
    // process on its own (before: suspended until the loop came back, if ever).
    let stalled = Stalled::main_thread_of(&agent);
    wait_for("the traced process resumed at its lease's end", || {
        all_suspended(&emu, lp.pid, false)
    });
    assert!(agent.log_text().contains("lease"), "{}", agent.log_text());
    drop(stalled);
    // The loop turns again: the operator's suspension is still in force, and applied again.
    wait_for("the suspension applied again once the loop turns", || {
        all_suspended(&emu, lp.pid, true)
    });
    let o = agent.kfdq(&["resume", &lp.pid.to_string()], None);
    assert!(o.status.success(), "{}", text(&o));
    wait_for("resumed", || all_suspended(&emu, lp.pid, false));
    lp.stop();
}
