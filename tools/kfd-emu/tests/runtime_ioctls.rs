//! What ROCr's thunk needs besides queues, memory, events and the SDMA engine
//! (runtime_events.rs): process apertures, memory policy, clock counters, XNACK mode, available
//! memory, the render node's DRM ioctls, ACQUIRE_VM through another path to the same render node,
//! /dev/kfd offsets, and the sysfs files the thunk reads. All through real syscalls on the FUSE
//! mount.

mod common;

use std::os::fd::AsRawFd;

use kfd_emu::Preset;
use kfd_sys::*;

use common::*;

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
