//! Decision latency of kfdqd at 64 client processes x 8 queues, and its idle CPU.
//!
//! `cargo bench --bench decision` (root: it mounts kfd-emu for the agent's topology).
//!
//! The clients are separate processes (this binary re-executed), so the agent sees 64 peers
//! with 64 `SO_PEERCRED` pids. They speak the shim's protocol without the shim: client 0 is a
//! latency-class process whose queue the bench turns busy and idle; the other 63 are
//! batch-class processes (level 1, hold) that acknowledge every command at once and print when
//! each arrived (CLOCK_MONOTONIC). One toggle: client 0 sends `Activity`, the agent decides and
//! sends 63 holds (or releases). Measured per toggle: activity sent -> first and last of the 63
//! commands received; and the agent's own decision latency (first message read -> commands
//! written) from its status. Pacing: each batch client sends the bench a datagram per command
//! (after its ack), and the next toggle waits until all 63 arrived, then 20 ms (the clients'
//! wake-ups are over); the bench asks the agent nothing between toggles. Idle CPU: utime+stime
//! of kfdqd over 10 s with all 64 connected and nothing happening. Results go to
//! docs/performance.md.
//!
//! Knobs: `KFDQ_BENCH_CHRT=N` runs the agent SCHED_FIFO at priority N; `KFDQ_BENCH_AGENT_CPU=N`
//! runs it alone on CPU N and everything else on the other CPUs (the agent's caches then
//! stay its own between toggles); `KFDQ_BENCH_LOG` sets its log filter.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::process::{Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use kfdq::GpuId;
use kfdq::proto::{AgentMsg, LineReader, Reply, Request, ShimMsg, encode};
use test_support::fake_shim::{FakeShim, Hello};
use test_support::wait::wait_state;

const CLIENTS: usize = 64;
const QUEUES: usize = 8;
const TOGGLES: usize = 400;

fn mono_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// Child mode: `decision --client SOCK CLASS GPU ARRIVALS ROOT`. Its queues are real ones on
/// the emulator at ROOT (the agent counts only the queues the kernel lists for a process).
fn client(sock: &str, class: &str, gpu: u32, arrivals: &str, root: &str) {
    let hello = Hello {
        class,
        exe: "bench",
        queues: QUEUES,
        effective_priority: if class == "latency" { 13 } else { 3 },
    };
    let mut shim = FakeShim::connect_as(
        std::path::Path::new(sock),
        &hello,
        std::path::Path::new(root),
        GpuId(gpu),
    );
    let first = shim.queue.queue_id;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    if class == "latency" {
        // Toggle on each stdin line; print when the activity was sent.
        let w = shim.s.try_clone().expect("the connection's writer");
        std::thread::spawn(move || while shim.try_next().is_some() {});
        // While busy it says so again every RENEW (as a shim does every BUSY_RENEW_PERIOD;
        // sparser, so that a toggle of the usual length has no renewal warming the agent
        // before its idle edge, and within BUSY_STALE, so that no toggle finds it stale).
        const RENEW: Duration = Duration::from_millis(50);
        // The writer and when the queue went busy (None: idle), under one lock; the renewing
        // thread sleeps until a renewal is due, or until the queue goes busy.
        let busy = std::sync::Arc::new((
            std::sync::Mutex::new((w, None::<Instant>)),
            std::sync::Condvar::new(),
        ));
        let activity = move |busy: bool| {
            encode(&ShimMsg::Activity {
                queue_id: first,
                busy,
            })
        };
        let renewing = busy.clone();
        std::thread::spawn(move || {
            let (lock, changed) = &*renewing;
            let mut st = lock.lock().unwrap();
            loop {
                st = match st.1 {
                    None => changed.wait(st).unwrap(),
                    Some(at) if at.elapsed() >= RENEW => {
                        st.0.write_all(&activity(true)).unwrap();
                        st.1 = Some(Instant::now());
                        st
                    }
                    Some(at) => changed.wait_timeout(st, RENEW - at.elapsed()).unwrap().0,
                };
            }
        });
        let (lock, changed) = &*busy;
        for line in std::io::stdin().lock().lines() {
            let busy = line.unwrap() == "busy";
            let mut st = lock.lock().unwrap();
            let t = mono_ns();
            st.0.write_all(&activity(busy)).unwrap();
            st.1 = busy.then(Instant::now);
            drop(st);
            changed.notify_one();
            writeln!(out, "sent {t}").unwrap();
            out.flush().unwrap();
        }
        return;
    }
    // Batch client: acknowledge at once, keep the arrival times, print them when stdin closes
    // (printing per message would wake the bench on every command and perturb the agent).
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::<u64>::new()));
    let got2 = got.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().lock().lines().count();
        let mut out = std::io::stdout().lock();
        for t in got2.lock().unwrap().iter() {
            writeln!(out, "got {t}").unwrap();
        }
        writeln!(out, "end").unwrap();
        out.flush().unwrap();
        std::process::exit(0);
    });
    drop(out);
    // One datagram per command, after its ack: the bench paces the toggles on them without
    // asking the agent anything (a status request would warm the agent's caches).
    let tell = UnixDatagram::unbound().expect("datagram socket");
    while let Some(m) = shim.try_next() {
        let t = mono_ns();
        let (seq, command) = match m {
            AgentMsg::Preempt { seq, .. } | AgentMsg::Release { seq, .. } => {
                got.lock().unwrap().push(t);
                (seq, true)
            }
            AgentMsg::SetPriority { seq, .. } | AgentMsg::Query { seq } => (seq, false),
            _ => continue,
        };
        shim.send(&ShimMsg::Ack {
            seq,
            ok: true,
            detail: "bench".into(),
        });
        if command {
            tell.send_to(&[1], arrivals).expect("tell the bench");
        }
    }
}

fn status(sock: &std::path::Path) -> kfdq::proto::control::NodeStatus {
    let mut s = UnixStream::connect(sock).unwrap();
    s.write_all(&encode(&Request::Status)).unwrap();
    match LineReader::new(BufReader::new(s)).next::<Reply>().unwrap() {
        Reply::Status(s) => *s,
        other => panic!("{other:?}"),
    }
}

fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // utime, stime.
    let [u, s] = kfdq::procfs::stat_fields(&stat, [14, 15]).unwrap();
    u + s
}

fn q(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--client") {
        client(
            &args[2],
            &args[3],
            args[4].parse().unwrap(),
            &args[5],
            &args[6],
        );
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "the decision bench mounts kfd-emu over FUSE and needs root: run it as root \
             (cargo bench --bench decision)"
        );
        std::process::exit(2);
    }
    // KFDQ_BENCH_AGENT_CPU=N runs the agent on CPU N alone (taskset), as a unit with
    // CPUAffinity=N next to GPU jobs kept off that CPU would: this process, the emulator and
    // the clients it starts stay on the other CPUs.
    let agent_cpu = std::env::var("KFDQ_BENCH_AGENT_CPU").ok();
    if let Some(cpu) = &agent_cpu {
        pin_others_away_from(cpu);
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("emu");
    // 512 queues oversubscribe any real partition: the residency guard would deactivate every
    // batch process from the start and a toggle would send nothing. Slots for all of them keep
    // the guard out of the measurement (it is the same decision, without the commands).
    let topo = dir.path().join("topo.toml");
    std::fs::write(
        &topo,
        "preset = \"mi308x\"\n[[node]]\n[node.properties]\nnum_cp_queues = 1024\n",
    )
    .unwrap();
    let emu = kfd_emu::MountedEmu::mount(
        &mnt,
        kfd_emu::EmuConfig {
            preset: kfd_emu::Preset::Mi308x,
            topology_file: Some(topo),
            ..kfd_emu::EmuConfig::default()
        },
    )
    .expect("mount kfd-emu");
    let gpu = emu.stats().partitions[0].gpu_id;
    let sock = dir.path().join("kfdq.sock");
    let cfg = dir.path().join("kfdq.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nsocket = \"{}\"\nhysteresis_ms = 0\nmin_preempt_interval_ms = 0\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = {{ env = true }}\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"hold\"\nmatch = {{ env = true }}\n",
            sock.display()
        ),
    )
    .unwrap();
    // KFDQ_BENCH_CHRT=N runs the agent SCHED_FIFO at priority N (chrt), as a unit with
    // CPUSchedulingPolicy=fifo would.
    let mut agent = Command::new("env");
    if let Some(cpu) = &agent_cpu {
        agent.args(["taskset", "-c", cpu]);
    }
    if let Ok(p) = std::env::var("KFDQ_BENCH_CHRT") {
        agent.args(["chrt", "-f", &p]);
    }
    agent.arg(env!("CARGO_BIN_EXE_kfdqd"));
    let mut agent = agent
        .arg("--config")
        .arg(&cfg)
        .arg("--root")
        .arg(emu.root())
        .env(
            "KFDQ_LOG",
            std::env::var("KFDQ_BENCH_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .spawn()
        .expect("kfdqd");
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < deadline, "kfdqd did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    let me = std::env::current_exe().unwrap();
    // The batch clients' arrivals, one datagram per command (pacing, below).
    let arrivals_path = dir.path().join("arrivals");
    let arrivals = UnixDatagram::bind(&arrivals_path).expect("bind the arrivals socket");
    arrivals.set_nonblocking(true).unwrap();
    let mut arrived = 0u64;
    let (tx, rx) = channel::<(usize, String)>();
    let mut children = Vec::new();
    let mut hp_in = None;
    for i in 0..CLIENTS {
        let class = if i == 0 { "latency" } else { "batch" };
        let mut c = Command::new(&me)
            .args([
                "--client",
                &sock.display().to_string(),
                class,
                &gpu.to_string(),
                &arrivals_path.display().to_string(),
                &emu.root().display().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = c.stdout.take().unwrap();
        let tx = tx.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send((i, l));
            }
        });
        if i == 0 {
            hp_in = c.stdin.take();
        }
        children.push(c);
    }
    let mut ready = 0;
    while ready < CLIENTS {
        let (_, l) = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("clients ready");
        ready += usize::from(l == "ready");
    }
    wait_state(
        "the agent to list all the clients",
        Duration::from_secs(20),
        || status(&sock).processes.len(),
        |n| *n >= CLIENTS,
    );
    let mut hp_in = hp_in.unwrap();
    let mut lp_in: Vec<_> = children
        .iter_mut()
        .skip(1)
        .map(|c| c.stdin.take().unwrap())
        .collect();
    let mut sent = Vec::new();
    for t in 0..TOGGLES {
        let busy = t % 2 == 0;
        writeln!(hp_in, "{}", if busy { "busy" } else { "idle" }).unwrap();
        loop {
            let (_, l) = rx.recv_timeout(Duration::from_secs(10)).expect("sent");
            if let Some(v) = l.strip_prefix("sent ") {
                sent.push(v.parse::<u64>().unwrap());
                break;
            }
        }
        // Every batch client has the toggle's command before the next toggle: a busy and an
        // idle edge read together cancel in one decision (nothing to send), and the arrivals
        // below pair the k-th command with toggle k; a loaded agent may lag any fixed pause.
        // The wait asks the clients, not the agent, so the agent's caches are as cold as
        // without it.
        let want = (t as u64 + 1) * (CLIENTS as u64 - 1);
        wait_state(
            &format!("toggle {t}'s {} commands to arrive", CLIENTS - 1),
            Duration::from_secs(10),
            || {
                let mut b = [0u8; 16];
                while arrivals.recv(&mut b).is_ok() {
                    arrived += 1;
                }
                arrived
            },
            |n| *n >= want,
        );
        // Pacing: the batch clients' wake-ups are over before the next toggle.
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = status(&sock);
    // Idle CPU with all 64 connected and nothing happening.
    let pid = agent.id();
    let ticks0 = cpu_ticks(pid);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let ticks = cpu_ticks(pid) - ticks0;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    let idle_pct = ticks as f64 / hz / t0.elapsed().as_secs_f64() * 100.0;
    // Collect the arrival times: the k-th command a batch client got answers toggle k.
    lp_in.clear();
    let mut arrivals: Vec<Vec<u64>> = vec![Vec::new(); CLIENTS];
    let mut ended = 0;
    while ended < CLIENTS - 1 {
        let (i, l) = rx.recv_timeout(Duration::from_secs(20)).expect("arrivals");
        if l == "end" {
            ended += 1;
        } else if let Some(v) = l.strip_prefix("got ") {
            arrivals[i].push(v.parse().unwrap());
        }
    }
    let (mut first, mut last) = (Vec::new(), Vec::new());
    for (k, s) in sent.iter().enumerate() {
        let at: Vec<u64> = arrivals[1..].iter().map(|a| a[k]).collect();
        first.push(at.iter().min().unwrap().saturating_sub(*s) as f64 / 1e3);
        last.push(at.iter().max().unwrap().saturating_sub(*s) as f64 / 1e3);
    }

    println!(
        "kfdqd decision latency, {CLIENTS} client processes x {QUEUES} queues, {TOGGLES} toggles"
    );
    println!("{:<58} {:>9} {:>9}", "", "p50 µs", "p99 µs");
    println!(
        "{:<58} {:>9.0} {:>9.0}",
        "activity sent -> first of 63 commands received",
        q(&mut first, 0.5),
        q(&mut first, 0.99)
    );
    println!(
        "{:<58} {:>9.0} {:>9.0}",
        "activity sent -> last of 63 commands received",
        q(&mut last, 0.5),
        q(&mut last, 0.99)
    );
    println!(
        "{:<58} {:>9.0} {:>9.0}",
        "agent: first message read -> commands written",
        st.counters.decision_us_p50,
        st.counters.decision_us_p99
    );
    println!(
        "{:<58} {:>9.0} {:>9.0}",
        "agent: the decision alone (policy + executor, no I/O)",
        st.counters.decide_us_p50,
        st.counters.decide_us_p99
    );
    // How long the latency client stayed busy (its busy -> idle toggles; it renews every 50
    // ms, so none should go stale: a stale one makes the next edge a full decision).
    let mut busy_ms: Vec<f64> = sent
        .chunks_exact(2)
        .map(|p| p[1].saturating_sub(p[0]) as f64 / 1e6)
        .collect();
    println!(
        "agent decisions: {} ({} of them edge decisions); busy reports gone stale: {}; busy for {:.0} ms p50, {:.0} ms max",
        st.counters.decisions,
        st.counters.edge_decisions,
        st.counters.stale_busy,
        q(&mut busy_ms, 0.5),
        q(&mut busy_ms, 1.0)
    );
    println!("agent idle CPU with {CLIENTS} peers connected: {idle_pct:.3} % of a core over 10 s");
    let _ = agent.kill();
    let _ = agent.wait();
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// Keeps this process, and so everything it starts after, off CPU `cpu`:
/// KFDQ_BENCH_AGENT_CPU.
fn pin_others_away_from(cpu: &str) {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let agent: usize = cpu
        .parse()
        .unwrap_or_else(|_| panic!("KFDQ_BENCH_AGENT_CPU={cpu}: give one CPU number"));
    let others: Vec<String> = (0..n)
        .filter(|c| *c != agent)
        .map(|c| c.to_string())
        .collect();
    assert!(
        agent < n && !others.is_empty(),
        "KFDQ_BENCH_AGENT_CPU={cpu}: this machine has CPUs 0..{n}; the agent needs one of them and the clients another"
    );
    let ok = Command::new("taskset")
        .args([
            "-a",
            "-p",
            "-c",
            &others.join(","),
            &std::process::id().to_string(),
        ])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "taskset could not move the bench off CPU {agent}");
}
