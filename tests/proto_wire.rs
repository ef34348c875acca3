//! The protocol's bytes on the wire, pinned: messages that carry process, queue and GPU ids
//! serialize to these exact lines (the ids are bare numbers), and the lines decode back to the
//! same messages. A shim and an agent of different builds must keep understanding each other.

use std::fmt::Debug;

use kfdq::proto::control::{
    Control, Counters, LeftAlone, NodeStatus, PartitionStatus, ProcessQueue, ProcessStatus,
};
use kfdq::proto::{
    AgentMsg, CuMask, Level, QueueInfo, Registry, Reply, Request, ShimMsg, StreamInfo, StreamKind,
    Target,
};
use kfdq::{GpuId, Pid, QueueId};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// `m` serializes to `want`, and `want` decodes to `m`.
fn check<T: Serialize + DeserializeOwned + PartialEq + Debug>(m: &T, want: &str) {
    assert_eq!(serde_json::to_string(m).unwrap(), want);
    assert_eq!(&serde_json::from_str::<T>(want).unwrap(), m);
}

#[test]
fn a_hello_carries_the_pid_as_a_number() {
    check(
        &ShimMsg::Hello {
            version: 1,
            pid: Pid(4242),
            exe: "/usr/bin/app".into(),
            class: Some("latency".into()),
            priority: None,
        },
        r#"{"type":"hello","version":1,"pid":4242,"exe":"/usr/bin/app","class":"latency","priority":null}"#,
    );
}

#[test]
fn activity_carries_the_queue_id_as_a_number() {
    check(
        &ShimMsg::Activity {
            queue_id: QueueId(3),
            busy: true,
        },
        r#"{"type":"activity","queue_id":3,"busy":true}"#,
    );
}

#[test]
fn the_doorbell_messages_are_bare_types() {
    check(&ShimMsg::Doorbell {}, r#"{"type":"doorbell"}"#);
    check(&AgentMsg::DoorbellTaken {}, r#"{"type":"doorbell_taken"}"#);
    check(&AgentMsg::Rang {}, r#"{"type":"rang"}"#);
}

#[test]
fn a_registry_carries_pid_queue_and_gpu_ids_as_numbers() {
    let registry = Registry {
        pid: Pid(4242),
        class: Some("latency".into()),
        streams: vec![StreamInfo {
            stream_id: 1,
            kind: StreamKind::Created,
            handle: 0x1000,
            hip_priority: Some(-1),
            queue_id: Some(QueueId(3)),
            creator: None,
            held: false,
            held_calls: 0,
        }],
        queues: vec![QueueInfo {
            queue_id: QueueId(3),
            gpu_id: GpuId(0xb1a0),
            requested_priority: 7,
            effective_priority: 13,
            ring_base: 0x7f00_0000,
            ring_size: 4096,
            streams: vec![1],
            deactivated: false,
            suspended: false,
            busy: true,
            window_waits: 0,
            window_stalls: 0,
        }],
        warnings: vec![],
        window: Some(64),
        lease_expiries: 0,
        release_failures: 0,
    };
    check(
        &ShimMsg::Registry(registry),
        r#"{"type":"registry","pid":4242,"class":"latency","streams":[{"stream_id":1,"kind":"created","handle":4096,"hip_priority":-1,"queue_id":3,"creator":null,"held":false,"held_calls":0}],"queues":[{"queue_id":3,"gpu_id":45472,"requested_priority":7,"effective_priority":13,"ring_base":2130706432,"ring_size":4096,"streams":[1],"deactivated":false,"suspended":false,"busy":true,"window_waits":0,"window_stalls":0}],"warnings":[],"window":64,"lease_expiries":0,"release_failures":0}"#,
    );
}

#[test]
fn commands_carry_queue_and_gpu_ids_as_numbers() {
    check(
        &AgentMsg::Preempt {
            seq: 7,
            level: Level::Deactivate,
            target: Target::Queues(vec![QueueId(1), QueueId(2)]),
            grace_period: 0,
        },
        r#"{"type":"preempt","seq":7,"level":"deactivate","target":{"kind":"queues","ids":[1,2]},"grace_period":0}"#,
    );
    check(
        &AgentMsg::SetCuMask {
            seq: 8,
            target: Target::Queues(vec![QueueId(3)]),
            masks: vec![CuMask {
                gpu_id: GpuId(0xb1a0),
                words: vec![0xffff, 0],
            }],
        },
        r#"{"type":"set_cu_mask","seq":8,"target":{"kind":"queues","ids":[3]},"masks":[{"gpu_id":45472,"words":[65535,0]}]}"#,
    );
}

#[test]
fn control_requests_carry_the_pid_as_a_number() {
    check(
        &Request::Suspend {
            pid: Pid(4242),
            level: Level::Suspend,
        },
        r#"{"type":"suspend","pid":4242,"level":"suspend"}"#,
    );
    check(
        &Request::Resume { pid: Pid(4242) },
        r#"{"type":"resume","pid":4242}"#,
    );
}

#[test]
fn the_status_carries_pid_queue_and_gpu_ids_as_numbers() {
    let status = NodeStatus {
        agent_pid: Pid(17),
        version: "0.1.0".into(),
        config: None,
        uptime_s: 1.5,
        priority_note: String::new(),
        partitions: vec![PartitionStatus {
            gpu_id: GpuId(0xb1a0),
            resident_slots: 24,
            cus: 80,
            queues: 1,
            busy_queues: 1,
            preempts: 2,
        }],
        classes: vec![],
        processes: vec![ProcessStatus {
            pid: Pid(4242),
            control: Control::Shim,
            uid: 1000,
            exe: "/usr/bin/app".into(),
            class: "latency".into(),
            class_reason: "env".into(),
            state: "running".into(),
            level: None,
            reason: "free".into(),
            manual: None,
            priority_override: None,
            queues: vec![ProcessQueue {
                queue_id: QueueId(3),
                gpu_id: GpuId(0xb1a0),
                priority: 13,
                busy: true,
                preempted: None,
            }],
            warnings: vec![],
            pod: None,
            preemptions: 0,
            preempted_ms: 0,
            busy_ms: 0,
        }],
        left_alone: vec![LeftAlone {
            pid: Pid(99),
            exe: "/usr/bin/other".into(),
            class: "batch".into(),
            reason: "traced".into(),
        }],
        counters: Counters::default(),
        release: String::new(),
        calibration: None,
    };
    let reply = Reply::Status(Box::new(status));
    check(
        &reply,
        r#"{"type":"status","agent_pid":17,"version":"0.1.0","config":null,"uptime_s":1.5,"priority_note":"","partitions":[{"gpu_id":45472,"resident_slots":24,"cus":80,"queues":1,"busy_queues":1,"preempts":2}],"classes":[],"processes":[{"pid":4242,"control":"shim","uid":1000,"exe":"/usr/bin/app","class":"latency","class_reason":"env","state":"running","level":null,"reason":"free","manual":null,"priority_override":null,"queues":[{"queue_id":3,"gpu_id":45472,"priority":13,"busy":true,"preempted":null}],"warnings":[],"pod":null,"preemptions":0,"preempted_ms":0,"busy_ms":0}],"left_alone":[{"pid":99,"exe":"/usr/bin/other","class":"batch","reason":"traced"}],"counters":{"decisions":0,"commands":0,"command_failures":0,"preempts":0,"preempts_per_s":0.0,"bad_messages":0,"tracer_scans":0,"connections":0,"decision_us_p50":0.0,"decision_us_p99":0.0,"decide_us_p50":0.0,"decide_us_p99":0.0,"ack_us_p50":0.0,"ack_us_max":0.0,"reloads":0,"reload_failures":0,"lease_expiries":0,"busy_edges":0,"doorbells":0,"doorbell_edges":0,"doorbell_ignored":0,"stale_busy":0,"release_failures":0,"edge_decisions":0,"direct_preempts":0,"direct_releases":0,"direct_cleared":0,"direct_subscriptions":0,"direct_forged":0,"unlisted_queues":0,"replaced_sessions":0,"activity_dropped":0,"uid_connections_refused":0,"hints":0,"hints_ignored":0,"hint_expiries":0},"release":""}"#,
    );
    // A status from an agent before the per-process pod and times decodes with their defaults.
    assert_eq!(
        serde_json::from_str::<Reply>(r#"{"type":"status","agent_pid":17,"version":"0.1.0","config":null,"uptime_s":1.5,"priority_note":"","partitions":[{"gpu_id":45472,"resident_slots":24,"cus":80,"queues":1,"busy_queues":1,"preempts":2}],"classes":[],"processes":[{"pid":4242,"control":"shim","uid":1000,"exe":"/usr/bin/app","class":"latency","class_reason":"env","state":"running","level":null,"reason":"free","manual":null,"priority_override":null,"queues":[{"queue_id":3,"gpu_id":45472,"priority":13,"busy":true,"preempted":null}],"warnings":[]}],"left_alone":[{"pid":99,"exe":"/usr/bin/other","class":"batch","reason":"traced"}],"counters":{"decisions":0,"commands":0,"command_failures":0,"preempts":0,"preempts_per_s":0.0,"bad_messages":0,"tracer_scans":0,"connections":0,"decision_us_p50":0.0,"decision_us_p99":0.0,"decide_us_p50":0.0,"decide_us_p99":0.0,"ack_us_p50":0.0,"ack_us_max":0.0,"reloads":0,"reload_failures":0,"lease_expiries":0,"busy_edges":0,"stale_busy":0,"release_failures":0}}"#).unwrap(),
        reply
    );
}

#[test]
fn direct_edges_messages_are_pinned() {
    check(
        &AgentMsg::BoardWriter { board: 0, slot: 3 },
        r#"{"type":"board_writer","board":0,"slot":3}"#,
    );
    check(
        &AgentMsg::Watch {
            board: 0,
            slots: vec![3, 4],
            level: Level::Deactivate,
            grace_period: 0,
            release: Box::new(kfdq::proto::WatchRelease::Hysteresis { hold_ns: 20000000 }),
            min_interval_ns: 1000000,
        },
        r#"{"type":"watch","board":0,"slots":[3,4],"level":"deactivate","grace_period":0,"release":{"rule":"hysteresis","hold_ns":20000000},"min_interval_ns":1000000}"#,
    );
    check(
        &AgentMsg::Unwatch { board: 0 },
        r#"{"type":"unwatch","board":0}"#,
    );
    check(&AgentMsg::BoardChanged {}, r#"{"type":"board_changed"}"#);
    check(
        &ShimMsg::SelfLevel {
            board: 0,
            level: Some(Level::Deactivate),
            ok: true,
            detail: "level 2".into(),
        },
        r#"{"type":"self_level","board":0,"level":"deactivate","ok":true,"detail":"level 2"}"#,
    );
}

#[test]
fn request_hint_messages_are_pinned() {
    check(
        &ShimMsg::Hint {
            on: true,
            expired: false,
        },
        r#"{"type":"hint","on":true,"expired":false}"#,
    );
    // An agent before hints sends no bound (hints refused); a shim before hints ignores it.
    check(
        &AgentMsg::Edges {
            on: true,
            hint_timeout_ms: None,
        },
        r#"{"type":"edges","on":true}"#,
    );
    check(
        &AgentMsg::Edges {
            on: true,
            hint_timeout_ms: Some(50),
        },
        r#"{"type":"edges","on":true,"hint_timeout_ms":50}"#,
    );
    // A hint off without `expired` (the field's default) is an end.
    assert_eq!(
        serde_json::from_str::<ShimMsg>(r#"{"type":"hint","on":false}"#).unwrap(),
        ShimMsg::Hint {
            on: false,
            expired: false
        }
    );
}
