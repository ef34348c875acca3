//! Tenants who do not cooperate (issue 50), pods: processes in cgroups laid out as the kubelet
//! makes them, under the real shim and a real kfdqd on kfd-emu. A pod cannot escape the class
//! its container was granted — not by dropping its token, not with another container's.

mod common;

use std::path::Path;

use common::kfdqd::Agent;
use common::pod::Container;
use common::*;
use kfdq::allocation::{Allocation, AllocationFile, FILE_VERSION, PodRef, TOKEN_ENV, Token};
use kfdq::ids::GpuId;

/// Three classes anyone may ask for with KFDQ_CLASS (outside pods `latency` is granted to
/// whoever asks); the fallback for pods is the default, the lowest (`batch`).
const CLASSES: &str = "\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"normal\"\nrank = 1\npriority = 8\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nmatch = { env = true }\n";

fn config(dir: &Path) -> String {
    format!(
        "[agent]\nhysteresis_ms = 20\n\n[kubernetes]\nallocations = \"{}\"\nfeatures = \"\"\n{CLASSES}",
        dir.join("allocations.json").display()
    )
}

fn grant(token: &Token, class: &str, pod: &str) -> Allocation {
    Allocation {
        token: token.clone(),
        class: class.into(),
        gpu: GpuId(1),
        devices: vec![format!("1-{class}-{pod}")],
        pod: Some(PodRef {
            namespace: "ns".into(),
            name: pod.into(),
            container: "c".into(),
        }),
    }
}

const DROP: &str = "env -u KFDQ_ALLOCATION";

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_pod_keeps_its_containers_grant_whatever_token_it_carries() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (normal, batch, latency) = (
        Token::from_bytes([0x11; 16]),
        Token::from_bytes([0x22; 16]),
        Token::from_bytes([0x33; 16]),
    );
    AllocationFile {
        version: FILE_VERSION,
        allocations: vec![
            grant(&normal, "normal", "train"),
            grant(&batch, "batch", "etl"),
            grant(&latency, "latency", "llm"),
        ],
    }
    .write(&dir.path().join("allocations.json"))
    .unwrap();
    let (a, b, l, c) = (
        Container::new(),
        Container::new(),
        Container::new(),
        Container::new(),
    );
    let agent = Agent::start(&emu, &config(dir.path()));
    let sock = agent.sock.clone();
    let ask_latency = ("KFDQ_CLASS", "latency".to_string());
    let class_of = |pid: u32| {
        let p = agent.wait_connected(pid, 3);
        (p.class, p.class_reason)
    };

    // Container A's first process carries its grant (normal): normal, whatever it asks.
    let first = a.worker(
        &emu,
        &sock,
        "",
        &[(TOKEN_ENV, normal.to_string()), ask_latency.clone()],
    );
    assert_eq!(class_of(first.pid).0, "normal");
    // Another process of A without the token (dropped with exec: same pid, no ancestor in the
    // cgroup) is still in A's grant.
    let dropped = a.worker(
        &emu,
        &sock,
        DROP,
        &[(TOKEN_ENV, normal.to_string()), ask_latency.clone()],
    );
    let (class, why) = class_of(dropped.pid);
    assert_eq!(class, "normal", "{why}");
    assert!(why.contains("kubernetes allocation ns/train/c"), "{why}");

    // Container B granted batch, whose first process drops the token before the agent saw
    // it: still batch (a pod's process without a grant gets pod_fallback_class).
    let b_first = b.worker(
        &emu,
        &sock,
        DROP,
        &[(TOKEN_ENV, batch.to_string()), ask_latency.clone()],
    );
    let (class, why) = class_of(b_first.pid);
    assert_eq!(class, "batch", "{why}");
    assert!(why.contains("pod_fallback_class"), "{why}");

    // The latency grant in its own container: latency.
    let served = l.worker(&emu, &sock, "", &[(TOKEN_ENV, latency.to_string())]);
    assert_eq!(class_of(served.pid).0, "latency");
    // The same token leaked into container C, or used outside any pod: nothing.
    let leaked = c.worker(
        &emu,
        &sock,
        "",
        &[(TOKEN_ENV, latency.to_string()), ask_latency.clone()],
    );
    let (class, why) = class_of(leaked.pid);
    assert_eq!(class, "batch", "{why}");
    assert!(why.contains("another container"), "{why}");
    let mut outside = Launch::new(programs().get("worker"))
        .arg("300")
        .env("KFDQ_SOCKET", sock.display().to_string())
        .env(TOKEN_ENV, latency.to_string())
        .env("KFDQ_CLASS", "latency")
        .start(&emu);
    outside.wait_line("READY");
    let (class, why) = class_of(outside.pid);
    assert_eq!(class, "batch", "{why}");

    for app in [first, dropped, b_first, served, leaked, outside] {
        app.stop();
        app.finish();
    }
}

/// Root in a pod is the pod's root, not the node's: it controls and sees its own container's
/// processes only, even those of the same uid in another pod; the node's root (outside pods)
/// still controls any.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_root_in_a_pod_controls_and_sees_its_own_container_only() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (Container::new(), Container::new());
    let admin_sock = dir.path().join("admin").join("admin.sock");
    let cfg = config(dir.path()).replacen(
        "[agent]\n",
        &format!("[agent]\nadmin_socket = \"{}\"\n", admin_sock.display()),
        1,
    );
    let agent = Agent::start(&emu, &cfg);
    let sock = agent.sock.display().to_string();
    let kfdq = workspace_bin("kfdq");
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&admin_sock).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "the admin socket is root's only");
    // Two pods' processes, both uid 0, without allocations (pod_fallback_class: batch).
    let mine = a.worker(&emu, &agent.sock, "", &[]);
    let theirs = b.worker(&emu, &agent.sock, "", &[]);
    agent.wait_connected(mine.pid, 3);
    agent.wait_connected(theirs.pid, 3);
    let in_a = |args: &[&str]| {
        let mut all = vec!["--agent", sock.as_str()];
        all.extend_from_slice(args);
        a.run(&kfdq, &all)
    };

    let (t, m) = (theirs.pid.to_string(), mine.pid.to_string());
    for args in [
        vec!["suspend", t.as_str()],
        vec!["set-priority", t.as_str(), "3"],
        vec!["class", t.as_str(), "batch"],
    ] {
        let o = in_a(&args);
        let out = common::kfdqd::text(&o);
        assert!(!o.status.success(), "{args:?}: {out}");
        assert!(out.contains("permission"), "{args:?}: {out}");
    }
    assert_eq!(agent.process(theirs.pid).unwrap().manual, None, "untouched");
    // Its own container's process: allowed.
    let o = in_a(&["suspend", m.as_str()]);
    assert!(o.status.success(), "{}", common::kfdqd::text(&o));
    let o = in_a(&["resume", m.as_str()]);
    assert!(o.status.success(), "{}", common::kfdqd::text(&o));

    // Status from the pod: its own process only; from the node's root: both.
    let o = in_a(&["--json", "status"]);
    let s: kfdq::proto::control::NodeStatus = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::kfdqd::text(&o)));
    let pids: Vec<u32> = s.processes.iter().map(|p| p.pid.0).collect();
    assert_eq!(pids, [mine.pid], "a pod sees its own container's processes");
    let pids: Vec<u32> = agent.status().processes.iter().map(|p| p.pid.0).collect();
    assert!(
        pids.contains(&theirs.pid) && pids.contains(&mine.pid),
        "{pids:?}"
    );
    // Through the admin socket (the agent's own pod: `kubectl exec` into kfdqd), a pod's
    // root is a node admin.
    let o = in_a(&["--admin", &admin_sock.display().to_string(), "suspend", &t]);
    assert!(o.status.success(), "{}", common::kfdqd::text(&o));
    let o = in_a(&["--admin", &admin_sock.display().to_string(), "resume", &t]);
    assert!(o.status.success(), "{}", common::kfdqd::text(&o));
    // The node's root suspends any.
    let o = agent.kfdq(&["suspend", &t], None);
    assert!(o.status.success(), "{}", common::kfdqd::text(&o));
    let o = agent.kfdq(&["resume", &t], None);
    assert!(o.status.success(), "{}", common::kfdqd::text(&o));
    for app in [mine, theirs] {
        app.stop();
        app.finish();
    }
}
