//! Every kind of stream under the shim, against fakehip + kfd-emu: the registry maps each
//! stream (null, per-thread, created by the program, created by a dlopen'ed library, created
//! through hipGetProcAddress pointers) to the KFD queue fakehip put it on, with the intended
//! priority, and the emulator agrees.
//!
//! A stream's first operation being a copy or fill is in `streams_first_op.rs`; the fixture in
//! `common/streams.rs`.

mod common;

use std::collections::HashMap;

use common::streams::{assert_emulator_agrees, program, stop_at};
use common::*;
use kfdq::{Pid, QueueId};

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn null_stream_pytorch_style() {
    let emu = mount();
    let mut s = stop_at(
        &emu,
        program("streams", &["null"]),
        "CHECKPOINT",
        "the null stream mapped",
        |r| {
            r.streams
                .iter()
                .any(|s| s.kind == StreamKind::Null && s.queue_id.is_some())
        },
    );
    let (null, pid, reg) = (s.q["null"], s.pid, &s.reg);
    let st = stream_of_kind(reg, StreamKind::Null);
    assert_eq!(st.stream_id, 0);
    assert_eq!(
        st.queue_id,
        Some(QueueId(null.queue_id)),
        "registry maps the null stream to fakehip's null-stream queue"
    );
    assert_eq!(
        reg.streams.len(),
        1,
        "hipStreamLegacy and the <<<>>> path are the same null stream: {reg:#?}"
    );
    // No class: the runtime's own priority (ROCr normal = 7) stays.
    assert_eq!(effective(reg, null.queue_id), 7);
    let done = emu.queue(pid, null.queue_id).packets_done;
    assert!(
        done >= 13,
        "every null-stream launch ran on that queue ({done} packets)"
    );
    // Keep the state directory alive past `finish` (which drops the app). The file must exist
    // while the program waits at its checkpoint (checked before letting it go on and exit).
    let state_dir = std::mem::replace(&mut s.app.state_dir, tempfile::tempdir().unwrap());
    assert!(state_dir.path().join(format!("shim-{pid}.json")).exists());
    s.finish(&emu);
    assert!(
        !state_dir.path().join(format!("shim-{pid}.json")).exists(),
        "the registry file is removed at exit"
    );
}

/// Runs `streams priorities` under `class` (`KFDQ_CLASS`) and `forced` (`KFDQ_PRIORITY`):
/// six created streams, each mapped to fakehip's queue and attributed to the main program.
fn run_priorities(
    emu: &Emu,
    class: Option<&str>,
    forced: Option<&str>,
) -> (Registry, HashMap<String, ProgQueue>, String) {
    let mut l = program("streams", &["priorities"]);
    if let Some(c) = class {
        l = l.env("KFDQ_CLASS", c);
    }
    if let Some(p) = forced {
        l = l.env("KFDQ_PRIORITY", p);
    }
    let s = stop_at(emu, l, "CHECKPOINT", "six streams mapped", |r| {
        mapped(r) >= 6
    });
    for (name, pq) in &s.q {
        let st = stream_by_handle(&s.reg, pq.handle);
        assert_eq!(st.kind, StreamKind::Created);
        assert_eq!(
            st.queue_id,
            Some(QueueId(pq.queue_id)),
            "stream {name}: registry vs fakehip"
        );
        assert_eq!(st.creator, None, "created by the main program");
    }
    let (reg, q) = (s.reg.clone(), s.q.clone());
    let stderr = s.finish(emu);
    (reg, q, stderr)
}

/// One test per row: `name: class, forced priority => check`; every row runs
/// [`run_priorities`] and hands its registry, queues and stderr to `check`.
macro_rules! priority_cases {
    ($($name:ident: $class:expr, $forced:expr => $check:ident;)*) => {$(
        #[test]
        #[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
        fn $name() {
            let emu = mount();
            let (reg, q, stderr) = run_priorities(&emu, $class, $forced);
            $check(&reg, &q, &stderr);
        }
    )*};
}

priority_cases! {
    stream_priorities_default_class_and_clamping: None, None => default_class_and_clamping;
    stream_priorities_latency_class: Some("latency"), None => latency_class;
    stream_priorities_batch_class: Some("batch"), None => batch_class;
    forced_priority_applies_to_every_queue: Some("batch"), Some("12") => forced_12;
    invalid_class_and_priority_are_reported: Some("gold"), Some("16") => invalid_gold_16;
}

fn default_class_and_clamping(reg: &Registry, q: &HashMap<String, ProgQueue>, stderr: &str) {
    // ROCr mapping, unchanged without a class: high 11, normal 7, low 0; 3 and -12 are clamped
    // by HIP to low and high.
    let want = [
        ("high", 11, -1),
        ("normal", 7, 0),
        ("low", 0, 1),
        ("three", 0, 1),
        ("minus12", 11, -1),
        ("plain", 7, i32::MIN),
    ];
    for (name, prio, hip) in want {
        let s = stream_by_handle(reg, q[name].handle);
        assert_eq!(effective(reg, q[name].queue_id), prio, "stream {name}");
        if hip != i32::MIN {
            assert_eq!(
                s.hip_priority,
                Some(hip),
                "stream {name}: effective (clamped) HIP priority"
            );
        }
    }
    // Lesson 8: out-of-range priorities are reported, in the registry and on stderr.
    for bad in ["priority 3)", "priority -12)"] {
        assert!(
            reg.warnings
                .iter()
                .any(|w| w.contains(bad) && w.contains("[-1, 1]")),
            "warning for {bad} in {:#?}",
            reg.warnings
        );
        assert!(stderr.contains(bad), "stderr reports {bad}: {stderr}");
    }
}

fn latency_class(reg: &Registry, q: &HashMap<String, ProgQueue>, _: &str) {
    assert_eq!(reg.class.as_deref(), Some("latency"));
    for (name, prio) in [("high", 15), ("normal", 13), ("low", 11), ("plain", 13)] {
        assert_eq!(
            effective(reg, q[name].queue_id),
            prio,
            "latency class, stream {name}"
        );
    }
    for qi in &reg.queues {
        assert!(
            [0, 7, 11].contains(&qi.requested_priority),
            "the runtime's request is recorded: {qi:?}"
        );
    }
}

fn batch_class(reg: &Registry, q: &HashMap<String, ProgQueue>, _: &str) {
    for (name, prio) in [("high", 6), ("normal", 3), ("low", 0)] {
        assert_eq!(
            effective(reg, q[name].queue_id),
            prio,
            "batch class, stream {name}"
        );
    }
}

fn forced_12(reg: &Registry, q: &HashMap<String, ProgQueue>, _: &str) {
    for name in ["high", "normal", "low", "plain"] {
        assert_eq!(
            effective(reg, q[name].queue_id),
            12,
            "KFDQ_PRIORITY=12 forces every queue"
        );
    }
}

fn invalid_gold_16(reg: &Registry, q: &HashMap<String, ProgQueue>, stderr: &str) {
    for name in ["high", "low"] {
        assert_eq!(
            effective(reg, q[name].queue_id),
            15,
            "KFDQ_PRIORITY=16 is clamped to 15"
        );
    }
    assert_eq!(
        reg.class.as_deref(),
        Some("gold"),
        "a name the shim does not know is kept for the agent, whose configuration may define it"
    );
    for w in ["KFDQ_CLASS=\"gold\"", "KFDQ_PRIORITY=16"] {
        assert!(
            reg.warnings.iter().any(|x| x.contains(w)),
            "registry warns about {w}: {:#?}",
            reg.warnings
        );
        assert!(stderr.contains(w), "stderr warns about {w}: {stderr}");
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn per_thread_default_streams() {
    let emu = mount();
    let s = stop_at(
        &emu,
        program("streams", &["spt"]),
        "CHECKPOINT",
        "three per-thread streams mapped",
        |r| {
            r.streams
                .iter()
                .filter(|s| s.kind == StreamKind::PerThread && s.queue_id.is_some())
                .count()
                == 3
        },
    );
    let mut mapped: Vec<u32> = s
        .reg
        .streams
        .iter()
        .filter(|s| s.kind == StreamKind::PerThread)
        .filter_map(|s| s.queue_id)
        .map(|q| q.0)
        .collect();
    let mut want: Vec<u32> = ["spt0", "spt1", "spt2"]
        .iter()
        .map(|n| s.q[*n].queue_id)
        .collect();
    mapped.sort();
    want.sort();
    assert_eq!(
        mapped, want,
        "each thread's per-thread stream maps to its own queue (both _spt and hipStreamPerThread launches)"
    );
    assert!(
        !s.reg.streams.iter().any(|s| s.kind == StreamKind::Null),
        "no null-stream use here: {:#?}",
        s.reg
    );
    s.finish(&emu);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn hip_get_proc_address_returns_the_wrappers() {
    let emu = mount();
    let mut s = stop_at(
        &emu,
        program("streams", &["procaddr"]).env("KFDQ_CLASS", "latency"),
        "CHECKPOINT",
        "three streams mapped",
        |r| mapped(r) == 3,
    );
    for sym in [
        "hipLaunchKernel",
        "hipLaunchKernel+spt",
        "hipStreamCreateWithPriority",
    ] {
        let line = s.app.wait_line(&format!("procaddr {sym} "));
        assert!(
            line.ends_with("libkfdq_shim.so"),
            "hipGetProcAddress({sym}) must hand out the shim's wrapper: {line}"
        );
    }
    let line = s.app.wait_line("procaddr hipMalloc ");
    assert!(
        line.ends_with("libamdhip64.so.6"),
        "functions the shim does not wrap stay the runtime's: {line}"
    );
    let (q, reg) = (&s.q, &s.reg);
    let created = stream_by_handle(reg, q["procaddr-high"].handle);
    assert_eq!(created.queue_id, Some(QueueId(q["procaddr-high"].queue_id)));
    assert_eq!(created.hip_priority, Some(-1));
    assert_eq!(
        effective(reg, q["procaddr-high"].queue_id),
        15,
        "latency class, high stream"
    );
    assert_kind_maps(reg, StreamKind::Null, q["null"].queue_id);
    assert_kind_maps(reg, StreamKind::PerThread, q["spt"].queue_id);
    s.finish(&emu);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn library_streams_are_attributed_to_the_library() {
    let emu = mount();
    let lib = programs().lib().display().to_string();
    let s = stop_at(
        &emu,
        program("uselib", &[lib.as_str()]).env("KFDQ_CLASS", "normal"),
        "CHECKPOINT",
        "four streams mapped",
        |r| mapped(r) == 4,
    );
    let (q, reg) = (&s.q, &s.reg);
    for (name, hip, prio) in [("lib-high", -1, 10), ("lib-low", 1, 7)] {
        let st = stream_by_handle(reg, q[name].handle);
        assert_eq!(st.queue_id, Some(QueueId(q[name].queue_id)), "{name}");
        assert_eq!(
            st.creator.as_deref(),
            Some("libkfdqtest_streams.so"),
            "{name} was created by the library"
        );
        assert_eq!(st.hip_priority, Some(hip));
        assert_eq!(
            effective(reg, q[name].queue_id),
            prio,
            "normal class, {name}"
        );
    }
    let app_stream = stream_by_handle(reg, q["app"].handle);
    assert_eq!(app_stream.creator, None);
    assert_eq!(app_stream.queue_id, Some(QueueId(q["app"].queue_id)));
    assert_kind_maps(reg, StreamKind::Null, q["null"].queue_id);
    // The library's launches (hipLaunchKernel, hipModuleLaunchKernel, the mangled
    // hipExtModuleLaunchKernel) ran on its queues.
    assert!(emu.queue(s.pid, q["lib-low"].queue_id).packets_done >= 2);
    s.finish(&emu);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn streams_sharing_a_queue_are_found_and_reported() {
    let emu = mount();
    let s = stop_at(
        &emu,
        program("streams", &["shared"]).env("GPU_MAX_HW_QUEUES", "1"),
        "CHECKPOINT",
        "three streams mapped",
        |r| mapped(r) == 3,
    );
    let (q, reg) = (&s.q, &s.reg);
    let shared = q["shared0"].queue_id;
    assert!(
        ["shared1", "shared2"]
            .iter()
            .all(|n| q[*n].queue_id == shared),
        "GPU_MAX_HW_QUEUES=1 (the user's) makes fakehip share: {q:?}"
    );
    for n in ["shared0", "shared1", "shared2"] {
        assert_eq!(
            stream_by_handle(reg, q[n].handle).queue_id,
            Some(QueueId(shared)),
            "{n} found through the write index of the shared queue"
        );
    }
    let qi = reg
        .queues
        .iter()
        .find(|x| x.queue_id == QueueId(shared))
        .unwrap();
    assert_eq!(qi.streams.len(), 3);
    let sharing: Vec<&String> = reg
        .warnings
        .iter()
        .filter(|w| w.starts_with("streams share KFD queues"))
        .collect();
    assert_eq!(sharing.len(), 1, "reported once: {:#?}", reg.warnings);
    assert!(
        sharing[0].contains("GPU_MAX_HW_QUEUES=1")
            && sharing[0].contains(&format!("queue {shared}")),
        "{}",
        sharing[0]
    );
    let stderr = s.finish(&emu);
    assert_eq!(
        stderr.matches("streams share KFD queues").count(),
        1,
        "and once on stderr: {stderr}"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn fork_child_starts_empty_and_registers_its_own_queues() {
    let emu = mount();
    let mut app = Launch::new(programs().get("forkexec"))
        .arg("fork")
        .start(&emu);
    let parent_pid = app.pid;
    let pid_of = |l: String| -> u32 { l.split_whitespace().nth(2).unwrap().parse().unwrap() };
    let child_pid = pid_of(app.wait_line("CHECKPOINT child "));
    assert_eq!(pid_of(app.wait_line("CHECKPOINT parent ")), parent_pid);
    assert_ne!(child_pid, parent_pid);
    let q = app.queues();
    let parent = app.wait_registry(parent_pid, "parent null stream", |r| {
        r.streams
            .iter()
            .any(|s| s.kind == StreamKind::Null && s.queue_id.is_some())
    });
    assert_eq!(parent.streams.len(), 1);
    let child = app.wait_registry(child_pid, "child streams", |r| mapped(r) == 2);
    assert_eq!(child.pid, Pid(child_pid));
    assert_eq!(
        stream_by_handle(&child, q["child-high"].handle).queue_id,
        Some(QueueId(q["child-high"].queue_id))
    );
    assert_kind_maps(&child, StreamKind::Null, q["child-null"].queue_id);
    // The child's registry holds only its own queues, which the emulator lists under its pid.
    assert_emulator_agrees(&emu, child_pid, &child);
    assert_emulator_agrees(&emu, parent_pid, &parent);
    app.go();
    app.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn exec_registers_the_new_image_once() {
    let emu = mount();
    let streams = programs().get("streams");
    let mut app = Launch::new(programs().get("forkexec"))
        .arg("exec")
        .arg(streams.display().to_string())
        .start(&emu);
    app.wait_line("CHECKPOINT pre-exec");
    let pid = app.pid;
    let before = app.wait_registry(pid, "pre-exec null stream", |r| {
        r.streams.iter().any(|s| s.queue_id.is_some())
    });
    assert_eq!(before.streams.len(), 1);
    app.release("pre-exec");
    app.wait_line("CHECKPOINT null");
    let q = app.queues();
    let after = app.wait_registry(pid, "the new image's null stream", |r| {
        r.streams
            .iter()
            .any(|s| s.queue_id == Some(QueueId(q["null"].queue_id)))
            && r.queues.len() == 1
    });
    assert_eq!(after.pid, Pid(pid), "same pid after exec");
    assert_eq!(
        after.streams.len(),
        1,
        "the new image registers once, with its own state: {after:#?}"
    );
    assert_emulator_agrees(&emu, pid, &after);
    app.go();
    app.finish();
}
