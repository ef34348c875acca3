//! User-mode compute queues: create with buffers that satisfy the Linux 6.12 exact-size rules,
//! reprioritize, deactivate/activate, CU masks, wave state, submit, destroy.
//!
//! Buffers (each its own allocation, CPU VA == GPU VA):
//! * ring: `ring_size` bytes, USERPTR;
//! * pointer page: one 4 KiB USERPTR page holding the 64-bit write index at 0 and the read
//!   index at 64 (the kernel wants each pointer's page to be the first page of a 4 KiB mapping);
//! * EOP: none for AQL on gfx94x (libhsakmt's rule); 4 KiB of VRAM otherwise;
//! * CWSR: `ALIGN((cwsr + debug) x num_xcc, 4096)` bytes with one header per XCC.
#![allow(unsafe_code)]

use std::mem::ManuallyDrop;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kfd_sys as sys;
use kfd_sys::zerocopy::IntoBytes;
use serde::Serialize;

use super::aql::{DispatchPacket, PACKET_SIZE};
use super::device::Kfd;
use super::doorbell::DoorbellPage;
use nix::errno::Errno;

use super::error::{Error, Result};
use super::ids::{GpuId, QueueId};
use super::ioctl;
use super::leak::{Leak, Leaked};
use super::memory::{AllocFlags, Allocation, PAGE_SIZE};
use super::types::{CuMask, Percentage, Priority, QueueKind};

/// Offset of the 64-bit write index in the pointer page.
pub const WRITE_INDEX_OFFSET: u64 = 0;
/// Offset of the 64-bit read index in the pointer page.
pub const READ_INDEX_OFFSET: u64 = 64;
/// `amd_queue_t.queue_properties` relative to the read pointer, which the runtime gives
/// CREATE_QUEUE as `&amd_queue_t.read_dispatch_id` (bytes 180 and 128 of ROCr's
/// `inc/amd_hsa_queue.h`), and its `AMD_QUEUE_PROPERTIES_ENABLE_PROFILING` bit.
const QUEUE_PROPERTIES_FROM_READ_INDEX: u64 = 180 - 128;
const QUEUE_PROPERTIES_ENABLE_PROFILING: u32 = 1 << 3;

/// Default ring: 64 KiB = 1024 AQL packets.
pub const DEFAULT_RING_SIZE: u32 = 64 * 1024;

/// What queue to create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSpec {
    /// Target GPU node.
    pub gpu: GpuId,
    /// AQL or PM4.
    pub kind: QueueKind,
    /// KFD priority.
    pub priority: Priority,
    /// Start active (percentage 100) or inactive (0).
    pub active: bool,
    /// Ring bytes (power of two, >= 4096 so the ring is its own GPU page).
    pub ring_size: u32,
}

impl QueueSpec {
    /// An active AQL queue at NORMAL priority with a 64 KiB ring.
    pub fn aql(gpu: GpuId) -> Self {
        QueueSpec {
            gpu,
            kind: QueueKind::ComputeAql,
            priority: Priority::NORMAL,
            active: true,
            ring_size: DEFAULT_RING_SIZE,
        }
    }

    /// Same, with priority `p`.
    pub fn priority(mut self, p: Priority) -> Self {
        self.priority = p;
        self
    }

    /// Same, with queue kind `k`.
    pub fn kind(mut self, k: QueueKind) -> Self {
        self.kind = k;
        self
    }

    /// Same, created inactive.
    pub fn inactive(mut self) -> Self {
        self.active = false;
        self
    }

    /// Same, with a ring of `bytes`.
    pub fn ring_size(mut self, bytes: u32) -> Self {
        self.ring_size = bytes;
        self
    }

    fn validate(&self) -> Result<()> {
        if !self.ring_size.is_power_of_two() || u64::from(self.ring_size) < PAGE_SIZE {
            return Err(Error::invalid(
                Errno::EINVAL,
                format!(
                    "ring size {} must be a power of two of at least 4096 bytes",
                    self.ring_size
                ),
            ));
        }
        Ok(())
    }
}

/// Wave state of an inactive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaveState {
    /// Control-stack bytes in use (XCC 0).
    pub ctl_stack_used_size: u32,
    /// Save-area bytes in use (XCC 0).
    pub save_area_used_size: u32,
}

/// The memory a queue's GPU side uses, released only once the kernel destroyed the queue.
#[derive(Debug)]
struct Buffers<'k> {
    ring: Allocation<'k>,
    pointers: Allocation<'k>,
    cwsr: Allocation<'k>,
    eop: Option<Allocation<'k>>,
}

impl Buffers<'_> {
    /// Leaves every buffer to the kernel (which kept their queue); returns (buffers, bytes).
    fn leak(self) -> (usize, u64) {
        let all = [
            Some(self.ring),
            Some(self.pointers),
            Some(self.cwsr),
            self.eop,
        ];
        let mut n = (0, 0);
        for a in all.into_iter().flatten() {
            n = (n.0 + 1, n.1 + a.size());
            a.leak();
        }
        n
    }

    /// Leaves the buffers of queue `id` to the kernel after its DESTROY_QUEUE failed with
    /// `error`, and reports it once.
    fn leave_to_kernel(self, kfd: &Kfd, id: QueueId, gpu: GpuId, error: &Error) {
        let (buffers, bytes) = self.leak();
        let what = Leaked::Queue {
            id,
            gpu,
            buffers,
            bytes,
        };
        kfd.leaked(Leak::new(what, error));
    }
}

/// A KFD user-mode queue of this process, destroyed on drop.
///
/// Its buffers are released only after the kernel destroyed the queue: when DESTROY_QUEUE fails
/// the queue and its buffers are left to the kernel, mapped and never reused, and reported once
/// ([`Kfd::leaks`], `leak.rs`).
#[derive(Debug)]
pub struct Queue<'k> {
    kfd: &'k Kfd,
    id: QueueId,
    gpu: GpuId,
    kind: QueueKind,
    priority: Priority,
    percentage: Percentage,
    cu_mask: Option<CuMask>,
    doorbell: Arc<DoorbellPage>,
    doorbell_in_page: u64,
    doorbell_offset: u64,
    destroyed: bool,
    /// Dropped by `Drop` only after a successful DESTROY_QUEUE, leaked otherwise.
    buffers: ManuallyDrop<Buffers<'k>>,
}

impl Kfd {
    /// Creates a compute queue on `spec.gpu` (ACQUIRE_VM is done if it was not).
    ///
    /// Allocates the ring, pointer page, CWSR area (and EOP where the GPU needs one) as
    /// the kernel's buffer rules ask (docs/kernel-interface.md §2), maps the doorbell page on
    /// first use, then issues CREATE_QUEUE. Kernel: `kfd_ioctl_create_queue` (`kfd_chardev.c`),
    /// request `AMDKFD_IOC_CREATE_QUEUE` ([`super::ioctl::create_queue`]); the doorbell page is
    /// an mmap of `/dev/kfd` (`kfd_mmap` -> `kfd_doorbell_mmap`).
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kfdq::kfd::{Kfd, Priority, QueueSpec, Root};
    ///
    /// let kfd = Kfd::open(&Root::from_env())?;
    /// let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).expect("a GPU");
    /// let q = kfd.create_queue(QueueSpec::aql(gpu).priority(Priority::HIGH))?;
    /// println!("{} on {}: doorbell offset {:#x}", q.id(), q.gpu(), q.doorbell_offset());
    /// q.destroy()?; // or drop it
    /// # Ok::<(), kfdq::kfd::Error>(())
    /// ```
    pub fn create_queue(&self, spec: QueueSpec) -> Result<Queue<'_>> {
        spec.validate()?;
        let node = self.gpu(spec.gpu)?;
        self.acquire_vm(spec.gpu)?;
        let sizes = node.cwsr_sizes()?;
        let rw = AllocFlags::WRITABLE;
        let ring = self.alloc_userptr(
            spec.gpu,
            u64::from(spec.ring_size),
            rw | AllocFlags::EXECUTABLE,
        )?;
        let pointers = self.alloc_userptr(spec.gpu, PAGE_SIZE, rw | AllocFlags::UNCACHED)?;
        let mut cwsr = self.alloc_userptr(spec.gpu, sizes.total(), rw)?;
        for xcc in 0..sizes.num_xcc {
            let h = sizes.header(xcc);
            cwsr.write_bytes(u64::from(xcc) * sizes.cwsr_size, h.as_bytes())?;
        }
        let eop = if spec.kind == QueueKind::ComputeAql && node.is_gfx94x() {
            None
        } else {
            Some(self.alloc(spec.gpu, sizes.eop_buffer_size, AllocFlags::VRAM | rw)?)
        };
        let percentage = if spec.active {
            Percentage::FULL
        } else {
            Percentage::OFF
        };
        let mut args = sys::kfd_ioctl_create_queue_args {
            ring_base_address: ring.va(),
            write_pointer_address: pointers.va() + WRITE_INDEX_OFFSET,
            read_pointer_address: pointers.va() + READ_INDEX_OFFSET,
            ring_size: spec.ring_size,
            gpu_id: spec.gpu.0,
            queue_type: spec.kind.raw(),
            queue_percentage: percentage.get(),
            queue_priority: spec.priority.get(),
            eop_buffer_address: eop.as_ref().map_or(0, |e| e.va()),
            eop_buffer_size: eop.as_ref().map_or(0, |e| e.size()),
            ctx_save_restore_address: cwsr.va(),
            ctx_save_restore_size: sizes.cwsr_size as u32,
            ctl_stack_size: sizes.ctl_stack_size as u32,
            ..Default::default()
        };
        let buffers = Buffers {
            ring,
            pointers,
            cwsr,
            eop,
        };
        // SAFETY: every buffer named in `args` is in `buffers`, which from here on is released
        // only after a DESTROY_QUEUE of the queue succeeded (below, or the returned Queue's Drop)
        // and is leaked otherwise.
        unsafe { ioctl::create_queue(self.as_fd(), &mut args)? };
        let id = QueueId(args.queue_id);
        let (doorbell, doorbell_in_page) = match self.doorbell_page(spec.gpu, args.doorbell_offset)
        {
            Ok(d) => d,
            Err(e) => {
                // Do not leak the kernel queue when the doorbell cannot be mapped; if the kernel
                // will not destroy it, its buffers stay with it.
                if let Err(d) = ioctl::destroy_queue(self.as_fd(), id) {
                    buffers.leave_to_kernel(self, id, spec.gpu, &d);
                }
                return Err(e);
            }
        };
        tracing::debug!(queue = id.0, gpu = %spec.gpu, priority = spec.priority.get(), "created queue");
        Ok(Queue {
            kfd: self,
            id,
            gpu: spec.gpu,
            kind: spec.kind,
            priority: spec.priority,
            percentage,
            cu_mask: None,
            doorbell,
            doorbell_in_page,
            doorbell_offset: args.doorbell_offset,
            destroyed: false,
            buffers: ManuallyDrop::new(buffers),
        })
    }
}

impl<'k> Queue<'k> {
    /// KFD queue id.
    pub fn id(&self) -> QueueId {
        self.id
    }

    /// GPU node.
    pub fn gpu(&self) -> GpuId {
        self.gpu
    }

    /// AQL or PM4.
    pub fn kind(&self) -> QueueKind {
        self.kind
    }

    /// Current KFD priority.
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// True unless deactivated with [`Queue::deactivate`].
    pub fn is_active(&self) -> bool {
        self.percentage.get() > 0
    }

    /// The CU mask last set, if any.
    pub fn cu_mask(&self) -> Option<&CuMask> {
        self.cu_mask.as_ref()
    }

    /// The `doorbell_offset` CREATE_QUEUE returned.
    pub fn doorbell_offset(&self) -> u64 {
        self.doorbell_offset
    }

    /// Ring GPU address.
    pub fn ring_address(&self) -> u64 {
        self.buffers.ring.va()
    }

    /// Ring bytes.
    pub fn ring_size(&self) -> u32 {
        self.buffers.ring.size() as u32
    }

    /// Address of the 64-bit write index.
    pub fn write_pointer_address(&self) -> u64 {
        self.buffers.pointers.va() + WRITE_INDEX_OFFSET
    }

    /// Address of the 64-bit read index.
    pub fn read_pointer_address(&self) -> u64 {
        self.buffers.pointers.va() + READ_INDEX_OFFSET
    }

    /// CWSR area address.
    pub fn cwsr_address(&self) -> u64 {
        self.buffers.cwsr.va()
    }

    /// Whether an EOP buffer was allocated (none for AQL on gfx94x).
    pub fn has_eop(&self) -> bool {
        self.buffers.eop.is_some()
    }

    fn update(&mut self, percentage: Percentage, priority: Priority) -> Result<()> {
        let args = sys::kfd_ioctl_update_queue_args {
            ring_base_address: self.buffers.ring.va(),
            queue_id: self.id.0,
            ring_size: self.ring_size(),
            queue_percentage: percentage.get(),
            queue_priority: priority.get(),
        };
        // SAFETY: the ring is this queue's own, owned by `self` until the queue is destroyed.
        unsafe { ioctl::update_queue(self.kfd.as_fd(), &args)? };
        self.percentage = percentage;
        self.priority = priority;
        Ok(())
    }

    /// Sets the KFD priority (UPDATE_QUEUE with the same ring and percentage). A device-wide
    /// preempt of the partition.
    ///
    /// Kernel: `kfd_ioctl_update_queue` (`kfd_chardev.c`), request `AMDKFD_IOC_UPDATE_QUEUE`
    /// ([`super::ioctl::update_queue`]); the pipe priority it programs is in
    /// [`Priority::pipe_priority`].
    pub fn set_priority(&mut self, priority: Priority) -> Result<()> {
        self.update(self.percentage, priority)
    }

    /// Deactivates the queue (percentage 0): it is unmapped and its waves are CWSR-saved.
    ///
    /// Kernel: `kfd_ioctl_update_queue` (`kfd_chardev.c`), request `AMDKFD_IOC_UPDATE_QUEUE`
    /// with `queue_percentage` 0: the queue no longer counts as active (`QUEUE_IS_ACTIVE`,
    /// `kfd_priv.h`) and leaves the runlist. A device-wide preempt of the
    /// partition, as ROCr's `AqlQueue::Suspend` does it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use kfdq::kfd::{Kfd, QueueSpec, Root};
    ///
    /// let kfd = Kfd::open(&Root::from_env())?;
    /// let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).expect("a GPU");
    /// let mut q = kfd.create_queue(QueueSpec::aql(gpu))?;
    /// q.deactivate()?;
    /// assert!(!q.is_active());
    /// let waves = q.wave_state()?; // only for an inactive queue
    /// println!("control stack {} bytes", waves.ctl_stack_used_size);
    /// q.activate()?;
    /// # Ok::<(), kfdq::kfd::Error>(())
    /// ```
    pub fn deactivate(&mut self) -> Result<()> {
        self.update(Percentage::OFF, self.priority)
    }

    /// Reactivates the queue (percentage 100).
    ///
    /// Kernel: `kfd_ioctl_update_queue` (`kfd_chardev.c`), request `AMDKFD_IOC_UPDATE_QUEUE`
    /// with `queue_percentage` 100.
    pub fn activate(&mut self) -> Result<()> {
        self.update(Percentage::FULL, self.priority)
    }

    /// Restricts the queue to the CUs in `mask`.
    ///
    /// Kernel: `kfd_ioctl_set_cu_mask` (`kfd_chardev.c`), request `AMDKFD_IOC_SET_CU_MASK`
    /// ([`super::ioctl::set_cu_mask`]).
    pub fn set_cu_mask(&mut self, mask: CuMask) -> Result<()> {
        ioctl::set_cu_mask(self.kfd.as_fd(), self.id, mask.words())?;
        self.cu_mask = Some(mask);
        Ok(())
    }

    /// Control-stack and save-area usage of an inactive queue (the kernel copies the control
    /// stack into the queue's CWSR area).
    ///
    /// Kernel: `kfd_ioctl_get_queue_wave_state` (`kfd_chardev.c`), request
    /// `AMDKFD_IOC_GET_QUEUE_WAVE_STATE` ([`super::ioctl::get_queue_wave_state`]).
    pub fn wave_state(&self) -> Result<WaveState> {
        // SAFETY: the CWSR area is owned by this queue and sized for every XCC's control stack.
        let (ctl, save) = unsafe {
            ioctl::get_queue_wave_state(self.kfd.as_fd(), self.id, self.buffers.cwsr.va())?
        };
        Ok(WaveState {
            ctl_stack_used_size: ctl,
            save_area_used_size: save,
        })
    }

    /// Asks the packet processor for each packet's start and end timestamps (GPU counter ticks),
    /// written to its completion signal ([`super::Signal::timestamps`]): sets
    /// `AMD_QUEUE_PROPERTIES_ENABLE_PROFILING` where ROCr keeps it, in the `amd_queue_t` whose
    /// `read_dispatch_id` is this queue's read pointer (ROCr's `AqlQueue::SetProfiling`).
    pub fn enable_profiling(&mut self) -> Result<()> {
        let off = READ_INDEX_OFFSET + QUEUE_PROPERTIES_FROM_READ_INDEX;
        self.buffers
            .pointers
            .atomic_u32(off)?
            .fetch_or(QUEUE_PROPERTIES_ENABLE_PROFILING, Ordering::AcqRel);
        Ok(())
    }

    /// Packets the ring holds.
    pub fn capacity(&self) -> u64 {
        u64::from(self.ring_size()) / PACKET_SIZE
    }

    /// The write index (next packet slot to fill).
    pub fn write_index(&self) -> Result<u64> {
        Ok(self
            .buffers
            .pointers
            .atomic_u64(WRITE_INDEX_OFFSET)?
            .load(Ordering::Acquire))
    }

    /// The read index (packets the GPU has consumed).
    pub fn read_index(&self) -> Result<u64> {
        Ok(self
            .buffers
            .pointers
            .atomic_u64(READ_INDEX_OFFSET)?
            .load(Ordering::Acquire))
    }

    /// Writes `packet` to the next slot, publishes its header last, advances the write index
    /// and rings the doorbell. Returns the packet's index.
    ///
    /// `&mut self`: one submitter at a time (the write index and the ring slots are not
    /// claimed atomically). No system call: the packet processor reads the ring after the
    /// doorbell write to the page mapped from `/dev/kfd`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use kfdq::kfd::{DispatchPacket, Kfd, QueueSpec, Root, Signal};
    ///
    /// let kfd = Kfd::open(&Root::from_env())?;
    /// let gpu = kfd.topology().gpus().next().and_then(|n| n.gpu_id).expect("a GPU");
    /// let mut q = kfd.create_queue(QueueSpec::aql(gpu))?;
    /// let done = Signal::new(&kfd, gpu, 1)?;
    /// let kernel_object = 0; // the code object's kernel descriptor address
    /// let packet = DispatchPacket::new(kernel_object, 64 * 80, 64).with_signal(&done);
    /// q.submit(&packet)?;
    /// q.wait_idle(Duration::from_secs(1))?;
    /// # Ok::<(), kfdq::kfd::Error>(())
    /// ```
    pub fn submit(&mut self, packet: &DispatchPacket) -> Result<u64> {
        if self.kind != QueueKind::ComputeAql {
            return Err(Error::invalid(
                Errno::EINVAL,
                format!("{} is a PM4 queue; AQL packets need an AQL queue", self.id),
            ));
        }
        let write = self.write_index()?;
        let read = self.read_index()?;
        if write.wrapping_sub(read) >= self.capacity() {
            return Err(Error::RingFull {
                queue: self.id,
                capacity: self.capacity(),
            });
        }
        let off = (write % self.capacity()) * PACKET_SIZE;
        let bytes = packet.to_bytes();
        self.buffers.ring.write_bytes(off + 4, &bytes[4..])?;
        self.buffers
            .ring
            .atomic_u32(off)?
            .store(packet.header_word(), Ordering::Release);
        self.buffers
            .pointers
            .atomic_u64(WRITE_INDEX_OFFSET)?
            .store(write + 1, Ordering::Release);
        self.doorbell.ring(self.doorbell_in_page, write)?;
        Ok(write)
    }

    /// Waits until the GPU has consumed every submitted packet.
    pub fn wait_idle(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.read_index()? >= self.write_index()? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout(timeout, format!("{} to drain", self.id)));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Destroys the queue now, returning the kernel's answer. Blocks while a debugger holds
    /// it suspended. After a failure the drop retries once, and if the kernel refuses again
    /// leaves the queue and its buffers to it.
    ///
    /// Kernel: `kfd_ioctl_destroy_queue` (`kfd_chardev.c`), request `AMDKFD_IOC_DESTROY_QUEUE`
    /// ([`super::ioctl::destroy_queue`]).
    pub fn destroy(mut self) -> Result<()> {
        self.destroy_inner()
    }

    fn destroy_inner(&mut self) -> Result<()> {
        if !self.destroyed {
            ioctl::destroy_queue(self.kfd.as_fd(), self.id)?;
            self.destroyed = true;
        }
        Ok(())
    }
}

impl Drop for Queue<'_> {
    fn drop(&mut self) {
        let destroyed = self.destroy_inner();
        // SAFETY: `drop` runs once and nothing uses `self.buffers` after it.
        let buffers = unsafe { ManuallyDrop::take(&mut self.buffers) };
        match destroyed {
            Ok(()) => drop(buffers),
            Err(e) => buffers.leave_to_kernel(self.kfd, self.id, self.gpu, &e),
        }
    }
}
