//! The device plugin against a kubelet stand-in (real gRPC over Unix sockets), a private
//! kfd-emu mount and a real kfdqd: registration, shares, Allocate, PodResources, health, and
//! kubelet restarts.

mod common;

use std::collections::BTreeSet;

use common::*;
use kfdq::allocation::TOKEN_ENV;
use tonic::Code;

const LATENCY: &str = "kfdq.io/latency";
const BATCH: &str = "kfdq.io/batch";

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn registers_each_class_and_lists_its_shares_per_partition() {
    let mut n = Node::start(Preset::Mi300xCpx, "\"all\"");
    let gpus = n.emu.gpu_ids();
    assert!(gpus.len() > 1, "CPX: several partitions");
    n.wait_registrations(LATENCY, 1);
    n.wait_registrations(BATCH, 1);
    for (res, class, shares) in [(LATENCY, "latency", 1), (BATCH, "batch", 4)] {
        let r = n.kubelet.registration(res).unwrap();
        assert_eq!(r.version, "v1beta1");
        assert_eq!(r.endpoint, format!("kfdq-{class}.sock"));
        let opts = r.options.expect("options sent");
        assert!(!opts.pre_start_required && opts.get_preferred_allocation_available);
        let want: BTreeSet<String> = gpus
            .iter()
            .flat_map(|g| (0..shares).map(move |k| format!("{g}-{class}-{k}")))
            .collect();
        n.wait_list(res, "every share, healthy", |l| {
            l.iter().map(|(id, _)| id.clone()).collect::<BTreeSet<_>>() == want
                && l.iter().all(|(_, h)| h == "Healthy")
        });
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_latency_and_a_batch_share_of_one_partition_go_to_two_containers() {
    let mut n = Node::start(Preset::Mi300xCpx, "\"all\"");
    let g = n.emu.gpu_ids()[0];
    let topo = kfdq::kfd::Topology::read(&kfdq::kfd::Root::new(n.emu.root())).unwrap();
    let minor = topo.gpu(kfdq::GpuId(g)).unwrap().render_minor().unwrap();
    n.wait_registrations(LATENCY, 1);
    n.wait_registrations(BATCH, 1);
    let lat = n.client(LATENCY);
    let bat = n.client(BATCH);
    n.wait_list(LATENCY, "healthy latency shares", |l| {
        !l.is_empty() && l.iter().all(|(_, h)| h == "Healthy")
    });

    // The kubelet asks which batch share to take: shares of one partition, packed.
    let avail: Vec<String> = (0..4).map(|k| format!("{g}-batch-{k}")).collect();
    assert_eq!(bat.preferred(&avail, 2), avail[..2].to_vec());

    let a = lat
        .allocate(&[&format!("{g}-latency-0")])
        .expect("latency share");
    let b = bat
        .allocate(&[&format!("{g}-batch-0")])
        .expect("batch share");
    let mut tokens = Vec::new();
    for (resp, class) in [(&a, "latency"), (&b, "batch")] {
        let c = &resp.container_responses[0];
        let devs: Vec<(&str, &str)> = c
            .devices
            .iter()
            .map(|d| (d.container_path.as_str(), d.host_path.as_str()))
            .collect();
        let root = n.emu.root().display().to_string();
        assert_eq!(
            devs,
            vec![
                ("/dev/kfd", format!("{root}/dev/kfd").as_str()),
                (
                    format!("/dev/dri/renderD{minor}").as_str(),
                    format!("{root}/dev/dri/renderD{minor}").as_str()
                ),
            ]
        );
        for d in &c.devices {
            assert!(
                std::path::Path::new(&d.host_path).exists(),
                "{} exists on the node",
                d.host_path
            );
        }
        let mounts: Vec<(&str, &str, bool)> = c
            .mounts
            .iter()
            .map(|m| (m.container_path.as_str(), m.host_path.as_str(), m.read_only))
            .collect();
        let sock_dir = n.agent.sock.parent().unwrap().display().to_string();
        assert_eq!(
            mounts,
            vec![
                ("/opt/kfdq", "/var/lib/kfdq/lib", true),
                (sock_dir.as_str(), sock_dir.as_str(), true)
            ]
        );
        assert_eq!(c.envs["LD_PRELOAD"], "/opt/kfdq/libkfdq_shim.so");
        assert_eq!(c.envs["KFDQ_SOCKET"], n.agent.sock.display().to_string());
        assert_eq!(c.envs["KFDQ_CLASS"], class);
        assert_eq!(c.envs["ROCR_VISIBLE_DEVICES"], "0");
        let t = &c.envs[TOKEN_ENV];
        assert_eq!(t.len(), 32, "{t}");
        tokens.push(t.clone());
    }
    assert_ne!(tokens[0], tokens[1], "each container has its own token");
    let file = n.allocations();
    assert_eq!(file.allocations.len(), 2);
    for (t, class, id) in [
        (&tokens[0], "latency", format!("{g}-latency-0")),
        (&tokens[1], "batch", format!("{g}-batch-0")),
    ] {
        let a = file
            .find(&t.parse().unwrap())
            .expect("the grant is on file");
        assert_eq!(
            (a.class.as_str(), a.gpu.0, a.devices.clone()),
            (class, g, vec![id])
        );
        assert!(a.pod.is_none(), "no container named yet");
    }

    // Beyond the configured shares, taken, of another class, or spanning partitions: refused.
    let e = lat.allocate(&[&format!("{g}-latency-1")]).unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = lat
        .allocate(&[&format!("{g}-latency-0")])
        .map(|_| ())
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    let e = bat
        .allocate(&[&format!("{g}-batch-0"), &format!("{g}-batch-1")])
        .unwrap_err();
    assert_eq!(
        e.code(),
        Code::AlreadyExists,
        "a share granted with another is refused: {e:?}"
    );
    let e = lat.allocate(&[&format!("{g}-batch-1")]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let g2 = n.emu.gpu_ids()[1];
    let e = bat
        .allocate(&[&format!("{g}-batch-2"), &format!("{g2}-batch-2")])
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert_eq!(
        n.allocations().allocations.len(),
        2,
        "refusals record nothing"
    );

    // PodResources names the containers; a container gone loses its grant after the grace.
    n.kubelet.set_holders(vec![
        Holder {
            namespace: "prod".into(),
            pod: "llm-server".into(),
            container: "server".into(),
            resource: LATENCY.into(),
            ids: vec![format!("{g}-latency-0")],
        },
        Holder {
            namespace: "research".into(),
            pod: "train".into(),
            container: "trainer".into(),
            resource: BATCH.into(),
            ids: vec![format!("{g}-batch-0")],
        },
    ]);
    let path = n.allocations.clone();
    let file = wait_state(
        "both grants named by PodResources",
        WAIT_LIMIT,
        || kfdq::allocation::AllocationFile::read(&path).unwrap(),
        |f| f.allocations.iter().all(|a| a.pod.is_some()),
    );
    let pod = file
        .find(&tokens[1].parse().unwrap())
        .unwrap()
        .pod
        .clone()
        .unwrap();
    assert_eq!(
        (
            pod.namespace.as_str(),
            pod.name.as_str(),
            pod.container.as_str()
        ),
        ("research", "train", "trainer")
    );
    n.kubelet.set_holders(vec![Holder {
        namespace: "prod".into(),
        pod: "llm-server".into(),
        container: "server".into(),
        resource: LATENCY.into(),
        ids: vec![format!("{g}-latency-0")],
    }]);
    let file = wait_state(
        "the batch grant dropped",
        WAIT_LIMIT,
        || kfdq::allocation::AllocationFile::read(&path).unwrap(),
        |f| f.allocations.len() == 1,
    );
    assert_eq!(file.allocations[0].class, "latency");
    // Its share can be granted again.
    bat.allocate(&[&format!("{g}-batch-0")])
        .expect("the freed share");
    n.assert_plugin_alive();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_unplugged_partition_or_a_stopped_agent_turns_shares_unhealthy() {
    let mut n = Node::start(Preset::Mi300xCpx, "\"all\"");
    let gpus = n.emu.gpu_ids();
    let gone = gpus[1];
    n.wait_registrations(BATCH, 1);
    let health = |l: &[(String, String)], g: u32| -> Vec<String> {
        l.iter()
            .filter(|(id, _)| id.starts_with(&format!("{g}-")))
            .map(|(_, h)| h.clone())
            .collect()
    };
    n.wait_list(BATCH, "all healthy", |l| {
        !l.is_empty() && l.iter().all(|(_, h)| h == "Healthy")
    });

    std::fs::write(n.emu.path("kfd-emu/unplug"), format!("remove {gone}\n")).unwrap();
    n.wait_list(
        BATCH,
        "the unplugged partition's shares unhealthy, the others healthy",
        |l| health(l, gone) == vec!["Unhealthy"; 4] && health(l, gpus[0]) == vec!["Healthy"; 4],
    );
    let e = n
        .client(BATCH)
        .allocate(&[&format!("{gone}-batch-0")])
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unavailable, "{e:?}");
    std::fs::write(n.emu.path("kfd-emu/unplug"), format!("restore {gone}\n")).unwrap();
    n.wait_list(BATCH, "healthy again", |l| {
        l.iter().all(|(_, h)| h == "Healthy")
    });

    n.agent.kill();
    n.wait_list(BATCH, "every share unhealthy without the agent", |l| {
        l.iter().all(|(_, h)| h == "Unhealthy")
    });
    n.agent.restart();
    n.wait_list(BATCH, "healthy with the agent back", |l| {
        l.iter().all(|(_, h)| h == "Healthy")
    });
    assert_eq!(
        n.kubelet.registrations().len(),
        2,
        "one registration per class throughout"
    );
    n.assert_plugin_alive();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_restarted_or_vanished_kubelet_gets_registrations_again() {
    let mut n = Node::start(Preset::Mi308x, "\"all\"");
    n.wait_registrations(LATENCY, 1);
    n.wait_registrations(BATCH, 1);
    n.wait_list(BATCH, "a list", |l| l.len() == 4);

    // The kubelet restarts: kubelet.sock recreated (a new inode), its streams cut, its
    // registry empty.
    let (dir, pr) = (n.plugin_dir.clone(), n.pod_resources.clone());
    n.kubelet.stop();
    n.kubelet = Kubelet::start(&dir, &pr);
    n.wait_registrations(LATENCY, 1);
    n.wait_registrations(BATCH, 1);
    n.wait_list(BATCH, "a list on the new kubelet's stream", |l| {
        l.len() == 4
    });

    // The kubelet vanishes mid-stream and the plugin sockets with it (a starting kubelet
    // clears the directory), stays away a while, then comes back. The restart above may
    // have logged its own absence (the plugin can retry in the gap), so only what follows
    // is counted.
    let logged_before = n.log_text().len();
    n.kubelet.stop();
    for c in ["latency", "batch"] {
        let _ = std::fs::remove_file(dir.join(format!("kfdq-{c}.sock")));
    }
    wait_for("the plugin to serve again on new sockets", || {
        dir.join("kfdq-latency.sock").exists() && dir.join("kfdq-batch.sock").exists()
    });
    n.assert_plugin_alive();
    // Without the kubelet the log says why (once per class), and PodResources' error names
    // its cause, not only "transport error".
    wait_for(
        "the missing kubelet socket and PodResources' cause in the log",
        || {
            let full = n.log_text();
            let log = full.get(logged_before..).unwrap_or_default();
            log.matches("no kubelet socket at").count() >= 2
                && full.contains("No such file or directory")
        },
    );
    let full = n.log_text();
    let log = full.get(logged_before..).unwrap_or_default();
    assert_eq!(
        log.matches("no kubelet socket at").count(),
        2,
        "once per class in this absence:\n{log}"
    );
    // Not a terminal: no colour codes in the log.
    assert!(!log.contains('\u{1b}'), "{log}");
    n.kubelet = Kubelet::start(&dir, &pr);
    n.wait_registrations(LATENCY, 1);
    n.wait_registrations(BATCH, 1);
    n.wait_list(BATCH, "a list from the new sockets", |l| l.len() == 4);
    let g = n.emu.gpu_ids()[0];
    n.client(LATENCY)
        .allocate(&[&format!("{g}-latency-0")])
        .expect("Allocate after the restarts");
    n.assert_plugin_alive();
}

#[test]
fn a_malformed_configuration_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("device-plugin.toml");
    let good = config_text(
        dir.path(),
        std::path::Path::new("/"),
        std::path::Path::new("/run/kfdq/kfdq.sock"),
        "[45704]",
    );
    std::fs::write(&path, &good).unwrap();
    // --check asks the node for what the file names: kfdqd's classes, the paths.
    let check = |agent_config: &std::path::Path| {
        std::process::Command::new(plugin_bin())
            .arg("--check")
            .arg("--config")
            .arg(&path)
            .arg("--agent-config")
            .arg(agent_config)
            .output()
            .unwrap()
    };
    let agent_conf = dir.path().join("kfdq.toml");
    let classes = "[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nmatch = { env = true }\n";
    std::fs::write(&agent_conf, classes).unwrap();
    let out = check(&agent_conf);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let line = |key: &str| good.lines().position(|l| l.starts_with(key)).unwrap() + 1;
    assert!(
        err.contains(&format!(
            "line {}: device_plugins_dir:",
            line("device_plugins_dir")
        )) && err.contains("is not there"),
        "{err}"
    );
    std::fs::create_dir_all(dir.path().join("device-plugins")).unwrap();
    let out = check(&agent_conf);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(&format!("line {}: shim:", line("shim"))),
        "{err}"
    );
    let shim = dir.path().join("lib/libkfdq_shim.so");
    std::fs::create_dir_all(shim.parent().unwrap()).unwrap();
    std::fs::write(&shim, "").unwrap();
    let sock = dir.path().join("run/kfdq.sock");
    let good = good
        .replace("/var/lib/kfdq/lib/libkfdq_shim.so", shim.to_str().unwrap())
        .replace("/run/kfdq/kfdq.sock", sock.to_str().unwrap());
    std::fs::write(&path, &good).unwrap();
    let out = check(&agent_conf);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains(&format!("line {}: agent_socket:", line("agent_socket"))),
        "{err}"
    );
    std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    // A class kfdqd does not define would fall back silently: refused, naming kfdqd's.
    std::fs::write(&agent_conf, classes.replace("\"batch\"", "\"training\"")).unwrap();
    let out = check(&agent_conf);
    let err = String::from_utf8_lossy(&out.stderr);
    let batch_line = good.lines().position(|l| l == "name = \"batch\"").unwrap() + 1;
    assert!(
        !out.status.success()
            && err.contains(&format!("line {batch_line}: name: kfdqd's configuration"))
            && err.contains("defines no class \"batch\"")
            && err.contains("latency, training"),
        "{err}"
    );
    std::fs::write(&agent_conf, classes).unwrap();
    let out = check(&agent_conf);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("kfdq.io/batch: 4 share(s) per partition"),
        "{stdout}"
    );

    let line = good
        .lines()
        .position(|l| l.starts_with("shares = 4"))
        .unwrap()
        + 1;
    std::fs::write(&path, good.replace("shares = 4", "shares = 400")).unwrap();
    let out = std::process::Command::new(plugin_bin())
        .arg("--check")
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "line {line}: shares: 400 is out of range; it takes an integer 1..=64"
        )),
        "{err}"
    );

    let line = good
        .lines()
        .position(|l| l.starts_with("grant_grace_ms"))
        .unwrap()
        + 1;
    std::fs::write(
        &path,
        good.replace("grant_grace_ms = 1000", "grant_grace_ms = soon"),
    )
    .unwrap();
    let out = std::process::Command::new(plugin_bin())
        .arg("--config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "refused before it starts");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("line {line}: grant_grace_ms takes milliseconds")),
        "{err}"
    );
}

/// A GPU process that holds queues (kfdq-test-hold) with `env`, until dropped.
struct GpuProcess(std::process::Child);

impl GpuProcess {
    fn start(root: &std::path::Path, env: &[(&str, &str)]) -> GpuProcess {
        use std::io::BufRead;
        let mut c = std::process::Command::new(workspace_bin("kfdq-test-hold"))
            .arg("--root")
            .arg(root)
            .args(["--queues", "1", "--runtime-enable"])
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn kfdq-test-hold");
        let mut line = String::new();
        std::io::BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"queues\""), "the holder's queues: {line:?}");
        GpuProcess(c)
    }
}

impl Drop for GpuProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The whole chain: the kubelet stand-in's Allocate and PodResources -> the plugin's grant on
/// file -> kfdqd reads a process's token from its environment and caps its class at the
/// grant's, naming the pod, whatever `KFDQ_CLASS` says.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_batch_grant_caps_the_class_of_the_container_s_process_in_kfdqd() {
    let mut n = Node::start(Preset::Mi300xCpx, "\"all\"");
    let g = n.emu.gpu_ids()[0];
    n.wait_registrations(BATCH, 1);
    n.wait_list(BATCH, "healthy batch shares", |l| {
        !l.is_empty() && l.iter().all(|(_, h)| h == "Healthy")
    });
    let a = n
        .client(BATCH)
        .allocate(&[&format!("{g}-batch-0")])
        .expect("batch share");
    let token = a.container_responses[0].envs[TOKEN_ENV].clone();
    n.kubelet.set_holders(vec![Holder {
        namespace: "research".into(),
        pod: "train".into(),
        container: "trainer".into(),
        resource: BATCH.into(),
        ids: vec![format!("{g}-batch-0")],
    }]);
    let path = n.allocations.clone();
    wait_state(
        "the grant named by PodResources",
        WAIT_LIMIT,
        || kfdq::allocation::AllocationFile::read(&path).unwrap(),
        |f| f.allocations.iter().any(|a| a.pod.is_some()),
    );

    // The container's process asks for latency; its grant says batch.
    let p = GpuProcess::start(
        n.emu.root(),
        &[(TOKEN_ENV, token.as_str()), ("KFDQ_CLASS", "latency")],
    );
    let pid = kfdq::Pid(p.0.id());
    let st = wait_state(
        "kfdqd to classify the container's process",
        WAIT_LIMIT,
        || n.agent.status(),
        |s| {
            s.as_ref()
                .is_some_and(|s| s.processes.iter().any(|q| q.pid == pid))
        },
    )
    .unwrap();
    let proc = st.processes.iter().find(|q| q.pid == pid).unwrap();
    assert_eq!(proc.class, "batch", "{proc:?}");
    assert!(
        proc.class_reason.contains("research/train/trainer"),
        "the note names the pod: {proc:?}"
    );
    let pod = proc.pod.as_ref().expect("the process's pod");
    assert_eq!(
        (pod.namespace.as_str(), pod.name.as_str()),
        ("research", "train")
    );
}
