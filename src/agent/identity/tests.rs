//! The identity's `/proc` reads, classification, and admin and ownership rules.

use super::proc::parent_of;
use super::*;

fn id(uid: u32) -> Identity {
    Identity {
        pid: Pid(1),
        start: 0,
        uid,
        gid: uid,
        groups: vec![],
        exe: "/usr/bin/x".into(),
        cgroup: "/system.slice/app/c1".into(),
        claim: Claim::None,
        admin_channel: false,
        liveness: Liveness::StartTime,
    }
}

fn cfg() -> AgentConfig {
    AgentConfig::parse(
        r#"
[[class]]
name = "serving"
rank = 2
priority = 13
match = { uids = [1000] }
[[class]]
name = "pods"
rank = 1
priority = 8
match = { cgroups = ["/system.slice"] }
[[class]]
name = "batch"
rank = 0
priority = 3
level = "deactivate"
match = { env = true }
"#,
        None,
    )
    .unwrap()
}

#[test]
fn the_parent_is_read_from_proc() {
    let me = std::process::id();
    assert_eq!(parent_of(me), Some(nix::unistd::getppid().as_raw() as u32));
    assert_eq!(parent_of(u32::MAX / 2), None);
    // The start time is this process's, and stays: the identity is current.
    let start = start_time(Pid(me)).unwrap();
    assert!(start > 0);
    assert_eq!(start_time(Pid(me)).unwrap(), start);
    // No token here or above in this cgroup (the test runs outside pods).
    let me = Identity::of_process(Pid(me), 0, 0).unwrap();
    assert_eq!(me.claim, Claim::None);
    assert_eq!(me.start, start);
    assert!(me.is_current());
    assert!(
        !Identity {
            start: start + 1,
            ..me
        }
        .is_current(),
        "another process's pid"
    );
}

#[test]
fn rules_match_in_file_order() {
    let c = cfg();
    assert_eq!(entitled_class(&c, &id(1000)).0, "serving");
    assert_eq!(entitled_class(&c, &id(2000)).0, "pods");
    let mut other = id(2000);
    other.cgroup = "/system.slicex".into();
    assert_eq!(entitled_class(&c, &other).0, "batch", "prefix on / only");
}

#[test]
fn kfdq_class_is_capped() {
    let c = cfg();
    let k = classify(&c, &id(2000), Some("serving"), None);
    assert_eq!(k.class, "pods");
    let r = k.refused.unwrap();
    assert!(
        r.contains("above") && r.contains("ask the node's admin"),
        "{r}"
    );
    let r = classify(&c, &id(0), Some("serving"), None).refused.unwrap();
    assert!(
        !r.contains("ask the node's admin") && r.contains("kfdq class 1 serving"),
        "root is the admin: {r}"
    );
    assert_eq!(classify(&c, &id(1000), Some("batch"), None).class, "batch");
    assert_eq!(classify(&c, &id(2000), Some("nope"), None).class, "pods");
    assert!(may_set_class(&c, &id(2000), "pods", "serving", None).is_err());
    assert!(may_set_class(&c, &id(0), "pods", "serving", None).is_ok());
}

#[test]
fn root_in_a_pod_is_no_admin_and_owns_its_container_only() {
    let c = cfg();
    let pod = |uid, ctr: &str| Identity {
        cgroup: format!("/kubepods/besteffort/pod1/{ctr}"),
        ..id(uid)
    };
    assert!(id(0).is_admin(&c));
    assert!(!pod(0, "a").is_admin(&c), "root in a pod");
    let admin = Identity {
        admin_channel: true,
        ..pod(0, "kfdqd")
    };
    assert!(admin.is_admin(&c), "the admin socket");
    assert!(may_set_class(&c, &pod(0, "a"), "pods", "serving", None).is_err());
    assert!(pod(1000, "a").owns(&pod(1000, "a")));
    assert!(
        !pod(1000, "a").owns(&pod(1000, "b")),
        "same uid, other container"
    );
    assert!(
        !id(1000).owns(&pod(1000, "b")),
        "a node user, a pod's process"
    );
    assert!(id(1000).owns(&id(1000)));
    assert!(!id(1000).owns(&id(1001)));
    assert!(pod(0, "a").may_see(&pod(5, "a"), &c));
    assert!(!pod(0, "a").may_see(&pod(0, "b"), &c));
    assert!(!pod(0, "a").may_see(&id(0), &c));
    assert!(id(1000).may_see(&pod(0, "b"), &c));
}
