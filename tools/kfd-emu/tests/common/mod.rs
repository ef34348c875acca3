//! Shared helpers of the kfd-emu integration tests: the root check, mounting an
//! emulator in a temporary directory, raw ioctls, and queue buffers.
//!
//! Everything goes through real syscalls (open, ioctl, mmap, read) on the FUSE mount.
#![allow(dead_code, unused_imports)]

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kfd_sys::*;

pub mod debug;
pub mod events;
pub mod uffd;

pub use test_support::emu::{Emu as TestEmu, mount, mount_preset, mount_with_env};
pub use test_support::wait::WAIT_LIMIT;
pub use test_support::{require_root, wait_until};

/// What the kfd-emu tests open and read on a mount.
pub trait KfdFiles {
    /// `/dev/kfd` of the mount.
    fn open_kfd(&self) -> Kfd;
    /// GPU nodes from sysfs: (node number, gpu_id, properties).
    fn gpu_nodes(&self) -> Vec<GpuNode>;
    /// Opens the render node of a GPU node.
    fn open_render(&self, node: &GpuNode) -> File;
}

impl KfdFiles for TestEmu {
    fn open_kfd(&self) -> Kfd {
        Kfd {
            file: open_rw(&self.path("dev/kfd")),
        }
    }

    fn gpu_nodes(&self) -> Vec<GpuNode> {
        let mut out = Vec::new();
        for n in 1.. {
            let dir = format!("sys/class/kfd/kfd/topology/nodes/{n}");
            if !self.path(&dir).exists() {
                break;
            }
            let gpu_id = self.read(&format!("{dir}/gpu_id")).trim().parse().unwrap();
            let props = parse_properties(&self.read(&format!("{dir}/properties")));
            out.push(GpuNode {
                node: n,
                gpu_id,
                props,
            });
        }
        out
    }

    fn open_render(&self, node: &GpuNode) -> File {
        open_rw(&self.path(&format!(
            "dev/dri/renderD{}",
            node.props["drm_render_minor"]
        )))
    }
}

pub struct GpuNode {
    pub node: u32,
    pub gpu_id: u32,
    pub props: BTreeMap<String, u64>,
}

impl GpuNode {
    pub fn cwsr_size(&self) -> u32 {
        self.props["cwsr_size"] as u32
    }

    pub fn ctl_stack_size(&self) -> u32 {
        self.props["ctl_stack_size"] as u32
    }

    /// Exact CWSR allocation per queue (the kernel's formula, docs/kernel-interface.md §3; debug memory computed).
    pub fn cwsr_total(&self) -> u64 {
        let p = &self.props;
        let s = kfd_emu::cwsr_sizes(
            p["simd_count"] as u32,
            p["simd_per_cu"] as u32,
            p["num_xcc"] as u32,
            p["array_count"] as u32,
            p["simd_arrays_per_engine"] as u32,
            p["gfx_target_version"] as u32,
            p["lds_size_in_kb"] as u32,
        );
        ((u64::from(self.cwsr_size()) + u64::from(s.debug_memory_size)) * p["num_xcc"])
            .div_ceil(4096)
            * 4096
    }
}

pub fn parse_properties(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .map(|l| {
            let (k, v) = l
                .split_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (
                k.to_string(),
                v.parse().unwrap_or_else(|_| panic!("bad value {l:?}")),
            )
        })
        .collect()
}

pub fn open_rw(p: &Path) -> File {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap_or_else(|e| panic!("open {}: {e}", p.display()))
}

/// Builds an ioctl request number ('K', nr, size, direction bits 1=W 2=R).
pub const fn kfd_cmd(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | (0x4b << 8) | nr
}

/// `/dev/kfd` opened by this process.
pub struct Kfd {
    pub file: File,
}

impl Kfd {
    /// `ioctl(fd, cmd, arg)`: Ok(return value) or Err(errno).
    pub fn ioctl<T>(&self, cmd: u32, arg: &mut T) -> Result<i32, i32> {
        raw_ioctl(self.file.as_raw_fd(), cmd, (arg as *mut T).cast())
    }

    pub fn version(&self) -> (u32, u32) {
        let mut v = kfd_ioctl_get_version_args::default();
        self.ioctl(AMDKFD_IOC_GET_VERSION, &mut v)
            .expect("GET_VERSION");
        (v.major_version, v.minor_version)
    }

    pub fn acquire_vm(&self, render: &File, gpu_id: u32) -> Result<i32, i32> {
        let mut a = kfd_ioctl_acquire_vm_args {
            drm_fd: render.as_raw_fd() as u32,
            gpu_id,
        };
        self.ioctl(AMDKFD_IOC_ACQUIRE_VM, &mut a)
    }

    /// ALLOC (USERPTR of `m`) + MAP on `gpu_id`; returns the handle.
    pub fn userptr(&self, gpu_id: u32, m: &Mapping) -> Result<u64, i32> {
        let handle = self.alloc_userptr(gpu_id, m)?;
        self.map(handle, gpu_id)?;
        Ok(handle)
    }

    pub fn alloc_userptr(&self, gpu_id: u32, m: &Mapping) -> Result<u64, i32> {
        let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: m.addr(),
            size: m.len as u64,
            mmap_offset: m.addr(),
            gpu_id,
            flags: KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE,
            ..Default::default()
        };
        self.ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a)?;
        Ok(a.handle)
    }

    pub fn map(&self, handle: u64, gpu_id: u32) -> Result<i32, i32> {
        let ids = [gpu_id];
        let mut a = kfd_ioctl_map_memory_to_gpu_args {
            handle,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: 1,
            n_success: 0,
        };
        self.ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mut a)
    }

    pub fn unmap(&self, handle: u64, gpu_id: u32) -> Result<i32, i32> {
        let ids = [gpu_id];
        let mut a = kfd_ioctl_unmap_memory_from_gpu_args {
            handle,
            device_ids_array_ptr: ids.as_ptr() as u64,
            n_devices: 1,
            n_success: 0,
        };
        self.ioctl(AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, &mut a)
    }

    pub fn free(&self, handle: u64) -> Result<i32, i32> {
        let mut a = kfd_ioctl_free_memory_of_gpu_args { handle };
        self.ioctl(AMDKFD_IOC_FREE_MEMORY_OF_GPU, &mut a)
    }

    pub fn create_queue(&self, a: &mut kfd_ioctl_create_queue_args) -> Result<u32, i32> {
        self.ioctl(AMDKFD_IOC_CREATE_QUEUE, a)?;
        Ok(a.queue_id)
    }

    pub fn destroy_queue(&self, queue_id: u32) -> Result<i32, i32> {
        let mut a = kfd_ioctl_destroy_queue_args { queue_id, pad: 0 };
        self.ioctl(AMDKFD_IOC_DESTROY_QUEUE, &mut a)
    }

    pub fn update_queue(&self, q: &Queue, percentage: u32, priority: u32) -> Result<i32, i32> {
        let mut a = kfd_ioctl_update_queue_args {
            ring_base_address: q.args.ring_base_address,
            queue_id: q.id,
            ring_size: q.args.ring_size,
            queue_percentage: percentage,
            queue_priority: priority,
        };
        self.ioctl(AMDKFD_IOC_UPDATE_QUEUE, &mut a)
    }

    pub fn runtime_enable(&self) -> Result<i32, i32> {
        let mut a = kfd_ioctl_runtime_enable_args {
            r_debug: 0,
            mode_mask: KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK,
            capabilities_mask: 0,
        };
        self.ioctl(AMDKFD_IOC_RUNTIME_ENABLE, &mut a)
    }

    /// DBG_TRAP with the op's argument struct placed in the union.
    pub fn dbg_trap<T: Copy>(&self, pid: u32, op: u32, op_args: &mut T) -> Result<i32, i32> {
        assert!(size_of::<T>() <= 24);
        let mut a = kfd_ioctl_dbg_trap_args {
            pid,
            op,
            ..Default::default()
        };
        // SAFETY: the union is 24 bytes of plain integers and T (an op struct) fits.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (op_args as *const T).cast::<u8>(),
                (&raw mut a.__bindgen_anon_1).cast::<u8>(),
                size_of::<T>(),
            );
        }
        let r = self.ioctl(AMDKFD_IOC_DBG_TRAP, &mut a);
        // SAFETY: copies the (possibly updated) union bytes back into T.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (&raw const a.__bindgen_anon_1).cast::<u8>(),
                (op_args as *mut T).cast::<u8>(),
                size_of::<T>(),
            );
        }
        r
    }
}

pub fn raw_ioctl(fd: i32, cmd: u32, arg: *mut libc::c_void) -> Result<i32, i32> {
    // SAFETY: the callers pass a pointer to an argument buffer at least as large as
    // the size encoded in `cmd`.
    let r = unsafe { libc::ioctl(fd, cmd as libc::c_ulong, arg) };
    if r < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
    } else {
        Ok(r)
    }
}

/// An anonymous, page-aligned, read-write mapping (unmapped on drop).
pub struct Mapping {
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; tests share it across
// threads only through raw reads/writes they synchronise themselves.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub fn new(len: usize) -> Mapping {
        Mapping::with_prot(len, libc::PROT_READ | libc::PROT_WRITE)
    }

    /// A reserved range no access reaches (`PROT_NONE`): a client address that faults,
    /// and that no other thread's mapping can take while this value lives (a range
    /// unmapped with `munmap` can be handed to a concurrent test's `mmap` at once).
    pub fn inaccessible(len: usize) -> Mapping {
        Mapping::with_prot(len, libc::PROT_NONE)
    }

    fn with_prot(len: usize, prot: libc::c_int) -> Mapping {
        // SAFETY: anonymous private mapping, no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "mmap {len} bytes");
        Mapping {
            ptr: ptr.cast(),
            len,
        }
    }

    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// Atomic view of the u64 at byte offset `off`.
    pub fn u64_at(&self, off: usize) -> &std::sync::atomic::AtomicU64 {
        assert!(off + 8 <= self.len && off % 8 == 0);
        // SAFETY: in bounds, 8-aligned (page-aligned base), lives as long as &self.
        unsafe { &*(self.ptr.add(off) as *const std::sync::atomic::AtomicU64) }
    }

    pub fn i64_at(&self, off: usize) -> &std::sync::atomic::AtomicI64 {
        assert!(off + 8 <= self.len && off % 8 == 0);
        // SAFETY: in bounds, 8-aligned, lives as long as &self.
        unsafe { &*(self.ptr.add(off) as *const std::sync::atomic::AtomicI64) }
    }

    /// Writes `bytes` at `off`.
    pub fn write(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len);
        // SAFETY: in bounds of the mapping; u8 has no alignment requirement.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.add(off), bytes.len()) };
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping created in `new`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Buffers of one queue, each its own exactly-sized userptr BO mapped on the GPU.
pub struct QueueBufs {
    pub ring: Mapping,
    /// Write index at byte 0, read index at byte 8.
    pub ptrs: Mapping,
    pub cwsr: Mapping,
    pub handles: Vec<u64>,
}

pub const WPTR_OFF: usize = 0;
pub const RPTR_OFF: usize = 8;

impl QueueBufs {
    pub fn new(kfd: &Kfd, node: &GpuNode, ring_size: usize) -> QueueBufs {
        let ring = Mapping::new(ring_size);
        let ptrs = Mapping::new(4096);
        let cwsr = Mapping::new(node.cwsr_total() as usize);
        let mut handles = Vec::new();
        for m in [&ring, &ptrs, &cwsr] {
            handles.push(kfd.userptr(node.gpu_id, m).expect("alloc+map userptr"));
        }
        QueueBufs {
            ring,
            ptrs,
            cwsr,
            handles,
        }
    }

    /// CREATE_QUEUE arguments for an AQL queue on `node` using these buffers.
    pub fn args(
        &self,
        node: &GpuNode,
        percentage: u32,
        priority: u32,
    ) -> kfd_ioctl_create_queue_args {
        kfd_ioctl_create_queue_args {
            ring_base_address: self.ring.addr(),
            write_pointer_address: self.ptrs.addr() + WPTR_OFF as u64,
            read_pointer_address: self.ptrs.addr() + RPTR_OFF as u64,
            ring_size: self.ring.len as u32,
            gpu_id: node.gpu_id,
            queue_type: KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
            queue_percentage: percentage,
            queue_priority: priority,
            ctx_save_restore_address: self.cwsr.addr(),
            ctx_save_restore_size: node.cwsr_size(),
            ctl_stack_size: node.ctl_stack_size(),
            ..Default::default()
        }
    }
}

/// A created queue with its arguments.
pub struct Queue {
    pub id: u32,
    pub args: kfd_ioctl_create_queue_args,
}

/// One process's setup on one GPU: kfd + render fd + ACQUIRE_VM.
pub struct Session {
    pub kfd: Kfd,
    pub render: File,
    pub node: GpuNode,
}

impl Session {
    pub fn new(t: &TestEmu, node_index: usize) -> Session {
        let kfd = t.open_kfd();
        let node = t.gpu_nodes().remove(node_index);
        let render = t.open_render(&node);
        kfd.acquire_vm(&render, node.gpu_id).expect("ACQUIRE_VM");
        Session { kfd, render, node }
    }

    /// Allocates a VRAM BO of `len` bytes (at GPU VA 1 << 40) and maps it through the render
    /// node, untouched: each first access of one of its pages is a fault the emulator serves
    /// (`page_io`). Returns the mapping's address; the caller unmaps it.
    pub fn map_vram_bo(&self, len: usize) -> *mut libc::c_void {
        let mut a = kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: 1 << 40,
            size: len as u64,
            gpu_id: self.node.gpu_id,
            flags: KFD_IOC_ALLOC_MEM_FLAGS_VRAM
                | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE
                | KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC,
            ..Default::default()
        };
        self.kfd
            .ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &mut a)
            .expect("ALLOC_MEMORY_OF_GPU of a VRAM BO");
        // SAFETY: maps `len` bytes of the render node at the BO's offset; nothing else is there.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.render.as_raw_fd(),
                a.mmap_offset as libc::off_t,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        ptr
    }

    /// Allocates buffers and creates an AQL queue.
    pub fn queue(&self, percentage: u32, priority: u32) -> (Queue, QueueBufs) {
        let bufs = QueueBufs::new(&self.kfd, &self.node, 4096);
        let mut args = bufs.args(&self.node, percentage, priority);
        let id = self.kfd.create_queue(&mut args).expect("CREATE_QUEUE");
        (Queue { id, args }, bufs)
    }
}

/// AQL kernel-dispatch packet with a modelled duration and completion signal.
pub fn dispatch_packet(duration_ns: u64, signal: u64) -> [u8; 64] {
    let mut p = [0u8; 64];
    p[0] = 2; // HSA_PACKET_TYPE_KERNEL_DISPATCH
    p[48..56].copy_from_slice(&duration_ns.to_ne_bytes());
    p[56..64].copy_from_slice(&signal.to_ne_bytes());
    p
}

/// Writes packets at write index `from..` into the ring and publishes the new index.
pub fn submit(bufs: &QueueBufs, from: u64, packets: &[[u8; 64]]) -> u64 {
    let slots = (bufs.ring.len / 64) as u64;
    for (i, p) in packets.iter().enumerate() {
        let idx = from + i as u64;
        bufs.ring.write(((idx % slots) * 64) as usize, p);
    }
    let to = from + packets.len() as u64;
    bufs.ptrs
        .u64_at(WPTR_OFF)
        .store(to, std::sync::atomic::Ordering::Release);
    to
}

/// CLOCK_MONOTONIC now, µs: the clock of the queues' stop and runnable times in the stats.
pub fn monotonic_us() -> f64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).expect("clock");
    t.tv_sec() as f64 * 1e6 + t.tv_nsec() as f64 / 1e3
}

/// Asserts that `times` holds exactly one time, inside `[from, to]`.
pub fn one_time_within(times: &[f64], from: f64, to: f64, what: &str) {
    assert!(
        times.len() == 1 && (from..=to).contains(&times[0]),
        "{what}: {times:?}, expected one time in [{from}, {to}]"
    );
}

/// The FUSE connection id of the mount at `root` (its device number, as fusectl names it).
pub fn fuse_connection(root: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(root).expect("stat the mount").dev();
    (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev))
}

/// Aborts FUSE connection `conn` through fusectl, mounted for that in a private mount
/// namespace (the host's stays as it was: a mount test depends on it).
pub fn abort_fuse_connection(conn: u64) -> std::io::Result<std::process::ExitStatus> {
    std::process::Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t fusectl none /sys/fs/fuse/connections && \
             echo 1 > /sys/fs/fuse/connections/{conn}/abort"
        ))
        .status()
}
