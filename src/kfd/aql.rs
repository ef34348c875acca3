//! AQL packets (HSA architected queuing language) and completion signals.

use serde::Serialize;

use super::device::Kfd;
use super::error::Result;
use super::ids::GpuId;
use super::memory::{AllocFlags, Allocation};

/// Bytes per AQL packet.
pub const PACKET_SIZE: u64 = 64;

/// Whether a queue is busy: its write index is above its read index, i.e. packets were written
/// that the packet processor has not consumed yet. Both indexes count packets from the queue's
/// creation and only grow (HSA runtime specification, "Architected Queuing Language": the
/// producer advances the write index, the packet processor the read index). The one definition
/// the shim's samples and the agent's tracer use.
pub fn busy(write_index: u64, read_index: u64) -> bool {
    write_index > read_index
}

/// `hsa_packet_type_t` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[repr(u8)]
pub enum PacketType {
    /// Vendor-specific.
    Vendor = 0,
    /// Not yet valid; the packet processor waits on it.
    Invalid = 1,
    /// Kernel dispatch.
    KernelDispatch = 2,
    /// Barrier (AND of dependency signals).
    BarrierAnd = 3,
    /// Agent dispatch.
    AgentDispatch = 4,
    /// Barrier (OR of dependency signals).
    BarrierOr = 5,
}

/// Header bit: wait for preceding packets to complete before launching.
pub const HEADER_BARRIER: u16 = 1 << 8;
const ACQUIRE_SHIFT: u16 = 9;
const RELEASE_SHIFT: u16 = 11;
/// Fence scope "system".
pub const FENCE_SCOPE_SYSTEM: u16 = 2;

/// A kernel-dispatch packet (`hsa_kernel_dispatch_packet_t`, 64 bytes).
///
/// On kfd-emu, `reserved2` carries the modelled duration in nanoseconds (0 = the emulator's
/// default); real hardware ignores it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchPacket {
    /// Packet header (type, barrier, fence scopes).
    pub header: u16,
    /// Grid dimensions (1..=3) in bits 0..1.
    pub setup: u16,
    /// Work-group size.
    pub workgroup_size: [u16; 3],
    /// Grid size in work-items.
    pub grid_size: [u32; 3],
    /// Private segment bytes per work-item.
    pub private_segment_size: u32,
    /// Group segment bytes per work-group.
    pub group_segment_size: u32,
    /// Kernel code object address.
    pub kernel_object: u64,
    /// Kernel arguments address.
    pub kernarg_address: u64,
    /// Reserved; kfd-emu's modelled duration in ns.
    pub reserved2: u64,
    /// Completion signal (address of an `amd_signal_t`), 0 for none.
    pub completion_signal: u64,
}

impl DispatchPacket {
    /// A 1-D dispatch of `grid` work-items in groups of `group`, with the barrier bit and system
    /// fences, as HIP issues them.
    pub fn new(kernel_object: u64, grid: u32, group: u16) -> Self {
        DispatchPacket {
            header: (PacketType::KernelDispatch as u16)
                | HEADER_BARRIER
                | (FENCE_SCOPE_SYSTEM << ACQUIRE_SHIFT)
                | (FENCE_SCOPE_SYSTEM << RELEASE_SHIFT),
            setup: 1,
            workgroup_size: [group, 1, 1],
            grid_size: [grid, 1, 1],
            kernel_object,
            ..Default::default()
        }
    }

    /// Sets the modelled duration (kfd-emu).
    pub fn with_duration_ns(mut self, ns: u64) -> Self {
        self.reserved2 = ns;
        self
    }

    /// Sets the completion signal.
    pub fn with_signal(mut self, signal: &Signal<'_>) -> Self {
        self.completion_signal = signal.address();
        self
    }

    /// The packet as the ring holds it (little endian). Bytes 0..4 (header + setup) are
    /// published last by the submitter.
    pub fn to_bytes(&self) -> [u8; PACKET_SIZE as usize] {
        let mut b = [0u8; PACKET_SIZE as usize];
        let mut put = |off: usize, v: &[u8]| b[off..off + v.len()].copy_from_slice(v);
        put(0, &self.header.to_le_bytes());
        put(2, &self.setup.to_le_bytes());
        put(4, &self.workgroup_size[0].to_le_bytes());
        put(6, &self.workgroup_size[1].to_le_bytes());
        put(8, &self.workgroup_size[2].to_le_bytes());
        put(12, &self.grid_size[0].to_le_bytes());
        put(16, &self.grid_size[1].to_le_bytes());
        put(20, &self.grid_size[2].to_le_bytes());
        put(24, &self.private_segment_size.to_le_bytes());
        put(28, &self.group_segment_size.to_le_bytes());
        put(32, &self.kernel_object.to_le_bytes());
        put(40, &self.kernarg_address.to_le_bytes());
        put(48, &self.reserved2.to_le_bytes());
        put(56, &self.completion_signal.to_le_bytes());
        b
    }

    /// Header and setup as the 32-bit word at the packet's start.
    pub fn header_word(&self) -> u32 {
        u32::from(self.header) | (u32::from(self.setup) << 16)
    }
}

/// `amd_signal_t` offsets.
const SIGNAL_KIND: u64 = 0;
const SIGNAL_VALUE: u64 = 8;
/// `amd_signal_t.start_ts` and `end_ts` (ROCr `inc/amd_hsa_signal.h`): GPU counter ticks the CP
/// writes when a packet of a queue with profiling enabled starts and ends.
const SIGNAL_START_TS: u64 = 0x20;
const SIGNAL_END_TS: u64 = 0x28;
/// `AMD_SIGNAL_KIND_USER`.
const SIGNAL_KIND_USER: u64 = 1;

/// A completion signal in GPU-visible memory: the packet processor decrements its value when a
/// packet that names it completes.
#[derive(Debug)]
pub struct Signal<'k> {
    mem: Allocation<'k>,
}

impl<'k> Signal<'k> {
    /// A user signal on `gpu` with `initial` value.
    pub fn new(kfd: &'k Kfd, gpu: GpuId, initial: i64) -> Result<Self> {
        let mem = kfd.alloc_userptr(gpu, 4096, AllocFlags::WRITABLE | AllocFlags::UNCACHED)?;
        mem.atomic_u64(SIGNAL_KIND)?
            .store(SIGNAL_KIND_USER, std::sync::atomic::Ordering::Release);
        let s = Signal { mem };
        s.set(initial)?;
        Ok(s)
    }

    /// Address to put in `completion_signal`.
    pub fn address(&self) -> u64 {
        self.mem.va()
    }

    /// Current value.
    pub fn value(&self) -> Result<i64> {
        Ok(self
            .mem
            .atomic_u64(SIGNAL_VALUE)?
            .load(std::sync::atomic::Ordering::Acquire) as i64)
    }

    /// The (start, end) GPU counter ticks the CP wrote for the last packet that completed this
    /// signal on a queue with profiling enabled ([`super::Queue::enable_profiling`]); (0, 0)
    /// before any.
    pub fn timestamps(&self) -> Result<(u64, u64)> {
        let load = |off| -> Result<u64> {
            Ok(self
                .mem
                .atomic_u64(off)?
                .load(std::sync::atomic::Ordering::Acquire))
        };
        Ok((load(SIGNAL_START_TS)?, load(SIGNAL_END_TS)?))
    }

    /// Sets the value.
    pub fn set(&self, v: i64) -> Result<()> {
        self.mem
            .atomic_u64(SIGNAL_VALUE)?
            .store(v as u64, std::sync::atomic::Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_busy_while_packets_wait() {
        assert!(busy(5, 2));
        assert!(!busy(5, 5), "all consumed");
        assert!(!busy(0, 0), "never used");
        assert!(
            !busy(2, 5),
            "a read index ahead (a torn or stale sample) is not work"
        );
    }

    #[test]
    fn dispatch_packet_layout() {
        let p = DispatchPacket::new(0x1122_3344_5566_7788, 256, 64).with_duration_ns(5000);
        let b = p.to_bytes();
        assert_eq!(b[0], PacketType::KernelDispatch as u8);
        assert_eq!(
            u16::from_le_bytes([b[0], b[1]]) & HEADER_BARRIER,
            HEADER_BARRIER
        );
        assert_eq!(u32::from_le_bytes(b[12..16].try_into().unwrap()), 256);
        assert_eq!(
            u64::from_le_bytes(b[32..40].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
        assert_eq!(u64::from_le_bytes(b[48..56].try_into().unwrap()), 5000);
        assert_eq!(p.header_word() & 0xffff, u32::from(p.header));
    }
}
