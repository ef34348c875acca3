//! CREATE/UPDATE/SET_CU_MASK/GET_QUEUE_WAVE_STATE/DESTROY through the emulator, and the kernel
//! rules as the library reports them.

mod common;

use std::os::fd::AsFd;

use common::*;
use kfd_emu::Fault;
use kfdq::kfd::{CuMask, Kfd, Leaked, Priority, QueueKind, QueueSpec, ioctl, procfs};
use nix::errno::Errno;

fn setup(preset: Preset) -> (Emu, u32) {
    (mount_preset(preset), std::process::id())
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn aql_queue_lifecycle() {
    let (emu, pid) = setup(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let mut q = kfd
        .create_queue(QueueSpec::aql(gpu).priority(Priority::HIGH))
        .unwrap();
    assert!(!q.has_eop(), "no EOP buffer for AQL on gfx94x");
    // The emulator (the "kernel") sees what we asked for.
    let s = emu.queue(pid, q.id().0);
    assert_eq!(s.priority, 11);
    assert!(s.active);
    assert_eq!(s.queue_type, "compute_aql");
    assert_eq!(s.ring_size, q.ring_size());
    assert_eq!(s.ring_base_address, q.ring_address());
    // sysfs shows it too (world-readable proc/<pid>/queues).
    let p = procfs::process(&emu.kfd_root(), pid).unwrap();
    let pq = p
        .queues
        .iter()
        .find(|x| x.queue_id == q.id())
        .expect("queue in sysfs");
    assert_eq!(pq.gpu_id, gpu);
    assert_eq!(pq.queue_type, 0);
    assert_eq!(pq.ring_size, u64::from(q.ring_size()));

    // UPDATE_QUEUE: priority, then deactivate / activate.
    q.set_priority(Priority::new(3).unwrap()).unwrap();
    assert_eq!(emu.queue(pid, q.id().0).priority, 3);
    q.deactivate().unwrap();
    let s = emu.queue(pid, q.id().0);
    assert!(!s.active);
    assert_eq!(s.percentage, 0);
    assert_eq!(s.priority, 3, "deactivation keeps the priority");
    // Wave state only for inactive queues.
    let ws = q.wave_state().unwrap();
    assert!(ws.ctl_stack_used_size <= 1 << 20);
    q.activate().unwrap();
    assert!(emu.queue(pid, q.id().0).active);
    let e = q.wave_state().unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL), "{e}");
    assert!(e.to_string().contains("inactive"), "{e}");

    // SET_CU_MASK.
    q.set_cu_mask(CuMask::first(40).unwrap()).unwrap();
    let mask = emu.queue(pid, q.id().0).cu_mask.expect("mask recorded");
    assert_eq!(mask, vec![u32::MAX, 0xff]);

    let id = q.id();
    q.destroy().unwrap();
    assert!(
        emu.stats()
            .queues
            .iter()
            .all(|x| !(x.pid == pid && x.queue_id == id.0))
    );
    let p = procfs::process(&emu.kfd_root(), pid).unwrap();
    assert!(p.queues.iter().all(|x| x.queue_id != id));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn pm4_queue_gets_an_eop_buffer() {
    let (emu, pid) = setup(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let mut q = kfd
        .create_queue(QueueSpec::aql(gpu).kind(QueueKind::ComputePm4))
        .unwrap();
    assert!(q.has_eop());
    assert_eq!(emu.queue(pid, q.id().0).queue_type, "compute_pm4");
    assert!(
        q.submit(&kfdq::kfd::DispatchPacket::new(0, 1, 1)).is_err(),
        "AQL packets need an AQL queue"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn inactive_at_creation() {
    let (emu, pid) = setup(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let q = kfd.create_queue(QueueSpec::aql(gpu).inactive()).unwrap();
    assert!(!q.is_active());
    assert!(!emu.queue(pid, q.id().0).active);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn library_validates_before_the_syscall() {
    assert_eq!(
        Priority::new(16).unwrap_err().to_string(),
        "queue priority 16 is out of range 0..=15"
    );
    assert!(
        kfdq::kfd::Percentage::new(101)
            .unwrap_err()
            .to_string()
            .contains("101 is out of range 0..=100")
    );
    assert!(CuMask::from_words(vec![]).is_err());
    assert!(
        CuMask::from_words(vec![0, 0])
            .unwrap_err()
            .to_string()
            .contains("hang")
    );
    assert!(
        CuMask::from_words(vec![1; 33]).is_err(),
        "more than 1024 bits"
    );
    let (emu, _) = setup(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let e = kfd
        .create_queue(QueueSpec::aql(gpu).ring_size(3000))
        .unwrap_err();
    assert!(e.to_string().contains("power of two"), "{e}");
    assert_eq!(e.errno(), Some(Errno::EINVAL), "the kernel's errno for it");
    assert_eq!(Priority::new(16).unwrap_err().errno(), Some(Errno::EINVAL));
    let e = kfd
        .create_queue(QueueSpec::aql(kfdq::kfd::GpuId(0xdead)))
        .unwrap_err();
    assert!(e.to_string().contains("no GPU with gpu_id 57005"), "{e}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn update_of_unknown_queue_names_the_rule() {
    let (emu, _) = setup(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let args = kfd_sys::kfd_ioctl_update_queue_args {
        queue_id: 77,
        queue_percentage: 100,
        queue_priority: 7,
        ..Default::default()
    };
    // SAFETY: no queue 77 exists, so no ring is repointed (the call fails).
    let e = unsafe { ioctl::update_queue(kfd.as_fd(), &args) }.unwrap_err();
    // The kernel answers EFAULT for an unknown queue (pqm_update_queue_properties).
    assert_eq!(e.errno(), Some(Errno::EFAULT));
    assert!(
        e.to_string()
            .contains("UPDATE_QUEUE queue 77: no such queue"),
        "{e}"
    );
    let e = ioctl::destroy_queue(kfd.as_fd(), kfdq::kfd::QueueId(77)).unwrap_err();
    assert!(e.to_string().contains("no such queue"), "{e}");
    // Priority 16 reaches the kernel only through the raw path; the kernel refuses it too.
    let args = kfd_sys::kfd_ioctl_update_queue_args {
        queue_id: 0,
        queue_priority: 16,
        ..Default::default()
    };
    // SAFETY: priority 16 is refused before any queue changes; no queue exists anyway.
    let e = unsafe { ioctl::update_queue(kfd.as_fd(), &args) }.unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EINVAL));
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_256th_queue_on_one_gpu_is_refused() {
    let (emu, _) = setup(Preset::Mi300xCpx);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let mut qs = Vec::new();
    for _ in 0..255 {
        qs.push(
            kfd.create_queue(QueueSpec::aql(gpu).inactive().ring_size(4096))
                .unwrap(),
        );
    }
    let e = kfd
        .create_queue(QueueSpec::aql(gpu).inactive().ring_size(4096))
        .unwrap_err();
    assert_eq!(e.errno(), Some(Errno::ENOSPC), "{e}");
    assert!(
        e.to_string()
            .contains("255 queues on this GPU (gfx942 limit)"),
        "{e}"
    );
    // Another partition of the same device is a separate GPU node with its own limit.
    let other = kfd.topology().gpus().nth(1).and_then(|n| n.gpu_id).unwrap();
    kfd.create_queue(QueueSpec::aql(other).inactive().ring_size(4096))
        .unwrap();
}

/// The kernel's ESRCH for CREATE_QUEUE without ACQUIRE_VM is asserted by kfd-emu's own tests
/// (the library always acquires first); here: the words a user sees for it.
#[test]
fn create_before_acquire_vm_message() {
    let gpu = kfdq::kfd::GpuId(0x1a2b);
    let e = kfdq::kfd::IoctlError {
        ioctl: kfdq::kfd::KfdIoctl::CreateQueue,
        errno: Errno::ESRCH,
        context: kfdq::kfd::error::IoctlContext {
            gpu: Some(gpu),
            ..Default::default()
        },
    };
    assert_eq!(e.rule(), "CREATE_QUEUE on gpu 6699 needs ACQUIRE_VM first");
}

/// A queue the kernel will not destroy keeps its buffers: nothing of it is unmapped or freed (the
/// GPU may still write its read index and save area), and it is reported once.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_queue_the_kernel_keeps_is_left_to_it_with_its_buffers() {
    let (emu, pid) = setup(Preset::Mi308x);
    let kfd = Kfd::open(&emu.kfd_root()).unwrap();
    let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).unwrap();
    let q = kfd.create_queue(QueueSpec::aql(gpu)).unwrap();
    let id = q.id();
    let buffers = [
        q.ring_address(),
        q.write_pointer_address(),
        q.cwsr_address(),
    ];
    emu.emu.inject(Fault::always(
        kfd_sys::AMDKFD_IOC_DESTROY_QUEUE,
        libc::EBUSY,
    ));
    // The explicit destroy returns the kernel's refusal; the drop that follows retries once and
    // then leaves the queue to the kernel.
    let e = q.destroy().unwrap_err();
    assert_eq!(e.errno(), Some(Errno::EBUSY), "{e}");
    assert!(
        emu.queues_of(pid).iter().any(|x| x.queue_id == id.0),
        "the kernel still has the queue"
    );
    for addr in buffers {
        assert!(
            mapped(addr),
            "buffer at {addr:#x} is still this process's memory"
        );
    }
    let leaks = kfd.leaks();
    assert_eq!(leaks.len(), 1, "reported once: {leaks:?}");
    assert!(
        matches!(leaks[0].what, Leaked::Queue { id: i, gpu: g, buffers: 3, .. } if i == id && g == gpu),
        "{:?}",
        leaks[0]
    );
    assert_eq!(leaks[0].errno, Some(Errno::EBUSY));
    // Nothing was half-released: once the kernel lets go, the queue destroys normally.
    emu.emu.clear_faults();
    ioctl::destroy_queue(kfd.as_fd(), id).unwrap();
}
