//! ACQUIRE_VM, ALLOC/MAP/UNMAP/FREE through the emulator.

mod common;

use std::fs::File;
use std::os::fd::AsFd;

use common::*;
use kfd_emu::Fault;
use kfdq::kfd::{AllocFlags, Kfd, Leaked, ioctl};
use nix::errno::Errno;

fn first_gpu(kfd: &Kfd) -> kfdq::kfd::GpuId {
    kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn acquire_vm_once_per_gpu() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = first_gpu(&kfd);
    assert!(!kfd.has_vm(gpu));
    kfd.acquire_vm(gpu).unwrap();
    kfd.acquire_vm(gpu).unwrap(); // idempotent in the library
    assert!(kfd.has_vm(gpu));
    // The kernel refuses a second ACQUIRE_VM with a different render-node fd.
    let minor = kfd.gpu(gpu).unwrap().render_minor().unwrap();
    let other = File::options()
        .read(true)
        .write(true)
        .open(emu.kfd_root().render_node(minor))
        .unwrap();
    let e = ioctl::acquire_vm(kfd.as_fd(), other.as_fd(), gpu).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EBUSY), "{e}");
    assert!(e.to_string().contains("already acquired"), "{e}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn acquire_vm_rejects_a_fd_that_is_not_the_render_node() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = first_gpu(&kfd);
    let not_render = File::open("/dev/null").unwrap();
    let e = ioctl::acquire_vm(kfd.as_fd(), not_render.as_fd(), gpu).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn userptr_alloc_map_unmap_free() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = first_gpu(&kfd);
    // The library refuses before the syscall when ACQUIRE_VM is missing.
    let e = kfd
        .alloc_userptr(gpu, 4096, AllocFlags::WRITABLE)
        .unwrap_err();
    assert!(e.to_string().contains("ACQUIRE_VM first"), "{e}");
    kfd.acquire_vm(gpu).unwrap();
    let mut a = kfd
        .alloc_userptr(gpu, 3 * 4096, AllocFlags::WRITABLE)
        .unwrap();
    assert!(a.is_mapped());
    assert_eq!(a.size(), 3 * 4096);
    assert_eq!(
        a.handle() >> 32,
        u64::from(gpu.0),
        "handle carries the gpu_id"
    );
    a.write_bytes(100, b"kfdq").unwrap();
    let mut back = [0u8; 4];
    a.read_bytes(100, &mut back).unwrap();
    assert_eq!(&back, b"kfdq");
    a.unmap_from_gpu().unwrap();
    assert!(!a.is_mapped());
    a.map_to_gpu().unwrap();
    let handle = a.handle();
    a.free().unwrap();
    // The handle is gone in the kernel.
    let e = ioctl::free_memory_of_gpu(kfd.as_fd(), handle).unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn gtt_buffer_is_cpu_visible_at_its_gpu_address() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = first_gpu(&kfd);
    kfd.acquire_vm(gpu).unwrap();
    let a = kfd
        .alloc(gpu, 8192, AllocFlags::GTT | AllocFlags::WRITABLE)
        .unwrap();
    assert!(a.cpu_accessible());
    a.atomic_u64(4096)
        .unwrap()
        .store(0x1234_5678, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        a.atomic_u64(4096)
            .unwrap()
            .load(std::sync::atomic::Ordering::SeqCst),
        0x1234_5678
    );
    let vram = kfd
        .alloc(gpu, 4096, AllocFlags::VRAM | AllocFlags::WRITABLE)
        .unwrap();
    assert!(!vram.cpu_accessible());
    assert!(
        vram.atomic_u64(0).is_err(),
        "private VRAM is not CPU-visible"
    );
    assert_ne!(a.va(), vram.va());
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn bad_sizes_are_refused_before_the_call() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = first_gpu(&kfd);
    kfd.acquire_vm(gpu).unwrap();
    let e = kfd
        .alloc_userptr(gpu, 100, AllocFlags::WRITABLE)
        .unwrap_err();
    assert!(e.to_string().contains("multiple of the 4 KiB"), "{e}");
    let e = kfd
        .alloc(gpu, 4096, AllocFlags::GTT | AllocFlags::VRAM)
        .unwrap_err();
    assert!(e.to_string().contains("exactly one of VRAM or GTT"), "{e}");
    // Refused with the errno the kernel gives the same arguments.
    let mut args = kfd_sys::kfd_ioctl_alloc_memory_of_gpu_args {
        va_addr: 0x10_0000_0000,
        size: 4096,
        gpu_id: gpu.0,
        flags: (AllocFlags::GTT | AllocFlags::VRAM).bits(),
        ..Default::default()
    };
    // SAFETY: not a USERPTR allocation, so the kernel keeps no CPU pointer (and it refuses
    // these flags anyway).
    let kernel = unsafe { ioctl::alloc_memory_of_gpu(kfd.as_fd(), &mut args) }.unwrap_err();
    assert_eq!(kernel.errno(), Some(Errno::EINVAL), "{kernel}");
    assert_eq!(e.errno(), kernel.errno(), "{e}");
}

/// A buffer the kernel will not free stays allocated and mapped on the CPU (the GPU may still
/// reach it): it is left to the kernel and reported once, never unmapped.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_buffer_the_kernel_will_not_free_is_left_to_it() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = first_gpu(&kfd);
    kfd.acquire_vm(gpu).unwrap();
    for flags in [AllocFlags::WRITABLE, AllocFlags::GTT | AllocFlags::WRITABLE] {
        let a = if flags.contains(AllocFlags::GTT) {
            kfd.alloc(gpu, 8192, flags).unwrap()
        } else {
            kfd.alloc_userptr(gpu, 8192, flags).unwrap()
        };
        let (va, handle) = (a.va(), a.handle());
        emu.emu.inject(Fault::always(
            kfd_sys::AMDKFD_IOC_FREE_MEMORY_OF_GPU,
            libc::EIO,
        ));
        drop(a);
        assert!(mapped(va), "{flags:?}: the CPU view at {va:#x} stays");
        let leaks = kfd.leaks();
        let last = leaks.last().expect("a leak");
        assert!(
            matches!(last.what, Leaked::Allocation { handle: h, va: v, size: 8192 } if h == handle && v == va),
            "{last:?}"
        );
        assert_eq!(last.errno, Some(Errno::EIO));
        // The kernel still holds it: once it lets go, the free goes through.
        emu.emu.clear_faults();
        ioctl::free_memory_of_gpu(kfd.as_fd(), handle).unwrap();
    }
    assert_eq!(kfd.leaks().len(), 2, "one report per buffer");
}
