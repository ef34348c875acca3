//! The `/dev/fuse` proxy's fast thread (`kfd-emu-fuse-fast`): DBG_TRAP SUSPEND_QUEUES and
//! RESUME_QUEUES (level 3's preemption) without the two hand-offs through the FUSE workers
//! (`kfd-emu-fuse-in` -> socket -> a fuser worker, its answer -> socket -> `kfd-emu-fuse-out`).
//!
//! Their handlers read and write the queue array in client memory under the state lock, so the
//! reader thread may not run them (a fault on a mapping of the mount would need the reader to
//! serve it: `crate::reader_ioctl`). This thread may: it never reads `/dev/fuse`, so it may wait
//! for the state lock and fault on client memory as a worker does, while the reader goes on
//! serving the READs such a fault needs. The reader hands it a request in memory and never waits
//! for it (docs/kfd-emulator.md, "The reader thread's ioctls"):
//! * the hand-off is a rendezvous channel (capacity 0) that the reader offers with `try_send`:
//!   it succeeds only while this thread waits in `recv`, so a request never queues behind one
//!   this thread is running; when it is busy (or gone), the request goes to the workers
//!   unchanged (`fuse_fast_ioctls_passed_on`). The channel's own lock is held by either side
//!   only to pair a sender with a receiver, never across a wait, a fault or another lock;
//! * the thread resolves the handle (waiting for the handle table, which the reader may not)
//!   and runs the workers' dispatch (`ioctl::dispatch_to_bytes`: caller check, lookup,
//!   fault injection, handler, waiting for the state lock) and writes the bytes fuser would
//!   write for the answer (`reply::encode`) to `/dev/fuse` itself (`fuse_proxy::write_answer`);
//! * FUSE_INTERRUPT for a request it runs is handled as for one a worker runs: these handlers
//!   never hold their request, so the interrupt is remembered (`ioctl::interrupt`) and the
//!   answer comes when the handler returns.
//!
//! It ends when the reader drops its end of the channel (the connection ended).

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use crate::error::EmuError;
use crate::ioctl::{self, Call, ProxyThread};
use crate::state::Emu;

/// A FUSE_IOCTL request on `dev/kfd` handed to the fast thread, with its own copy of the
/// argument bytes. The handle is resolved by the fast thread, which may wait for the handle
/// table (the reader may not: a worker holding it for an unrelated open or release would send
/// the request to the workers).
pub(crate) struct Job {
    unique: u64,
    tid: u32,
    fh: u64,
    cmd: u32,
    in_data: Vec<u8>,
    out_size: u32,
}

impl Job {
    /// A request on handle `fh` of `dev/kfd`, from thread `tid`.
    pub fn new(unique: u64, tid: u32, fh: u64, cmd: u32, in_data: &[u8], out_size: u32) -> Job {
        Job {
            unique,
            tid,
            fh,
            cmd,
            in_data: in_data.to_vec(),
            out_size,
        }
    }
}

/// The reader's end of the hand-off.
pub(crate) struct FastThread {
    tx: SyncSender<Job>,
}

impl FastThread {
    /// Starts the fast thread, which writes its answers to `dev` (the mounted `/dev/fuse`).
    pub fn start(emu: &Arc<Emu>, dev: Arc<OwnedFd>) -> Result<FastThread, EmuError> {
        let (tx, rx) = sync_channel(0);
        let emu = emu.clone();
        std::thread::Builder::new()
            .name("kfd-emu-fuse-fast".into())
            .spawn(move || serve(&emu, &rx, &dev))
            .map_err(|e| EmuError::io("spawn a FUSE proxy thread", e))?;
        Ok(FastThread { tx })
    }

    /// An end whose thread is gone: every offer is given back.
    #[cfg(test)]
    pub fn gone() -> FastThread {
        FastThread {
            tx: sync_channel(0).0,
        }
    }

    /// Hands `job` to the fast thread if it waits for one now; else gives it back (the thread
    /// runs another request, or is gone), without waiting.
    pub fn offer(&self, job: Job) -> Result<(), Job> {
        self.tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(job) | TrySendError::Disconnected(job) => job,
        })
    }
}

/// Runs the jobs the reader hands over until it drops its end.
fn serve(emu: &Emu, jobs: &Receiver<Job>, dev: &OwnedFd) {
    let mut answer = Vec::new();
    for job in jobs {
        match emu.handles.kfd_opener(job.fh) {
            Some(opener) => {
                let call = Call {
                    unique: job.unique,
                    tid: job.tid,
                    opener,
                    cmd: job.cmd,
                    in_data: &job.in_data,
                    out_size: job.out_size,
                };
                // Only the reader ever finds the lock taken and gives up; this one waits.
                let ran = ioctl::dispatch_to_bytes(emu, &call, ProxyThread::Fast, &mut answer);
                debug_assert!(ran, "the fast thread waits for the state lock");
            }
            // A handle of dev/kfd's inode is a dev/kfd handle while the kernel holds the file
            // for the ioctl; were it not in the table, fuser's answer (`fs::ioctl`) is ENOTTY.
            None => crate::reply::encode(&mut answer, job.unique, &[], Err(libc::ENOTTY)),
        }
        // Counted before the answer, so a caller whose ioctl returned finds it counted.
        emu.fast_ioctls.fetch_add(1, Ordering::Relaxed);
        crate::fuse_proxy::write_answer(emu, dev, &answer);
    }
}
