//! kfdqd's metrics under Kubernetes sharing, through the real binaries on kfd-emu: the
//! series of processes that carry a device plugin grant's token carry the pod's labels, which
//! Debian's Prometheus scrapes, and every query of the Grafana dashboard in deploy/grafana
//! names only series and labels the agent exports. (The class cap and the node's feature
//! file: `kubernetes_agent.rs`.)

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use common::kfdqd::Agent;
use common::kubernetes::{config, grant, pod, worker, write_allocations};
use common::prom::{encode_query, free_port, get, prometheus, query, sample};
use common::*;
use kfdq::Pid;
use kfdq::allocation::{TOKEN_ENV, Token};
use kfdq::proto::{Level, Reply, Request};

/// Every series of a scrape: metric name -> label names seen on its samples.
fn series(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut m: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some((series, _)) = l.rsplit_once(' ') else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let e = m.entry(name.to_owned()).or_default();
        for pair in labels.trim_end_matches('}').split("\",") {
            if let Some((k, _)) = pair.split_once('=') {
                e.insert(k.trim_matches(',').to_owned());
            }
        }
    }
    m
}

/// The metric names (`kfdq_...`) and label names (in `by (...)` and `{...}` matchers) of a
/// PromQL expression.
fn names_in(expr: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut metrics = BTreeSet::new();
    let mut labels = BTreeSet::new();
    let mut rest = expr;
    while let Some(i) = rest.find("kfdq_") {
        let end = rest[i..].find(|c| !word(c)).map_or(rest.len(), |e| i + e);
        metrics.insert(rest[i..end].to_owned());
        rest = &rest[end..];
    }
    for (open, close) in [("by (", ')'), ("{", '}')] {
        let mut rest = expr;
        while let Some(i) = rest.find(open) {
            let inner = &rest[i + open.len()..];
            let end = inner.find(close).unwrap();
            for part in inner[..end].split(',') {
                let name: String = part.trim().chars().take_while(|c| word(*c)).collect();
                if !name.is_empty() {
                    labels.insert(name);
                }
            }
            rest = &inner[end..];
        }
    }
    (metrics, labels)
}

/// Every PromQL expression of the dashboard: panel targets and template variable queries
/// (`label_values(METRIC, LABEL)` becomes the metric with the label in a `by`).
fn dashboard_queries() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/grafana/kfdq.json");
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut q: Vec<String> = Vec::new();
    for p in d["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().into_iter().flatten() {
            q.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    for v in d["templating"]["list"].as_array().unwrap() {
        if let Some(def) = v["definition"].as_str() {
            let inner = def
                .strip_prefix("label_values(")
                .and_then(|s| s.strip_suffix(')'))
                .unwrap_or_else(|| panic!("a variable query other than label_values: {def}"));
            let (metric, label) = inner.rsplit_once(',').unwrap();
            q.push(format!("count by ({}) ({metric})", label.trim()));
        }
    }
    assert!(q.len() >= 10, "{q:?}");
    q
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn pod_labels_reach_prometheus_and_the_dashboard_asks_only_for_what_the_agent_exports() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let (batch, latency) = (Token::from_bytes([0x44; 16]), Token::from_bytes([0x55; 16]));
    // The batch grant's pod is not known yet (the plugin names it once PodResources does).
    write_allocations(
        dir.path(),
        vec![
            grant(&batch, "batch", None),
            grant(&latency, "latency", pod("serving", "llm", "server")),
        ],
    );
    let agent = Agent::start(
        &emu,
        &config(
            dir.path(),
            "",
            &format!("\n[metrics]\nlisten = \"{addr}\"\n"),
        ),
    );
    let served = worker(&emu, &agent, &[(TOKEN_ENV, latency.to_string())]);
    let mut flood = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2", "2"])
        .env("KFDQ_CLASS", "batch")
        .env(TOKEN_ENV, batch.to_string())
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(&emu);
    flood.wait_line("flooding");
    agent.wait_connected(flood.pid, 2);
    agent.wait_connected(served.pid, 3);
    let (fpid, spid) = (flood.pid.to_string(), served.pid.to_string());
    let scrape = || {
        let (status, body) = get(addr, "/metrics");
        assert!(status.contains("200"), "{status}");
        body
    };

    // No pod yet: the labels are empty; the served pod's are there.
    let t = test_support::wait::wait_value("both processes in a scrape", WAIT_LIMIT, || {
        let t = scrape();
        (sample(&t, "kfdq_process_queues", &[("pid", &fpid)]).is_some()
            && sample(&t, "kfdq_process_queues", &[("pid", &spid)]).is_some())
        .then_some(t)
    });
    assert!(
        sample(&t, "kfdq_process_level", &[("pid", &fpid), ("pod", "")]).is_some(),
        "{t}"
    );
    assert!(
        sample(
            &t,
            "kfdq_process_level",
            &[
                ("pid", &spid),
                ("namespace", "serving"),
                ("pod", "llm"),
                ("container", "server"),
                ("class", "latency")
            ]
        )
        .is_some(),
        "{t}"
    );

    // The plugin learns the batch pod: the agent reads the file again and labels it.
    write_allocations(
        dir.path(),
        vec![
            grant(&batch, "batch", pod("ml", "train", "trainer")),
            grant(&latency, "latency", pod("serving", "llm", "server")),
        ],
    );
    let train = [
        ("pid", fpid.as_str()),
        ("namespace", "ml"),
        ("pod", "train"),
        ("container", "trainer"),
    ];
    test_support::wait::wait_value("the batch pod's labels", WAIT_LIMIT, || {
        sample(&scrape(), "kfdq_process_level", &train)
    });

    // Preempted by hand: the pod's preemption shows per pod, and Prometheus answers by pod.
    let r = agent.request(&Request::Suspend {
        pid: Pid(flood.pid),
        level: Level::Deactivate,
    });
    assert!(matches!(r, Reply::Done { .. }), "{r:?}");
    let during = test_support::wait::wait_value("level 2 in a scrape", WAIT_LIMIT, || {
        let t = scrape();
        (sample(&t, "kfdq_process_level", &train) == Some(2.0)).then_some(t)
    });
    assert!(
        sample(&during, "kfdq_process_preemptions_total", &train).is_some_and(|n| n >= 1.0),
        "{during}"
    );
    assert!(
        sample(&during, "kfdq_process_busy_seconds_total", &train).is_some_and(|s| s > 0.0),
        "the flood was busy before it was preempted: {during}"
    );
    let p = prometheus(addr);
    let level = test_support::wait::wait_value(
        "prometheus to answer for the pod",
        Duration::from_secs(120),
        || {
            query(
                &p,
                "max by (namespace, pod) (kfdq_process_level{namespace=\"ml\", pod=\"train\"})",
            )
        },
    );
    assert_eq!(level, 2.0);
    test_support::wait::wait_value(
        "prometheus to see the pod's preempted time",
        Duration::from_secs(120),
        || {
            query(
                &p,
                "sum by (pod) (kfdq_process_preempted_seconds_total{pod=\"train\"})",
            )
            .filter(|s| *s > 0.0)
        },
    );
    let r = agent.request(&Request::Resume {
        pid: Pid(flood.pid),
    });
    assert!(matches!(r, Reply::Done { .. }), "{r:?}");

    // The batch job ends: its class's busy period is observed.
    let fpid_n = flood.pid;
    drop(flood);
    wait_for("the batch job to disconnect", || {
        agent.process(fpid_n).is_none()
    });
    let after = test_support::wait::wait_value("a batch busy period", WAIT_LIMIT, || {
        let t = scrape();
        sample(
            &t,
            "kfdq_class_busy_period_seconds_count",
            &[("class", "batch")],
        )
        .filter(|n| *n >= 1.0)
        .map(|_| t)
    });

    // The dashboard: every metric it names has samples in the live scrapes, with every label
    // it uses; and Prometheus itself accepts every query.
    let mut live = series(&during);
    for (k, v) in series(&after) {
        live.entry(k).or_default().extend(v);
    }
    for expr in dashboard_queries() {
        let (metrics, labels) = names_in(&expr);
        assert!(!metrics.is_empty(), "{expr}");
        for m in &metrics {
            let carried = live
                .get(m)
                .unwrap_or_else(|| panic!("{expr}: {m} is not in the agent's /metrics"));
            for l in &labels {
                assert!(
                    carried.contains(l),
                    "{expr}: {m} carries no label {l} (it has {carried:?})"
                );
            }
        }
        let q = expr
            .replace("$__rate_interval", "1m")
            .replace("$namespace", ".*")
            .replace("$pod", ".*")
            .replace("$class", ".*");
        let (status, body) = get(p.addr, &format!("/api/v1/query?query={}", encode_query(&q)));
        assert!(
            status.contains("200") && body.contains("\"success\""),
            "Prometheus refused {q}: {status} {body}"
        );
    }
    served.stop();
    served.finish();
}
