//! The `/dev/kfd` mmap offset space: doorbell pages and the MMIO remap page of each GPU node,
//! encoded like the kernel's `KFD_MMAP_TYPE_* | KFD_MMAP_GPU_ID(gpu_id)`, and which offsets a
//! mapping may touch.
//!
//! FUSE cannot refuse an `mmap` (it never reaches the server), so an offset the kernel's
//! `kfd_mmap` refuses is refused when the mapping is first touched: the read fails and the
//! client gets SIGBUS instead of the kernel's `EINVAL` from `mmap`.

use crate::config::Topology;
use crate::state::PAGE;

/// Bit position of the mmap type (`KFD_MMAP_TYPE_SHIFT`).
const TYPE_SHIFT: u64 = 62;
/// Emulator doorbell mmap type (the kernel uses 3 << 62; FUSE refuses offsets >= 2^63).
const TYPE_DOORBELL: u64 = 1 << TYPE_SHIFT;
/// The kernel's MMIO type (0 << 62).
const TYPE_MMIO: u64 = 0;
/// Bit position of the gpu id (`KFD_MMAP_GPU_ID_SHIFT`).
const GPU_ID_SHIFT: u64 = 46;
/// Bytes per doorbell on gfx9.
const DOORBELL_SIZE: u64 = 8;
/// Doorbell bytes of one process on one device (1024 doorbells of 8 bytes).
const DOORBELL_PROCESS_BYTES: u64 = 1024 * DOORBELL_SIZE;

/// The doorbell mmap offset of doorbell `index` of a node.
pub(crate) fn doorbell_offset(gpu_id: u32, index: u32) -> u64 {
    TYPE_DOORBELL | (u64::from(gpu_id) << GPU_ID_SHIFT) | (u64::from(index) * DOORBELL_SIZE)
}

/// The mmap offset of a node's MMIO remap page.
pub(crate) fn mmio_offset(gpu_id: u32) -> u64 {
    TYPE_MMIO | (u64::from(gpu_id) << GPU_ID_SHIFT)
}

/// Whether `[offset, offset + len)` lies inside one doorbell range or MMIO page of an existing
/// node (what the kernel's `kfd_mmap` accepts for those types).
pub(crate) fn valid(topo: &Topology, offset: u64, len: u64) -> bool {
    let gpu_id = ((offset & ((1 << TYPE_SHIFT) - 1)) >> GPU_ID_SHIFT) as u32;
    if topo.gpu_index(gpu_id).is_none() {
        return false;
    }
    let Some(end) = offset.checked_add(len) else {
        return false;
    };
    let within = |base: u64, size: u64| offset >= base && end <= base + size;
    within(doorbell_offset(gpu_id, 0), DOORBELL_PROCESS_BYTES) || within(mmio_offset(gpu_id), PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::EmuConfig;

    #[test]
    fn doorbell_and_mmio_ranges_only() {
        let topo = Topology::build(&EmuConfig::default()).unwrap();
        let id = topo.gpus[0].gpu_id;
        assert!(valid(&topo, doorbell_offset(id, 0), 4096));
        assert!(valid(&topo, doorbell_offset(id, 512), 4096));
        assert!(!valid(&topo, doorbell_offset(id, 1023), 4096));
        assert!(valid(&topo, mmio_offset(id), 4096));
        assert!(!valid(&topo, mmio_offset(id), 8192));
        assert!(!valid(&topo, mmio_offset(id) + 4096, 4096));
        assert!(!valid(&topo, 0, 4096));
        assert!(!valid(&topo, doorbell_offset(id + 77, 0), 4096));
    }
}
