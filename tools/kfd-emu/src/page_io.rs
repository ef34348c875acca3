//! Page-cache I/O of the device files, answered by the `/dev/fuse` proxy's reader thread itself.
//!
//! A client's mapping of a render node (its BOs) or of `/dev/kfd` (doorbells, MMIO) is made of
//! page-cache pages of the FUSE file (opened with `FOPEN_KEEP_CACHE`, not direct I/O): the first
//! touch of such a page is a FUSE_READ, and a write fault on a page under writeback waits for its
//! FUSE_WRITE. The emulator itself touches client memory from its FUSE worker threads
//! (`process_vm_readv`/`writev` of ioctl arguments, event slots, signals: `client_mem`), and the
//! kernel then takes the same faults on the emulator's behalf (`pin_user_pages_remote` ->
//! `filemap_fault`). Were those READs served by the FUSE workers, every worker could be blocked
//! in such a fault while the READs they wait for queue behind them: the mount hung (both
//! workers in `folio_wait_bit_common`, docs/kfd-emulator.md).
//!
//! So the proxy answers FUSE_READ and FUSE_WRITE of the device files on the thread that reads
//! `/dev/fuse` (`fuse_proxy::requests`), which never touches client memory nor waits for a FUSE
//! worker: the data comes from (goes to) the BO store (`state::BoStore`, its own locks, never
//! held across a client access) or is the doorbell pages' zeros. Every other request goes on to
//! the FUSE workers as before.
//!
//! Wire facts (`include/uapi/linux/fuse.h`): after `struct fuse_in_header` (40 bytes; opcode at
//! byte 4, unique id at 8, node id at 16) FUSE_READ (15) carries `struct fuse_read_in` and
//! FUSE_WRITE (16) `struct fuse_write_in` (both 40 bytes: `fh` u64, `offset` u64, `size` u32,
//! ...), the write's data after it; the answer is `struct fuse_out_header` (16 bytes: length,
//! negative errno, unique id) followed by the data read, or by `struct fuse_write_out` (`size`
//! u32, padding u32).

use crate::abi::{u32_at, u64_at};
use crate::kfd_mmap;
use crate::state::{Emu, PAGE};

/// `FUSE_READ`.
const FUSE_READ: u32 = 15;
/// `FUSE_WRITE`.
const FUSE_WRITE: u32 = 16;
/// `sizeof(struct fuse_in_header)`.
const IN_HEADER: usize = 40;
/// `sizeof(struct fuse_read_in)` and `sizeof(struct fuse_write_in)`.
const IO_IN: usize = 40;
/// `sizeof(struct fuse_out_header)`.
const OUT_HEADER: usize = 16;

/// Which device file a node id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Device {
    Kfd,
    Render,
}

fn device(emu: &Emu, nodeid: u64) -> Option<Device> {
    if emu.kfd_ino.get() == Some(&nodeid) {
        return Some(Device::Kfd);
    }
    emu.render_inos
        .get()
        .is_some_and(|inos| inos.contains(&nodeid))
        .then_some(Device::Render)
}

/// Starts the answer for `unique` in `out`: the out header with `error` (0 or a positive
/// errno); its length is set by [`finish`] once the body follows.
fn start(out: &mut Vec<u8>, unique: u64, error: i32) {
    out.clear();
    out.extend_from_slice(&0u32.to_ne_bytes());
    out.extend_from_slice(&(-error).to_ne_bytes());
    out.extend_from_slice(&unique.to_ne_bytes());
}

/// Sets the answer's length.
fn finish(out: &mut [u8]) {
    let len = out.len() as u32;
    out[..4].copy_from_slice(&len.to_ne_bytes());
}

/// Answers `msg` in `out` when it is a READ or WRITE of a device file (true); false for any
/// other request, which the FUSE workers serve. The same answers `fs::KfdFs::read`/`write`
/// give. `out` keeps its capacity from one answer to the next: a READ allocates nothing, which
/// matters when the emulator runs inside its client's process (the tests), where an allocation
/// that grows the heap waits for the `mmap_lock` a faulting or unmapping client thread holds.
pub(crate) fn serve(emu: &Emu, msg: &[u8], out: &mut Vec<u8>) -> bool {
    let Some(opcode) = u32_at(msg, 4) else {
        return false;
    };
    if opcode != FUSE_READ && opcode != FUSE_WRITE {
        return false;
    }
    let (Some(unique), Some(nodeid), Some(offset), Some(size)) = (
        u64_at(msg, 8),
        u64_at(msg, 16),
        u64_at(msg, IN_HEADER + 8),
        u32_at(msg, IN_HEADER + 16),
    ) else {
        return false;
    };
    let Some(dev) = device(emu, nodeid) else {
        return false;
    };
    if opcode == FUSE_READ {
        // Doorbell and MMIO pages read as zeros; any other offset is one the kernel's
        // kfd_mmap refuses, and the mapping faults.
        if dev == Device::Kfd && !kfd_mmap::valid(&emu.topo, offset, PAGE) {
            start(out, unique, libc::EIO);
        } else {
            start(out, unique, 0);
            out.resize(OUT_HEADER + size as usize, 0);
            if dev == Device::Render {
                emu.bos.read_into(offset, &mut out[OUT_HEADER..]);
            }
        }
        finish(out);
        return true;
    }
    let Some(data) = msg.get(IN_HEADER + IO_IN..IN_HEADER + IO_IN + size as usize) else {
        return false;
    };
    match dev {
        Device::Render => emu.bos.write(offset, data),
        // Doorbell page writeback: accepted and ignored (the CP polls write pointers).
        Device::Kfd => {}
    }
    start(out, unique, 0);
    out.extend_from_slice(&size.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
    finish(out);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve(e: &Emu, msg: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        super::serve(e, msg, &mut out).then_some(out)
    }

    fn request(
        opcode: u32,
        unique: u64,
        nodeid: u64,
        offset: u64,
        data: &[u8],
        size: u32,
    ) -> Vec<u8> {
        let mut m = vec![0u8; IN_HEADER + IO_IN];
        m[4..8].copy_from_slice(&opcode.to_ne_bytes());
        m[8..16].copy_from_slice(&unique.to_ne_bytes());
        m[16..24].copy_from_slice(&nodeid.to_ne_bytes());
        m[IN_HEADER + 8..IN_HEADER + 16].copy_from_slice(&offset.to_ne_bytes());
        m[IN_HEADER + 16..IN_HEADER + 20].copy_from_slice(&size.to_ne_bytes());
        m.extend_from_slice(data);
        let len = m.len() as u32;
        m[..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    fn emu() -> Emu {
        let config = crate::config::EmuConfig::default();
        let topo = crate::config::Topology::build(&config).unwrap();
        let emu = Emu::new(config, topo, std::path::PathBuf::from("/nonexistent"));
        let _ = emu.render_inos.set(vec![7]);
        let _ = emu.kfd_ino.set(3);
        emu.bos.insert(
            1 << 20,
            std::sync::Arc::new(crate::state::Backing::new(8192)),
        );
        emu
    }

    #[test]
    fn render_node_writes_and_reads_go_to_the_bo_store() {
        let e = emu();
        let w = serve(&e, &request(FUSE_WRITE, 9, 7, (1 << 20) + 10, b"abc", 3)).unwrap();
        assert_eq!(w.len(), OUT_HEADER + 8);
        assert_eq!(u32_at(&w, 0), Some(24));
        assert_eq!(u32_at(&w, 4), Some(0));
        assert_eq!(u64_at(&w, 8), Some(9));
        assert_eq!(u32_at(&w, OUT_HEADER), Some(3));
        let r = serve(&e, &request(FUSE_READ, 10, 7, (1 << 20) + 8, &[], 6)).unwrap();
        assert_eq!(u64_at(&r, 8), Some(10));
        assert_eq!(&r[OUT_HEADER..], &[0, 0, b'a', b'b', b'c', 0]);
    }

    #[test]
    fn only_device_reads_and_writes_are_taken() {
        let e = emu();
        // Another inode's read, an ioctl (39) of a render node, a truncated request.
        assert_eq!(serve(&e, &request(FUSE_READ, 1, 8, 0, &[], 4)), None);
        assert_eq!(serve(&e, &request(39, 1, 7, 0, &[], 4)), None);
        assert_eq!(serve(&e, &request(FUSE_READ, 1, 7, 0, &[], 4)[..50]), None);
        // A write whose data is shorter than its size.
        assert_eq!(serve(&e, &request(FUSE_WRITE, 1, 7, 0, b"ab", 3)), None);
    }

    #[test]
    fn kfd_reads_zeros_at_doorbells_and_fails_elsewhere() {
        let e = emu();
        let gpu_id = e.topo.gpus[0].gpu_id;
        let at = kfd_mmap::doorbell_offset(gpu_id, 0);
        let r = serve(&e, &request(FUSE_READ, 5, 3, at, &[], 4096)).unwrap();
        assert_eq!(r.len(), OUT_HEADER + 4096);
        assert!(r[OUT_HEADER..].iter().all(|b| *b == 0));
        let bad = serve(&e, &request(FUSE_READ, 6, 3, 12345, &[], 4096)).unwrap();
        assert_eq!(bad.len(), OUT_HEADER);
        assert_eq!(u32_at(&bad, 4), Some((-libc::EIO) as u32));
    }
}
