//! FUSE message size. kfd-emu's `/dev/fuse` proxy passes each request and reply through a unix
//! socket, whose buffer holds all but 17 pages of a message in one physically contiguous
//! allocation; a 1 MiB write (the kernel's largest by default) failed there with `ENOBUFS` on a
//! busy, fragmented machine, and the mount stopped answering: rocblas-bench's start-up beside
//! other ROCm programs hung or failed (docs/real-rocm.md). The emulator now asks the kernel for
//! messages of at most 64 KiB of data (`fuse_proxy::limit_messages`). Whether the machine is
//! fragmented is not up to a test; the size of the messages is, and the stats show it.

mod common;

use std::process::Command;

use kfd_emu::Preset;
use kfd_sys::*;

use common::*;

/// A BO larger than any FUSE message (the kernel's limit is 256 pages).
const BO: usize = 4 << 20;
/// 64 KiB of data plus the largest request header (`fuse_in_header` and `fuse_write_in`) with
/// room to spare.
const LARGEST: u64 = (64 << 10) + 4096;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn bo_bytes_cross_the_mount_in_messages_a_fragmented_machine_can_carry() {
    require_root();
    let t = mount_preset(Preset::Mi210);
    let s = Session::new(&t, 0);
    let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
        va_addr: 1 << 40,
        size: BO as u64,
        gpu_id: s.node.gpu_id,
        flags: KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
        ..Default::default()
    };
    s.kfd
        .ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a)
        .expect("ALLOC_MEMORY_OF_GPU of a 4 MiB VRAM BO");
    let data: Vec<u8> = (0..BO).map(|i| (i * 7 % 251) as u8).collect();
    let written = nix::sys::uio::pwrite(&s.render, &data, a.mmap_offset as i64)
        .expect("write the BO through its render node");
    assert_eq!(written, BO);

    // Another process reads the BO back through the render node.
    let render = t.path(&format!(
        "dev/dri/renderD{}",
        s.node.props["drm_render_minor"]
    ));
    let out = Command::new("dd")
        .arg(format!("if={}", render.display()))
        .arg(format!("skip={}", a.mmap_offset))
        .args([
            "bs=4M",
            "count=1",
            "iflag=skip_bytes,fullblock",
            "status=none",
        ])
        .output()
        .expect("run dd");
    assert!(out.status.success(), "dd: {out:?}");
    assert!(out.stdout == data, "another process read other bytes back");

    let largest = t.stats().fuse_largest_message;
    assert!(
        largest > 0,
        "the emulator carried no FUSE message through its proxy (KFD_EMU_FUSE_PROXY=0 set?)"
    );
    assert!(
        largest <= LARGEST,
        "a {largest}-byte FUSE message crossed the proxy's socket: more than {LARGEST} bytes \
         need a high-order allocation that fails with ENOBUFS on a fragmented machine"
    );
}
