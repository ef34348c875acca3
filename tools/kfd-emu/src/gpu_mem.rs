//! Memory as the GPU of a process sees it: a GPU virtual address is the same address in the
//! client (ROCr maps system memory and CPU-visible VRAM at their GPU addresses), and a BO the
//! client has not mapped is reached through the bytes the render node keeps for it.
//!
//! Callers must not hold the state lock: client memory may be render-node pages whose faults
//! and writeback are served by FUSE threads that may be waiting for it; a BO lookup takes the
//! lock briefly.

use crate::client_mem;
use crate::state::{Emu, State};

/// Largest piece moved at once (copies are done in pieces of this size).
pub(crate) const CHUNK: usize = 1 << 20;

/// The GPU virtual memory of process `tgid` on node `gpu`.
pub(crate) struct Vm<'a> {
    pub emu: &'a Emu,
    pub tgid: u32,
    pub gpu: usize,
}

/// The render-node offset of `[addr, addr + len)` when a backed BO mapped on `gpu` covers it.
fn bo_offset(st: &State, tgid: u32, gpu: usize, addr: u64, len: u64) -> Option<u64> {
    let p = st.processes.get(&tgid)?;
    let (_, bo) = p.mapping_at(gpu, addr)?;
    let off = addr - bo.va;
    (bo.backed && off.checked_add(len)? <= bo.size).then_some(bo.mmap_offset + off)
}

impl crate::code_object::GpuMemory for Vm<'_> {
    fn tgid(&self) -> u32 {
        self.tgid
    }

    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
        Vm::read(self, addr, buf)
    }

    fn region_start(&self, addr: u64) -> Option<u64> {
        Vm::region_start(self, addr)
    }
}

impl Vm<'_> {
    fn backing(&self, addr: u64, len: u64) -> Result<u64, i32> {
        bo_offset(&self.emu.lock(), self.tgid, self.gpu, addr, len).ok_or(client_mem::FAULT)
    }

    /// Start of the memory `addr` lies in: the client's mapping, else the BO mapped there on
    /// this node. `None` when the GPU could not reach it either.
    pub fn region_start(&self, addr: u64) -> Option<u64> {
        if let Some(start) = client_mem::mapping_start(self.tgid, addr) {
            return Some(start);
        }
        let st = self.emu.lock();
        let (_, bo) = st.processes.get(&self.tgid)?.mapping_at(self.gpu, addr)?;
        bo.backed.then_some(bo.va)
    }

    /// Reads `buf.len()` bytes at GPU address `addr`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
        if client_mem::read(self.tgid, addr, buf).is_ok() {
            return Ok(());
        }
        let off = self.backing(addr, buf.len() as u64)?;
        buf.copy_from_slice(&self.emu.bos.read(off, buf.len()));
        Ok(())
    }

    /// Writes `data` at GPU address `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), i32> {
        if client_mem::write(self.tgid, addr, data).is_ok() {
            return Ok(());
        }
        let off = self.backing(addr, data.len() as u64)?;
        self.emu.bos.write(off, data);
        Ok(())
    }

    /// Copies `len` bytes from `src` to `dst` (in `CHUNK` pieces, front to back).
    pub fn copy(&self, src: u64, dst: u64, len: u64) -> Result<(), i32> {
        let mut buf = vec![0u8; CHUNK.min(usize::try_from(len).unwrap_or(CHUNK))];
        let mut done = 0u64;
        while done < len {
            let n = (len - done).min(buf.len() as u64) as usize;
            self.read(src.wrapping_add(done), &mut buf[..n])?;
            self.write(dst.wrapping_add(done), &buf[..n])?;
            done += n as u64;
        }
        Ok(())
    }

    /// Fills `len` bytes at `dst` with `pattern` repeated.
    pub fn fill(&self, dst: u64, len: u64, pattern: &[u8]) -> Result<(), i32> {
        if pattern.is_empty() {
            return Ok(());
        }
        // Whole patterns per piece, so every piece starts at the pattern's first byte.
        let n = (CHUNK.min(usize::try_from(len).unwrap_or(CHUNK)) / pattern.len()).max(1)
            * pattern.len();
        let buf: Vec<u8> = pattern.iter().copied().cycle().take(n).collect();
        let mut done = 0u64;
        while done < len {
            let k = (len - done).min(buf.len() as u64) as usize;
            self.write(dst.wrapping_add(done), &buf[..k])?;
            done += k as u64;
        }
        Ok(())
    }
}
