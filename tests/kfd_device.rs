//! GET_VERSION, topology and capabilities through the emulator; every wrapper on a non-KFD fd.

mod common;

use std::fs::File;
use std::os::fd::AsFd;

use common::*;
use kfdq::kfd::{self, GpuId, Kfd, QueueId, cwsr::SizeSource, ioctl};
use nix::errno::Errno;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn get_version_and_capabilities() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    assert_eq!(kfd.version().major, 1);
    assert_eq!(kfd.version().minor, 17);
    let caps = kfd.capabilities();
    assert!(caps.debugger_api);
    assert!(caps.buffer_rules);
    let (maj, min) = ioctl::get_version(kfd.as_fd()).unwrap();
    assert_eq!((maj, min), (1, 17));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn old_kfd_minor_disables_debugger_api() {
    let emu = mount(EmuConfig {
        kfd_minor: 11,
        ..EmuConfig::default()
    });
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    assert!(!kfd.capabilities().debugger_api);
    let e = kfd.runtime_enable(0, false).unwrap_err();
    assert!(e.to_string().contains("needs amdkfd interface 1.13"), "{e}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn topology_of_mi308x_preset() {
    let emu = mount_preset(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpus: Vec<_> = kfd.topology().gpus().collect();
    assert_eq!(gpus.len(), 1);
    let n = gpus[0];
    assert_eq!(n.cu_count(), 80);
    assert_eq!(n.num_xcc(), 4);
    assert_eq!(n.cp_queues_per_xcc(), 24);
    assert_eq!(n.hw_queue_slots(), 96);
    assert_eq!(n.resident_queue_limit(), 24);
    assert!(n.is_gfx94x());
    assert_eq!(n.gfx_version().unwrap().to_string(), "gfx942");
    assert!(
        kfd.topology().nodes.iter().any(|n| !n.is_gpu()),
        "a CPU node"
    );
    let s = n.cwsr_sizes().unwrap();
    assert_eq!(s.source, SizeSource::Sysfs);
    // 4 XCC x 20 CU (docs/kernel-interface.md §3 worked numbers).
    assert_eq!(s.ctl_stack_size, 8192);
    assert_eq!(s.cwsr_size, 12_214_272);
    assert_eq!(s.debug_memory_size, 25_600);
    let partition = emu.partition(n.gpu_id.unwrap().0);
    assert_eq!(partition.num_xcc, 4);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn cpx_preset_has_eight_partitions() {
    let emu = mount_preset(Preset::Mi300xCpx);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpus: Vec<_> = kfd.topology().gpus().collect();
    assert_eq!(gpus.len(), 8);
    assert!(gpus.iter().all(|n| n.num_xcc() == 1 && n.cu_count() == 38));
    let ids: std::collections::BTreeSet<_> = gpus.iter().map(|n| n.gpu_id.unwrap()).collect();
    assert_eq!(ids.len(), 8, "distinct gpu_ids: {ids:?}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn legacy_kernel_sizes_come_from_the_formula() {
    let cfg = EmuConfig {
        preset: Preset::Mi300xSpx,
        buffer_checks: false,
        ..EmuConfig::default()
    };
    let emu = mount(cfg);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    assert!(!kfd.capabilities().buffer_rules);
    let n = kfd.topology().gpus().next().unwrap();
    let s = n.cwsr_sizes().unwrap();
    assert_eq!(s.source, SizeSource::Formula);
    assert_eq!(s.cwsr_size, 23_203_840);
    assert_eq!(s.total(), 186_019_840);
}

#[test]
fn missing_device_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let e = Kfd::open(&kfd::Root::new(dir.path())).unwrap_err();
    assert!(e.to_string().contains("dev/kfd"), "{e}");
}

/// kvm-ioctls' `test_bad_kvm_fd` habit: every wrapper, given an fd that is not /dev/kfd, fails
/// with the kernel's errno and names the ioctl.
#[test]
fn every_wrapper_fails_cleanly_on_a_non_kfd_fd() {
    let null = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .unwrap();
    let fd = null.as_fd();
    let q = QueueId(0);
    let g = GpuId(1);
    let check = |name: &str, r: kfd::Result<()>| {
        let e = r.expect_err(name);
        assert_eq!(e.errno(), Some(Errno::ENOTTY), "{name}: {e}");
        assert!(e.to_string().contains(name), "{name} not named in {e}");
    };
    check("GET_VERSION", ioctl::get_version(fd).map(drop));
    check("DESTROY_QUEUE", ioctl::destroy_queue(fd, q));
    // The unsafe wrappers too, on the same fd. Each SAFETY: the fd is /dev/null, whose ioctl
    // answers ENOTTY without reading any address, so no ring or buffer reaches a GPU.
    // SAFETY: see above.
    let r = unsafe { ioctl::update_queue(fd, &Default::default()) };
    check("UPDATE_QUEUE", r);
    // SAFETY: see above.
    let r = unsafe { ioctl::create_queue(fd, &mut Default::default()) };
    check("CREATE_QUEUE", r);
    // SAFETY: see above.
    let r = unsafe { ioctl::alloc_memory_of_gpu(fd, &mut Default::default()) };
    check("ALLOC_MEMORY_OF_GPU", r);
    // SAFETY: see above.
    let r = unsafe { ioctl::get_queue_wave_state(fd, q, 0) };
    check("GET_QUEUE_WAVE_STATE", r.map(drop));
    // SAFETY: see above.
    let r = unsafe { ioctl::dbg_trap(fd, &mut Default::default()) };
    check("DBG_TRAP", r.map(drop));
    check("ACQUIRE_VM", ioctl::acquire_vm(fd, fd, g));
    check("FREE_MEMORY_OF_GPU", ioctl::free_memory_of_gpu(fd, 1));
    check(
        "MAP_MEMORY_TO_GPU",
        ioctl::map_memory_to_gpu(fd, 1, &[g]).map(drop),
    );
    check(
        "UNMAP_MEMORY_FROM_GPU",
        ioctl::unmap_memory_from_gpu(fd, 1, &[g]).map(drop),
    );
    check("SET_CU_MASK", ioctl::set_cu_mask(fd, q, &[1]));
    check("RUNTIME_ENABLE", ioctl::runtime_enable(fd, 0, 1).map(drop));
    check("DBG_TRAP", kfd::debug::resume_queues(fd, 1, &[q]).map(drop));
    check("DBG_TRAP", kfd::debug::queue_snapshot(fd, 1, 0).map(drop));
}
