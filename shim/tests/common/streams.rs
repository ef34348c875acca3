//! The fixture of the stream tests (`streams*.rs`): a program of the suite stopped at its
//! checkpoint with its queues and registry, and the check that the registry and the emulator
//! agree on every queue.

use std::collections::HashMap;

use super::*;

/// Asserts registry and emulator agree on every queue of `pid`: same ids, and the emulator's
/// priority is the registry's effective priority.
pub fn assert_emulator_agrees(emu: &Emu, pid: u32, reg: &Registry) {
    let emu_q = emu.queues_of(pid);
    for q in &reg.queues {
        let e = emu_q
            .iter()
            .find(|e| e.queue_id == q.queue_id.0)
            .unwrap_or_else(|| {
                panic!("emulator lacks queue {} of {pid}: {emu_q:#?}", q.queue_id.0)
            });
        assert_eq!(
            e.priority, q.effective_priority,
            "queue {}: emulator priority vs registry effective priority",
            q.queue_id.0
        );
        assert_eq!(e.gpu_id, q.gpu_id.0);
    }
    assert_eq!(
        emu_q.len(),
        reg.queues.len(),
        "registry and emulator list the same queues of {pid}: {emu_q:#?} vs {reg:#?}"
    );
}

/// A program of this suite stopped at its checkpoint: the queues it printed and its registry.
pub struct Stopped {
    pub app: App,
    pub pid: u32,
    pub q: HashMap<String, ProgQueue>,
    pub reg: Registry,
}

/// Starts `launch`, waits for the line `checkpoint`, then for a registry of which `ready`
/// (described by `what`) holds.
pub fn stop_at(
    emu: &Emu,
    launch: Launch,
    checkpoint: &str,
    what: &str,
    ready: impl Fn(&Registry) -> bool,
) -> Stopped {
    let mut app = launch.start(emu);
    app.wait_line(checkpoint);
    let q = app.queues();
    let pid = app.pid;
    let reg = app.wait_registry(pid, what, ready);
    Stopped { app, pid, q, reg }
}

impl Stopped {
    /// Asserts the emulator agrees with the registry, lets the program go on to its exit and
    /// returns its stderr.
    pub fn finish(self, emu: &Emu) -> String {
        assert_emulator_agrees(emu, self.pid, &self.reg);
        self.app.go();
        self.app.finish().1
    }
}

/// A launch of one of the suite's programs with `args`.
pub fn program(name: &str, args: &[&str]) -> Launch<'static> {
    args.iter()
        .fold(Launch::new(programs().get(name)), |l, a| l.arg(*a))
}
