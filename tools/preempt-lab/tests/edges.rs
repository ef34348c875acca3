//! The edge configurations (`l1e`..`l3e`) and the release rule as `preempt-lab sim` runs them:
//! busy edges that do not wait for a sample, the agent's file and the lab's flags reaching the
//! same rule, and what a sweep reports against the LP limit. Virtual time: nothing here depends
//! on the machine's speed.

mod common;
use common::{lab, ok};

/// `sim` with one seed of 20 requests (4 ms batch work-groups: quick in a debug build) and
/// `extra` arguments.
fn sim<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "sim",
        "--seeds",
        "1",
        "--requests",
        "20",
        "--scenario",
        "field-synthetic",
        "--lp-wg-us",
        "4000",
    ];
    args.extend_from_slice(extra);
    args
}

/// [`sim`]'s report as JSON.
fn json(extra: &[&str]) -> serde_json::Value {
    let mut args = sim(extra);
    args.push("--json");
    serde_json::from_str(&ok(&lab(&args))).unwrap()
}

fn row(v: &serde_json::Value, control: &str) -> serde_json::Value {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["control"] == control)
        .unwrap_or_else(|| panic!("no row {control}"))
        .clone()
}

fn f(r: &serde_json::Value, key: &str) -> f64 {
    r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("no number {key} in {r}"))
}

#[test]
fn a_busy_edge_preempts_without_waiting_for_a_sample() {
    // The shim samples every 100 ms, longer than a request: the sampled level sees few of
    // them; the edge level reacts within the edge, decision and command trips (230 µs) plus
    // the runlist update, at every request that finds the batch job on the GPU.
    let v = json(&["--activity-us", "100000", "--controls", "l2,l2e"]);
    let (sampled, edge) = (row(&v, "level 2"), row(&v, "level 2 edge"));
    assert!(f(&edge, "preempts_per_s") > 0.0, "{edge}");
    assert!(f(&edge, "reaction_p99_us") < 2000.0, "{edge}");
    assert_eq!(edge["reactions_missed"], 0, "{edge}");
    assert!(
        sampled["reactions_missed"].as_u64().unwrap() > 0,
        "{sampled}"
    );
    assert!(f(&edge, "hp_p99_rel") < f(&sampled, "hp_p99_rel"));
}

#[test]
fn the_agents_file_and_the_labs_flags_reach_the_same_release_rule() {
    // kfdqd's parser (AgentConfig) builds the policy from the file; the flags set the same
    // parameters on the built-in classes: the same decisions, hence the same report rows.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("kfdq.toml");
    std::fs::write(
        &cfg,
        "[agent]\nrelease = \"cost\"\npreempt_round_trip_us = 2000\nrelease_k = 3\nrelease_epsilon = 0.05\nrelease_max_hold_ms = 15\n",
    )
    .unwrap();
    let from_file = json(&["--controls", "l2e", "--config", cfg.to_str().unwrap()]);
    let from_flags = json(&[
        "--controls",
        "l2e",
        "--round-trip-us",
        "2000",
        "--release-k",
        "3",
        "--release-epsilon",
        "0.05",
        "--release-max-hold-ms",
        "15",
    ]);
    assert_eq!(from_file["rows"], from_flags["rows"]);
    // And the setting matters: the built-in C of 200 µs releases sooner (more LP kept).
    let default = json(&["--controls", "l2e"]);
    assert_ne!(default["rows"], from_file["rows"]);
    assert!(
        f(&row(&default, "level 2 edge"), "lp_rel") > f(&row(&from_file, "level 2 edge"), "lp_rel")
    );
    // The file's fixed hysteresis is the sampled levels' rule: the same rows as the flag.
    std::fs::write(&cfg, "[agent]\nhysteresis_ms = 20\n").unwrap();
    let a = json(&["--controls", "l2e", "--config", cfg.to_str().unwrap()]);
    let b = json(&["--controls", "l2e", "--release", "hysteresis"]);
    assert_eq!(a["rows"], b["rows"]);
}

#[test]
fn release_options_are_checked() {
    for (args, want) in [
        (vec!["--release", "soon"], "use cost"),
        (vec!["--release-k=-1"], "release_k = -1 is out of range"),
        (
            vec!["--release", "hysteresis", "--release-k", "2"],
            "add --release cost",
        ),
        (vec!["--sweep", "release-epsilon=2"], "0 <= epsilon < 1"),
    ] {
        let mut all = vec!["sim", "--seeds", "1", "--requests", "5"];
        all.extend(args.iter().copied());
        let o = lab(&all);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }
    let o = lab(&["run", "--controls", "l2e"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is sim-only"));
}

#[test]
fn an_hp_rate_sweep_reports_lp_kept_against_its_limit() {
    let mut args = sim(&["--controls", "l2e", "--sweep", "hp-rate=10,40"]);
    let t = ok(&lab(&args));
    assert!(t.contains("limit-LP"), "{t}");
    args.push("--json");
    let v: serde_json::Value = serde_json::from_str(&ok(&lab(&args))).unwrap();
    let busy = |i: usize| {
        v["points"][i]["report"]["alone"]["hp_busy_fraction"]
            .as_f64()
            .unwrap()
    };
    // Four times the rate, about four times the busy time (requests of 2.4 ms alone).
    assert!(
        busy(0) > 0.0 && busy(1) > 2.5 * busy(0),
        "{} {}",
        busy(0),
        busy(1)
    );
    for i in 0..2 {
        let lp = v["points"][i]["report"]["rows"][0]["lp_rel"]
            .as_f64()
            .unwrap();
        // Within whole LP kernels (32 ms each here, about 60 in the run alone) of the limit.
        assert!(lp <= 1.0 - busy(i) + 0.05, "LP {lp} above its limit");
    }
    args.pop();
    args.push("--csv");
    let csv = ok(&lab(&args));
    assert!(csv.lines().next().unwrap().ends_with(",lp_limit"), "{csv}");
}

#[test]
fn a_command_that_lands_while_the_model_runs_ahead_does_not_stall_the_simulation() {
    // Seed 4 of the field with a 1 ms command trip at level 3 edge once stalled: a runlist
    // update moved the partition's clock past the next sample, which was then never taken (an
    // event loop waiting for a time already gone). It must now end with every request.
    use preempt_lab::scenario::Scenario;
    use preempt_lab::sim::{self, Control};
    let mut sc = Scenario::field_synthetic(1000.0);
    sc.requests = 40;
    sc.host.command_ns = 1_000_000;
    let setup = sc.setup(Control::Edge(kfdq::proto::Level::Suspend), 4, true, true);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(sim::run(&setup).map(|r| r.hp_latency_us.len()));
    });
    // A bound for a hang, not a measurement: the run takes well under a second in a debug build.
    let n = rx
        .recv_timeout(std::time::Duration::from_secs(120))
        .expect("the simulation stalled")
        .unwrap();
    assert_eq!(n, 40);
}
