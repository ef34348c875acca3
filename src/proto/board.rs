//! The edge board: a page of shared memory (a memfd the agent makes) through which the launch
//! that makes a latency-class process busy tells the batch-class processes it preempts, with one
//! `FUTEX_WAKE` and no hop through the agent (docs/agent.md, "Direct edges").
//!
//! Layout (native-endian `u32` words, each naturally aligned):
//!
//! * offset [`SEQ_OFFSET`]: the change counter, the futex word every watcher waits on. Whoever
//!   changes a slot adds one to it and wakes its waiters.
//! * offset [`slot_offset`]`(i)`, `i < ` [`SLOTS`]: slot `i`, an edge count. Odd: the writer's
//!   queues are busy; even: idle. The writer adds one at each edge (its launch at the busy edge,
//!   its control thread at the idle edge); the agent sets it even again when the writer is gone,
//!   its reports went stale, or the slot says busy for long while the writer reports nothing
//!   busy (forged).
//!
//! One board per writer (the agent uses slot 0): a writer gets a writable descriptor of its own
//! board, which it seals against later writes once mapped; a watcher a read-only one of each
//! sealed board whose writer's class preempts its own. Every access is atomic, through
//! `crate::kfd::board` (agent and shim alike).

/// Bytes of a board (one page).
pub const BOARD_BYTES: usize = 4096;

/// Offset of the change counter (the futex word).
pub const SEQ_OFFSET: usize = 0;

/// Offset of slot 0; the counter has a cache line to itself.
const SLOT_BASE: usize = 64;

/// Bytes per slot (a `u32` edge count and 4 bytes reserved).
const SLOT_BYTES: usize = 8;

/// Slots per board: writers of one class on one node.
pub const SLOTS: u32 = ((BOARD_BYTES - SLOT_BASE) / SLOT_BYTES) as u32;

/// Offset of slot `i`'s edge count (`i < SLOTS`).
pub const fn slot_offset(i: u32) -> usize {
    SLOT_BASE + i as usize * SLOT_BYTES
}

/// Whether a slot's edge count says busy.
pub const fn busy(count: u32) -> bool {
    count % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_fit_the_page_and_never_touch_the_counter() {
        assert!(slot_offset(SLOTS - 1) + 4 <= BOARD_BYTES);
        assert!(slot_offset(0) >= SEQ_OFFSET + 4);
        assert_eq!(slot_offset(1) - slot_offset(0), SLOT_BYTES);
        assert!(busy(1) && !busy(2) && !busy(0));
    }
}
