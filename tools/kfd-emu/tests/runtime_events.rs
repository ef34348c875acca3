//! ROCr's thunk's events (create, set, reset, destroy, blocking waits, event ages, the CP's
//! end-of-kernel interrupt) and the SDMA engine (copies, fences, decrements, traps that signal
//! an event). All through real syscalls on the FUSE mount; the other runtime ioctls are in
//! runtime_ioctls.rs.

mod common;

use std::sync::atomic::Ordering;

use kfd_emu::Preset;
use kfd_sys::*;

use common::events::{event_data, wait_events};
use common::*;

const SIGNAL: u32 = KFD_IOC_EVENT_SIGNAL;

fn create_event(
    kfd: &Kfd,
    page_handle: u64,
    auto_reset: bool,
) -> Result<kfd_ioctl_create_event_args, i32> {
    let mut a = kfd_ioctl_create_event_args {
        event_page_offset: page_handle,
        event_type: SIGNAL,
        auto_reset: u32::from(auto_reset),
        ..Default::default()
    };
    kfd.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut a).map(|_| a)
}

fn id_arg<T: Default>(f: impl FnOnce(&mut T)) -> T {
    let mut a = T::default();
    f(&mut a);
    a
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn events_set_wait_age_and_destroy() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let page = Mapping::new(4096 * 8);
    let handle = s.kfd.userptr(s.node.gpu_id, &page).unwrap();
    let ev = create_event(&s.kfd, handle, true).unwrap();
    assert_eq!(ev.event_id, 1, "slot 0 is reserved");
    assert_eq!((ev.event_slot_index, ev.event_trigger_data), (1, 1));
    assert_eq!(
        page.u64_at(8).load(Ordering::Acquire),
        u64::MAX,
        "slots start unsignalled"
    );
    assert_eq!(
        create_event(&s.kfd, handle, true),
        Err(libc::EINVAL),
        "the page is set once"
    );
    let manual = create_event(&s.kfd, 0, false).unwrap();
    let id = ev.event_id;

    // Nothing signalled: a poll and a bounded wait time out.
    assert_eq!(
        wait_events(&s.kfd, &[event_data(id, 0)], false, 0).wait_result,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    assert_eq!(
        wait_events(&s.kfd, &[event_data(id, 0)], false, 30).wait_result,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    // Set, then wait: complete; the auto-reset event is consumed by that wait.
    let mut set = id_arg(|a: &mut kfd_ioctl_set_event_args| a.event_id = id);
    s.kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut set).unwrap();
    let w = wait_events(&s.kfd, &[event_data(id, 1)], false, 0);
    assert_eq!(
        (w.result, w.wait_result),
        (Ok(0), KFD_IOC_WAIT_RESULT_COMPLETE)
    );
    assert_eq!(
        w.ages[0], 2,
        "the age advanced with the set and is written back"
    );
    assert_eq!(
        wait_events(&s.kfd, &[event_data(id, 0)], false, 0).wait_result,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    // An age older than the event's: signalled since the caller looked, even though consumed.
    assert_eq!(
        wait_events(&s.kfd, &[event_data(id, 1)], false, 0).wait_result,
        KFD_IOC_WAIT_RESULT_COMPLETE
    );
    // Wait for all of two: only one set.
    let mid = manual.event_id;
    let mut set_m = id_arg(|a: &mut kfd_ioctl_set_event_args| a.event_id = mid);
    s.kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut set_m).unwrap();
    let both = [event_data(id, 0), event_data(mid, 0)];
    assert_eq!(
        wait_events(&s.kfd, &both, true, 0).wait_result,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    assert_eq!(
        wait_events(&s.kfd, &both, false, 0).wait_result,
        KFD_IOC_WAIT_RESULT_COMPLETE
    );
    // RESET clears a manual-reset event.
    let mut reset = id_arg(|a: &mut kfd_ioctl_reset_event_args| a.event_id = mid);
    s.kfd.ioctl(AMDKFD_IOC_RESET_EVENT, &mut reset).unwrap();
    assert_eq!(
        wait_events(&s.kfd, &[event_data(mid, 0)], false, 0).wait_result,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    // Unknown ids.
    assert_eq!(
        wait_events(&s.kfd, &[event_data(77, 0)], false, 0).result,
        Err(libc::EINVAL)
    );
    let mut bad = id_arg(|a: &mut kfd_ioctl_set_event_args| a.event_id = 77);
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut bad),
        Err(libc::EINVAL)
    );

    // A blocked wait is answered by a set from another thread...
    std::thread::scope(|sc| {
        let waiter = sc.spawn(|| wait_events(&s.kfd, &[event_data(id, 0)], false, u32::MAX));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_waits
            == 1));
        let mut set = id_arg(|a: &mut kfd_ioctl_set_event_args| a.event_id = id);
        s.kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut set).unwrap();
        let w = waiter.join().unwrap();
        assert_eq!(
            (w.result, w.wait_result),
            (Ok(0), KFD_IOC_WAIT_RESULT_COMPLETE)
        );
    });
    assert_eq!(t.stats().processes[0].blocked_waits, 0);
    // ... and fails with EIO when its event is destroyed.
    std::thread::scope(|sc| {
        let waiter = sc.spawn(|| wait_events(&s.kfd, &[event_data(id, 0)], false, u32::MAX));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_waits
            == 1));
        let mut d = id_arg(|a: &mut kfd_ioctl_destroy_event_args| a.event_id = id);
        s.kfd.ioctl(AMDKFD_IOC_DESTROY_EVENT, &mut d).unwrap();
        assert_eq!(waiter.join().unwrap().result, Err(libc::EIO));
    });
    let mut d = id_arg(|a: &mut kfd_ioctl_destroy_event_args| a.event_id = id);
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_DESTROY_EVENT, &mut d),
        Err(libc::EINVAL)
    );
    assert_eq!(t.stats().processes[0].events, 1);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn end_of_kernel_interrupt_fires_the_signal_event() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let page = Mapping::new(4096 * 8);
    let handle = s.kfd.userptr(s.node.gpu_id, &page).unwrap();
    let ev = create_event(&s.kfd, handle, true).unwrap();
    let (_q, bufs) = s.queue(100, 7);
    // An amd_signal_t: value at 8, event mailbox pointer at 0x10, event id at 0x18.
    let signal = Mapping::new(4096);
    signal.i64_at(8).store(1, Ordering::Release);
    signal
        .u64_at(0x10)
        .store(page.addr() + 8 * u64::from(ev.event_id), Ordering::Release);
    signal.write(0x18, &ev.event_id.to_ne_bytes());
    std::thread::scope(|sc| {
        let waiter =
            sc.spawn(|| wait_events(&s.kfd, &[event_data(ev.event_id, 0)], false, u32::MAX));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_waits
            == 1));
        submit(&bufs, 0, &[dispatch_packet(1_000_000, signal.addr())]);
        let w = waiter.join().unwrap();
        assert_eq!(
            (w.result, w.wait_result),
            (Ok(0), KFD_IOC_WAIT_RESULT_COMPLETE)
        );
    });
    assert_eq!(signal.i64_at(8).load(Ordering::Acquire), 0);
    // The slot is acknowledged (rewritten unsignalled) once the emulator has released its lock,
    // just after the waiters are answered.
    let slot = page.u64_at(8 * ev.event_id as usize);
    assert!(
        wait_until(WAIT_LIMIT, || slot.load(Ordering::Acquire) == u64::MAX),
        "the slot was acknowledged after the interrupt"
    );
}

/// SDMA packet headers (op | sub_op << 8 | extra << 16).
fn sdma_copy(src: u64, dst: u64, bytes: u32) -> Vec<u32> {
    vec![
        1,
        bytes - 1,
        0,
        src as u32,
        (src >> 32) as u32,
        dst as u32,
        (dst >> 32) as u32,
    ]
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sdma_queue_copies_fences_decrements_and_traps() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let page = Mapping::new(4096 * 8);
    let handle = s.kfd.userptr(s.node.gpu_id, &page).unwrap();
    let ev = create_event(&s.kfd, handle, true).unwrap();
    let ring = Mapping::new(4096);
    let ptrs = Mapping::new(4096);
    for m in [&ring, &ptrs] {
        s.kfd.userptr(s.node.gpu_id, m).unwrap();
    }
    let mut a = kfd_ioctl_create_queue_args {
        ring_base_address: ring.addr(),
        write_pointer_address: ptrs.addr(),
        read_pointer_address: ptrs.addr() + 8,
        ring_size: 4096,
        gpu_id: s.node.gpu_id,
        queue_type: KFD_IOC_QUEUE_TYPE_SDMA,
        queue_percentage: 100,
        queue_priority: 15,
        ..Default::default()
    };
    s.kfd.create_queue(&mut a).unwrap();
    let len = 3 * 4096 + 17;
    let src = Mapping::new(4 * 4096);
    let dst = Mapping::new(4 * 4096);
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    src.write(0, &pattern);
    let signal = Mapping::new(4096);
    signal.i64_at(8).store(1, Ordering::Release);
    let fence = signal.addr() + 64;
    let slot = page.addr() + 8 * u64::from(ev.event_id);
    let mut p = sdma_copy(src.addr(), dst.addr(), len as u32);
    // FENCE: 32-bit 0x5eed at `fence`.
    p.extend([5, fence as u32, (fence >> 32) as u32, 0x5eed]);
    // ATOMIC ADD64 of -1 on the signal value (operation 47 in bits 25..31).
    let value = signal.addr() + 8;
    p.extend([
        10 | (47 << 25),
        value as u32,
        (value >> 32) as u32,
        u32::MAX,
        u32::MAX,
        0,
        0,
        0,
    ]);
    // The interrupt: event id to the mailbox slot, then TRAP with the id.
    p.extend([
        5,
        slot as u32,
        (slot >> 32) as u32,
        ev.event_id,
        6,
        ev.event_id,
    ]);
    let bytes: Vec<u8> = p.iter().flat_map(|w| w.to_ne_bytes()).collect();
    ring.write(0, &bytes);
    std::thread::scope(|sc| {
        let waiter =
            sc.spawn(|| wait_events(&s.kfd, &[event_data(ev.event_id, 0)], false, u32::MAX));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_waits
            == 1));
        ptrs.u64_at(0).store(bytes.len() as u64, Ordering::Release);
        assert_eq!(
            waiter.join().unwrap().wait_result,
            KFD_IOC_WAIT_RESULT_COMPLETE
        );
    });
    assert_eq!(
        ptrs.u64_at(8).load(Ordering::Acquire),
        bytes.len() as u64,
        "read pointer in bytes"
    );
    let mut got = vec![0u8; len];
    // SAFETY: reads `len` bytes of the live mapping `dst`.
    unsafe { std::ptr::copy_nonoverlapping(dst.ptr, got.as_mut_ptr(), len) };
    assert_eq!(got, pattern);
    assert_eq!(
        signal.u64_at(64).load(Ordering::Acquire) & 0xffff_ffff,
        0x5eed
    );
    assert_eq!(signal.i64_at(8).load(Ordering::Acquire), 0);
    let q = &t.stats().queues[0];
    assert_eq!(
        (q.queue_type.as_str(), q.packets_done, q.stopped),
        ("sdma", 5, false)
    );
    // A packet the engine does not model stops the queue.
    ring.write(bytes.len(), &0x3fu32.to_ne_bytes());
    ptrs.u64_at(0)
        .store(bytes.len() as u64 + 4, Ordering::Release);
    assert!(wait_until(WAIT_LIMIT, || t.stats().queues[0].stopped));
}
