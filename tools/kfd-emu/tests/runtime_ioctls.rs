//! What ROCr's thunk needs besides queues and memory: process apertures, memory policy, clock
//! counters, XNACK mode, available memory, events (create, set, reset, destroy, blocking waits,
//! event ages, the CP's end-of-kernel interrupt), the render node's DRM ioctls, ACQUIRE_VM
//! through another path to the same render node, /dev/kfd offsets, the SDMA engine, and the
//! sysfs files the thunk reads. All through real syscalls on the FUSE mount.

mod common;

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use kfd_emu::Preset;
use kfd_sys::*;

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

/// One `struct kfd_event_data` (48 bytes): the age at 0, the id at 40.
fn event_data(id: u32, age: u64) -> [u8; 48] {
    assert_eq!(size_of::<kfd_event_data>(), 48);
    assert_eq!(std::mem::offset_of!(kfd_event_data, event_id), 40);
    let mut d = [0u8; 48];
    d[..8].copy_from_slice(&age.to_ne_bytes());
    d[40..44].copy_from_slice(&id.to_ne_bytes());
    d
}

/// WAIT_EVENTS on `events`; returns (ioctl result, wait_result, ages written back).
fn wait(
    kfd: &Kfd,
    events: &[[u8; 48]],
    all: bool,
    timeout_ms: u32,
) -> (Result<i32, i32>, u32, Vec<u64>) {
    let mut data: Vec<u8> = events.iter().flatten().copied().collect();
    let mut a = kfd_ioctl_wait_events_args {
        events_ptr: data.as_mut_ptr() as u64,
        num_events: events.len() as u32,
        wait_for_all: u32::from(all),
        timeout: timeout_ms,
        wait_result: 99,
    };
    let r = kfd.ioctl(AMDKFD_IOC_WAIT_EVENTS, &mut a);
    let ages = data
        .chunks_exact(48)
        .map(|c| u64::from_ne_bytes(c[..8].try_into().unwrap()))
        .collect();
    (r, a.wait_result, ages)
}

fn id_arg<T: Default>(f: impl FnOnce(&mut T)) -> T {
    let mut a = T::default();
    f(&mut a);
    a
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn apertures_policy_clocks_xnack_memory() {
    require_root();
    let t = mount_preset(Preset::Mi300xCpx);
    let s = Session::new(&t, 0);
    let nodes = t.gpu_nodes();
    // Count first, then fill.
    let mut a = kfd_ioctl_get_process_apertures_new_args::default();
    s.kfd
        .ioctl(AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut a)
        .unwrap();
    assert_eq!(a.num_of_nodes as usize, nodes.len());
    let mut ap = vec![kfd_process_device_apertures::default(); 3];
    a.kfd_process_device_apertures_ptr = ap.as_mut_ptr() as u64;
    a.num_of_nodes = 3;
    s.kfd
        .ioctl(AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut a)
        .unwrap();
    assert_eq!(a.num_of_nodes, 3, "no more entries than room");
    assert_eq!(ap[1].gpu_id, nodes[1].gpu_id);
    assert_eq!(
        (ap[0].lds_base, ap[0].lds_limit),
        (1 << 48, (1 << 48) | 0xffff_ffff)
    );
    assert_eq!(ap[0].scratch_base, 2 << 48);
    assert_eq!(
        (ap[0].gpuvm_base, ap[0].gpuvm_limit),
        (1 << 16, (1 << 47) - 1)
    );
    a.kfd_process_device_apertures_ptr = 8;
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut a),
        Err(libc::EFAULT)
    );

    let mut p = kfd_ioctl_set_memory_policy_args {
        gpu_id: s.node.gpu_id,
        default_policy: KFD_IOC_CACHE_POLICY_COHERENT,
        alternate_policy: KFD_IOC_CACHE_POLICY_NONCOHERENT,
        ..Default::default()
    };
    assert_eq!(s.kfd.ioctl(AMDKFD_IOC_SET_MEMORY_POLICY, &mut p), Ok(0));
    p.default_policy = 2;
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_SET_MEMORY_POLICY, &mut p),
        Err(libc::EINVAL)
    );
    p.default_policy = 0;
    p.gpu_id = 1;
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_SET_MEMORY_POLICY, &mut p),
        Err(libc::EINVAL)
    );

    let mut c = kfd_ioctl_get_clock_counters_args {
        gpu_id: s.node.gpu_id,
        ..Default::default()
    };
    s.kfd.ioctl(AMDKFD_IOC_GET_CLOCK_COUNTERS, &mut c).unwrap();
    let first = c;
    s.kfd.ioctl(AMDKFD_IOC_GET_CLOCK_COUNTERS, &mut c).unwrap();
    assert_eq!(c.system_clock_freq, 1_000_000_000);
    assert!(
        c.gpu_clock_counter >= first.gpu_clock_counter
            && c.cpu_clock_counter > first.cpu_clock_counter
    );
    c.gpu_id = 1;
    s.kfd.ioctl(AMDKFD_IOC_GET_CLOCK_COUNTERS, &mut c).unwrap();
    assert_eq!(
        c.gpu_clock_counter, 0,
        "unknown gpu_id: no GPU counter, no error"
    );

    let mut x = kfd_ioctl_set_xnack_mode_args { xnack_enabled: -1 };
    s.kfd.ioctl(AMDKFD_IOC_SET_XNACK_MODE, &mut x).unwrap();
    assert_eq!(x.xnack_enabled, 0);
    x.xnack_enabled = 1;
    assert_eq!(s.kfd.ioctl(AMDKFD_IOC_SET_XNACK_MODE, &mut x), Ok(0));
    let (_q, _bufs) = s.queue(100, 7);
    x.xnack_enabled = 0;
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_SET_XNACK_MODE, &mut x),
        Err(libc::EBUSY),
        "a queue exists"
    );
    x.xnack_enabled = -1;
    s.kfd.ioctl(AMDKFD_IOC_SET_XNACK_MODE, &mut x).unwrap();
    assert_eq!(x.xnack_enabled, 1, "the refused change changed nothing");

    let mut m = kfd_ioctl_get_available_memory_args {
        gpu_id: s.node.gpu_id,
        ..Default::default()
    };
    s.kfd.ioctl(AMDKFD_IOC_AVAILABLE_MEMORY, &mut m).unwrap();
    let before = m.available;
    let mut vram = kfd_ioctl_alloc_memory_of_gpu_args {
        va_addr: 1 << 40,
        size: 1 << 30,
        gpu_id: s.node.gpu_id,
        flags: KFD_IOC_ALLOC_MEM_FLAGS_VRAM,
        ..Default::default()
    };
    s.kfd
        .ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut vram)
        .unwrap();
    s.kfd.ioctl(AMDKFD_IOC_AVAILABLE_MEMORY, &mut m).unwrap();
    assert_eq!(before - m.available, 1 << 30);
    m.gpu_id = 1;
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_AVAILABLE_MEMORY, &mut m),
        Err(libc::EINVAL)
    );
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
        wait(&s.kfd, &[event_data(id, 0)], false, 0).1,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    assert_eq!(
        wait(&s.kfd, &[event_data(id, 0)], false, 30).1,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    // Set, then wait: complete; the auto-reset event is consumed by that wait.
    let mut set = id_arg(|a: &mut kfd_ioctl_set_event_args| a.event_id = id);
    s.kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut set).unwrap();
    let (r, res, ages) = wait(&s.kfd, &[event_data(id, 1)], false, 0);
    assert_eq!((r, res), (Ok(0), KFD_IOC_WAIT_RESULT_COMPLETE));
    assert_eq!(
        ages[0], 2,
        "the age advanced with the set and is written back"
    );
    assert_eq!(
        wait(&s.kfd, &[event_data(id, 0)], false, 0).1,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    // An age older than the event's: signalled since the caller looked, even though consumed.
    assert_eq!(
        wait(&s.kfd, &[event_data(id, 1)], false, 0).1,
        KFD_IOC_WAIT_RESULT_COMPLETE
    );
    // Wait for all of two: only one set.
    let mid = manual.event_id;
    let mut set_m = id_arg(|a: &mut kfd_ioctl_set_event_args| a.event_id = mid);
    s.kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut set_m).unwrap();
    let both = [event_data(id, 0), event_data(mid, 0)];
    assert_eq!(wait(&s.kfd, &both, true, 0).1, KFD_IOC_WAIT_RESULT_TIMEOUT);
    assert_eq!(
        wait(&s.kfd, &both, false, 0).1,
        KFD_IOC_WAIT_RESULT_COMPLETE
    );
    // RESET clears a manual-reset event.
    let mut reset = id_arg(|a: &mut kfd_ioctl_reset_event_args| a.event_id = mid);
    s.kfd.ioctl(AMDKFD_IOC_RESET_EVENT, &mut reset).unwrap();
    assert_eq!(
        wait(&s.kfd, &[event_data(mid, 0)], false, 0).1,
        KFD_IOC_WAIT_RESULT_TIMEOUT
    );
    // Unknown ids.
    assert_eq!(
        wait(&s.kfd, &[event_data(77, 0)], false, 0).0,
        Err(libc::EINVAL)
    );
    let mut bad = id_arg(|a: &mut kfd_ioctl_set_event_args| a.event_id = 77);
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut bad),
        Err(libc::EINVAL)
    );

    // A blocked wait is answered by a set from another thread...
    std::thread::scope(|sc| {
        let waiter = sc.spawn(|| wait(&s.kfd, &[event_data(id, 0)], false, u32::MAX));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_waits
            == 1));
        let mut set = id_arg(|a: &mut kfd_ioctl_set_event_args| a.event_id = id);
        s.kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut set).unwrap();
        let (r, res, _) = waiter.join().unwrap();
        assert_eq!((r, res), (Ok(0), KFD_IOC_WAIT_RESULT_COMPLETE));
    });
    assert_eq!(t.stats().processes[0].blocked_waits, 0);
    // ... and fails with EIO when its event is destroyed.
    std::thread::scope(|sc| {
        let waiter = sc.spawn(|| wait(&s.kfd, &[event_data(id, 0)], false, u32::MAX));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_waits
            == 1));
        let mut d = id_arg(|a: &mut kfd_ioctl_destroy_event_args| a.event_id = id);
        s.kfd.ioctl(AMDKFD_IOC_DESTROY_EVENT, &mut d).unwrap();
        assert_eq!(waiter.join().unwrap().0, Err(libc::EIO));
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
        let waiter = sc.spawn(|| wait(&s.kfd, &[event_data(ev.event_id, 0)], false, u32::MAX));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_waits
            == 1));
        submit(&bufs, 0, &[dispatch_packet(1_000_000, signal.addr())]);
        let (r, res, _) = waiter.join().unwrap();
        assert_eq!((r, res), (Ok(0), KFD_IOC_WAIT_RESULT_COMPLETE));
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

/// DRM_IOWR / DRM_IOW request numbers of the render node.
const DRM_IOCTL_VERSION: u32 = 0xc040_6400;
const DRM_IOCTL_GET_CLIENT: u32 = 0xc028_6405;
const DRM_IOCTL_AMDGPU_INFO: u32 = 0x4020_6445;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn render_node_drm_ioctls() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let node = t.gpu_nodes().remove(0);
    let render = t.open_render(&node);
    let fd = render.as_raw_fd();
    // VERSION: lengths first, then the strings.
    let mut v = [0u8; 64];
    raw_ioctl(fd, DRM_IOCTL_VERSION, v.as_mut_ptr().cast()).unwrap();
    assert_eq!(i32::from_ne_bytes(v[0..4].try_into().unwrap()), 3);
    assert_eq!(u64::from_ne_bytes(v[16..24].try_into().unwrap()), 6);
    let mut name = [0u8; 16];
    v[16..24].copy_from_slice(&16u64.to_ne_bytes());
    v[24..32].copy_from_slice(&(name.as_mut_ptr() as u64).to_ne_bytes());
    raw_ioctl(fd, DRM_IOCTL_VERSION, v.as_mut_ptr().cast()).unwrap();
    assert_eq!(&name[..6], b"amdgpu");
    // GET_CLIENT: the caller, authenticated.
    let mut c = [0u8; 40];
    raw_ioctl(fd, DRM_IOCTL_GET_CLIENT, c.as_mut_ptr().cast()).unwrap();
    assert_eq!(i32::from_ne_bytes(c[4..8].try_into().unwrap()), 1);
    assert_eq!(
        u64::from_ne_bytes(c[8..16].try_into().unwrap()),
        u64::from(std::process::id())
    );
    c[0] = 1;
    assert_eq!(
        raw_ioctl(fd, DRM_IOCTL_GET_CLIENT, c.as_mut_ptr().cast()),
        Err(libc::EINVAL)
    );
    // AMDGPU_INFO queries write to return_pointer.
    let info = |query: u32, out: &mut [u8], arg: [u32; 4]| {
        let mut q = [0u8; 32];
        q[0..8].copy_from_slice(&(out.as_mut_ptr() as u64).to_ne_bytes());
        q[8..12].copy_from_slice(&(out.len() as u32).to_ne_bytes());
        q[12..16].copy_from_slice(&query.to_ne_bytes());
        for (i, w) in arg.iter().enumerate() {
            q[16 + i * 4..20 + i * 4].copy_from_slice(&w.to_ne_bytes());
        }
        raw_ioctl(fd, DRM_IOCTL_AMDGPU_INFO, q.as_mut_ptr().cast())
    };
    let mut one = [0u8; 4];
    info(0x00, &mut one, [0; 4]).unwrap();
    assert_eq!(u32::from_ne_bytes(one), 1, "ACCEL_WORKING");
    let mut dev = [0u8; 440];
    info(0x16, &mut dev, [0; 4]).unwrap();
    assert_eq!(
        u32::from_ne_bytes(dev[0..4].try_into().unwrap()),
        0x74a2,
        "DEV_INFO device_id"
    );
    assert_eq!(
        u32::from_ne_bytes(dev[48..52].try_into().unwrap()),
        80,
        "cu_active_number"
    );
    let mut regs = [0xffu8; 8];
    info(0x15, &mut regs, [0, 2, 0, 0]).unwrap();
    assert_eq!(regs, [0; 8], "READ_MMR_REG reads zeros");
    assert_eq!(info(0x7f, &mut one, [0; 4]), Err(libc::EINVAL));
    assert_eq!(
        raw_ioctl(fd, 0xc010_6499, c.as_mut_ptr().cast()),
        Err(libc::EINVAL)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn acquire_vm_recognises_the_render_node_behind_another_path() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let node = t.gpu_nodes().remove(0);
    // A bind mount of the render node elsewhere: same device and inode, another path.
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("renderD128");
    std::fs::write(&other, b"").unwrap();
    let src = t.path(&format!(
        "dev/dri/renderD{}",
        node.props["drm_render_minor"]
    ));
    nix::mount::mount(
        Some(&src),
        &other,
        None::<&str>,
        nix::mount::MsFlags::MS_BIND,
        None::<&str>,
    )
    .expect("bind mount the render node");
    let kfd = t.open_kfd();
    let plain = std::fs::File::open(dir.path()).unwrap();
    assert_eq!(
        kfd.acquire_vm(&plain, node.gpu_id),
        Err(libc::EINVAL),
        "not a render node"
    );
    let render = open_rw(&other);
    let r = kfd.acquire_vm(&render, node.gpu_id);
    drop(render);
    nix::mount::umount2(&other, nix::mount::MntFlags::MNT_DETACH).unwrap();
    assert_eq!(r, Ok(0));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn kfd_reads_only_at_doorbell_and_mmio_offsets() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (q, _bufs) = s.queue(100, 7);
    let mut mmio = kfd_ioctl_alloc_memory_of_gpu_args {
        va_addr: 1 << 40,
        size: 4096,
        gpu_id: s.node.gpu_id,
        flags: KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP,
        ..Default::default()
    };
    s.kfd
        .ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut mmio)
        .unwrap();
    assert_eq!(
        mmio.mmap_offset,
        u64::from(s.node.gpu_id) << 46,
        "KFD_MMAP_TYPE_MMIO | gpu id"
    );
    let mut buf = [0xffu8; 4096];
    let pread = |off: u64, b: &mut [u8]| nix::sys::uio::pread(&s.kfd.file, b, off as i64);
    assert_eq!(pread(mmio.mmap_offset, &mut buf), Ok(4096));
    assert_eq!(buf, [0u8; 4096]);
    let doorbell = q.args.doorbell_offset & !4095;
    assert_eq!(pread(doorbell, &mut buf), Ok(4096));
    assert_eq!(
        pread(mmio.mmap_offset + 4096, &mut buf),
        Err(nix::errno::Errno::EIO)
    );
    assert_eq!(pread(12345 << 12, &mut buf), Err(nix::errno::Errno::EIO));
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
        let waiter = sc.spawn(|| wait(&s.kfd, &[event_data(ev.event_id, 0)], false, u32::MAX));
        assert!(wait_until(WAIT_LIMIT, || t.stats().processes[0]
            .blocked_waits
            == 1));
        ptrs.u64_at(0).store(bytes.len() as u64, Ordering::Release);
        assert_eq!(waiter.join().unwrap().1, KFD_IOC_WAIT_RESULT_COMPLETE);
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

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn sysfs_mem_banks_caches_and_module_state() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let node = &t.gpu_nodes()[0];
    let dir = format!("sys/class/kfd/kfd/topology/nodes/{}", node.node);
    let bank = parse_properties(&t.read(&format!("{dir}/mem_banks/0/properties")));
    assert_eq!(bank["heap_type"], 1, "FB_PUBLIC");
    assert_eq!(bank["size_in_bytes"], 192 << 30);
    let caches = node.props["caches_count"];
    assert!(caches > 0);
    for k in 0..caches {
        let c = parse_properties(&t.read(&format!("{dir}/caches/{k}/properties")));
        assert_eq!(c["level"], k + 1);
    }
    assert!(!t.path(&format!("{dir}/caches/{caches}")).exists());
    assert_eq!(
        node.props["capability"] & (1 << 27),
        0,
        "no SVM API advertised"
    );
    let cpu =
        parse_properties(&t.read("sys/class/kfd/kfd/topology/nodes/0/mem_banks/0/properties"));
    assert_eq!(cpu["heap_type"], 0);
    assert_eq!(t.read("sys/module/amdgpu/initstate"), "live\n");
}
