//! Failures injected at run time through the mount's `kfd-emu/faults` control file (as another
//! process would: plain writes and reads on the FUSE mount), and the preempt timeout.

mod common;

use std::io::Write as _;

use kfd_emu::{FaultsFile, Preset};

use common::*;

fn faults(t: &TestEmu) -> FaultsFile {
    serde_json::from_str(&t.read("kfd-emu/faults")).expect("kfd-emu/faults is JSON")
}

/// Writes `text` to the control file in one write; the errno if refused.
fn write_faults(t: &TestEmu, text: &str) -> Result<(), i32> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(t.path("kfd-emu/faults"))
        .expect("open kfd-emu/faults");
    f.write_all(text.as_bytes())
        .map_err(|e| e.raw_os_error().unwrap_or(0))
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_control_file_injects_lists_refuses_and_clears_failures() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    assert_eq!(faults(&t).faults, []);
    let s = Session::new(&t, 0);
    let (q, _bufs) = s.queue(100, 7);

    write_faults(&t, "update_queue=EBUSY,every=2\n").unwrap();
    let seen: Vec<Result<i32, i32>> = (0..4).map(|_| s.kfd.update_queue(&q, 100, 7)).collect();
    assert_eq!(seen, [Ok(0), Err(libc::EBUSY), Ok(0), Err(libc::EBUSY)]);
    let f = faults(&t);
    assert_eq!(f.faults.len(), 1);
    assert_eq!((f.faults[0].calls, f.faults[0].failed), (4, 2));
    assert_eq!(f.refused, None);

    // A write with one bad line is refused whole, and says why.
    let bad = write_faults(&t, "destroy_queue=EIO\nupdate_queue=EBUSY,p=2\n");
    assert_eq!(bad, Err(libc::EINVAL));
    let f = faults(&t);
    assert_eq!(
        f.faults.len(),
        1,
        "nothing of the refused write took effect"
    );
    let why = f.refused.expect("the reason is kept");
    assert!(why.contains("not a probability in (0, 1]"), "{why}");
    assert_eq!(
        s.kfd.destroy_queue(99),
        Err(libc::EINVAL),
        "no DESTROY_QUEUE fault"
    );

    // A failed DESTROY_QUEUE leaves the queue with the kernel.
    write_faults(&t, "clear\ndestroy_queue=EIO,times=1").unwrap();
    assert_eq!(s.kfd.destroy_queue(q.id), Err(libc::EIO));
    assert_eq!(t.queues_of(std::process::id()).len(), 1);
    assert_eq!(
        s.kfd.destroy_queue(q.id),
        Ok(0),
        "times=1: the next call runs"
    );
    assert_eq!(t.queues_of(std::process::id()).len(), 0);
    write_faults(&t, "clear").unwrap();
    assert_eq!(faults(&t).faults, []);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_preempt_timeout_fails_with_etime_and_resets_the_partition() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (a, _ba) = s.queue(100, 7);
    let (b, _bb) = s.queue(100, 7);
    write_faults(&t, "update_queue=preempt-timeout,times=1").unwrap();
    assert_eq!(s.kfd.update_queue(&a, 0, 7), Err(libc::ETIME));
    let stats = t.stats();
    assert_eq!(stats.partitions[0].resets, 1);
    let me = std::process::id();
    for id in [a.id, b.id] {
        let q = t.queue(me, id);
        assert!(q.stopped, "queue {id} lost in the reset");
        assert!(q.active, "the failed call changed nothing else");
    }
    // The reset is over: the next call runs.
    assert_eq!(s.kfd.update_queue(&a, 0, 7), Ok(0));
    assert!(!t.queue(me, a.id).active);
}
