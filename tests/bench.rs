//! `kfdq bench` on the emulator: the closed loop (the emulator's model parameters, set away
//! from their defaults, are what the bench measures), the calibration file it writes, and its
//! refusals (no debugger API, a partition other processes use, an unknown GPU target).

mod common;

use std::process::{Command, Output};

use common::*;
use gfx_model::Arbitration;

/// The reaction chain's entry under "not measured" when no agent answers.
const NO_AGENT: &str = "reaction chain through the agent";

/// `kfdq bench` on `emu`, with no agent at its socket.
fn bench(emu: &Emu, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(emu.root())
        .args(["--agent", "/nonexistent/kfdq.sock"])
        .args(["--json", "bench", "--repeat", "2"])
        .args(extra)
        .output()
        .expect("run kfdq bench")
}

/// The bench's JSON; on failure the test fails with the bench's stderr, the emulator's log
/// and its statistics (a bench that waited in vain says what the partition held).
fn json(emu: &Emu, out: &Output) -> serde_json::Value {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kfdq bench failed: {}\n{text}\nkfd-emu's log:\n{}\nkfd-emu's statistics:\n{}",
        String::from_utf8_lossy(&out.stderr),
        emu.emu.log_text(),
        std::fs::read_to_string(emu.path("kfd-emu/stats.json")).unwrap_or_default()
    );
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn within(measured: f64, truth: f64, what: &str) {
    assert!(
        (measured - truth).abs() <= 0.2 * truth,
        "{what}: measured {measured}, set {truth} (more than 20 % off)"
    );
}

fn config(fixed_us: u64, save: u64, restore: u64, arbitration: Arbitration) -> EmuConfig {
    EmuConfig {
        preset: Preset::Mi308x,
        preempt_cost_us: fixed_us,
        save_wave_ns: save,
        restore_wave_ns: restore,
        arbitration: Some(arbitration),
        ..EmuConfig::default()
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_bench_recovers_the_emulators_parameters() {
    // Away from the defaults (50 µs, 20 ns, 20 ns, pipe), each case different.
    let cases = [
        (300, 500, 1000, Arbitration::Equal, "equal"),
        (120, 80, 40, Arbitration::PipePriority, "pipe"),
        (900, 30, 250, Arbitration::StrictPriority, "strict"),
    ];
    for (fixed_us, save, restore, arbitration, word) in cases {
        let emu = mount(config(fixed_us, save, restore, arbitration));
        let v = json(&emu, &bench(&emu, &[]));
        let p = &v[0];
        let fit = &p["fit"];
        within(
            fit["fixed_ns"].as_f64().unwrap(),
            (fixed_us * 1000) as f64,
            "preempt_fixed_ns",
        );
        within(
            fit["save_wave_ns"].as_f64().unwrap(),
            save as f64,
            "save_wave_ns",
        );
        within(
            fit["restore_wave_ns"].as_f64().unwrap(),
            restore as f64,
            "restore_wave_ns",
        );
        assert!(fit["wave_counts"].as_u64().unwrap() >= 2, "{fit}");
        assert_eq!(p["arbitration"]["verdict"], word, "{:#}", p["arbitration"]);
        // Everything was measured but the reaction chain, which says there is no agent and
        // how to start one.
        let u = p["unavailable"].as_array().unwrap();
        assert_eq!(u.len(), 1, "{u:#?}");
        assert_eq!(u[0]["measurement"], NO_AGENT);
        assert!(u[0]["why"].as_str().unwrap().contains("no agent answers"));
        assert!(u[0]["fix"].as_str().unwrap().contains("kfdqd"), "{u:#?}");
        // Every measurement the issue names is there, with its samples.
        let names: Vec<&str> = p["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        for n in [
            "l2_idle_deactivate_call",
            "l2_idle_deactivate_stall",
            "l2_busy_deactivate_call",
            "l2_busy_activate_stall",
            "l3_suspend_call",
            "l3_suspend_stall",
            "l3_resume_call",
            "l3_resume_stall",
        ] {
            assert!(names.contains(&n), "{n} missing from {names:?}");
        }
        // The bench leaves nothing behind: no queue of its own or of its worker.
        wait_for("the bench's queues to be gone", || {
            emu.stats().queues.is_empty()
        });
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_calibration_file_carries_the_fit_and_the_node() {
    let emu = mount(config(250, 100, 300, Arbitration::StrictPriority));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("node.toml");
    let out = bench(&emu, &["--write", file.to_str().unwrap()]);
    json(&emu, &out);
    let text = std::fs::read_to_string(&file).unwrap();
    let file =
        kfdq_calibration::Calibration::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(file.partitions.len(), 1);
    let c = file.first();
    within(
        c.model.preempt_fixed_ns as f64,
        250_000.0,
        "preempt_fixed_ns",
    );
    within(c.model.save_wave_ns as f64, 100.0, "save_wave_ns");
    within(c.model.restore_wave_ns as f64, 300.0, "restore_wave_ns");
    assert_eq!(c.model.arbitration.as_str(), "strict");
    assert_eq!(c.node.gfx_target, "gfx942");
    assert_eq!(c.node.gfx_target_version, 90402);
    assert_eq!(c.node.wave_slots, 2560);
    assert!(c.node.kernel.contains("kfd-emu"), "{}", c.node.kernel);
    assert_eq!(
        c.model.preempt_round_trip_ns,
        kfdq_calibration::round_trip_ns(
            c.model.preempt_fixed_ns,
            c.model.save_wave_ns,
            c.model.restore_wave_ns,
            2560
        )
    );
    file.check_target(&text, 90402).unwrap();
    assert!(file.check_target(&text, 90010).is_err());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn without_the_debugger_api_level_3_is_named_with_its_fix() {
    let emu = mount(EmuConfig {
        preset: Preset::Mi308x,
        kfd_minor: 11,
        ..EmuConfig::default()
    });
    let v = json(&emu, &bench(&emu, &[]));
    let p = &v[0];
    let u: Vec<_> = p["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["measurement"] != NO_AGENT)
        .collect();
    assert_eq!(u.len(), 1, "{u:#?}");
    assert_eq!(u[0]["measurement"], "level 3");
    assert!(u[0]["why"].as_str().unwrap().contains("1.13"), "{u:#?}");
    assert!(!u[0]["fix"].as_str().unwrap().is_empty());
    // Level 2 still gives the fit (the default parameters: 50 µs, 20 ns per wave).
    within(
        p["fit"]["fixed_ns"].as_f64().unwrap(),
        50_000.0,
        "preempt_fixed_ns",
    );
    // And the victim's side: with the default 50 µs preempt its work resumes far sooner than
    // with the 30 ms of `the_victims_side_shows_when_its_work_stops_and_resumes`.
    let resumes = p50s(p, "l2_victim_resume");
    assert_eq!(resumes.len(), 2, "{:#}", p["rows"]);
    for (w, r) in resumes {
        assert!(r < 15_000.0, "{w} waves: resumed after {r} µs");
    }
    assert!(p50s(p, "l3_victim_resume").is_empty());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_partition_in_use_is_refused_unless_forced() {
    let emu = mount(config(50, 20, 20, Arbitration::PipePriority));
    let holder = Holder::spawn(emu.root(), &["--queues", "1"]);
    let before = emu.stats();
    let out = bench(&emu, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use") && err.contains("--force"), "{err}");
    assert!(err.contains(&holder.pid.to_string()), "{err}");
    let after = emu.stats();
    assert_eq!(
        (before.partitions[0].runlist_updates, before.queues.len()),
        (after.partitions[0].runlist_updates, after.queues.len()),
        "a refused bench changed the partition"
    );
    // With --force it measures (the other process's queue is idle: the fit is still exact).
    let v = json(&emu, &bench(&emu, &["--force"]));
    within(
        v[0]["fit"]["fixed_ns"].as_f64().unwrap(),
        50_000.0,
        "preempt_fixed_ns",
    );
    holder.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn an_unknown_gpu_target_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("topology.toml");
    std::fs::write(
        &topo,
        "preset = \"mi308x\"\n[[node]]\n[node.properties]\ngfx_target_version = 110000\n",
    )
    .unwrap();
    let emu = mount(EmuConfig {
        preset: Preset::Mi308x,
        topology_file: Some(topo),
        ..EmuConfig::default()
    });
    let out = bench(&emu, &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("gfx1100") && err.contains("not a GPU kfdq bench knows"),
        "{err}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_bench_dispatches_its_spin_kernel_for_gfx942_and_gfx90a() {
    for preset in [Preset::Mi308x, Preset::Mi210] {
        let emu = mount(EmuConfig {
            preset,
            ..EmuConfig::default()
        });
        let mut child = Command::new(env!("CARGO_BIN_EXE_kfdq"))
            .arg("--root")
            .arg(emu.root())
            .args(["--json", "bench", "--repeat", "1"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // The emulator names a dispatch's kernel from the code object loaded in the caller's
        // GPU memory (docs/kfd-emulator.md, "Real code objects"); watch while the bench runs.
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut s = Vec::new();
            std::io::Read::read_to_end(&mut stdout, &mut s).unwrap();
            s
        });
        let mut seen = std::collections::BTreeSet::new();
        let status = loop {
            for p in emu.stats().processes {
                seen.extend(p.dispatches_by_kernel.into_keys());
            }
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let v = json(
            &emu,
            &Output {
                status,
                stdout: reader.join().unwrap(),
                stderr: Vec::new(),
            },
        );
        assert!(
            seen.contains("kfdq_spin"),
            "{preset:?}: kernels seen {seen:?}"
        );
        within(
            v[0]["fit"]["fixed_ns"].as_f64().unwrap(),
            50_000.0,
            "preempt_fixed_ns",
        );
        assert!(v[0]["spin_ns_per_iteration"].as_f64().is_some());
    }
}

/// The p50 (µs) of each `name` row, by busy waves.
fn p50s(p: &serde_json::Value, name: &str) -> Vec<(u64, f64)> {
    p["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == name)
        .map(|r| {
            (
                r["busy_waves"].as_u64().unwrap(),
                r["us"]["p50"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_victims_side_shows_when_its_work_stops_and_resumes() {
    // A 200 ms preempt (far from the default 50 µs, and far above the emulator's own latency
    // and a loaded host's scheduling delays, which reach tens of milliseconds beside busy
    // loops: 14 ms to see the stop was measured there with a 30 ms preempt): a deactivated or
    // suspended stream resumes completing after the reactivation's preempt, the restore of its
    // W waves and the rest of its saved packet (half of one on average).
    let (fixed_us, restore) = (200_000, 40);
    let emu = mount(config(fixed_us, 20, restore, Arbitration::PipePriority));
    let v = json(&emu, &bench(&emu, &["--window-ms", "700"]));
    let p = &v[0];
    for level in ["l2", "l3"] {
        let stops = p50s(p, &format!("{level}_victim_stop"));
        let resumes = p50s(p, &format!("{level}_victim_resume"));
        assert_eq!(stops.len(), 2, "{level}: {:#}", p["rows"]);
        assert_eq!(resumes.len(), 2, "{level}: {:#}", p["rows"]);
        for ((w, stop), (w2, resume)) in stops.into_iter().zip(resumes) {
            assert_eq!(w, w2);
            let expected = (fixed_us * 1000 + restore * w + 50_000) as f64 / 1e3;
            within(
                resume,
                expected,
                &format!("{level} time to resume, {w} waves"),
            );
            // The work stops long before it resumes: the stop is the call's trip, not the cost.
            assert!(
                stop < resume / 4.0,
                "{level}, {w} waves: stopped after {stop} µs, resumed after {resume} µs"
            );
        }
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_calibration_file_holds_every_partition() {
    // Two partitions of one MI308X, each with its own costs (what kfd-emu sets from a
    // calibration file of two partitions).
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("topology.toml");
    std::fs::write(&topo, "preset = \"mi308x\"\n[[node]]\n[[node]]\n").unwrap();
    let costs = [(200_000, 40, 60), (700_000, 90, 30)];
    let emu = mount(EmuConfig {
        preset: Preset::Mi308x,
        topology_file: Some(topo),
        partition_costs: costs
            .iter()
            .map(|&(fixed, save, restore)| kfd_emu::PartitionCosts {
                preempt_fixed_ns: fixed,
                save_wave_ns: save,
                restore_wave_ns: restore,
                arbitration: Arbitration::PipePriority,
            })
            .collect(),
        ..EmuConfig::default()
    });
    let file = dir.path().join("node.toml");
    let out = bench(&emu, &["--write", file.to_str().unwrap()]);
    let v = json(&emu, &out);
    // Beside --json too, the write is said on stderr (stdout is the JSON).
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("wrote the calibration of gpu"), "{err}");
    assert_eq!(v.as_array().unwrap().len(), 2);
    let text = std::fs::read_to_string(&file).unwrap();
    let c = kfdq_calibration::Calibration::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(c.partitions.len(), 2, "{text}");
    for (i, (p, &(fixed, save, restore))) in c.partitions.iter().zip(&costs).enumerate() {
        assert_eq!(u64::from(p.node.gpu_id), v[i]["gpu_id"].as_u64().unwrap());
        within(
            p.model.preempt_fixed_ns as f64,
            fixed as f64,
            "preempt_fixed_ns",
        );
        within(p.model.save_wave_ns as f64, save as f64, "save_wave_ns");
        within(
            p.model.restore_wave_ns as f64,
            restore as f64,
            "restore_wave_ns",
        );
    }
    assert_ne!(c.partitions[0].node.gpu_id, c.partitions[1].node.gpu_id);
    // Both partitions pair with the emulator's two nodes; a one-node reader is refused.
    assert_eq!(c.pair(&text, &[90402, 90402]).unwrap().len(), 2);
    assert!(c.pair(&text, &[90402]).is_err());
}

/// kfdqd on an emulator, with the classes the reaction chain's helpers run as; killed at drop.
struct Agent {
    child: std::process::Child,
    sock: std::path::PathBuf,
    state: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn start(emu: &Emu, batch_level: &str) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("kfdq.sock");
        let state = dir.path().join("state");
        let conf = dir.path().join("kfdq.toml");
        std::fs::write(
            &conf,
            format!(
                "[agent]\nsocket = \"{}\"\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = {{ env = true }}\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"{batch_level}\"\nmatch = {{ env = true }}\n",
                sock.display()
            ),
        )
        .unwrap();
        let child = Command::new(workspace_bin("kfdqd"))
            .arg("--config")
            .arg(&conf)
            .arg("--root")
            .arg(emu.root())
            .env("KFDQ_STATE_DIR", &state)
            .spawn()
            .expect("start kfdqd");
        wait_for("kfdqd's socket", || {
            std::os::unix::net::UnixStream::connect(&sock).is_ok()
        });
        Agent {
            child,
            sock,
            state,
            _dir: dir,
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_reaction_chain_runs_through_a_running_agent() {
    let emu = mount(config(50, 20, 20, Arbitration::PipePriority));
    for level in ["deactivate", "suspend"] {
        let agent = Agent::start(&emu, level);
        let out = Command::new(env!("CARGO_BIN_EXE_kfdq"))
            .arg("--root")
            .arg(emu.root())
            .arg("--agent")
            .arg(&agent.sock)
            .args(["--json", "bench", "--repeat", "2"])
            .env("KFDQ_SHIM", test_support::bins::shim_path())
            .env("KFDQ_STATE_DIR", &agent.state)
            .output()
            .expect("run kfdq bench");
        let v = json(&emu, &out);
        let p = &v[0];
        assert_eq!(p["agent_level"], level, "{p:#}");
        let u = p["unavailable"].as_array().unwrap();
        assert!(u.is_empty(), "{level}: {u:#?}");
        let row = |name: &str| {
            p["rows"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["name"] == name)
                .unwrap_or_else(|| panic!("{level}: {name} missing: {:#}", p["rows"]))
                .clone()
        };
        // The rows exist only for samples whose batch helper paused during the latency request
        // (`kfdq::reaction::chain`: a pause that began before the request ended and ended after
        // it began; its unit tests pin that arithmetic), and `unavailable` is empty only if some
        // sample found one. The values are the machine's: on a loaded host the request itself
        // stretches (its submitting process descheduled, its queue idle between packets, which
        // releases the batch job as it should), so no bound on them is asserted (release -58 ms
        // and reaction 22 ms were seen beside busy loops).
        let reaction = row("agent_reaction")["us"]["p50"].as_f64().unwrap();
        assert!(reaction.is_finite(), "{level}: reaction {reaction} µs");
        let release = row("agent_release")["us"]["p50"].as_f64().unwrap();
        assert!(release.is_finite(), "{level}: release {release} µs");
    }
    // The helpers are gone with their queues, and the agent forgot them.
    wait_for("the helpers' queues to be gone", || {
        emu.stats().queues.is_empty()
    });
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_hip_helpers_are_refused_with_their_reason_and_raw_is_said() {
    let emu = mount(config(50, 20, 20, Arbitration::PipePriority));
    let before = emu.stats();
    // The HIP runtime opens the node's /dev/kfd, not --root's: refused before anything runs.
    let out = bench(&emu, &["--runtime", "hip", "--reaction-only"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--runtime hip") && err.contains("--root") && err.contains("--runtime raw"),
        "{err}"
    );
    let after = emu.stats();
    assert_eq!(
        (before.partitions[0].runlist_updates, before.queues.len()),
        (after.partitions[0].runlist_updates, after.queues.len()),
        "a refused bench changed the partition"
    );
    // By default the chain falls back to raw helpers, saying why (and, with no agent, the row
    // names how to start one).
    let out = bench(&emu, &["--reaction-only"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(err.contains("raw queue layer, not HIP"), "{err}");
    let v = json(&emu, &out);
    let u = v[0]["unavailable"].as_array().unwrap();
    assert!(
        u.iter().any(|x| x["measurement"]
            .as_str()
            .is_some_and(|m| m.contains("reaction chain"))),
        "{u:#?}"
    );
    assert!(v[0]["agent_runtime"].is_null(), "{:#}", v[0]);
}

/// `--write` into a missing directory or onto a directory is refused before anything is
/// measured; a write that still fails at the end (`/dev/full`: ENOSPC) prints the finished
/// measurements all the same, then names the file it could not write.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_calibration_that_cannot_be_written_loses_no_measurement() {
    let emu = mount(EmuConfig {
        preset: Preset::Mi308x,
        ..EmuConfig::default()
    });
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing").join("node.toml");
    for (target, want) in [
        (missing.as_path(), "does not exist"),
        (dir.path(), "is a directory"),
    ] {
        let out = bench(&emu, &["--write", target.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(want) && err.contains("nothing was measured"),
            "{err}"
        );
        let s = emu.stats();
        assert!(
            s.partitions
                .iter()
                .all(|p| p.preempts == 0 && p.runlist_updates == 0),
            "refused before measuring: {s:?}"
        );
    }
    assert!(!missing.exists());

    let out = bench(&emu, &["--write", "/dev/full"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("/dev/full") && err.contains("printed above"),
        "{err}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}\n{err}"));
    assert!(
        v[0]["gpu_id"].as_u64().is_some_and(|g| g > 0),
        "the measurements: {v:#}"
    );
}
