//! Access to client (emulated GPU user) memory with `process_vm_readv`/`writev`.
//!
//! Every failure (unmapped range, process gone, partial transfer) is reported as
//! `EFAULT`, the errno the kernel's `copy_from_user`/`copy_to_user` give.

use std::io::{IoSlice, IoSliceMut};

use nix::sys::uio::{RemoteIoVec, process_vm_readv, process_vm_writev};
use nix::unistd::Pid;

/// Errno of a failed client-memory access.
pub(crate) const FAULT: i32 = libc::EFAULT;

fn pid_of(pid: u32) -> Result<Pid, i32> {
    i32::try_from(pid).map(Pid::from_raw).map_err(|_| FAULT)
}

fn remote(addr: u64, len: usize) -> Result<RemoteIoVec, i32> {
    let base = usize::try_from(addr).map_err(|_| FAULT)?;
    base.checked_add(len).ok_or(FAULT)?;
    Ok(RemoteIoVec { base, len })
}

/// Reads `buf.len()` bytes at `addr` of process `pid`.
pub(crate) fn read(pid: u32, addr: u64, buf: &mut [u8]) -> Result<(), i32> {
    if buf.is_empty() {
        return Ok(());
    }
    let len = buf.len();
    let iov = [remote(addr, len)?];
    let mut local = [IoSliceMut::new(buf)];
    match process_vm_readv(pid_of(pid)?, &mut local, &iov) {
        Ok(n) if n == len => Ok(()),
        _ => Err(FAULT),
    }
}

/// Writes `data` at `addr` of process `pid`.
pub(crate) fn write(pid: u32, addr: u64, data: &[u8]) -> Result<(), i32> {
    if data.is_empty() {
        return Ok(());
    }
    let iov = [remote(addr, data.len())?];
    let local = [IoSlice::new(data)];
    match process_vm_writev(pid_of(pid)?, &local, &iov) {
        Ok(n) if n == data.len() => Ok(()),
        _ => Err(FAULT),
    }
}

/// Reads a native-endian `u64`.
pub(crate) fn read_u64(pid: u32, addr: u64) -> Result<u64, i32> {
    let mut b = [0u8; 8];
    read(pid, addr, &mut b)?;
    Ok(u64::from_ne_bytes(b))
}

/// Writes a native-endian `u64`.
pub(crate) fn write_u64(pid: u32, addr: u64, v: u64) -> Result<(), i32> {
    write(pid, addr, &v.to_ne_bytes())
}

/// Reads `n` native-endian `u32`s.
pub(crate) fn read_u32s(pid: u32, addr: u64, n: usize) -> Result<Vec<u32>, i32> {
    let mut b = vec![0u8; n.checked_mul(4).ok_or(FAULT)?];
    read(pid, addr, &mut b)?;
    Ok(b.chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Writes `u32`s as native-endian bytes.
pub(crate) fn write_u32s(pid: u32, addr: u64, vals: &[u32]) -> Result<(), i32> {
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_ne_bytes()).collect();
    write(pid, addr, &bytes)
}

/// Start of the mapping (`/proc/<pid>/maps` line) that contains `addr`.
pub(crate) fn mapping_start(pid: u32, addr: u64) -> Option<u64> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).ok()?;
    maps.lines().find_map(|l| {
        let range = l.split_whitespace().next()?;
        let (a, b) = range.split_once('-')?;
        let (a, b) = (
            u64::from_str_radix(a, 16).ok()?,
            u64::from_str_radix(b, 16).ok()?,
        );
        (a <= addr && addr < b).then_some(a)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_own_memory() {
        let me = std::process::id();
        let mut cell = Box::new(0x1122_3344_5566_7788u64);
        let addr = &mut *cell as *mut u64 as u64;
        assert_eq!(read_u64(me, addr), Ok(0x1122_3344_5566_7788));
        write_u64(me, addr, 7).unwrap();
        assert_eq!(read_u64(me, addr), Ok(7));
        assert_eq!(read_u64(me, 8), Err(FAULT));
        assert_eq!(read_u64(me, u64::MAX - 3), Err(FAULT));
        let start = mapping_start(me, addr).expect("the heap is mapped");
        assert!(start <= addr && start % 4096 == 0);
        assert_eq!(mapping_start(me, 8), None);
    }
}
