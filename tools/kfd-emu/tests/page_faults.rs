//! The emulator's own page faults. kfd-emu writes ioctl results, event slots and signals into
//! client memory from its FUSE worker threads (`process_vm_writev`). When that memory is a BO
//! the client mapped through the render node and has not touched yet, the kernel faults the
//! page in on the emulator's behalf, with a FUSE_READ of the render node: a READ that once
//! waited for a free FUSE worker while every worker waited in such a fault, and the mount hung
//! (`shim/tests/sid_bench.rs` in CI; docs/kfd-emulator.md). The proxy now answers device-file
//! READs and WRITEs on its reader thread (`page_io`), so however many faults are taken at once,
//! each is served.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};

use kfd_emu::Preset;
use kfd_sys::*;

use common::*;

/// Client threads issuing ioctls at once: more than the emulator's FUSE workers (2), so that
/// on the old code every worker is blocked in a fault while READs wait.
const THREADS: usize = 6;
/// Rounds, each on fresh, untouched pages.
const ROUNDS: usize = 8;
/// Distance between the pages the ioctls write: beyond a fault's read-ahead (64 KiB, the
/// mount's `max_readahead`), so that each write is its own fault and its own READ.
const STRIDE: usize = 256 << 10;

/// A shared mapping of a BO through the render node (unmapped on drop).
struct BoMapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a plain shared mapping owned by this value; the threads only pass addresses inside
// it to ioctls and read it with volatile loads after those return.
unsafe impl Send for BoMapping {}
// SAFETY: as above.
unsafe impl Sync for BoMapping {}

impl Drop for BoMapping {
    fn drop(&mut self) {
        // The unmap writes the dirty pages back (FUSE_WRITEs) holding this process's
        // `mmap_lock`: the emulator, a process of its own (test-support), serves them without it.
        // SAFETY: unmaps exactly the mapping made in the test.
        unsafe {
            libc::munmap(self.ptr.cast(), self.len);
        }
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn ioctls_writing_into_untouched_bo_pages_from_many_threads_all_return() {
    require_root();
    let t = mount_preset(Preset::Mi210);
    let conn = fuse_connection(t.root());
    let s = Arc::new(Session::new(&t, 0));
    let len = THREADS * ROUNDS * STRIDE;
    let ptr = s.map_vram_bo(len);
    let bo = Arc::new(BoMapping {
        ptr: ptr.cast(),
        len,
    });

    let done = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(THREADS));
    let failures = Arc::new(Mutex::new(Vec::new()));
    for i in 0..THREADS {
        let (s, bo, done, start) = (s.clone(), bo.clone(), done.clone(), start.clone());
        let failures = failures.clone();
        std::thread::spawn(move || {
            for r in 0..ROUNDS {
                start.wait();
                let off = (r * THREADS + i) * STRIDE;
                // SAFETY: `off` is inside the mapping.
                let out = unsafe { bo.ptr.add(off) };
                let mut args = kfd_ioctl_get_process_apertures_new_args {
                    kfd_process_device_apertures_ptr: out as u64,
                    num_of_nodes: 1,
                    ..Default::default()
                };
                let res = s.kfd.ioctl(AMDKFD_IOC_GET_PROCESS_APERTURES_NEW, &mut args);
                let seen = res.map(|_| {
                    // SAFETY: the entry lies inside the mapping; the page is faulted in now.
                    unsafe { std::ptr::read_volatile(out.cast::<kfd_process_device_apertures>()) }
                        .gpu_id
                });
                if seen != Ok(s.node.gpu_id) {
                    failures.lock().unwrap().push(format!(
                        "thread {i} round {r}: {seen:?} (gpu id {} expected, read through \
                         the client's own mapping)",
                        s.node.gpu_id
                    ));
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
    let all = THREADS * ROUNDS;
    if !wait_until(WAIT_LIMIT, || done.load(Ordering::Relaxed) == all) {
        let returned = done.load(Ordering::Relaxed);
        // Unblock the stuck threads, or the test process would never exit.
        let status = abort_fuse_connection(conn);
        eprintln!("aborting FUSE connection {conn}: {status:?}");
        panic!(
            "{returned} of {all} ioctls writing into untouched render-node pages returned within \
             {WAIT_LIMIT:?}: the emulator's FUSE workers wait for page-fault READs that none of \
             them is free to serve"
        );
    }
    assert_eq!(*failures.lock().unwrap(), Vec::<String>::new());
}
