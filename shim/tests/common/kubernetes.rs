//! The Kubernetes tests' agent setup (`kubernetes_agent.rs`, `kubernetes_metrics.rs`): the
//! agent's configuration with an allocations file, the device plugin's grants written as the
//! plugin writes them, and a worker carrying a grant's token.

use std::path::Path;

use kfdq::allocation::{Allocation, AllocationFile, FILE_VERSION, PodRef, Token};
use kfdq::ids::GpuId;

use super::kfdqd::Agent;
use super::{App, Emu, Launch, programs};

/// Three classes anyone may ask for with KFDQ_CLASS (without an allocation, `latency` is
/// granted to whoever asks); none is preempted by the policy, so that the workers' own GPU
/// work never waits on the others.
pub const CLASSES: &str = "\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"normal\"\nrank = 1\npriority = 8\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nmatch = { env = true }\n";

/// The agent's configuration with its allocations file and feature file under `dir`.
pub fn config(dir: &Path, features: &str, extra: &str) -> String {
    format!(
        "[agent]\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\n{extra}\n[kubernetes]\nallocations = \"{}\"\nfeatures = \"{features}\"\n{CLASSES}",
        dir.join("allocations.json").display()
    )
}

pub fn pod(namespace: &str, name: &str, container: &str) -> Option<PodRef> {
    Some(PodRef {
        namespace: namespace.into(),
        name: name.into(),
        container: container.into(),
    })
}

pub fn grant(token: &Token, class: &str, pod: Option<PodRef>) -> Allocation {
    Allocation {
        token: token.clone(),
        class: class.into(),
        gpu: GpuId(1),
        devices: vec![format!("1-{class}-0")],
        pod,
    }
}

/// Writes the allocations file as the plugin does (atomically).
pub fn write_allocations(dir: &Path, allocations: Vec<Allocation>) {
    AllocationFile {
        version: FILE_VERSION,
        allocations,
    }
    .write(&dir.join("allocations.json"))
    .unwrap();
}

/// The worker (three streams) under the shim with `env`, connected to `agent`.
pub fn worker(emu: &Emu, agent: &Agent, env: &[(&'static str, String)]) -> App {
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
