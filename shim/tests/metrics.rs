//! kfdqd's Prometheus endpoint with a real process under the shim on kfd-emu: the exposition
//! passes `promtool check metrics`, shows the process's class and level and the preemption, and
//! Debian's real `prometheus` server scrapes it on the loopback address and answers a query for
//! the series through its HTTP API. Bad requests get HTTP errors; the agent keeps serving.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::kfdqd::{Agent, two_classes};
use common::prom::{free_port, get, http, prometheus, query, sample, tool};
use common::*;
use kfdq::Pid;
use kfdq::proto::{Level, Reply, Request};

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn prometheus_scrapes_the_agent_and_reads_a_preempted_process_back() {
    let emu = mount();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = format!(
        "{}\n[metrics]\nlisten = \"{addr}\"\n",
        two_classes("deactivate")
    );
    let agent = Agent::start(&emu, &config);
    let mut lp = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2", "2"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(&emu);
    lp.wait_line("flooding");
    agent.wait_connected(lp.pid, 2);
    let pid = lp.pid.to_string();

    // Running: level 0, two queues, the class busy.
    let text = test_support::wait::wait_value(
        "the batch job's queues in a scrape",
        Duration::from_secs(30),
        || {
            let (status, body) = get(addr, "/metrics");
            assert!(status.contains("200"), "{status}");
            (sample(&body, "kfdq_process_queues", &[("pid", &pid)]) == Some(2.0)).then_some(body)
        },
    );
    assert_eq!(
        sample(
            &text,
            "kfdq_process_level",
            &[("pid", &pid), ("class", "batch")]
        ),
        Some(0.0),
        "{text}"
    );

    // Preempted by hand at level 2.
    let r = agent.request(&Request::Suspend {
        pid: Pid(lp.pid),
        level: Level::Deactivate,
    });
    assert!(matches!(r, Reply::Done { .. }), "{r:?}");
    let text =
        test_support::wait::wait_value("level 2 in a scrape", Duration::from_secs(30), || {
            let (_, body) = get(addr, "/metrics");
            (sample(&body, "kfdq_process_level", &[("pid", &pid)]) == Some(2.0)).then_some(body)
        });
    assert!(
        sample(
            &text,
            "kfdq_preemptions_total",
            &[("class", "batch"), ("level", "deactivate")]
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "kfdq_preemption_latency_seconds_count",
            &[("level", "deactivate")]
        )
        .is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "kfdq_class_busy_seconds_total",
            &[("class", "batch")]
        )
        .is_some_and(|s| s > 0.0),
        "{text}"
    );
    assert!(
        sample(&text, "kfdq_partition_resident_slots", &[]).is_some_and(|n| n > 0.0),
        "{text}"
    );

    // The exposition is valid by Prometheus's own linter.
    let mut promtool = Command::new(tool("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = promtool.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // The real server scrapes it and answers for the series.
    let p = prometheus(addr);
    let level = test_support::wait::wait_value(
        "prometheus to scrape kfdqd and answer for kfdq_process_level",
        Duration::from_secs(120),
        || {
            query(
                &p,
                &format!("kfdq_process_level{{job=\"kfdqd\",pid=\"{pid}\"}}"),
            )
        },
    );
    assert_eq!(level, 2.0);
    assert_eq!(query(&p, "up{job=\"kfdqd\"}"), Some(1.0));

    // Resumed: the server sees level 0 on a later scrape.
    let r = agent.request(&Request::Resume { pid: Pid(lp.pid) });
    assert!(matches!(r, Reply::Done { .. }), "{r:?}");
    test_support::wait::wait_value(
        "prometheus to see the resume",
        Duration::from_secs(120),
        || (query(&p, &format!("kfdq_process_level{{pid=\"{pid}\"}}")) == Some(0.0)).then_some(()),
    );
    lp.stop();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn bad_http_requests_get_errors_and_the_agent_keeps_serving() {
    let emu = mount();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let agent = Agent::start(
        &emu,
        &format!("{}\n[metrics]\nlisten = \"{addr}\"\n", two_classes("hold")),
    );
    assert!(get(addr, "/nothing").0.contains("404"));
    assert!(
        http(addr, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            .0
            .contains("405")
    );
    let huge = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let mut s = TcpStream::connect(addr).unwrap();
    // The endpoint may close before reading it all; what matters is what follows.
    let _ = s.write_all(huge.as_bytes());
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.is_empty() || reply.contains("431"), "{reply}");
    // A client that connects and says nothing does not block the agent's own socket.
    let _idle = TcpStream::connect(addr).unwrap();
    let st = agent.status();
    assert_eq!(st.agent_pid, Pid(agent.child.id()));
    // Nor, once it times out, the endpoint.
    let (status, body) = get(addr, "/metrics");
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("kfdq_agent_build_info"), "{body}");

    // A port in use: kfdqd refuses to start and says which setting to change (on GPUs of its
    // own: on the first agent's, the lock would refuse it first).
    let other = mount();
    let out = Command::new(workspace_bin("kfdqd"))
        .arg("--config")
        .arg(&agent.config)
        .arg("--socket")
        .arg(agent.dir.path().join("other.sock"))
        .arg("--root")
        .arg(other.root())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&addr.to_string()) && err.contains("[metrics] listen"),
        "{err}"
    );
}
