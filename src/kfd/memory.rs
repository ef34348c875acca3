//! GPU memory: ALLOC / MAP / UNMAP / FREE with CPU VA == GPU VA, as RAII handles.
//!
//! USERPTR buffers are anonymous memory the process maps first and then registers; VRAM and
//! GTT buffers get a PROT_NONE reservation whose address becomes the GPU VA, and CPU-visible
//! ones are then mapped over it from the render node at the kernel's `mmap_offset`.
#![allow(unsafe_code)]

use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use bitflags::bitflags;
use kfd_sys as sys;
use nix::sys::mman::{MapFlags, ProtFlags};

use super::device::Kfd;
use nix::errno::Errno;

use super::error::{Error, Result};
use super::ids::GpuId;
use super::ioctl;
use super::leak::{Leak, Leaked};

/// GPU page size used by the buffer rules.
pub const PAGE_SIZE: u64 = 4096;

bitflags! {
    /// `KFD_IOC_ALLOC_MEM_FLAGS_*`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AllocFlags: u32 {
        /// Device memory.
        const VRAM = sys::KFD_IOC_ALLOC_MEM_FLAGS_VRAM as u32;
        /// System memory through the GART.
        const GTT = sys::KFD_IOC_ALLOC_MEM_FLAGS_GTT as u32;
        /// Existing process memory registered with the GPU.
        const USERPTR = sys::KFD_IOC_ALLOC_MEM_FLAGS_USERPTR as u32;
        /// Doorbell page.
        const DOORBELL = sys::KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL as u32;
        /// MMIO remap page.
        const MMIO_REMAP = sys::KFD_IOC_ALLOC_MEM_FLAGS_MMIO_REMAP as u32;
        /// Physically contiguous.
        const CONTIGUOUS = sys::KFD_IOC_ALLOC_MEM_FLAGS_CONTIGUOUS as u32;
        /// Extended coherence.
        const EXT_COHERENT = sys::KFD_IOC_ALLOC_MEM_FLAGS_EXT_COHERENT as u32;
        /// Uncached.
        const UNCACHED = sys::KFD_IOC_ALLOC_MEM_FLAGS_UNCACHED as u32;
        /// Coherent.
        const COHERENT = sys::KFD_IOC_ALLOC_MEM_FLAGS_COHERENT as u32;
        /// gfx7/8 double-mapped AQL ring.
        const AQL_QUEUE_MEM = sys::KFD_IOC_ALLOC_MEM_FLAGS_AQL_QUEUE_MEM as u32;
        /// No fallback domain.
        const NO_SUBSTITUTE = sys::KFD_IOC_ALLOC_MEM_FLAGS_NO_SUBSTITUTE as u32;
        /// CPU-visible VRAM.
        const PUBLIC = sys::KFD_IOC_ALLOC_MEM_FLAGS_PUBLIC as u32;
        /// GPU may execute from it.
        const EXECUTABLE = sys::KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE as u32;
        /// GPU may write it.
        const WRITABLE = sys::KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE as u32;
    }
}

/// How the CPU sees an allocation.
#[derive(Debug)]
enum CpuView {
    /// Anonymous memory owned by us (USERPTR).
    Anon(memmap2::MmapMut),
    /// A mapping we made with mmap (render-node view, or a PROT_NONE reservation).
    Raw {
        ptr: NonNull<c_void>,
        len: usize,
        accessible: bool,
    },
}

/// A GPU buffer object, mapped to one GPU, at the same address for CPU and GPU.
///
/// Dropping it unmaps it from the GPU, frees it and releases the CPU mapping. When the kernel
/// refuses the unmap or the free, nothing is released: the buffer is left to the kernel, mapped
/// on the CPU and never reused, and reported once ([`Kfd::leaks`], `leak.rs`).
#[derive(Debug)]
pub struct Allocation<'k> {
    kfd: &'k Kfd,
    gpu: GpuId,
    handle: u64,
    va: u64,
    size: u64,
    flags: AllocFlags,
    mapped: bool,
    cpu: CpuView,
}

// SAFETY: the allocation owns its mappings; raw pointers in it are only dereferenced through
// &self/&mut self methods with the usual borrow rules, and the KFD calls are thread-safe.
unsafe impl Send for Allocation<'_> {}
// SAFETY: through `&self` an Allocation only reads its own fields and hands out atomics
// (`atomic_u32`/`atomic_u64`); the non-atomic byte copies (`write_bytes`, `read_bytes`) take
// `&mut self`, so two threads can never race on them.
unsafe impl Sync for Allocation<'_> {}

fn page_len(size: u64) -> Result<NonZeroUsize> {
    if size == 0 || size % PAGE_SIZE != 0 {
        return Err(Error::invalid(
            Errno::EINVAL,
            format!("allocation size {size} must be a non-zero multiple of the 4 KiB GPU page"),
        ));
    }
    NonZeroUsize::new(size as usize)
        .ok_or_else(|| Error::invalid(Errno::EINVAL, "zero-sized allocation"))
}

impl Kfd {
    fn require_vm(&self, gpu: GpuId) -> Result<()> {
        self.gpu(gpu)?;
        if !self.has_vm(gpu) {
            return Err(Error::invalid(
                Errno::EINVAL,
                format!("GPU memory on gpu {gpu} needs ACQUIRE_VM first (call Kfd::acquire_vm)"),
            ));
        }
        Ok(())
    }

    /// Allocates `size` bytes of zeroed anonymous memory, registers it as a USERPTR buffer at
    /// the same GPU address and maps it to `gpu`.
    ///
    /// Kernel: `kfd_ioctl_alloc_memory_of_gpu` then `kfd_ioctl_map_memory_to_gpu`
    /// (`kfd_chardev.c`), requests `AMDKFD_IOC_ALLOC_MEMORY_OF_GPU` and
    /// `AMDKFD_IOC_MAP_MEMORY_TO_GPU`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kfdq::kfd::{AllocFlags, Kfd, Root};
    ///
    /// let kfd = Kfd::open(&Root::from_env())?;
    /// let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).expect("a GPU");
    /// kfd.acquire_vm(gpu)?;
    /// let mut buf = kfd.alloc_userptr(gpu, 4096, AllocFlags::WRITABLE)?;
    /// buf.write_bytes(0, b"hello")?; // CPU and GPU see it at buf.va()
    /// buf.free()?; // or drop it
    /// # Ok::<(), kfdq::kfd::Error>(())
    /// ```
    pub fn alloc_userptr(
        &self,
        gpu: GpuId,
        size: u64,
        extra: AllocFlags,
    ) -> Result<Allocation<'_>> {
        self.require_vm(gpu)?;
        let len = page_len(size)?;
        let mut anon = memmap2::MmapMut::map_anon(len.get()).map_err(|source| Error::Mmap {
            what: "userptr buffer",
            source,
        })?;
        let va = anon.as_mut_ptr() as u64;
        let flags = AllocFlags::USERPTR | extra;
        let mut args = sys::kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: va,
            size,
            mmap_offset: va,
            gpu_id: gpu.0,
            flags: flags.bits(),
            ..Default::default()
        };
        // SAFETY: `anon` is moved into the Allocation below, which frees the BO before the
        // mapping is released (field drop order runs after Drop::drop).
        unsafe { ioctl::alloc_memory_of_gpu(self.as_fd(), &mut args)? };
        let mut a = Allocation {
            kfd: self,
            gpu,
            handle: args.handle,
            va,
            size,
            flags,
            mapped: false,
            cpu: CpuView::Anon(anon),
        };
        a.map_to_gpu()?;
        Ok(a)
    }

    /// Allocates a VRAM or GTT buffer at a reserved address and maps it to `gpu`. GTT and
    /// `PUBLIC` VRAM buffers are also mapped for the CPU at the same address (through the
    /// render node); other VRAM stays a PROT_NONE reservation on the CPU side.
    ///
    /// Kernel: `kfd_ioctl_alloc_memory_of_gpu` then `kfd_ioctl_map_memory_to_gpu`
    /// (`kfd_chardev.c`), requests `AMDKFD_IOC_ALLOC_MEMORY_OF_GPU` and
    /// `AMDKFD_IOC_MAP_MEMORY_TO_GPU`; the CPU mapping is an mmap of the render node at the
    /// allocation's `mmap_offset`. Example: [`Kfd::acquire_vm`].
    pub fn alloc(&self, gpu: GpuId, size: u64, flags: AllocFlags) -> Result<Allocation<'_>> {
        self.require_vm(gpu)?;
        if !(flags.contains(AllocFlags::VRAM) ^ flags.contains(AllocFlags::GTT))
            || flags.contains(AllocFlags::USERPTR)
        {
            return Err(Error::invalid(
                Errno::EINVAL,
                "Kfd::alloc takes exactly one of VRAM or GTT; use alloc_userptr for USERPTR",
            ));
        }
        let len = page_len(size)?;
        // SAFETY: a fresh private PROT_NONE reservation; nothing else refers to it.
        let reserve = unsafe {
            nix::sys::mman::mmap_anonymous(
                None,
                len,
                ProtFlags::PROT_NONE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
            )
        }
        .map_err(|e| Error::Mmap {
            what: "VA reservation",
            source: e.into(),
        })?;
        let va = reserve.as_ptr() as u64;
        let mut a = Allocation {
            kfd: self,
            gpu,
            handle: 0,
            va,
            size,
            flags,
            mapped: false,
            cpu: CpuView::Raw {
                ptr: reserve,
                len: len.get(),
                accessible: false,
            },
        };
        let mut args = sys::kfd_ioctl_alloc_memory_of_gpu_args {
            va_addr: va,
            size,
            gpu_id: gpu.0,
            flags: flags.bits(),
            ..Default::default()
        };
        // SAFETY: not a USERPTR allocation; the kernel keeps no CPU pointer of ours.
        unsafe { ioctl::alloc_memory_of_gpu(self.as_fd(), &mut args)? };
        a.handle = args.handle;
        let cpu_visible = flags.contains(AllocFlags::GTT) || flags.contains(AllocFlags::PUBLIC);
        if cpu_visible {
            let vms = self.vms();
            let vm = vms.get(&gpu).ok_or(Error::UnknownGpu(gpu))?;
            // SAFETY: MAP_FIXED over our own reservation of exactly this length, which the
            // Allocation owns and unmaps on drop.
            unsafe {
                nix::sys::mman::mmap(
                    Some(reserve.addr()),
                    len,
                    ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                    MapFlags::MAP_SHARED | MapFlags::MAP_FIXED,
                    vm.render.as_fd(),
                    args.mmap_offset as libc::off_t,
                )
            }
            .map_err(|e| Error::Mmap {
                what: "render-node view of a buffer",
                source: e.into(),
            })?;
            a.cpu = CpuView::Raw {
                ptr: reserve,
                len: len.get(),
                accessible: true,
            };
        }
        a.map_to_gpu()?;
        Ok(a)
    }
}

impl<'k> Allocation<'k> {
    /// GPU (and CPU) virtual address.
    pub fn va(&self) -> u64 {
        self.va
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// KFD handle (`gpu_id << 32 | id`).
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// The GPU it belongs to.
    pub fn gpu(&self) -> GpuId {
        self.gpu
    }

    /// Allocation flags.
    pub fn flags(&self) -> AllocFlags {
        self.flags
    }

    /// True while mapped into the GPU VM.
    pub fn is_mapped(&self) -> bool {
        self.mapped
    }

    /// True when the CPU can read and write it.
    pub fn cpu_accessible(&self) -> bool {
        match &self.cpu {
            CpuView::Anon(_) => true,
            CpuView::Raw { accessible, .. } => *accessible,
        }
    }

    /// MAP_MEMORY_TO_GPU on its GPU.
    ///
    /// Kernel: `kfd_ioctl_map_memory_to_gpu` (`kfd_chardev.c`), request
    /// `AMDKFD_IOC_MAP_MEMORY_TO_GPU` ([`super::ioctl::map_memory_to_gpu`]).
    pub fn map_to_gpu(&mut self) -> Result<()> {
        if !self.mapped {
            ioctl::map_memory_to_gpu(self.kfd.as_fd(), self.handle, &[self.gpu])?;
            self.mapped = true;
        }
        Ok(())
    }

    /// UNMAP_MEMORY_FROM_GPU on its GPU (refused while a queue uses it, Linux 6.12+).
    ///
    /// Kernel: `kfd_ioctl_unmap_memory_from_gpu` (`kfd_chardev.c`), request
    /// `AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU` ([`super::ioctl::unmap_memory_from_gpu`]).
    pub fn unmap_from_gpu(&mut self) -> Result<()> {
        if self.mapped {
            ioctl::unmap_memory_from_gpu(self.kfd.as_fd(), self.handle, &[self.gpu])?;
            self.mapped = false;
        }
        Ok(())
    }

    /// Unmaps and frees now, returning the kernel's answer. Drop does the same; after a failed
    /// `free` the drop retries once, and if the kernel refuses again leaves the buffer to it.
    ///
    /// Kernel: `kfd_ioctl_unmap_memory_from_gpu`, then `kfd_ioctl_free_memory_of_gpu`
    /// (`kfd_chardev.c`), request `AMDKFD_IOC_FREE_MEMORY_OF_GPU`.
    pub fn free(mut self) -> Result<()> {
        self.release()
    }

    fn release(&mut self) -> Result<()> {
        self.unmap_from_gpu()?;
        if self.handle != 0 {
            ioctl::free_memory_of_gpu(self.kfd.as_fd(), self.handle)?;
            self.handle = 0;
        }
        Ok(())
    }

    /// Leaves the buffer to the kernel: nothing is unmapped or freed, on the GPU or on the CPU.
    /// For a buffer of a queue the kernel kept; the queue reports the leak.
    pub(crate) fn leak(self) {
        std::mem::forget(self);
    }

    fn take_cpu(&mut self) -> CpuGuard {
        let cpu = std::mem::replace(
            &mut self.cpu,
            CpuView::Raw {
                ptr: NonNull::dangling(),
                len: 0,
                accessible: false,
            },
        );
        CpuGuard(Some(cpu))
    }

    fn base(&self) -> Option<*mut u8> {
        match &self.cpu {
            CpuView::Anon(m) => Some(m.as_ptr() as *mut u8),
            CpuView::Raw {
                ptr,
                accessible: true,
                ..
            } => Some(ptr.as_ptr() as *mut u8),
            CpuView::Raw { .. } => None,
        }
    }

    fn checked(&self, offset: u64, len: u64, align: u64) -> Result<*mut u8> {
        let base = self
            .base()
            .ok_or_else(|| Error::invalid(Errno::EFAULT, "buffer is not CPU-visible"))?;
        if offset.checked_add(len).is_none_or(|end| end > self.size) || offset % align != 0 {
            return Err(Error::invalid(
                Errno::EFAULT,
                format!(
                    "access of {len} bytes at offset {offset} (alignment {align}) is outside the {}-byte buffer",
                    self.size
                ),
            ));
        }
        // SAFETY: offset + len <= size, so the pointer stays inside the mapping.
        Ok(unsafe { base.add(offset as usize) })
    }

    /// The 64-bit word at `offset`, shared with the GPU.
    pub fn atomic_u64(&self, offset: u64) -> Result<&AtomicU64> {
        let p = self.checked(offset, 8, 8)?;
        // SAFETY: in bounds, 8-byte aligned, and the mapping lives as long as &self; AtomicU64
        // has the layout of u64 and all accesses to this word go through atomics or the GPU.
        Ok(unsafe { &*(p as *const AtomicU64) })
    }

    /// The 32-bit word at `offset`, shared with the GPU.
    pub fn atomic_u32(&self, offset: u64) -> Result<&AtomicU32> {
        let p = self.checked(offset, 4, 4)?;
        // SAFETY: in bounds, 4-byte aligned, lives as long as &self; same layout as u32.
        Ok(unsafe { &*(p as *const AtomicU32) })
    }

    /// Copies `bytes` into the buffer at `offset` (volatile: the GPU may be reading).
    ///
    /// `&mut self`: the copy is not atomic, so no other thread may copy at the same time (the
    /// GPU may; that is what volatile is for). A shared reference, which may live in several
    /// threads, cannot copy:
    ///
    /// ```compile_fail
    /// fn race(a: &kfdq::kfd::Allocation<'_>) {
    ///     a.write_bytes(0, b"kfdq").unwrap();
    /// }
    /// ```
    pub fn write_bytes(&mut self, offset: u64, bytes: &[u8]) -> Result<()> {
        let p = self.checked(offset, bytes.len() as u64, 1)?;
        for (i, b) in bytes.iter().enumerate() {
            // SAFETY: in bounds by `checked`; byte writes need no alignment.
            unsafe { p.add(i).write_volatile(*b) };
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at `offset` (volatile: the GPU may be writing).
    ///
    /// `&mut self` for the same reason as [`Allocation::write_bytes`].
    pub fn read_bytes(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        let p = self.checked(offset, out.len() as u64, 1)?;
        for (i, b) in out.iter_mut().enumerate() {
            // SAFETY: in bounds by `checked`.
            *b = unsafe { p.add(i).read_volatile() };
        }
        Ok(())
    }
}

struct CpuGuard(Option<CpuView>);

impl Drop for CpuGuard {
    fn drop(&mut self) {
        if let Some(CpuView::Raw { ptr, len, .. }) = self.0.take()
            && len > 0
        {
            // SAFETY: we created this mapping of `len` bytes and nothing references it anymore.
            if let Err(e) = unsafe { nix::sys::mman::munmap(ptr, len) } {
                tracing::warn!(error = %e, "munmap of a GPU buffer view failed");
            }
        }
    }
}

impl Drop for Allocation<'_> {
    fn drop(&mut self) {
        match self.release() {
            Ok(()) => drop(self.take_cpu()),
            Err(e) => {
                let what = Leaked::Allocation {
                    handle: self.handle,
                    va: self.va,
                    size: self.size,
                };
                self.kfd.leaked(Leak::new(what, &e));
                // The GPU may still reach this memory: the CPU view stays mapped for good.
                std::mem::forget(self.take_cpu());
            }
        }
    }
}
