use super::*;
use crate::policy::{CostRelease, Release};
use crate::proto::Level;

#[test]
fn a_full_file_parses() {
    let c = AgentConfig::parse(
        r#"
[agent]
socket = "/run/x/kfdq.sock"
socket_mode = "0660"
hysteresis_ms = 5
default_class = "batch"

[[class]]
name = "serving"
rank = 5
priority = 14
match = { uids = [1000], cgroups = ["/kubepods.slice"], env = false }

[[class]]
name = "batch"
rank = 1
priority = 2
level = "suspend"
starvation = { run_ms = 10, after_ms = 500 }
"#,
        None,
    )
    .unwrap();
    assert_eq!(c.socket.mode, 0o660);
    assert_eq!(c.policy.hysteresis_ns, 5_000_000);
    assert_eq!(c.default_class, "batch");
    assert_eq!(c.class_names(), ["serving", "batch"]);
    assert_eq!(c.rule("batch").unwrap().level, Some(Level::Suspend));
    assert_eq!(c.class("serving").unwrap().matcher.uids, [1000]);
}

#[test]
fn the_release_rule_is_cost_by_default_and_hysteresis_ms_selects_the_fixed_one() {
    let cost = |c: &AgentConfig| match c.policy.release {
        Release::Cost(c) => c,
        Release::Hysteresis => panic!("the fixed rule"),
    };
    assert_eq!(
        cost(&AgentConfig::builtin()),
        CostRelease::default(),
        "built in"
    );
    let c = AgentConfig::parse("[agent]\nmin_preempt_interval_ms = 1\n", None).unwrap();
    assert_eq!(cost(&c), CostRelease::default(), "a file without a rule");
    let c = AgentConfig::parse("[agent]\nhysteresis_ms = 20\n", None).unwrap();
    assert_eq!(c.policy.release, Release::Hysteresis);
    assert_eq!(c.policy.hysteresis_ns, 20_000_000);
    let c = AgentConfig::parse("[agent]\nrelease = \"hysteresis\"\n", None).unwrap();
    assert_eq!(c.policy.release, Release::Hysteresis);
    let c = AgentConfig::parse(
        "[agent]\nrelease = \"cost\"\npreempt_round_trip_us = 350\nrelease_k = 2.5\nrelease_epsilon = 0.05\nrelease_max_hold_ms = 8\nrelease_history = 4\n",
        None,
    )
    .unwrap();
    assert_eq!(
        cost(&c),
        CostRelease {
            round_trip_ns: 350_000,
            k: 2.5,
            epsilon: 0.05,
            max_hold_ns: 8_000_000,
            history: 4,
            min_history: 4,
        },
        "a shorter history lowers the default minimum with it"
    );
}

#[test]
fn bad_release_settings_are_refused_with_the_rule() {
    for (text, want) in [
        ("release = \"fast\"", "is not cost"),
        ("release = \"cost\"\nhysteresis_ms = 20", "contradict"),
        (
            "hysteresis_ms = 20\nrelease_k = 2",
            "release_k belongs to the cost",
        ),
        (
            "release = \"hysteresis\"\npreempt_round_trip_us = 100",
            "preempt_round_trip_us belongs",
        ),
        ("preempt_round_trip_us = -1", "0..=1000000 µs"),
        ("release_k = 0", "release_k = 0 is out of range"),
        ("release_epsilon = 1", "0 <= epsilon < 1"),
        ("release_max_hold_ms = -3", "release_max_hold_ms = -3"),
        (
            "release_history = 0",
            "release_history = 0 is out of range 1..=1024",
        ),
        (
            "release_history = 8\nrelease_min_history = 9",
            "release_min_history = 9 is out of range 1..=release_history (8)",
        ),
    ] {
        let e = AgentConfig::parse(&format!("\n[agent]\n{text}\n"), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(":2: [agent]: ") && e.contains(want),
            "{text}: {e}"
        );
    }
}

#[test]
fn metrics_listen_is_an_address_and_port() {
    let c = AgentConfig::parse("[metrics]\nlisten = \"127.0.0.1:9464\"\n", None).unwrap();
    assert_eq!(c.metrics, Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(AgentConfig::builtin().metrics, None);
    let e = AgentConfig::parse("\n[metrics]\nlisten = \"localhost\"\n", None)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("<config>:3:") && e.contains("127.0.0.1:9464"),
        "{e}"
    );
    let e = AgentConfig::parse("[metrics]\nport = 1\n", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field"), "{e}");
}

#[test]
fn errors_name_the_line_and_the_rule() {
    let text = "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\n\n[[class]]\nname = \"b\"\nrank = 1\npriority = 2\n";
    let e = AgentConfig::parse(text, None).unwrap_err().to_string();
    assert!(e.contains(":7:") && e.contains("rank 1"), "{e}");
    let e = AgentConfig::parse("[[class]]\nname = \"a\"\nrank = 1\npriority = 30\n", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains(":2:") && e.contains("0..=15"), "{e}");
    let e = AgentConfig::parse("[agent]\nsockt = \"/x\"\n", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains(":2:") && e.contains("sockt"), "{e}");
    let e = AgentConfig::parse(
        "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nlevel = \"pause\"\n",
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("suspend (3)"), "{e}");
}

#[test]
fn windows_are_checked_and_the_builtin_batch_class_has_one() {
    assert_eq!(
        AgentConfig::builtin().rule("batch").unwrap().window,
        Some(2)
    );
    let c = AgentConfig::parse(
        "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nlevel = \"hold\"\nwindow = 1\n",
        None,
    )
    .unwrap();
    assert_eq!(c.rule("a").unwrap().window, Some(1));
    for bad in ["0", "5000"] {
        let e = AgentConfig::parse(
            &format!("[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nwindow = {bad}\n"),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains(":2:") && e.contains("1..=4096"), "{e}");
    }
}

#[test]
fn control_and_tracer_periods_are_checked() {
    let c = AgentConfig::parse(
        "[tracer]\nactivity_us = 1000\nscan_ms = 100\n\n[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nlevel = \"suspend\"\ncontrol = \"tracer\"\n\n[[class]]\nname = \"b\"\nrank = 2\npriority = 9\n",
        None,
    )
    .unwrap();
    assert_eq!(c.control("a"), Control::Tracer);
    assert_eq!(c.control("b"), Control::Shim);
    assert!(c.uses_tracer());
    assert!(!AgentConfig::builtin().uses_tracer(), "opt-in");
    assert_eq!(c.tracer.activity, std::time::Duration::from_millis(1));
    assert_eq!(c.tracer.scan, std::time::Duration::from_millis(100));
    let e = AgentConfig::parse(
        "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\ncontrol = \"ptrace\"\n",
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains(":2:") && e.contains("tracer (also"), "{e}");
    let e = AgentConfig::parse("\n[tracer]\nscan_ms = 5\n", None)
        .unwrap_err()
        .to_string();
    assert!(e.contains(":2:") && e.contains("50..=60000"), "{e}");
}

#[test]
fn hw_queues_are_checked_and_the_builtin_classes_have_them() {
    let b = AgentConfig::builtin();
    assert_eq!(b.rule("latency").unwrap().hw_queues, Some(8));
    assert_eq!(b.rule("batch").unwrap().hw_queues, Some(4));
    let c = AgentConfig::parse(
        "[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nhw_queues = 2\n\n[[class]]\nname = \"b\"\nrank = 0\npriority = 3\n",
        None,
    )
    .unwrap();
    assert_eq!(c.rule("a").unwrap().hw_queues, Some(2));
    assert_eq!(
        c.rule("b").unwrap().hw_queues,
        None,
        "omitted: the shim's default"
    );
    for bad in ["0", "1025"] {
        let e = AgentConfig::parse(
            &format!("[[class]]\nname = \"a\"\nrank = 1\npriority = 3\nhw_queues = {bad}\n"),
            None,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(":2:") && e.contains("hw_queues") && e.contains("1..=1024"),
            "{e}"
        );
    }
}

#[test]
fn error_lines_come_from_the_parser_not_from_a_search_of_the_text() {
    // Each key or header also appears in a comment above the line that breaks the rule: the
    // error names the real line, not the comment's.
    for (text, line, want) in [
        (
            "# [agent] settings follow\n\n[agent]\nlease_ms = 1\n",
            3,
            "lease_ms = 1 is outside",
        ),
        (
            "# calibration = \"node.toml\" once measured\n[agent]\nedges = true\ncalibration = \"/nonexistent/kfdq-calibration.toml\"\n",
            4,
            "calibration = ",
        ),
        (
            "# [tracer] is optional\n\n\n[tracer]\nscan_ms = 5\n",
            4,
            "50..=60000",
        ),
        (
            "# [kubernetes] for pods\n[kubernetes]\nallocations = \"a.json\"\n",
            2,
            "must be an absolute path",
        ),
    ] {
        let e = AgentConfig::parse(text, None).unwrap_err().to_string();
        assert!(
            e.contains(&format!("<config>:{line}: ")) && e.contains(want),
            "{text:?}: {e}"
        );
    }
}
