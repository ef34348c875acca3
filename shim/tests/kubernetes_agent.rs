//! kfdqd's side of Kubernetes sharing, through the real binaries on kfd-emu: the device
//! plugin's allocations file (written here with `AllocationFile::write`, as the plugin writes
//! it) caps the class of the processes that carry its tokens, whatever they ask; their metrics
//! carry the pod's labels, which Debian's Prometheus scrapes and the Grafana dashboard in
//! deploy/grafana queries; the node's feature file for node-feature-discovery says what
//! `kfdq doctor` finds.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::kfdqd::{Agent, text};
use common::prom::{encode_query, free_port, get, prometheus, query, sample};
use common::*;
use kfdq::Pid;
use kfdq::allocation::{Allocation, AllocationFile, FILE_VERSION, PodRef, TOKEN_ENV, Token};
use kfdq::ids::GpuId;
use kfdq::proto::{Level, Reply, Request};
use nix::sys::signal::Signal;

/// Three classes anyone may ask for with KFDQ_CLASS (without an allocation, `latency` is
/// granted to whoever asks); none is preempted by the policy, so that the workers' own GPU
/// work never waits on the others.
const CLASSES: &str = "\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"normal\"\nrank = 1\npriority = 8\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nmatch = { env = true }\n";

/// The agent's configuration with its allocations file and feature file under `dir`.
fn config(dir: &Path, features: &str, extra: &str) -> String {
    format!(
        "[agent]\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\n{extra}\n[kubernetes]\nallocations = \"{}\"\nfeatures = \"{features}\"\n{CLASSES}",
        dir.join("allocations.json").display()
    )
}

fn pod(namespace: &str, name: &str, container: &str) -> Option<PodRef> {
    Some(PodRef {
        namespace: namespace.into(),
        name: name.into(),
        container: container.into(),
    })
}

fn grant(token: &Token, class: &str, pod: Option<PodRef>) -> Allocation {
    Allocation {
        token: token.clone(),
        class: class.into(),
        gpu: GpuId(1),
        devices: vec![format!("1-{class}-0")],
        pod,
    }
}

/// Writes the allocations file as the plugin does (atomically).
fn write_allocations(dir: &Path, allocations: Vec<Allocation>) {
    AllocationFile {
        version: FILE_VERSION,
        allocations,
    }
    .write(&dir.join("allocations.json"))
    .unwrap();
}

/// The worker (three streams) under the shim with `env`, connected to `agent`.
fn worker(emu: &Emu, agent: &Agent, env: &[(&'static str, String)]) -> App {
    let mut l = Launch::new(programs().get("worker"))
        .arg("300")
        .env("KFDQ_SOCKET", agent.sock.display().to_string());
    for (k, v) in env {
        l = l.env(k, v.clone());
    }
    let mut app = l.start(emu);
    app.wait_line("READY");
    app
}

/// The KFD priorities of `pid`'s compute queues in the emulator (the kernel's view).
fn priorities(emu: &Emu, pid: u32) -> Vec<u32> {
    emu.stats()
        .queues
        .into_iter()
        .filter(|q| q.pid == pid && q.queue_type.starts_with("compute"))
        .map(|q| q.priority)
        .collect()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_allocation_caps_the_class_whatever_the_process_asks() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (batch, latency) = (Token::from_bytes([0x11; 16]), Token::from_bytes([0x22; 16]));
    write_allocations(
        dir.path(),
        vec![
            grant(&batch, "batch", pod("ml", "train", "trainer")),
            grant(&latency, "latency", pod("serving", "llm", "server")),
        ],
    );
    let agent = Agent::start(&emu, &config(dir.path(), "", ""));

    // A batch allocation asking for latency: batch, and status says why.
    let capped = worker(
        &emu,
        &agent,
        &[
            (TOKEN_ENV, batch.to_string()),
            ("KFDQ_CLASS", "latency".into()),
        ],
    );
    let p = agent.wait_connected(capped.pid, 3);
    assert_eq!(p.class, "batch", "{p:?}");
    assert_eq!(
        p.class_reason,
        "capped by kubernetes allocation ml/train/trainer"
    );
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("KFDQ_CLASS=latency is above class batch")),
        "{p:?}"
    );
    assert_eq!(p.pod, pod("ml", "train", "trainer"));
    let status = text(&agent.kfdq(&["status"], None));
    assert!(
        status.contains("capped by kubernetes allocation ml/train/trainer"),
        "{status}"
    );
    // The kernel's queues follow the class: none above the low pipe band (0-6).
    test_support::wait::wait_state(
        "the capped process's queues in the low band",
        WAIT_LIMIT,
        || priorities(&emu, capped.pid),
        |p| p.len() == 3 && p.iter().all(|&x| x <= 6),
    );

    // A latency allocation: latency.
    let served = worker(&emu, &agent, &[(TOKEN_ENV, latency.to_string())]);
    let p = agent.wait_connected(served.pid, 3);
    assert_eq!(p.class, "latency", "{p:?}");
    assert_eq!(p.class_reason, "kubernetes allocation serving/llm/server");

    // A forged token: the fallback class (the lowest), whatever it asks.
    let forged = worker(
        &emu,
        &agent,
        &[
            (TOKEN_ENV, Token::from_bytes([0x33; 16]).to_string()),
            ("KFDQ_CLASS", "latency".into()),
        ],
    );
    let p = agent.wait_connected(forged.pid, 3);
    assert_eq!(p.class, "batch", "{p:?}");
    assert!(p.class_reason.contains("pod_fallback_class"), "{p:?}");

    // kfdq class cannot raise the batch allocation, not even as root.
    let pid = capped.pid.to_string();
    let o = agent.kfdq(&["class", &pid, "latency"], None);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("capped by kubernetes allocation ml/train/trainer"),
        "{}",
        text(&o)
    );
    assert_eq!(agent.process(capped.pid).unwrap().class, "batch");

    // A child started without the token (`env -u`) stays in its container's allocation: the
    // agent takes the nearest ancestor's token in the same cgroup.
    let w = programs().get("worker").display().to_string();
    let mut shell = Launch::new("/bin/sh".into())
        .arg("-c")
        .arg(format!(
            "env -u {TOKEN_ENV} KFDQ_CLASS=latency {w} 300; exit $?"
        ))
        .env(TOKEN_ENV, batch.to_string())
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(&emu);
    let ready = shell.wait_line("READY");
    let child: u32 = ready.split_whitespace().nth(1).unwrap().parse().unwrap();
    let environ = std::fs::read(format!("/proc/{child}/environ")).unwrap();
    assert!(
        !String::from_utf8_lossy(&environ).contains(TOKEN_ENV),
        "the child carries no token itself"
    );
    let p = agent.wait_connected(child, 3);
    assert_eq!(p.class, "batch", "{p:?}");
    assert_eq!(
        p.class_reason,
        "capped by kubernetes allocation ml/train/trainer"
    );
    shell.stop();
    shell.finish();

    // A broken allocations file: no allocations, so every token falls back; the agent serves
    // on, and the whole file puts the latency process back.
    std::fs::write(dir.path().join("allocations.json"), "{ half a file").unwrap();
    let p = agent.wait(&format!("pid {} to fall back", served.pid), |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(served.pid) && p.class == "batch")
    });
    let w = &p
        .processes
        .iter()
        .find(|p| p.pid == Pid(served.pid))
        .unwrap()
        .warnings;
    assert!(
        w.iter()
            .any(|w| w.contains("class latency -> batch by the device plugin's allocations")),
        "{w:?}"
    );
    assert!(
        agent.log_text().contains("not an allocations file"),
        "{}",
        agent.log_text()
    );
    write_allocations(
        dir.path(),
        vec![
            grant(&batch, "batch", pod("ml", "train", "trainer")),
            grant(&latency, "latency", pod("serving", "llm", "server")),
        ],
    );
    agent.wait(&format!("pid {} back in latency", served.pid), |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(served.pid) && p.class == "latency")
    });

    for app in [capped, served, forged] {
        app.stop();
        app.finish();
    }
}

/// `key=value` lines of a feature file (comments skipped).
fn labels(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or((l, "true"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// `kfdq --json doctor` on the emulator: per partition, the highest level that works with
/// every level below it, and whether the tracer path works.
fn doctor_levels(emu: &Emu) -> Vec<(u64, u32, bool)> {
    let out = std::process::Command::new(workspace_bin("kfdq"))
        .arg("--root")
        .arg(emu.root())
        .args([
            "--json",
            "doctor",
            "--socket",
            "/nonexistent-kfdq/kfdq.sock",
        ])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let works = |l: &str| {
                p["levels"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["level"] == l && x["works"] == true)
            };
            let max = (0..=3)
                .take_while(|n| works(&n.to_string()))
                .last()
                .unwrap();
            (p["gpu_id"].as_u64().unwrap(), max, works("tracer"))
        })
        .collect()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_node_feature_file_says_what_kfdq_doctor_finds_and_goes_when_the_agent_stops() {
    // Two partitions with every level; then a KFD without the debugger API (no level 3).
    for (config_emu, level) in [
        (
            EmuConfig {
                gpus: 2,
                ..EmuConfig::default()
            },
            3,
        ),
        (
            EmuConfig {
                kfd_minor: 11,
                ..EmuConfig::default()
            },
            2,
        ),
    ] {
        let emu = mount_with(config_emu);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("features.d/kfdq");
        let mut agent = Agent::start(&emu, &config(dir.path(), &file.display().to_string(), ""));
        wait_for("the feature file", || file.exists());
        let l = labels(&file);
        let doctor = doctor_levels(&emu);
        assert!(!doctor.is_empty());
        assert_eq!(l["kfdq.io/version"], env!("CARGO_PKG_VERSION"));
        assert_eq!(
            l["kfdq.io/priority-mode"], "pipe",
            "a current kernel programs the pipe priority only"
        );
        assert_eq!(l["kfdq.io/partitions"], doctor.len().to_string());
        assert_eq!(l["kfdq.io/preemption-level"], level.to_string(), "{l:?}");
        for (gpu, max, tracer) in &doctor {
            assert_eq!(
                l[&format!("kfdq.io/gpu-{gpu}.preemption-level")],
                max.to_string(),
                "{l:?}"
            );
            assert_eq!(l[&format!("kfdq.io/gpu-{gpu}.tracer")], tracer.to_string());
        }
        assert!(
            l.keys().all(|k| k.starts_with("kfdq.io/")),
            "NFD wants a namespace: {l:?}"
        );
        let names: Vec<_> = std::fs::read_dir(file.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["kfdq"], "no temporary file left");

        if level == 3 {
            // A clean stop removes it (a stopped agent enforces nothing).
            agent.signal(Signal::SIGTERM);
            let st = agent.child.wait().unwrap();
            assert!(st.success(), "{st}: {}", agent.log_text());
            assert!(!file.exists(), "removed at the stop");
        } else {
            // A reload that turns the labels off removes the file.
            std::fs::write(
                &agent.config,
                std::fs::read_to_string(&agent.config).unwrap().replace(
                    &format!("features = \"{}\"", file.display()),
                    "features = \"\"",
                ),
            )
            .unwrap();
            agent.signal(Signal::SIGHUP);
            wait_for("the feature file to go at the reload", || !file.exists());
            assert_eq!(agent.status().counters.reloads, 1, "{}", agent.log_text());
        }
    }
}

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
