//! The per-(process, GPU) doorbell page: mapped once from `/dev/kfd`, shared by every queue.
#![allow(unsafe_code)]

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::device::Kfd;
use super::error::{Error, Result};
use super::types::GpuId;

/// Size of a process's doorbell slice on gfx9 (1024 doorbells of 8 bytes).
pub const DOORBELL_PAGE_SIZE: u64 = 8192;

/// A mapped doorbell slice.
#[derive(Debug)]
pub struct DoorbellPage {
    map: memmap2::MmapRaw,
    mmap_offset: u64,
}

impl DoorbellPage {
    /// The mmap offset this page was mapped at.
    pub fn mmap_offset(&self) -> u64 {
        self.mmap_offset
    }

    /// Rings the 64-bit doorbell at `offset_in_page` with `value` (the new AQL write index).
    pub fn ring(&self, offset_in_page: u64, value: u64) -> Result<()> {
        if offset_in_page % 8 != 0
            || offset_in_page
                .checked_add(8)
                .is_none_or(|end| end > DOORBELL_PAGE_SIZE)
        {
            return Err(Error::InvalidArgument(format!(
                "doorbell offset {offset_in_page:#x} is not an 8-byte slot of the page"
            )));
        }
        // SAFETY: in bounds and 8-byte aligned (checked above); the mapping lives as long as self.
        let cell =
            unsafe { &*(self.map.as_mut_ptr().add(offset_in_page as usize) as *const AtomicU64) };
        cell.store(value, Ordering::Release);
        Ok(())
    }
}

impl Kfd {
    /// The doorbell page of `gpu` for a queue whose CREATE_QUEUE returned `doorbell_offset`;
    /// mapped on first use, then shared. Returns the page and the queue's offset in it.
    pub(crate) fn doorbell_page(
        &self,
        gpu: GpuId,
        doorbell_offset: u64,
    ) -> Result<(Arc<DoorbellPage>, u64)> {
        let in_page = doorbell_offset & (DOORBELL_PAGE_SIZE - 1);
        let base = doorbell_offset & !(DOORBELL_PAGE_SIZE - 1);
        let mut vms = self.vms();
        let vm = vms.get_mut(&gpu).ok_or(Error::UnknownGpu(gpu))?;
        if let Some(page) = &vm.doorbells
            && page.mmap_offset == base
        {
            return Ok((Arc::clone(page), in_page));
        }
        let map = memmap2::MmapOptions::new()
            .offset(base)
            .len(DOORBELL_PAGE_SIZE as usize)
            .map_raw(self.as_raw_fd())
            .map_err(|source| Error::Mmap {
                what: "doorbell page",
                source,
            })?;
        let page = Arc::new(DoorbellPage {
            map,
            mmap_offset: base,
        });
        vm.doorbells = Some(Arc::clone(&page));
        Ok((page, in_page))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> DoorbellPage {
        let map = memmap2::MmapOptions::new()
            .len(DOORBELL_PAGE_SIZE as usize)
            .map_anon()
            .expect("anonymous mapping");
        DoorbellPage {
            map: memmap2::MmapRaw::from(map),
            mmap_offset: 0,
        }
    }

    #[test]
    fn only_aligned_slots_inside_the_page_ring() {
        let p = page();
        p.ring(DOORBELL_PAGE_SIZE - 8, 7).unwrap();
        // SAFETY: the last slot of the 8 KiB mapping, aligned; written just above.
        let v =
            unsafe { (p.map.as_ptr().add(DOORBELL_PAGE_SIZE as usize - 8) as *const u64).read() };
        assert_eq!(v, 7);
        for bad in [3, DOORBELL_PAGE_SIZE, u64::MAX - 7, !7] {
            let e = p.ring(bad, 1).unwrap_err();
            assert!(e.to_string().contains("8-byte slot"), "{bad:#x}: {e}");
        }
    }
}
