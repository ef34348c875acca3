//! The node's edge decision in process: the same busy edge as `decision`, no sockets, no
//! emulator; one serving process toggles busy and idle, the others (training, level 1) are
//! held and released, and acknowledge at once. Prints the decision's p50 and p99 (µs) and the
//! after-write bookkeeping's. Results go to docs/performance.md.
//!
//! `cargo bench --bench node_decision`. Knobs: `PROBE_N` decisions (default 400),
//! `PROBE_PROCS` processes (default 64: one serving, the rest training, 8 queues each),
//! `PROBE_COLD=1` 64 MiB written before each decision (cold caches, as in the agent after the
//! clients it woke ran on the same CPUs), `PROBE_SLEEP=1` asleep or `PROBE_SLEEP=spin`
//! spinning `PROBE_GAP_US` µs (default 20000, the `decision` bench's pause) before each.

use std::time::{Duration, Instant};

use kfdq::agent::AgentConfig;
use kfdq::agent::identity::Identity;
use kfdq::agent::node::{NodeState, Out};
use kfdq::policy::PartitionObs;
use kfdq::proto::{AgentMsg, QueueInfo, Registry, ShimMsg};
use kfdq::{GpuId, Pid, QueueId};

const GPU: GpuId = GpuId(0x1000);

/// A serving class over a training class held at level 1, no hysteresis, no rate limit.
const CONFIG: &str = r#"
[agent]
direct_edges = false
hysteresis_ms = 0
min_preempt_interval_ms = 0

[[class]]
name = "serving"
rank = 2
priority = 13
match = { env = true }

[[class]]
name = "training"
rank = 0
priority = 3
level = "hold"
match = { env = true }
"#;

fn knob<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let t0 = Instant::now();
    let cfg = AgentConfig::parse(CONFIG, None).expect("the bench's agent file");
    let parts = vec![PartitionObs {
        gpu_id: GPU,
        resident_slots: 1024,
        cus: 80,
    }];
    let mut n = NodeState::new(cfg, parts, String::new(), t0).expect("a node");
    let mut out = Vec::new();
    let procs: u32 = knob("PROBE_PROCS", 64);
    let me = Identity::of_pid(Pid::this()).expect("the bench's own identity");
    for i in 0..procs.max(2) {
        let pid = Pid(1000 + i);
        let class = if i == 0 { "serving" } else { "training" };
        // The bench's own identity, under each process's pid (classes come from KFDQ_CLASS).
        let id = Identity { pid, ..me.clone() };
        n.hello(
            u64::from(i) + 1,
            id,
            kfdq::proto::VERSION,
            Some(class.into()),
            pid,
            &mut out,
        )
        .expect("hello");
        let queues = (1..=8)
            .map(|q| QueueInfo::new(QueueId(q), GPU, 7, 3))
            .collect();
        let reg = ShimMsg::Registry(Registry {
            pid,
            class: Some(class.into()),
            queues,
            ..Registry::default()
        });
        n.shim_message(pid, reg, t0, &mut out);
    }
    n.decide(t0, &mut out);
    let (mut times, mut after) = (Vec::new(), Vec::new());
    let mut evict = match std::env::var_os("PROBE_COLD") {
        Some(_) => vec![0u8; 64 << 20],
        None => Vec::new(),
    };
    let sleep = std::env::var("PROBE_SLEEP").ok();
    let gap = Duration::from_micros(knob("PROBE_GAP_US", 20_000));
    // The commands of the last toggle, acknowledged after it: both buffers keep their
    // capacity, as the server's outbox does.
    let mut sent = Vec::new();
    let toggles: u32 = knob("PROBE_N", 400);
    for t in 0..toggles {
        out.clear();
        let now = t0 + Duration::from_millis(u64::from(t) * 20 + 20);
        let edge = ShimMsg::Activity {
            queue_id: QueueId(1),
            busy: t % 2 == 0,
        };
        n.shim_message(Pid(1000), edge, now, &mut out);
        for (i, b) in evict.iter_mut().enumerate().step_by(64) {
            *b = b.wrapping_add(i as u8);
        }
        std::hint::black_box(&evict);
        match sleep.as_deref() {
            Some("spin") => {
                let until = Instant::now() + gap;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            Some(_) => std::thread::sleep(gap),
            None => {}
        }
        // As the server: the commands timed, the times accounted after.
        let s = Instant::now();
        n.decide_commands(now, &mut out);
        times.push(s.elapsed().as_secs_f64() * 1e6);
        let s = Instant::now();
        n.after_write(now, &mut out);
        after.push(s.elapsed().as_secs_f64() * 1e6);
        std::mem::swap(&mut out, &mut sent);
        for o in sent.drain(..) {
            if let Out::Shim(conn, AgentMsg::Preempt { seq, .. } | AgentMsg::Release { seq, .. }) =
                o
            {
                let pid = Pid(1000 + conn as u32 - 1);
                let ack = ShimMsg::Ack {
                    seq,
                    ok: true,
                    detail: String::new(),
                };
                n.shim_message(pid, ack, now, &mut out);
            }
        }
    }
    times.sort_by(f64::total_cmp);
    after.sort_by(f64::total_cmp);
    let k = times.len();
    println!(
        "{} processes, {k} decisions: decide p50 {:.1} p99 {:.1} us; after the write p50 {:.1} p99 {:.1} us",
        procs.max(2),
        times[k / 2],
        times[k * 99 / 100],
        after[k / 2],
        after[k * 99 / 100]
    );
}
