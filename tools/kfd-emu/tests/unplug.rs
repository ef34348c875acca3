//! A partition leaves the KFD topology at run time and comes back, through the mount's
//! `kfd-emu/unplug` control file (plain writes and reads, as another process would).

mod common;

use std::io::Write as _;

use kfd_emu::Preset;

use common::*;

/// The gpu_ids the topology directory lists now, in node order.
fn listed_gpu_ids(t: &TestEmu) -> Vec<u32> {
    let nodes = t.path("sys/class/kfd/kfd/topology/nodes");
    let mut dirs: Vec<u32> = std::fs::read_dir(&nodes)
        .expect("read the topology's nodes/")
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    dirs.sort();
    dirs.iter()
        .map(|n| {
            t.read(&format!("sys/class/kfd/kfd/topology/nodes/{n}/gpu_id"))
                .trim()
                .parse()
                .unwrap()
        })
        .filter(|g| *g != 0)
        .collect()
}

fn write_unplug(t: &TestEmu, text: &str) -> Result<(), i32> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(t.path("kfd-emu/unplug"))
        .expect("open kfd-emu/unplug");
    f.write_all(text.as_bytes())
        .map_err(|e| e.raw_os_error().unwrap_or(0))
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_partition_leaves_the_topology_and_comes_back() {
    require_root();
    let t = mount_preset(Preset::Mi300xCpx);
    let all = t.gpu_ids();
    assert!(all.len() >= 2, "CPX has several partitions: {all:?}");
    assert_eq!(listed_gpu_ids(&t), all);
    let gone = all[1];
    let dir = (0..64)
        .find(|n| {
            t.path(&format!("sys/class/kfd/kfd/topology/nodes/{n}/gpu_id"))
                .exists()
                && t.read(&format!("sys/class/kfd/kfd/topology/nodes/{n}/gpu_id"))
                    .trim()
                    == gone.to_string()
        })
        .expect("the partition's node directory");

    write_unplug(&t, &format!("remove {gone}\n")).expect("remove is accepted");
    let left: Vec<u32> = all.iter().copied().filter(|g| *g != gone).collect();
    assert_eq!(
        listed_gpu_ids(&t),
        left,
        "the removed partition is not listed"
    );
    assert!(
        !t.path(&format!("sys/class/kfd/kfd/topology/nodes/{dir}"))
            .exists(),
        "nor found by name"
    );
    assert_eq!(
        t.read("kfd-emu/unplug").trim(),
        format!("{{\"unplugged\":[{gone}]}}")
    );

    // A bad line changes nothing.
    assert_eq!(
        write_unplug(&t, &format!("restore {gone}\nremove 1\n")),
        Err(libc::EINVAL)
    );
    assert_eq!(write_unplug(&t, "unplug everything\n"), Err(libc::EINVAL));
    assert_eq!(listed_gpu_ids(&t), left);

    write_unplug(&t, &format!("restore {gone}\n")).expect("restore is accepted");
    assert_eq!(listed_gpu_ids(&t), all);
    write_unplug(&t, &format!("remove {gone}\nclear\n")).unwrap();
    assert_eq!(listed_gpu_ids(&t), all);
}
