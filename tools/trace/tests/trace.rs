//! The trace format read from files: each column's meaning pinned by a small fixture, and every
//! bad file refused with its file, line, field and rule.

use std::path::PathBuf;

use kfdq_trace::{Dispatch, Footprint, Trace};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

#[test]
fn a_bad_row_is_refused_with_its_file_and_line() {
    let path = fixture("bad-row.csv");
    let e = Trace::load(&path).unwrap_err().to_string();
    // Line 6: comment, header and a blank line count.
    let want = format!(
        "{}:6: field workgroups: \"0\" is not an integer of at least 1",
        path.display()
    );
    assert!(e.starts_with(&want), "{e}");
}

#[test]
fn each_column_means_one_thing() {
    let t = Trace::load(&fixture("columns.csv")).unwrap();
    assert_eq!(t.dispatches.len(), 3);
    let [a, b, c] = [t.dispatches[0], t.dispatches[1], t.dispatches[2]];
    assert_eq!(
        a,
        Dispatch {
            workgroups: 784,
            waves_per_wg: 2,
            wg_us: 1.76,
            stream: 0,
            barrier: false,
            footprint: Some(Footprint {
                cu_util: 0.0073,
                dram_bytes: 5.0
            }),
        }
    );
    // waves_per_wg: waves of 64 threads; a HIP launch holds at most 16 of them.
    let hip = t.hip_launches("columns.csv").unwrap();
    assert_eq!((hip[0].waves, hip[0].threads()), (2, 128));
    assert_eq!(
        (b.waves_per_wg, hip[1].waves, hip[1].threads()),
        (32, 16, 1024)
    );
    assert_eq!((hip[2].waves, hip[2].threads()), (16, 1024));
    assert_eq!((hip[1].workgroups, hip[1].wg_us), (37, 11.616));
    // wg_us: µs of one work-group, in whole ns, at least 1.
    assert_eq!((a.wg_ns(), b.wg_ns(), c.wg_ns()), (1760, 11_616, 1));
    // cu_util in permille, dram_bytes rounded.
    assert_eq!((b.cu_util_permille(), b.dram_bytes()), (564, 16_737));
    assert_eq!((c.cu_util_permille(), c.dram_bytes()), (1000, 0));
    // stream and barrier: the second dispatch ends the first request; the tail is another.
    assert_eq!((b.stream, b.barrier, c.barrier), (1, true, false));
    assert_eq!(t.request_ends(), vec![2, 3]);
    assert_eq!(t.streams(), 2);
}

#[test]
fn a_grid_a_hip_launch_cannot_take_is_refused_with_its_dispatch() {
    let h = "workgroups,waves_per_wg,wg_us,stream,barrier";
    let t = Trace::from_csv("t.csv", &format!("{h}\n1,1,1,0,0\n4294967296,1,1,0,0\n")).unwrap();
    assert_eq!(t.dispatches[1].workgroups, 1 << 32, "the model takes it");
    let e = t.hip_launches("t.csv").unwrap_err().to_string();
    assert!(
        e.starts_with("t.csv: dispatch 2: 4294967296 work-groups"),
        "{e}"
    );
}

#[test]
fn csv_and_json_give_the_same_trace() {
    let csv = "# two requests on two streams\n\
               workgroups,waves_per_wg,wg_us,stream,barrier\n\
               64,4,40,0,0\n\
               \n\
               128,2,12.5,1,1\n\
               32,4,40,0,true\n";
    let a = Trace::from_csv("t.csv", csv).unwrap();
    let json = r#"{"dispatches": [
        {"workgroups": 64, "waves_per_wg": 4, "wg_us": 40, "stream": 0, "barrier": false},
        {"workgroups": 128, "waves_per_wg": 2, "wg_us": 12.5, "stream": 1, "barrier": true},
        {"workgroups": 32, "waves_per_wg": 4, "wg_us": 40, "stream": 0, "barrier": true}
    ]}"#;
    assert_eq!(a, Trace::from_json("t.json", json).unwrap());
    assert_eq!(a.request_ends(), vec![2, 3]);
    assert_eq!(a.dispatches[0].footprint, None);
    let c = Trace::from_csv(
        "t.csv",
        "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util,dram_bytes\n132,32,1397.6,0,1,0.9353,10489635\n",
    )
    .unwrap();
    let j = Trace::from_json(
        "t.json",
        r#"{"dispatches": [{"workgroups": 132, "waves_per_wg": 32, "wg_us": 1397.6, "stream": 0,
            "barrier": true, "cu_util": 0.9353, "dram_bytes": 10489635}]}"#,
    )
    .unwrap();
    assert_eq!(c, j);
    let k = c.dispatches[0];
    assert_eq!(
        (k.cu_util_permille(), k.dram_bytes(), k.wg_ns()),
        (935, 10_489_635, 1_397_600)
    );
}

#[test]
fn bad_csv_names_line_field_and_rule() {
    let h = "workgroups,waves_per_wg,wg_us,stream,barrier\n";
    let cases = [
        ("64,4,40,0,0\n", "t:1: the header must be"),
        (
            &format!("{h}64,4,40,0,0\n0,4,40,0,0\n") as &str,
            "t:3: field workgroups: \"0\" is not an integer of at least 1",
        ),
        (
            &format!("{h}64,33,40,0,0\n"),
            "t:2: field waves_per_wg: \"33\" is not an integer in 1..=32",
        ),
        (
            "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util,dram_bytes\n64,4,40,0,0,1.5,0\n",
            "t:2: field cu_util: \"1.5\" is not a number in 0..=1",
        ),
        (
            "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util,dram_bytes\n64,4,40,0,0,0.5\n",
            "t:2: 6 fields, expected 7",
        ),
        (
            "workgroups,waves_per_wg,wg_us,stream,barrier,cu_util\n64,4,40,0,0,0.5\n",
            "t:1: the header must be",
        ),
        (
            &format!("{h}64,4,-3,0,0\n"),
            "t:2: field wg_us: \"-3\" is not a number above 0",
        ),
        (&format!("{h}64,4,nan,0,0\n"), "t:2: field wg_us"),
        (&format!("{h}64,4,40,x,0\n"), "t:2: field stream"),
        // Two bad fields: the first in column order is named.
        (&format!("{h}0,99,40,0,maybe\n"), "t:2: field workgroups"),
        (
            &format!("{h}64,4,40,0,yes\n"),
            "t:2: field barrier: \"yes\"",
        ),
        (&format!("{h}64,4,40\n"), "t:2: 3 fields, expected 5"),
        (h, "t: no dispatches"),
        ("", "t: empty"),
        ("# only a comment\n\n", "t: empty"),
    ];
    for (text, want) in cases {
        let e = Trace::from_csv("t", text).unwrap_err().to_string();
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn bad_json_names_line_field_and_rule() {
    let d = |body: &str| format!("{{\"dispatches\": [\n{body}\n]}}");
    let ok = r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 1, "stream": 0, "barrier": true}"#;
    let cases = [
        (
            d(&format!(
                "{ok},\n{}",
                r#"{"workgroups": 0, "waves_per_wg": 1, "wg_us": 1, "stream": 0, "barrier": true}"#
            )),
            "t:3:",
            "field workgroups: \"0\" is not an integer of at least 1",
        ),
        (
            d(r#"{"workgroups": 1, "waves_per_wg": 40, "wg_us": 1, "stream": 0, "barrier": true}"#),
            "t:2:",
            "field waves_per_wg",
        ),
        (
            d(r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 0, "stream": 0, "barrier": true}"#),
            "t:2:",
            "field wg_us: \"0\" is not a number above 0",
        ),
        (
            d(
                r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 1, "stream": 0, "barrier": true, "cu_util": 2}"#,
            ),
            "t:2:",
            "field cu_util: \"2\" is not a number in 0..=1",
        ),
        (
            d(
                r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 1, "stream": 0, "barrier": true, "dram_bytes": null}"#,
            ),
            "t:2:",
            "invalid type: null",
        ),
        (
            d(r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 1, "stream": 0}"#),
            "t:2:",
            "missing field `barrier`",
        ),
        (
            d(
                r#"{"workgroups": 1, "waves_per_wg": 1, "wg_us": 1, "stream": 0, "barrier": true, "grid": 3}"#,
            ),
            "t:2:",
            "unknown field `grid`",
        ),
        (d(""), "t: no dispatches", ""),
    ];
    for (text, at, want) in cases {
        let e = Trace::from_json("t", &text).unwrap_err().to_string();
        assert!(e.starts_with(at) && e.contains(want), "{text}: {e}");
    }
}

#[test]
fn the_committed_traces_all_parse() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../preempt-lab/examples/traces");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "csv" || e == "json") {
            let t = Trace::load(&path).unwrap_or_else(|e| panic!("{e}"));
            assert!(!t.dispatches.is_empty());
            n += 1;
        }
    }
    assert!(n >= 9, "{n} traces in {}", dir.display());
}
