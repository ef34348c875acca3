//! The backing bytes of GTT/VRAM BOs (`Backing`, allocated page by page on first write) and
//! the render node's store of them by mmap offset (`BoStore`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use super::PAGE;

/// Backing bytes of a GTT/VRAM BO, allocated page by page on first write.
pub(crate) struct Backing {
    pub size: u64,
    pages: Mutex<BTreeMap<u64, Box<[u8]>>>,
}

impl Backing {
    pub fn new(size: u64) -> Backing {
        Backing {
            size,
            pages: Mutex::new(BTreeMap::new()),
        }
    }

    fn pages(&self) -> MutexGuard<'_, BTreeMap<u64, Box<[u8]>>> {
        crate::locks::lock(&self.pages, "BO backing")
    }

    /// Copies bytes at `offset` (within the BO) into `out`; unwritten bytes read 0.
    fn read(&self, offset: u64, out: &mut [u8]) {
        let pages = self.pages();
        let mut done = 0usize;
        while done < out.len() {
            let pos = offset + done as u64;
            let (page, inpage) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (PAGE as usize - inpage).min(out.len() - done);
            match pages.get(&page) {
                Some(p) => out[done..done + n].copy_from_slice(&p[inpage..inpage + n]),
                None => out[done..done + n].fill(0),
            }
            done += n;
        }
    }

    /// Stores `data` at `offset` (within the BO).
    fn write(&self, offset: u64, data: &[u8]) {
        let mut pages = self.pages();
        let mut done = 0usize;
        while done < data.len() {
            let pos = offset + done as u64;
            let (page, inpage) = (pos / PAGE, (pos % PAGE) as usize);
            let n = (PAGE as usize - inpage).min(data.len() - done);
            let p = pages
                .entry(page)
                .or_insert_with(|| vec![0u8; PAGE as usize].into_boxed_slice());
            p[inpage..inpage + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
    }
}

/// Render-node offset -> backing store.
#[derive(Default)]
pub(crate) struct BoStore {
    map: RwLock<BTreeMap<u64, Arc<Backing>>>,
}

impl BoStore {
    pub fn insert(&self, offset: u64, backing: Arc<Backing>) {
        crate::locks::write(&self.map, "BO store").insert(offset, backing);
    }

    pub fn remove(&self, offset: u64) {
        crate::locks::write(&self.map, "BO store").remove(&offset);
    }

    /// Visits every (BO, offset in BO, range in the request) overlapping
    /// `[offset, offset + len)`.
    fn overlapping(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(&Backing, u64, std::ops::Range<usize>),
    ) {
        if len == 0 {
            return;
        }
        let map = crate::locks::read(&self.map, "BO store");
        let end = offset.saturating_add(len as u64);
        // The BO starting at or before `offset`, plus all starting inside the range.
        let first = map.range(..=offset).next_back();
        let rest = map.range(offset.saturating_add(1)..end.max(offset.saturating_add(1)));
        for (start, b) in first.into_iter().chain(rest) {
            let bo_end = start.saturating_add(b.size);
            let lo = offset.max(*start);
            let hi = end.min(bo_end);
            if lo < hi {
                let r = (lo - offset) as usize..(hi - offset) as usize;
                f(b, lo - start, r);
            }
        }
    }

    /// Render-node read: BO bytes where a BO lives, zeros elsewhere.
    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        self.read_into(offset, &mut out);
        out
    }

    /// [`BoStore::read`] into `out` (which the caller zeroed), allocating nothing.
    pub fn read_into(&self, offset: u64, out: &mut [u8]) {
        self.overlapping(offset, out.len(), |b, at, r| b.read(at, &mut out[r]));
    }

    /// Render-node write (page-cache writeback of a BO mapping).
    pub fn write(&self, offset: u64, data: &[u8]) {
        self.overlapping(offset, data.len(), |b, at, r| b.write(at, &data[r]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bo_store_reads_across_bos_and_holes() {
        let s = BoStore::default();
        s.insert(8192, Arc::new(Backing::new(4096)));
        s.insert(16384, Arc::new(Backing::new(8192)));
        s.write(8192 + 4090, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        s.write(16384 + 4095, &[42, 43]);
        let r = s.read(8192 + 4088, 12);
        assert_eq!(r, vec![0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 0, 0]);
        let r = s.read(16384 + 4094, 4);
        assert_eq!(r, vec![0, 42, 43, 0]);
        assert_eq!(s.read(0, 3), vec![0, 0, 0]);
    }
}
