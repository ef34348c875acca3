//! `kfdq --root <mount> topology|ps [--json]` print what the emulator serves.

mod common;

use std::process::Command;

use common::*;

fn kfdq(root: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kfdq"))
        .arg("--root")
        .arg(root)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn topology_json_matches_the_emulator() {
    let Some(emu) = mount("topology_json_matches_the_emulator", Preset::Mi300xCpx) else {
        return;
    };
    let (ok, out, err) = kfdq(emu.path(), &["topology", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["kfd_version"]["minor"], 17);
    let gpus: Vec<_> = v["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "gpu")
        .collect();
    let stats = emu.stats();
    assert_eq!(gpus.len(), stats.partitions.len());
    for (g, p) in gpus.iter().zip(&stats.partitions) {
        assert_eq!(g["gpu_id"].as_u64().unwrap() as u32, p.gpu_id);
        assert_eq!(g["num_xcc"].as_u64().unwrap() as u32, p.num_xcc);
        assert_eq!(
            g["resident_queue_limit"].as_u64().unwrap() as u32,
            p.num_cp_queues
        );
        assert_eq!(g["compute_units"], 38);
        assert_eq!(g["gfx_target"], "gfx942");
        assert_eq!(g["cwsr"]["source"], "sysfs");
    }
    // The table says the same for people.
    let (ok, table, _) = kfdq(emu.path(), &["topology"]);
    assert!(ok);
    assert!(
        table.contains("gfx942") && table.contains("8 GPU partition(s)"),
        "{table}"
    );
}

#[test]
fn ps_json_lists_another_process_queues() {
    let Some(emu) = mount("ps_json_lists_another_process_queues", Preset::Mi308x) else {
        return;
    };
    let holder = Holder::spawn(emu.path(), &["--queues", "3", "--priority", "11"]);
    let (ok, out, err) = kfdq(emu.path(), &["ps", "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = v
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == holder.pid)
        .expect("holder listed");
    assert_eq!(p["command"], "kfdq-demo");
    let ids: Vec<u32> = p["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue_id"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(ids, holder.queues);
    for q in p["queues"].as_array().unwrap() {
        assert_eq!(q["gpu_id"].as_u64().unwrap() as u32, holder.gpu_id);
        assert_eq!(q["type_name"], "compute");
        assert_eq!(q["ring_size"], 65536);
    }
    let (ok, table, _) = kfdq(emu.path(), &["ps"]);
    assert!(ok);
    assert!(
        table.contains("kfdq-demo") && table.contains("65536"),
        "{table}"
    );
    let pid = holder.pid;
    assert!(holder.finish().success());
    // Its KFD state goes away with it.
    wait_for("process dir removal", || {
        let (_, out, _) = kfdq(emu.path(), &["ps", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_array().unwrap().iter().all(|p| p["pid"] != pid)
    });
}

#[test]
fn missing_root_gives_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    for cmd in ["topology", "ps"] {
        let (ok, _, err) = kfdq(dir.path(), &[cmd]);
        assert!(!ok, "{cmd} succeeded without amdkfd");
        assert!(err.contains("kfd-emu --mount"), "{cmd}: {err}");
    }
}
