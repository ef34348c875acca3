//! The fixture of the operator tests (`operator*.rs`): a configuration with two custom
//! classes, the worker under the shim connected to an agent, `kfdq` as a process.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output, Stdio};

use super::kfdqd::Agent;
use super::*;

/// Two classes only the configuration knows, both selectable with KFDQ_CLASS.
pub const CUSTOM: &str = "[agent]\nhysteresis_ms = 20\n\n[[class]]\nname = \"inference\"\nrank = 2\npriority = 12\nmatch = { env = true }\n\n[[class]]\nname = \"train\"\nrank = 0\npriority = 2\nlevel = \"deactivate\"\nmatch = { env = true }\n";

/// The worker (three streams: hi, lo, null) under the shim, with `env`, connected to `agent`.
pub fn worker(emu: &Emu, agent: &Agent, env: &[(&'static str, &str)]) -> App {
    let mut l = Launch::new(programs().get("worker"))
        .arg("300")
        .env("KFDQ_SOCKET", agent.sock.display().to_string());
    for (k, v) in env {
        l = l.env(k, *v);
    }
    let mut app = l.start(emu);
    app.wait_line("READY");
    app
}

/// `kfdq ARGS` as a process, as `uid` if given, with no inherited socket.
pub fn kfdq(emu: &Emu, args: &[&str], uid: Option<u32>) -> Output {
    let mut cmd = Command::new(workspace_bin("kfdq"));
    cmd.args(args)
        .env("KFDQ_ROOT", emu.root())
        .env_remove("KFDQ_SOCKET")
        .stdin(Stdio::null());
    if let Some(u) = uid {
        cmd.uid(u).gid(u);
    }
    cmd.output().expect("run kfdq")
}

pub fn ok(o: &Output) -> bool {
    o.status.success()
}
