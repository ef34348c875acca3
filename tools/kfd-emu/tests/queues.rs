//! Version, memory and queue ioctls through real syscalls on the FUSE mount.

mod common;

use std::os::fd::AsRawFd;

use kfd_emu::{EmuConfig, Preset};
use kfd_sys::*;

use common::*;

const EINVAL: i32 = libc::EINVAL;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn get_version_reports_configured_minor() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    assert_eq!(t.open_kfd().version(), (1, 17));
    let t = mount(EmuConfig {
        kfd_minor: 12,
        ..EmuConfig::default()
    });
    let kfd = t.open_kfd();
    assert_eq!(kfd.version(), (1, 12));
    // The debugger API does not exist below 1.13.
    assert_eq!(kfd.runtime_enable(), Err(libc::ENOTTY));
    let mut e = kfd_ioctl_dbg_trap_enable_args::default();
    assert_eq!(
        kfd.dbg_trap(std::process::id(), KFD_IOC_DBG_TRAP_ENABLE, &mut e),
        Err(libc::ENOTTY)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn unknown_ioctls_are_enotty() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let kfd = t.open_kfd();
    // CREATE_PROCESS (0x27, _IO) is not modelled at 1.17.
    assert_eq!(
        raw_ioctl(
            kfd.file.as_raw_fd(),
            kfd_cmd(0, 0x27, 0),
            std::ptr::null_mut()
        ),
        Err(libc::ENOTTY)
    );
    // GET_DMABUF_INFO (0x1c, not modelled) and a number past the table.
    let mut buf = [0u8; 32];
    for nr in [0x1c, 0x60] {
        assert_eq!(
            raw_ioctl(
                kfd.file.as_raw_fd(),
                kfd_cmd(3, nr, 32),
                buf.as_mut_ptr().cast()
            ),
            Err(libc::ENOTTY)
        );
    }
    // Dispatch is by number only: GET_VERSION with a bigger struct still works.
    let mut big = [0u32; 4];
    raw_ioctl(
        kfd.file.as_raw_fd(),
        kfd_cmd(2, 0x01, 16),
        big.as_mut_ptr().cast(),
    )
    .unwrap();
    assert_eq!(&big[..2], &[1, 17]);
}

/// GET_TILE_CONFIG as `kfd_ioctl_get_tile_config` answers on gfx9: the address config, no banks
/// or ranks, the caller's counts cut to 32 tile and 16 macro-tile modes, all zero; an unknown
/// GPU is EINVAL. (ROCr's image manager asserts on it at HIP start-up on gfx90a.)
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn get_tile_config_reports_gfx9_values() {
    require_root();
    let t = mount_preset(Preset::Mi210);
    let kfd = t.open_kfd();
    let node = t.gpu_nodes().remove(0);
    let mut tiles = [0xffff_ffffu32; 40];
    let mut macros = [0xffff_ffffu32; 20];
    let mut args = [0u32; 10];
    let put64 = |a: &mut [u32; 10], at: usize, v: u64| {
        a[at] = v as u32;
        a[at + 1] = (v >> 32) as u32;
    };
    put64(&mut args, 0, tiles.as_mut_ptr() as u64);
    put64(&mut args, 2, macros.as_mut_ptr() as u64);
    args[4] = 40;
    args[5] = 20;
    args[6] = node.gpu_id;
    raw_ioctl(
        kfd.file.as_raw_fd(),
        kfd_cmd(3, 0x12, 40),
        args.as_mut_ptr().cast(),
    )
    .unwrap();
    assert_eq!((args[4], args[5]), (32, 16), "counts cut to the kernel's");
    assert_eq!(args[7], 0x2201_4042, "gb_addr_config");
    assert_eq!((args[8], args[9]), (0, 0), "no banks or ranks on gfx9");
    assert!(tiles[..32].iter().all(|v| *v == 0) && tiles[32] == 0xffff_ffff);
    assert!(macros[..16].iter().all(|v| *v == 0) && macros[16] == 0xffff_ffff);
    args[6] = 0x1;
    assert_eq!(
        raw_ioctl(
            kfd.file.as_raw_fd(),
            kfd_cmd(3, 0x12, 40),
            args.as_mut_ptr().cast()
        ),
        Err(EINVAL)
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn acquire_vm_rules() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let kfd = t.open_kfd();
    let node = t.gpu_nodes().remove(0);
    let render = t.open_render(&node);
    assert_eq!(kfd.acquire_vm(&render, 0x1), Err(EINVAL), "unknown gpu");
    let mut a = kfd_ioctl_acquire_vm_args {
        drm_fd: 999_999,
        gpu_id: node.gpu_id,
    };
    assert_eq!(kfd.ioctl(AMDKFD_IOC_ACQUIRE_VM, &mut a), Err(libc::EBADF));
    assert_eq!(
        kfd.acquire_vm(&kfd.file, node.gpu_id),
        Err(EINVAL),
        "not a render node"
    );
    kfd.acquire_vm(&render, node.gpu_id).unwrap();
    kfd.acquire_vm(&render, node.gpu_id).unwrap();
    let other = t.open_render(&node);
    assert_eq!(kfd.acquire_vm(&other, node.gpu_id), Err(libc::EBUSY));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn memory_ioctls() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let kfd = t.open_kfd();
    let node = t.gpu_nodes().remove(0);
    let m = Mapping::new(8192);
    assert_eq!(
        kfd.alloc_userptr(node.gpu_id, &m),
        Err(EINVAL),
        "before ACQUIRE_VM"
    );
    let render = t.open_render(&node);
    kfd.acquire_vm(&render, node.gpu_id).unwrap();
    let h = kfd.alloc_userptr(node.gpu_id, &m).unwrap();
    assert_eq!(h >> 32, u64::from(node.gpu_id));
    assert_eq!(kfd.alloc_userptr(node.gpu_id, &m), Err(EINVAL), "overlap");
    // A CPU range the process cannot read: EFAULT. (Reserved PROT_NONE rather than
    // unmapped: an unmapped range can be taken by another test thread's mmap at once.)
    let gone = Mapping::inaccessible(4096);
    let addr = gone.addr();
    let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
        va_addr: addr,
        size: 4096,
        mmap_offset: addr,
        gpu_id: node.gpu_id,
        flags: KFD_IOC_ALLOC_MEM_FLAGS_USERPTR,
        ..Default::default()
    };
    assert_eq!(
        kfd.ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a),
        Err(libc::EFAULT)
    );
    // A size that is not a page multiple is rounded up to whole pages, as the kernel does:
    // 100 bytes take the whole page, so a second BO in that page overlaps.
    let small = Mapping::new(8192);
    a.va_addr = small.addr();
    a.mmap_offset = small.addr();
    a.size = 100;
    assert_eq!(kfd.ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a), Ok(0));
    a.size = 4096;
    assert_eq!(
        kfd.ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a),
        Err(EINVAL),
        "the rounded-up BO covers the page"
    );
    a.va_addr = small.addr() + 4096;
    a.mmap_offset = a.va_addr;
    assert_eq!(kfd.ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a), Ok(0));
    // MAP: bad array pointer, unknown handle, unknown device.
    let mut mp = kfd_ioctl_map_memory_to_gpu_args {
        handle: h,
        device_ids_array_ptr: 8,
        n_devices: 1,
        n_success: 0,
    };
    assert_eq!(
        kfd.ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut mp),
        Err(libc::EFAULT)
    );
    assert_eq!(kfd.map(h + 77, node.gpu_id), Err(EINVAL));
    assert_eq!(kfd.map(h, 0x1), Err(EINVAL));
    let ids = [node.gpu_id];
    let mut mp = kfd_ioctl_map_memory_to_gpu_args {
        handle: h,
        device_ids_array_ptr: ids.as_ptr() as u64,
        n_devices: 1,
        n_success: 0,
    };
    kfd.ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut mp).unwrap();
    assert_eq!(mp.n_success, 1);
    kfd.unmap(h, node.gpu_id).unwrap();
    kfd.free(h).unwrap();
    assert_eq!(kfd.free(h), Err(EINVAL));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn gtt_bo_is_readable_through_the_render_node() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let kfd = t.open_kfd();
    let node = t.gpu_nodes().remove(0);
    let render = t.open_render(&node);
    kfd.acquire_vm(&render, node.gpu_id).unwrap();
    let va = Mapping::new(8192);
    let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
        va_addr: va.addr(),
        size: 8192,
        gpu_id: node.gpu_id,
        flags: KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
        ..Default::default()
    };
    kfd.ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a).unwrap();
    assert!(a.mmap_offset > 0 && a.mmap_offset < 1 << 62);
    // CPU mapping of the BO through the render node, shared.
    // SAFETY: maps 8192 bytes of the render node file at the BO's offset.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            render.as_raw_fd(),
            a.mmap_offset as libc::off_t,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: p maps 8192 writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(b"hello bo".as_ptr(), p.cast::<u8>().add(4096), 8);
        assert_eq!(libc::msync(p, 8192, libc::MS_SYNC), 0);
        libc::munmap(p, 8192);
    }
    // The written bytes reached the BO's backing store: read them with pread on a
    // fresh handle (direct read through FUSE after the page cache is dropped).
    let other = t.open_render(&node);
    let mut buf = [0u8; 8];
    // SAFETY: reads 8 bytes into buf.
    let n = unsafe {
        libc::pread(
            other.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            8,
            (a.mmap_offset + 4096) as libc::off_t,
        )
    };
    assert_eq!(n, 8);
    assert_eq!(&buf, b"hello bo");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn create_queue_happy_path() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (q, bufs) = s.queue(100, 7);
    assert_eq!(q.id, 0);
    let db = q.args.doorbell_offset;
    assert_eq!(db >> 62, 1, "emulator doorbell mmap type");
    assert_eq!((db >> 46) & 0xffff, u64::from(s.node.gpu_id));
    assert_eq!(db & 0x1fff, 0, "first doorbell of the process slice");
    // The doorbell slice maps and rings.
    // SAFETY: maps the 8 KiB doorbell slice of dev/kfd.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            s.kfd.file.as_raw_fd(),
            (db & !0x1fff) as libc::off_t,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    // SAFETY: the doorbell is inside the mapping, 8-byte aligned.
    unsafe {
        std::ptr::write_volatile(p.cast::<u8>().add((db & 0x1fff) as usize).cast::<u64>(), 0);
        libc::munmap(p, 8192);
    }
    // sysfs proc entry.
    let pid = std::process::id();
    let dir = format!("sys/class/kfd/kfd/proc/{pid}/queues/0");
    assert_eq!(t.read(&format!("{dir}/size")), "4096");
    assert_eq!(t.read(&format!("{dir}/type")), "0");
    assert_eq!(t.read(&format!("{dir}/gpuid")), s.node.gpu_id.to_string());
    assert!(
        !t.read(&format!("sys/class/kfd/kfd/proc/{pid}/pasid"))
            .ends_with('\n')
    );
    // Stats.
    let st = t.stats();
    let qs = &st.queues[0];
    assert_eq!(
        (qs.pid, qs.queue_id, qs.priority, qs.percentage),
        (pid, 0, 7, 100)
    );
    assert_eq!(qs.queue_type, "compute_aql");
    assert!(qs.active && qs.resident && !qs.suspended);
    assert_eq!(qs.exception_status, kfd_ec_mask(EC_QUEUE_NEW));
    assert_eq!(st.partitions[0].active_queues, 1);
    // Buffers are referenced by the queue.
    assert_eq!(
        s.kfd.unmap(bufs.handles[0], s.node.gpu_id),
        Err(libc::EBUSY)
    );
    assert_eq!(s.kfd.free(bufs.handles[2]), Err(libc::EBUSY));
    // A second queue gets id 1 and the next doorbell.
    let (q2, _b2) = s.queue(100, 7);
    assert_eq!(q2.id, 1);
    assert_eq!(q2.args.doorbell_offset & 0x1fff, 8);
    s.kfd.destroy_queue(q.id).unwrap();
    assert_eq!(s.kfd.destroy_queue(q.id), Err(EINVAL));
    assert!(!t.path(&dir).exists());
    s.kfd.unmap(bufs.handles[0], s.node.gpu_id).unwrap();
    s.kfd.free(bufs.handles[0]).unwrap();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn create_queue_rejections() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let kfd = t.open_kfd();
    let node = t.gpu_nodes().remove(0);
    let render = t.open_render(&node);
    // Before ACQUIRE_VM: ESRCH (buffers are not needed to get there).
    let a = kfd_ioctl_create_queue_args {
        ring_base_address: 0x10_0000,
        ring_size: 4096,
        gpu_id: node.gpu_id,
        queue_type: KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        queue_percentage: 100,
        ..Default::default()
    };
    assert_eq!(kfd.create_queue(&mut a.clone()), Err(libc::ESRCH));
    kfd.acquire_vm(&render, node.gpu_id).unwrap();
    let bufs = QueueBufs::new(&kfd, &node, 4096);
    let good = bufs.args(&node, 100, 7);
    let check = |f: &dyn Fn(&mut kfd_ioctl_create_queue_args), want: i32, what: &str| {
        let mut a = good;
        f(&mut a);
        assert_eq!(kfd.create_queue(&mut a), Err(want), "{what}");
    };
    check(&|a| a.queue_priority = 16, EINVAL, "priority 16");
    check(&|a| a.queue_percentage = 101, EINVAL, "percentage 101");
    check(&|a| a.ring_size = 3000, EINVAL, "ring not a power of two");
    check(
        &|a| a.ring_base_address = 0xffff_8000_0000_0000,
        libc::EFAULT,
        "kernel ring address",
    );
    check(
        &|a| a.read_pointer_address = 0x8000_0000_0000,
        libc::EFAULT,
        "kernel rptr",
    );
    check(&|a| a.queue_type = 5, 524, "queue type 5 (ENOTSUPP)");
    check(&|a| a.gpu_id = 0x1, EINVAL, "unknown gpu");
    check(
        &|a| a.ring_size = 8192,
        EINVAL,
        "ring mapping smaller than ring_size",
    );
    check(
        &|a| a.ring_base_address += 4096,
        EINVAL,
        "ring not at a mapping start",
    );
    check(
        &|a| a.read_pointer_address = bufs.cwsr.addr(),
        EINVAL,
        "rptr in a BO bigger than 4 KiB",
    );
    check(
        &|a| a.write_pointer_address = bufs.cwsr.addr() + 4096,
        EINVAL,
        "wptr inside a big BO",
    );
    check(
        &|a| a.ctl_stack_size += 4096,
        EINVAL,
        "ctl_stack_size != node",
    );
    check(
        &|a| a.ctx_save_restore_size -= 4096,
        EINVAL,
        "ctx_save_restore_size < node",
    );
    check(
        &|a| a.ctx_save_restore_size += 4096,
        EINVAL,
        "CWSR mapping smaller than required",
    );
    check(
        &|a| a.ctx_save_restore_address += 4096,
        EINVAL,
        "CWSR not at mapping start",
    );
    check(
        &|a| a.eop_buffer_address = bufs.ptrs.addr(),
        EINVAL,
        "eop size 0 != 4096",
    );
    // A ring that is not GPU-mapped.
    kfd.unmap(bufs.handles[0], node.gpu_id).unwrap();
    check(&|_| {}, EINVAL, "ring BO not mapped on the GPU");
    kfd.map(bufs.handles[0], node.gpu_id).unwrap();
    // Small rings: only the start is checked; 0 becomes 1024.
    let mut a = good;
    a.ring_size = 0;
    kfd.create_queue(&mut a).unwrap();
    assert_eq!(
        t.read(&format!(
            "sys/class/kfd/kfd/proc/{}/queues/0/size",
            std::process::id()
        )),
        "1024"
    );
    // The good arguments work.
    kfd.create_queue(&mut good.clone()).unwrap();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn legacy_kernel_skips_buffer_validation() {
    require_root();
    let t = mount(EmuConfig {
        preset: Preset::Mi308x,
        buffer_checks: false,
        ..EmuConfig::default()
    });
    let s = Session::new(&t, 0);
    let ring = Mapping::new(65536);
    let mut a = kfd_ioctl_create_queue_args {
        ring_base_address: ring.addr(),
        write_pointer_address: ring.addr() + 8,
        read_pointer_address: ring.addr() + 16,
        ring_size: 4096,
        gpu_id: s.node.gpu_id,
        queue_type: KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
        queue_percentage: 100,
        ..Default::default()
    };
    s.kfd.create_queue(&mut a).unwrap();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_256th_queue_on_a_gpu_is_enospc() {
    require_root();
    let t = mount_preset(Preset::Mi300xCpx);
    let s = Session::new(&t, 0);
    // All queues share one set of exactly-sized buffers (allowed by the kernel).
    let bufs = QueueBufs::new(&s.kfd, &s.node, 4096);
    for i in 0..255 {
        let mut a = bufs.args(&s.node, 0, 7);
        assert_eq!(s.kfd.create_queue(&mut a), Ok(i));
    }
    let mut a = bufs.args(&s.node, 0, 7);
    assert_eq!(s.kfd.create_queue(&mut a), Err(libc::ENOSPC));
    // Another partition has its own limit.
    let other = t.gpu_nodes().remove(1);
    let render = t.open_render(&other);
    s.kfd.acquire_vm(&render, other.gpu_id).unwrap();
    let b2 = QueueBufs::new(&s.kfd, &other, 4096);
    let mut a = b2.args(&other, 0, 7);
    assert_eq!(s.kfd.create_queue(&mut a), Ok(255));
    // Freeing one slot on the first partition lets the next create succeed (id 3).
    s.kfd.destroy_queue(3).unwrap();
    let mut a = bufs.args(&s.node, 0, 7);
    assert_eq!(s.kfd.create_queue(&mut a), Ok(3));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn create_queue_accepts_the_88_byte_kfd_1_11_struct() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let bufs = QueueBufs::new(&s.kfd, &s.node, 4096);
    let full = bufs.args(&s.node, 100, 9);
    // The 1.11 struct: the 96-byte layout without sdma_engine_id and pad, in a buffer
    // with a canary right after the 88 bytes.
    let mut raw = [0u8; 96];
    // SAFETY: kfd_ioctl_create_queue_args is 96 bytes of plain integers.
    let bytes: [u8; 96] = unsafe { std::mem::transmute(full) };
    raw[..88].copy_from_slice(&bytes[..88]);
    raw[88..].fill(0xee);
    let cmd = kfd_cmd(3, 0x02, 88);
    assert_ne!(cmd, AMDKFD_IOC_CREATE_QUEUE);
    raw_ioctl(s.kfd.file.as_raw_fd(), cmd, raw.as_mut_ptr().cast()).expect("88-byte CREATE_QUEUE");
    // SAFETY: same layout, plain integers.
    let out: kfd_ioctl_create_queue_args = unsafe { std::mem::transmute(raw) };
    assert_eq!(out.queue_id, 0);
    assert_ne!(out.doorbell_offset, 0);
    assert_eq!(
        &raw[88..],
        &[0xee; 8],
        "nothing copied past the caller's size"
    );
    let st = t.stats();
    assert_eq!(st.queues[0].priority, 9);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn update_queue_and_cu_mask() {
    require_root();
    let t = mount_preset(Preset::Mi308x);
    let s = Session::new(&t, 0);
    let (q, _bufs) = s.queue(100, 7);
    s.kfd.update_queue(&q, 100, 15).unwrap();
    assert_eq!(t.stats().queues[0].priority, 15);
    assert_eq!(s.kfd.update_queue(&q, 101, 15), Err(EINVAL));
    assert_eq!(s.kfd.update_queue(&q, 100, 16), Err(EINVAL));
    let mut u = kfd_ioctl_update_queue_args {
        ring_base_address: q.args.ring_base_address,
        queue_id: 99,
        ring_size: 4096,
        queue_percentage: 100,
        queue_priority: 1,
    };
    // The kernel (pqm_update_queue_properties) answers EFAULT for an unknown queue.
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_UPDATE_QUEUE, &mut u),
        Err(libc::EFAULT)
    );
    u.queue_id = q.id;
    u.ring_size = 8192;
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_UPDATE_QUEUE, &mut u),
        Err(libc::EFAULT),
        "ring size mismatch"
    );
    u.ring_size = 3000;
    assert_eq!(s.kfd.ioctl(AMDKFD_IOC_UPDATE_QUEUE, &mut u), Err(EINVAL));
    // Null ring deactivates.
    u.ring_base_address = 0;
    u.ring_size = 0;
    s.kfd.ioctl(AMDKFD_IOC_UPDATE_QUEUE, &mut u).unwrap();
    let st = t.stats();
    assert!(!st.queues[0].active);
    assert_eq!(st.queues[0].ring_size, 1024);
    // CU mask.
    let mask = [0xffff_0000u32, 0x0000_ffff];
    let mut m = kfd_ioctl_set_cu_mask_args {
        queue_id: q.id,
        num_cu_mask: 64,
        cu_mask_ptr: mask.as_ptr() as u64,
    };
    s.kfd.ioctl(AMDKFD_IOC_SET_CU_MASK, &mut m).unwrap();
    assert_eq!(t.stats().queues[0].cu_mask, Some(mask.to_vec()));
    m.num_cu_mask = 33;
    assert_eq!(s.kfd.ioctl(AMDKFD_IOC_SET_CU_MASK, &mut m), Err(EINVAL));
    m.num_cu_mask = 0;
    assert_eq!(s.kfd.ioctl(AMDKFD_IOC_SET_CU_MASK, &mut m), Err(EINVAL));
    m.num_cu_mask = 32;
    m.cu_mask_ptr = 8;
    assert_eq!(
        s.kfd.ioctl(AMDKFD_IOC_SET_CU_MASK, &mut m),
        Err(libc::EFAULT)
    );
}
