//! Every ioctl wrapper of `kfdq::kfd` returns `EBADF` for an fd that is not open, as the kernel
//! does before it reads any argument (kvm-ioctls' `test_bad_kvm_fd`). No device is needed.

use std::collections::BTreeSet;
use std::os::fd::BorrowedFd;

use kfdq::kfd::{GpuId, KfdIoctl, QueueId, Result, debug, ioctl};
use nix::errno::Errno;

#[test]
fn every_wrapper_returns_ebadf_for_a_bad_fd() {
    // SAFETY: no file is ever open at this number: it is above the largest fd limit the kernel
    // allows (`fs.nr_open` is at most 2^30), so the borrow takes nothing from anyone, and every
    // call below fails in the kernel's fd lookup before it reads or writes any argument.
    let bad = unsafe { BorrowedFd::borrow_raw(i32::MAX - 1) };
    let (gpu, q) = (GpuId(1), QueueId(1));
    let mut seen: Vec<(&str, Option<Errno>, Option<KfdIoctl>)> = Vec::new();
    let mut check = |name, r: Result<()>| {
        let e = r.expect_err(name);
        let ioctl = match &e {
            kfdq::kfd::Error::Ioctl(i) => Some(i.ioctl),
            _ => None,
        };
        seen.push((name, e.errno(), ioctl));
    };
    check("get_version", ioctl::get_version(bad).map(drop));
    // SAFETY: the call fails at the fd; the (null) addresses in the arguments are never used.
    check("create_queue", unsafe {
        ioctl::create_queue(bad, &mut Default::default())
    });
    check("destroy_queue", ioctl::destroy_queue(bad, q));
    // SAFETY: as above.
    check("update_queue", unsafe {
        ioctl::update_queue(bad, &Default::default())
    });
    check("acquire_vm", ioctl::acquire_vm(bad, bad, gpu));
    // SAFETY: as above.
    check("alloc_memory_of_gpu", unsafe {
        ioctl::alloc_memory_of_gpu(bad, &mut Default::default())
    });
    check("free_memory_of_gpu", ioctl::free_memory_of_gpu(bad, 0));
    check(
        "map_memory_to_gpu",
        ioctl::map_memory_to_gpu(bad, 0, &[gpu]).map(drop),
    );
    check(
        "unmap_memory_from_gpu",
        ioctl::unmap_memory_from_gpu(bad, 0, &[gpu]).map(drop),
    );
    check("set_cu_mask", ioctl::set_cu_mask(bad, q, &[1]));
    // SAFETY: as above (the kernel never writes to address 0 here).
    check("get_queue_wave_state", unsafe {
        ioctl::get_queue_wave_state(bad, q, 0).map(drop)
    });
    check("runtime_enable", ioctl::runtime_enable(bad, 0, 0).map(drop));
    // SAFETY: as above.
    check("dbg_trap", unsafe {
        ioctl::dbg_trap(bad, &mut Default::default()).map(drop)
    });
    // The debugger API's wrappers above the raw DBG_TRAP.
    check(
        "debug::runtime_enable",
        debug::runtime_enable(bad, 0, false).map(drop),
    );
    check(
        "debug::suspend_queues",
        debug::suspend_queues(bad, 1, &[q], 0, 0).map(drop),
    );
    check(
        "debug::resume_queues",
        debug::resume_queues(bad, 1, &[q]).map(drop),
    );
    check(
        "debug::queue_snapshot",
        debug::queue_snapshot(bad, 1, 0).map(drop),
    );
    check("debug::dbg_enable", debug::dbg_enable(bad, 1, 0).map(drop));

    let wrong: Vec<_> = seen
        .iter()
        .filter(|(_, errno, _)| *errno != Some(Errno::EBADF))
        .collect();
    assert!(wrong.is_empty(), "not EBADF: {wrong:?}");
    // Every ioctl kfdq issues was called: a new wrapper has to join this test.
    let called: BTreeSet<&str> = seen
        .iter()
        .filter_map(|(_, _, i)| i.map(|i| i.name()))
        .collect();
    let all: BTreeSet<&str> = KfdIoctl::ALL.iter().map(|i| i.name()).collect();
    assert_eq!(called, all);
}
