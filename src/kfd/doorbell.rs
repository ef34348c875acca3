//! The per-(process, GPU) doorbell page: mapped once from `/dev/kfd`, shared by every queue.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;

use super::error::{Error, Result};

/// Size of a process's doorbell slice on gfx9 (1024 doorbells of 8 bytes).
pub const DOORBELL_PAGE_SIZE: u64 = 8192;

/// A mapped doorbell slice.
#[derive(Debug)]
pub struct DoorbellPage {
    map: memmap2::MmapRaw,
    mmap_offset: u64,
}

impl DoorbellPage {
    /// Maps the doorbell slice at mmap offset `base` (a multiple of [`DOORBELL_PAGE_SIZE`]) of
    /// the `/dev/kfd` file `kfd`.
    pub(crate) fn map(kfd: BorrowedFd<'_>, base: u64) -> Result<DoorbellPage> {
        let map = memmap2::MmapOptions::new()
            .offset(base)
            .len(DOORBELL_PAGE_SIZE as usize)
            .map_raw(kfd.as_raw_fd())
            .map_err(|source| Error::Mmap {
                what: "doorbell page",
                source,
            })?;
        Ok(DoorbellPage {
            map,
            mmap_offset: base,
        })
    }

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
            return Err(Error::invalid(
                Errno::EINVAL,
                format!("doorbell offset {offset_in_page:#x} is not an 8-byte slot of the page"),
            ));
        }
        // SAFETY: in bounds and 8-byte aligned (checked above); the mapping lives as long as self.
        let cell =
            unsafe { &*(self.map.as_mut_ptr().add(offset_in_page as usize) as *const AtomicU64) };
        cell.store(value, Ordering::Release);
        Ok(())
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
