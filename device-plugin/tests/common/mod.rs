//! What the device plugin's tests share: a private kfd-emu mount, a real kfdqd on it, the
//! kubelet stand-in, and the real plugin binary, each in the test's own directory.
#![allow(dead_code)]

pub mod kubelet;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use kfd_emu::Preset;
use kfdq::allocation::AllocationFile;
use kfdq::proto::{Reply, Request, encode};
pub use test_support::bins::workspace_bin;
pub use test_support::emu::{Emu, mount_preset};
pub use test_support::require_root;
pub use test_support::wait::{WAIT_LIMIT, wait_for, wait_state};

pub use kubelet::{Holder, Kubelet, PluginClient};

/// A running kfdqd on the emulator.
#[derive(Debug)]
pub struct Agent {
    child: Option<Child>,
    pub sock: PathBuf,
    config: PathBuf,
    log: PathBuf,
    root: PathBuf,
}

impl Agent {
    /// Starts kfdqd with two classes on `emu`, its socket in `dir/run` (a directory of its own,
    /// as on a node: the plugin refuses a socket directory that holds the allocations file),
    /// and waits until it answers.
    pub fn start(emu: &Emu, dir: &Path) -> Agent {
        let run = dir.join("run");
        std::fs::create_dir_all(&run).unwrap();
        let sock = run.join("kfdq.sock");
        let config = dir.join("kfdq.toml");
        std::fs::write(
            &config,
            format!(
                "[agent]\nsocket = \"{}\"\n\n[tracer]\nscan_ms = 100\n\n[kubernetes]\nallocations = \"{}\"\nfeatures = \"\"\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = {{ env = true }}\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"suspend\"\ncontrol = \"tracer\"\nmatch = {{ env = true }}\n",
                sock.display(),
                dir.join("kfdq/allocations.json").display()
            ),
        )
        .unwrap();
        let mut a = Agent {
            child: None,
            sock,
            config,
            log: dir.join("kfdqd.log"),
            root: emu.root().to_owned(),
        };
        a.restart();
        a
    }

    /// The agent's status now, if it answers.
    pub fn status(&self) -> Option<kfdq::proto::control::NodeStatus> {
        use std::io::{BufRead, BufReader, Write};
        let mut s = std::os::unix::net::UnixStream::connect(&self.sock).ok()?;
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        s.write_all(&encode(&Request::Status)).ok()?;
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).ok()?;
        match serde_json::from_str::<Reply>(&line).ok()? {
            Reply::Status(st) => Some(*st),
            _ => None,
        }
    }

    /// Whether it answers a status request now.
    pub fn answers(&self) -> bool {
        use std::io::{BufRead, BufReader, Write};
        let Ok(mut s) = std::os::unix::net::UnixStream::connect(&self.sock) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        if s.write_all(&encode(&Request::Status)).is_err() {
            return false;
        }
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).is_ok()
            && serde_json::from_str::<Reply>(&line).is_ok()
    }

    /// Kills it (SIGKILL), leaving its socket file behind as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it (again) and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(
            Command::new(workspace_bin("kfdqd"))
                .arg("--config")
                .arg(&self.config)
                .arg("--root")
                .arg(&self.root)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(err))
                .spawn()
                .expect("spawn kfdqd"),
        );
        wait_for("kfdqd to answer", || self.answers());
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The plugin binary of this build.
pub fn plugin_bin() -> &'static str {
    env!("CARGO_BIN_EXE_kfdq-device-plugin")
}

/// Everything one test runs: emulator, agent, kubelet stand-in, plugin.
#[derive(Debug)]
pub struct Node {
    // Drop order: the plugin first, the emulator last.
    pub plugin: Option<Child>,
    pub kubelet: Kubelet,
    pub agent: Agent,
    pub emu: Emu,
    pub dir: tempfile::TempDir,
    pub plugin_dir: PathBuf,
    pub pod_resources: PathBuf,
    pub allocations: PathBuf,
    pub config: PathBuf,
    pub log: PathBuf,
}

/// The test configuration: short periods so that the tests wait little.
pub fn config_text(node_dir: &Path, root: &Path, agent_sock: &Path, gpus: &str) -> String {
    format!(
        "[kubelet]\ndevice_plugins_dir = \"{d}/device-plugins\"\npod_resources_socket = \"{d}/pod-resources.sock\"\npod_resources_poll_ms = 100\n\n[plugin]\nresource_prefix = \"kfdq.io\"\ngpus = {gpus}\nroot = \"{r}\"\nallocations = \"{d}/kfdq/allocations.json\"\nagent_socket = \"{a}\"\nshim = \"/var/lib/kfdq/lib/libkfdq_shim.so\"\ngrant_grace_ms = 1000\nhealth_period_ms = 100\n\n[[class]]\nname = \"latency\"\nshares = 1\n\n[[class]]\nname = \"batch\"\nshares = 4\n",
        d = node_dir.display(),
        r = root.display(),
        a = agent_sock.display(),
    )
}

impl Node {
    /// A node with `preset`'s partitions shared (`gpus`: TOML value of the key).
    pub fn start(preset: Preset, gpus: &str) -> Node {
        require_root();
        let emu = mount_preset(preset);
        let dir = tempfile::Builder::new()
            .prefix("kfdq-plugin-test-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let plugin_dir = dir.path().join("device-plugins");
        std::fs::create_dir(&plugin_dir).unwrap();
        std::fs::create_dir(dir.path().join("kfdq")).unwrap();
        let pod_resources = dir.path().join("pod-resources.sock");
        let agent = Agent::start(&emu, dir.path());
        let kubelet = Kubelet::start(&plugin_dir, &pod_resources);
        let config = dir.path().join("device-plugin.toml");
        std::fs::write(
            &config,
            config_text(dir.path(), emu.root(), &agent.sock, gpus),
        )
        .unwrap();
        let log = dir.path().join("plugin.log");
        let mut n = Node {
            plugin: None,
            kubelet,
            agent,
            emu,
            allocations: dir.path().join("kfdq/allocations.json"),
            dir,
            plugin_dir,
            pod_resources,
            config,
            log,
        };
        n.start_plugin();
        n
    }

    /// Starts the plugin binary.
    pub fn start_plugin(&mut self) {
        let err = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.plugin = Some(
            Command::new(plugin_bin())
                .arg("--config")
                .arg(&self.config)
                .env("KFDQ_LOG", "kfdq_device_plugin=debug")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::from(err))
                .spawn()
                .expect("spawn kfdq-device-plugin"),
        );
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Fails the test if the plugin exited.
    pub fn assert_plugin_alive(&mut self) {
        if let Some(st) = self.plugin.as_mut().and_then(|c| c.try_wait().unwrap()) {
            panic!("the plugin exited ({st}):\n{}", self.log_text());
        }
    }

    /// Waits until the stand-in holds `n` registrations of `resource`.
    pub fn wait_registrations(&mut self, resource: &str, n: usize) {
        let what = format!("{n} registration(s) of {resource}");
        if !test_support::wait_until(WAIT_LIMIT, || {
            self.kubelet
                .registrations()
                .iter()
                .filter(|r| r.resource_name == resource)
                .count()
                >= n
        }) {
            panic!(
                "timed out waiting for {what}; plugin log:\n{}",
                self.log_text()
            );
        }
        self.assert_plugin_alive();
    }

    /// A client to the socket `resource`'s registration named.
    pub fn client(&self, resource: &str) -> PluginClient {
        let r = self.kubelet.registration(resource).expect("registered");
        PluginClient::new(self.plugin_dir.join(r.endpoint))
    }

    pub fn allocations(&self) -> AllocationFile {
        AllocationFile::read(&self.allocations).expect("the allocations file")
    }

    /// Waits until the stand-in's last list of `resource` satisfies `f`.
    pub fn wait_list(&self, resource: &str, what: &str, f: impl Fn(&[(String, String)]) -> bool) {
        if !test_support::wait_until(WAIT_LIMIT, || f(&self.kubelet.devices(resource))) {
            panic!(
                "timed out waiting for {what}; last list {:?}; plugin log:\n{}",
                self.kubelet.devices(resource),
                self.log_text()
            );
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.plugin.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
