//! The `preempt-lab` binary as a user runs it: reports, determinism, bad input.

use std::process::{Command, Output};

mod common;
use common::{lab, ok};

/// Small and quick (the tests run a debug build): 20 requests, 2 seeds, 4 ms batch
/// work-groups (fewer work-group events per simulated second than the default 1 ms).
const SMALL: [&str; 10] = [
    "sim",
    "--seeds",
    "2",
    "--requests",
    "20",
    "--scenario",
    "field-synthetic",
    "--lp-wg-us",
    "4000",
    "--json",
];

#[test]
fn the_same_seeds_give_byte_identical_json_and_other_seeds_do_not() {
    let a = ok(&lab(&SMALL));
    let b = ok(&lab(&SMALL));
    assert_eq!(a, b, "two runs with the same seeds differ");
    let c = ok(&lab(&[
        "sim",
        "--seeds",
        "3",
        "--requests",
        "20",
        "--scenario",
        "field-synthetic",
        "--lp-wg-us",
        "4000",
        "--json",
    ]));
    assert_ne!(a, c);
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v["rows"].as_array().unwrap().len(), 9);
    assert_eq!(v["scenario"]["seeds"], serde_json::json!([1, 2]));
}

#[test]
fn the_field_scenario_orders_the_configurations_as_the_model_says() {
    let v: serde_json::Value = serde_json::from_str(&ok(&lab(&SMALL))).unwrap();
    let row = |name: &str| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["control"] == name)
            .unwrap_or_else(|| panic!("no row {name}"))
            .clone()
    };
    let f = |name: &str, key: &str| row(name)[key].as_f64().unwrap();
    // Native sharing hurts the HP job; with long batch work-groups, levels 2 and 3 beat
    // priorities (running work-groups are saved, not waited for), at the price of device-wide
    // preempts and LP throughput; priorities and level 1 cost no preempt.
    assert!(f("native", "hp_p99_rel") > 4.0 * f("level 2", "hp_p99_rel"));
    assert!(f("level 2", "hp_p99_rel") < f("priority", "hp_p99_rel"));
    for quiet in ["native", "priority", "level 1"] {
        assert_eq!(f(quiet, "preempts_per_s"), 0.0, "{quiet}");
    }
    for l in ["level 2", "level 3"] {
        assert!(f(l, "preempts_per_s") > 0.0, "{l}");
        assert!(f(l, "lp_rel") < f("native", "lp_rel"), "{l}");
        assert!(f(l, "preempt_latency_p50_us") > 0.0, "{l}");
    }
    assert!(v["alone"]["hp_p99_us"].as_f64().unwrap() > 2000.0);
}

/// One seed of 10 requests with `extra` arguments.
fn quick(extra: &[&str]) -> Output {
    let mut args = vec![
        "sim",
        "--seeds",
        "1",
        "--requests",
        "10",
        "--scenario",
        "field-synthetic",
        "--lp-wg-us",
        "4000",
    ];
    args.extend_from_slice(extra);
    lab(&args)
}

/// The configurations `sim` compares by default, as its reports name them.
const CONFIGS: [&str; 9] = [
    "native",
    "priority",
    "level 1",
    "level 2",
    "level 3",
    "level 1 edge",
    "level 2 edge",
    "level 3 edge",
    "level 2 hinted",
];

#[test]
fn the_table_and_csv_name_every_configuration() {
    let t = ok(&quick(&[]));
    for c in CONFIGS {
        assert!(t.contains(c), "{t}");
    }
    assert!(
        t.contains("HP busy") && t.contains("LP limit") && t.contains("reaction us"),
        "{t}"
    );
    let csv = ok(&quick(&["--csv", "--controls", "native,l3"]));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "{csv}");
    assert!(lines[0].starts_with("scenario,control,"));
    assert!(lines[2].starts_with("field-synthetic,level 3,"));
}

#[test]
fn a_kfdq_toml_supplies_the_classes_and_bad_input_is_refused() {
    let dir = std::env::temp_dir().join(format!("preempt-lab-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("kfdq.toml");
    std::fs::write(
        &cfg,
        "[[class]]\nname = \"serving\"\nrank = 1\npriority = 14\n\n[[class]]\nname = \"training\"\nrank = 0\npriority = 2\nlevel = \"suspend\"\n",
    )
    .unwrap();
    let c = cfg.display().to_string();
    let t = ok(&quick(&[
        "--config",
        &c,
        "--hp-class",
        "serving",
        "--lp-class",
        "training",
    ]));
    assert!(t.contains(&c) && t.contains("serving / training"), "{t}");
    let o = lab(&["sim", "--seeds", "1", "--requests", "10", "--config", &c]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains(
            "class \"latency\" is not in the configuration (its classes: serving, training)"
        ),
        "{e}"
    );
    let o = lab(&["sim", "--controls", "native,l4"]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("l1e, l2e, l3e (edges, release rule)") && e.contains("l2h"),
        "{e}"
    );
    let o = lab(&["sim", "--scenario", "bert6"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("built-in scenarios are field"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A fresh directory under the system's temporary directory for one test.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("preempt-lab-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Width and height from a PNG's IHDR chunk, after checking the signature.
fn png_size(bytes: &[u8]) -> (u32, u32) {
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "not a PNG signature");
    assert_eq!(&bytes[12..16], b"IHDR");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&bytes[16..20]), be(&bytes[20..24]))
}

#[test]
fn plots_are_written_as_svg_and_png_naming_every_configuration() {
    let dir = scratch("plots");
    let d = dir.display().to_string();
    let o = quick(&["--plots", &d]);
    ok(&o);
    for chart in [
        "field-synthetic-hp-latency-cdf",
        "field-synthetic-lp-throughput",
    ] {
        let svg = std::fs::read_to_string(dir.join(format!("{chart}.svg"))).unwrap();
        assert!(
            svg.trim_start().starts_with("<svg"),
            "{chart}: {}",
            &svg[..80]
        );
        assert!(svg.trim_end().ends_with("</svg>"), "{chart}");
        for c in CONFIGS {
            assert!(svg.contains(c), "{chart}.svg does not name {c}");
        }
        let png = std::fs::read(dir.join(format!("{chart}.png"))).unwrap();
        let (w, h) = png_size(&png);
        assert!(w >= 800 && h >= 500, "{chart}.png is {w}x{h}");
        // A blank image compresses to almost nothing; text and curves do not.
        assert!(
            png.len() > 20_000,
            "{chart}.png is only {} bytes",
            png.len()
        );
    }
    // The CDF also shows the job alone; the throughput chart has a panel per configuration.
    let cdf = std::fs::read_to_string(dir.join("field-synthetic-hp-latency-cdf.svg")).unwrap();
    assert!(cdf.contains("alone") && cdf.contains("log scale"));
    let tp = std::fs::read(dir.join("field-synthetic-lp-throughput.png")).unwrap();
    let o = quick(&["--plots", &d, "--controls", "native,l2"]);
    ok(&o);
    let (_, h2) = png_size(&std::fs::read(dir.join("field-synthetic-lp-throughput.png")).unwrap());
    let (_, h5) = png_size(&tp);
    assert!(h2 < h5, "2 panels ({h2} px) not shorter than 9 ({h5} px)");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_tradeoff_plot_has_a_point_per_configuration_and_sweep_value() {
    let dir = scratch("tradeoff");
    let d = dir.display().to_string();
    ok(&quick(&["--plots", &d, "--controls", "l2,l2e"]));
    let svg = std::fs::read_to_string(dir.join("field-synthetic-tradeoff.svg")).unwrap();
    assert!(svg.contains("level 2 edge") && svg.contains("LP throughput kept"));
    assert!(png_size(&std::fs::read(dir.join("field-synthetic-tradeoff.png")).unwrap()).0 >= 800);
    ok(&quick(&[
        "--plots",
        &d,
        "--controls",
        "l2,l2e",
        "--sweep",
        "hp-rate=10,40",
    ]));
    let svg = std::fs::read_to_string(dir.join("field-synthetic-hp-rate-tradeoff.svg")).unwrap();
    // One circle per configuration and value, plus one per legend entry.
    assert_eq!(svg.matches("<circle").count(), 2 * 2 + 2, "{svg}");
    for v in ["\n10\n", "\n40\n"] {
        assert!(svg.contains(v), "no label {v:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn plots_without_a_font_fail_with_the_fix() {
    let dir = scratch("nofont");
    let o = Command::new(env!("CARGO_BIN_EXE_preempt-lab"))
        .args([
            "sim",
            "--seeds",
            "1",
            "--requests",
            "5",
            "--scenario",
            "field-synthetic",
            "--lp-wg-us",
            "4000",
        ])
        .arg("--plots")
        .arg(&dir)
        .env("PREEMPT_LAB_FONT", dir.join("missing.ttf"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("missing.ttf") && e.contains("fonts-dejavu-core"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The example trace files shipped with preempt-lab.
fn example(name: &str) -> String {
    format!("{}/examples/traces/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn trace_files_replace_the_jobs_and_bad_ones_name_line_and_field() {
    let hp = example("inference.csv");
    let lp = example("training-step.json");
    let v: serde_json::Value = serde_json::from_str(&ok(&quick(&[
        "--hp-trace",
        &hp,
        "--lp-trace",
        &lp,
        "--json",
    ])))
    .unwrap();
    assert_eq!(v["scenario"]["hp"]["trace"], hp.as_str());
    assert_eq!(
        v["scenario"]["hp"]["request_ends"],
        serde_json::json!([20, 50])
    );
    assert_eq!(v["scenario"]["lp"]["kernels"].as_array().unwrap().len(), 4);
    // The two request kinds alone: 20 x 40 µs and 15 + 29 x 25 µs.
    let p50 = v["alone"]["hp_p50_us"].as_f64().unwrap();
    assert!((700.0..900.0).contains(&p50), "{p50}");
    let dir = scratch("traces");
    let bad = dir.join("bad.csv");
    std::fs::write(
        &bad,
        "workgroups,waves_per_wg,wg_us,stream,barrier\n64,4,40,0,0\n64,4,0,0,1\n",
    )
    .unwrap();
    let o = quick(&["--hp-trace", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.csv:3: field wg_us: \"0\" is not a number above 0"),
        "{e}"
    );
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        "{\"dispatches\": [\n {\"workgroups\": 64, \"waves_per_wg\": 99, \"wg_us\": 1, \"stream\": 0, \"barrier\": true}\n]}\n",
    )
    .unwrap();
    let o = quick(&["--lp-trace", bad.to_str().unwrap()]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.json:2:") && e.contains("field waves_per_wg"),
        "{e}"
    );
    let o = quick(&["--lp-trace", dir.join("none.csv").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_sweep_has_one_row_per_value_and_configuration() {
    let csv = ok(&quick(&[
        "--sweep",
        "arbitration",
        "--controls",
        "native,priority,l2",
        "--csv",
    ]));
    let lines: Vec<&str> = csv.lines().collect();
    assert!(lines[0].starts_with("scenario,sweep,value,control,hp_p50_rel"));
    assert_eq!(lines.len(), 1 + 3 * 3, "{csv}");
    for v in ["equal", "pipe", "strict"] {
        for c in ["native", "priority", "level 2"] {
            let row = format!("field-synthetic,arbitration,{v},{c},");
            assert_eq!(
                lines.iter().filter(|l| l.starts_with(&row)).count(),
                1,
                "{row}"
            );
        }
    }
    // Under the `equal` hypothesis priorities buy nothing; under `pipe` they do.
    let p99 = |v: &str, c: &str| -> f64 {
        let row = lines
            .iter()
            .find(|l| l.starts_with(&format!("field-synthetic,arbitration,{v},{c},")))
            .unwrap();
        row.split(',').nth(5).unwrap().parse().unwrap()
    };
    assert!(p99("equal", "priority") > 3.0 * p99("pipe", "priority"));
    let v: serde_json::Value = serde_json::from_str(&ok(&quick(&[
        "--sweep",
        "cu-split=none,25/75",
        "--controls",
        "priority",
        "--json",
    ])))
    .unwrap();
    assert_eq!(v["sweep"], "cu-split");
    let pts = v["points"].as_array().unwrap();
    assert_eq!(pts.len(), 2);
    assert_eq!(pts[1]["value"], "25/75");
    // A quarter of the CUs for the batch job's neighbour costs the batch job throughput.
    let lp = |i: usize| pts[i]["report"]["rows"][0]["lp_rel"].as_f64().unwrap();
    assert!(lp(1) < lp(0), "{} {}", lp(1), lp(0));
    let t = ok(&quick(&["--sweep", "level=native,l3"]));
    assert_eq!(t.lines().filter(|l| l.starts_with("l3 ")).count(), 2, "{t}");
    let o = quick(&["--sweep", "size"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown sweep \"size\""));
    let o = quick(&["--sweep", "cu-split=80/80"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("at most 100 together"));
}

#[test]
fn sweeps_and_traces_keep_json_byte_identical() {
    let args = [
        "--sweep",
        "hp-rate=10,40",
        "--hp-trace",
        &example("inference.csv"),
        "--json",
    ];
    assert_eq!(ok(&quick(&args)), ok(&quick(&args)));
}
