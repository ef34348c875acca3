//! A FUSE_INTERRUPT for a request the emulator holds (`crate::fuse_proxy` delivers them) ends
//! it as amdkfd's interrupted waits end: a blocked WAIT_EVENTS returns `EINTR` when the thread
//! has a fatal signal pending and `ERESTARTSYS` otherwise (`kfd_wait_on_events`: the remaining
//! timeout is written back and auto-reset events it consumed are set again, so the restarted
//! call loses nothing); a DESTROY_QUEUE blocked on a suspended queue returns `ERESTARTSYS`
//! (`wait_on_destroy_queue`'s `wait_event_interruptible`; the queue is no longer being
//! destroyed). `ERESTARTSYS` travels in the ioctl result, which FUSE returns as is: the kernel
//! restarts the call after a handler installed with `SA_RESTART` (or after a stop), and returns
//! `EINTR` after any other handler, exactly as for amdkfd.
//!
//! An interrupt for a request that is not held yet (the kernel may send it before the handler
//! runs) is remembered and the request, once it would block, ends at once.

use crate::effects::Effects;
use crate::reply::ERESTARTSYS;
use crate::state::{Emu, State};

/// Ends the held request `unique`, or remembers the interrupt for when it would block.
pub(crate) fn interrupted(emu: &Emu, unique: u64) {
    let mut effects = Effects::default();
    {
        let mut st = emu.lock();
        if !crate::events::interrupt_wait(&mut st, unique)
            && !interrupt_destroy(&mut st, unique, &mut effects)
        {
            st.note_interrupt(unique);
        }
    }
    effects.run(emu);
}

/// A blocked DESTROY_QUEUE ends with `ERESTARTSYS`; the queue stays.
fn interrupt_destroy(st: &mut State, unique: u64, effects: &mut Effects) -> bool {
    let Some(i) = st
        .pending_destroys
        .iter()
        .position(|pd| pd.unique == unique)
    else {
        return false;
    };
    let pd = st.pending_destroys.swap_remove(i);
    tracing::debug!(
        tgid = pd.key.0,
        qid = pd.key.1,
        "blocked DESTROY_QUEUE interrupted"
    );
    let mut data = pd.buf;
    data.truncate(pd.out_len);
    effects.replies.push((pd.reply, data, Err(ERESTARTSYS)));
    true
}
