//! The Kubernetes class cap in the node: a process's allocation caps its class against
//! `KFDQ_CLASS`, `kfdq class` (root included) and the file changing under it.

use std::time::Instant;

use super::fixture::identity;
use super::*;
use crate::agent::identity::{Claim, Identity};
use crate::allocation::{Allocation, AllocationFile, FILE_VERSION, PodRef, Token};
use crate::ids::{GpuId, Pid};
use crate::proto::Request;

const CONFIG: &str = "[agent]\nhysteresis_ms = 0\n\n[kubernetes]\nfeatures = \"\"\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"normal\"\nrank = 1\npriority = 8\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nmatch = { env = true }\n";

fn id(pid: u32, claim: Claim) -> Identity {
    Identity {
        exe: "/bin/p".into(),
        claim,
        ..identity(Pid(pid))
    }
}

fn grant(token: &Token, class: &str, pod: &str) -> Allocation {
    Allocation {
        token: token.clone(),
        class: class.into(),
        gpu: GpuId(1),
        devices: vec![format!("1-{class}-0")],
        pod: Some(PodRef {
            namespace: "ns".into(),
            name: pod.into(),
            container: "c".into(),
        }),
    }
}

fn class_of(n: &NodeState, pid: u32) -> (String, String) {
    let s = n.status(Instant::now());
    let p = s.processes.iter().find(|p| p.pid == Pid(pid)).unwrap();
    (p.class.clone(), p.class_reason.clone())
}

#[test]
fn the_allocation_caps_the_class_whoever_asks() {
    let t0 = Instant::now();
    let cfg = AgentConfig::parse(CONFIG, None).unwrap();
    let mut n = NodeState::new(cfg, vec![], String::new(), t0).unwrap();
    let (batch, latency) = (Token::from_bytes([1; 16]), Token::from_bytes([2; 16]));
    n.set_allocations(AllocationFile {
        version: FILE_VERSION,
        allocations: vec![
            grant(&batch, "batch", "train"),
            grant(&latency, "latency", "llm"),
        ],
    });
    let mut out = Vec::new();
    let v = crate::proto::VERSION;
    let hello = |n: &mut NodeState, conn, pid, claim, class: &str, out: &mut Vec<Out>| {
        n.hello(conn, id(pid, claim), v, Some(class.into()), Pid(pid), out)
            .unwrap()
    };
    hello(
        &mut n,
        1,
        10,
        Claim::Token(batch.clone()),
        "latency",
        &mut out,
    );
    hello(&mut n, 2, 20, Claim::Token(latency.clone()), "", &mut out);
    hello(
        &mut n,
        3,
        30,
        Claim::Token(Token::from_bytes([9; 16])),
        "latency",
        &mut out,
    );
    hello(&mut n, 4, 40, Claim::Malformed, "", &mut out);
    hello(&mut n, 5, 50, Claim::Token(latency), "normal", &mut out);
    hello(&mut n, 6, 60, Claim::None, "latency", &mut out);
    let (c, why) = class_of(&n, 10);
    assert_eq!(c, "batch");
    assert_eq!(why, "capped by kubernetes allocation ns/train/c");
    assert_eq!(class_of(&n, 20).0, "latency");
    assert_eq!(class_of(&n, 30).0, "batch", "forged: the fallback");
    assert_eq!(class_of(&n, 40).0, "batch", "malformed: the fallback");
    assert_eq!(class_of(&n, 50).0, "normal", "KFDQ_CLASS may lower it");
    assert_eq!(class_of(&n, 60).0, "latency", "no claim: the rules");
    let s = n.status(t0);
    let p = s.processes.iter().find(|p| p.pid == Pid(10)).unwrap();
    assert_eq!(p.pod.as_ref().unwrap().name, "train");
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("KFDQ_CLASS=latency is above class batch"))
    );

    // kfdq class, even as root, cannot raise it; lowering is fine.
    let root = id(1, Claim::None);
    let set = |n: &mut NodeState, pid, class: &str, out: &mut Vec<Out>| {
        let req = Request::SetClass {
            pid: Pid(pid),
            class: class.into(),
        };
        n.control(99, &root, req, t0, out);
    };
    out.clear();
    set(&mut n, 10, "latency", &mut out);
    let Some(Out::Control(99, crate::proto::Reply::Error { error })) = out.first() else {
        panic!("{out:?}");
    };
    assert!(
        error.contains("capped by kubernetes allocation ns/train/c"),
        "{error}"
    );
    assert_eq!(class_of(&n, 10).0, "batch");
    out.clear();
    set(&mut n, 20, "batch", &mut out);
    assert_eq!(class_of(&n, 20).0, "batch");
    assert_eq!(
        class_of(&n, 20).1,
        "kfdq class, within kubernetes allocation ns/llm/c"
    );

    // The plugin drops the latency grant: its processes fall back, the override with them.
    set(&mut n, 20, "latency", &mut out);
    assert_eq!(class_of(&n, 20).0, "latency");
    n.set_allocations(AllocationFile {
        version: FILE_VERSION,
        allocations: vec![grant(&batch, "batch", "train")],
    });
    assert_eq!(class_of(&n, 20).0, "batch");
    assert_eq!(class_of(&n, 50).0, "batch");
}
