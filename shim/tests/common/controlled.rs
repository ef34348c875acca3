//! The fixture of the control tests (`control*.rs`): a worker under the shim, connected to
//! the test's agent (a `UnixListener` speaking `kfdq::proto`), with its streams mapped.

use std::os::unix::net::UnixListener;

use kfdq::Pid;

use super::agent::*;
use super::*;

/// A worker under the shim, connected to the test's agent, with its streams mapped.
pub struct Setup {
    pub emu: Emu,
    pub app: App,
    pub conn: Conn,
    pub listener: UnixListener,
    pub _sock_dir: tempfile::TempDir,
    /// name -> (stream id, queue id)
    pub streams: std::collections::HashMap<String, (u64, u32)>,
}

pub fn setup(lib: bool, extra_env: &[(&'static str, &str)]) -> Setup {
    let emu = mount();
    let sock_dir = tempfile::tempdir().unwrap();
    let (listener, path) = listen(sock_dir.path());
    let mut l = Launch::new(programs().get("worker"))
        .arg("2000")
        .env("KFDQ_SOCKET", path.display().to_string());
    if lib {
        l = l.arg(programs().lib().display().to_string());
    }
    for (k, v) in extra_env {
        l = l.env(k, *v);
    }
    let mut app = l.start(&emu);
    let mut conn = accept(&listener);
    assert_eq!(conn.pid, Pid(app.pid));
    app.wait_line("READY");
    let q = app.queues();
    let want = if lib { 5 } else { 3 };
    let reg = conn.wait_registry("all streams mapped", |r| mapped(r) >= want);
    let mut streams = std::collections::HashMap::new();
    for name in ["hi", "lo"] {
        let s = stream_by_handle(&reg, q[name].handle);
        assert_eq!(s.queue_id, Some(QueueId(q[name].queue_id)));
        streams.insert(name.to_string(), (s.stream_id, q[name].queue_id));
    }
    let null = stream_of_kind(&reg, StreamKind::Null);
    assert_eq!(null.queue_id, Some(QueueId(q["null"].queue_id)));
    streams.insert("null".into(), (null.stream_id, q["null"].queue_id));
    if lib {
        let s = stream_by_handle(&reg, q["lib-low"].handle);
        streams.insert("lib".into(), (s.stream_id, q["lib-low"].queue_id));
    }
    Setup {
        emu,
        app,
        conn,
        listener,
        _sock_dir: sock_dir,
        streams,
    }
}

impl Setup {
    pub fn qid(&self, name: &str) -> u32 {
        self.streams[name].1
    }

    pub fn sid(&self, name: &str) -> u64 {
        self.streams[name].0
    }

    pub fn done(&self, name: &str) -> u64 {
        self.emu.queue(self.app.pid, self.qid(name)).packets_done
    }

    /// Asserts that the `frozen` streams' queues complete nothing while the `running` ones
    /// progress. No fixed window: a window lasts until every running stream has completed 3
    /// more packets, or, with none running, until a witness process's queue has run 20 ms of
    /// packets on the same partition. First the frozen streams must settle: work launched
    /// before the command (already past the shim, or written but not yet signalled by the
    /// runtime) completes, so windows repeat until the frozen counts stay put over one; then one
    /// more window is the assertion.
    pub fn assert_progress(&self, frozen: &[&str], running: &[&str]) {
        let counts = || -> Vec<u64> { frozen.iter().map(|n| self.done(n)).collect() };
        let window = || {
            if running.is_empty() {
                test_support::hold::cp_witness(&self.emu, 20, 1000);
            } else {
                let start: Vec<u64> = running.iter().map(|n| self.done(n)).collect();
                wait_for("every running stream to complete 3 more packets", || {
                    running
                        .iter()
                        .zip(&start)
                        .all(|(n, s)| self.done(n) >= s + 3)
                });
            }
        };
        let mut before = counts();
        let mut settled = false;
        for _ in 0..20 {
            window();
            let now = counts();
            settled = now == before;
            before = now;
            if settled {
                break;
            }
        }
        assert!(
            settled,
            "the frozen streams {frozen:?} never settled: {before:?}"
        );
        window();
        for (i, n) in frozen.iter().enumerate() {
            assert_eq!(
                self.done(n),
                before[i],
                "stream {n} (queue {}) must make no progress",
                self.qid(n)
            );
        }
    }

    /// Ends the agent's connection with `end` (handed the connection and the emulator), then
    /// accepts the worker's next connection.
    pub fn reconnect(self, end: impl FnOnce(Conn, &Emu)) -> Setup {
        let Setup {
            emu,
            app,
            conn,
            listener,
            _sock_dir,
            streams,
        } = self;
        end(conn, &emu);
        Setup {
            conn: accept(&listener),
            emu,
            app,
            listener,
            _sock_dir,
            streams,
        }
    }

    pub fn finish(self) {
        self.app.stop();
        let (lines, _) = self.app.finish();
        assert!(
            lines.iter().any(|l| l.starts_with("count hi ")),
            "worker reported its counts"
        );
    }
}
