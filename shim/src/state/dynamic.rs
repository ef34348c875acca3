//! HIP's dynamic queues: when the runtime may move a stream whose queue the shim knows onto
//! another queue, so that launches must compare write indices again ([`F_REPROBE`]).
//!
//! CLR (Debian's HIP 6.4.3 and 7.2.4; `rocclr/device/rocm/rocvirtual.cpp`, `ReleaseHwQueue` /
//! `profilingBegin`) with `DEBUG_HIP_DYNAMIC_QUEUES` on hands an idle stream's queue back to its
//! pool once the device has more queues of that priority than `GPU_MAX_HW_QUEUES`, and gives the
//! stream the least-loaded active queue of the pool at its next command — no CREATE_QUEUE, so
//! nothing but the write indices tells the shim (docs/shim.md, "HIP 7.2").
//!
//! [`F_REPROBE`]: super::F_REPROBE

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use super::State;

/// CLR's default `GPU_MAX_HW_QUEUES` (`rocclr/utils/flags.hpp`: `release(uint,
/// GPU_MAX_HW_QUEUES, 4, ...)`; Debian's 6.4.3 and 7.2.4 flag tables read 4 too), in effect when
/// the variable is unset or not a number.
const CLR_DEFAULT_MAX_HW_QUEUES: u32 = 4;

impl State {
    /// Whether the runtime may move a stream to another of this process's queues with no
    /// CREATE_QUEUE, given the runtime's `cap` of hardware queues per priority: streams share a
    /// queue already (a pool at its cap), or one GPU has more live stream queues of one
    /// requested priority than `cap` — CLR's condition for handing an idle stream's queue back.
    /// A stream queue is a compute queue some stream was ever attributed to (`claimed`): CLR's
    /// pool queues, not ROCr's own utility queues, which would only make launches compare write
    /// indices where the runtime moves nothing.
    pub fn streams_may_move(&self, cap: u32) -> bool {
        let live = || self.queues().iter().filter(|q| q.compute && !q.dying);
        let pool = || live().filter(|q| q.claimed);
        live().any(|q| q.streams.len() > 1)
            || pool().any(|q| {
                pool()
                    .filter(|o| o.gpu_id == q.gpu_id && o.requested == q.requested)
                    .count()
                    > cap as usize
            })
    }
}

/// Whether launches must compare write indices even on streams whose queue is known: HIP's
/// dynamic queues are on and [`State::streams_may_move`] at the runtime's cap.
pub(super) fn reprobe(st: &State) -> bool {
    dynamic_queues() && st.streams_may_move(max_hw_queues())
}

/// Whether HIP's dynamic queue management is on for this process: `DEBUG_HIP_DYNAMIC_QUEUES`
/// (the shim's own default is 2) read as Debian's CLR reads a boolean flag — `true`, or a
/// number whose `atoi` is non-zero (`rocclr/utils/flags.cpp`, `Flag::setValue`). Read once.
fn dynamic_queues() -> bool {
    const UNKNOWN: u8 = 0;
    const OFF: u8 = 1;
    const ON: u8 = 2;
    static DYNAMIC: AtomicU8 = AtomicU8::new(UNKNOWN);
    match DYNAMIC.load(Ordering::Relaxed) {
        UNKNOWN => {
            let on = std::env::var("DEBUG_HIP_DYNAMIC_QUEUES")
                .ok()
                .is_some_and(|v| clr_bool(&v));
            DYNAMIC.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
        v => v == ON,
    }
}

/// The runtime's hardware queues per priority: `GPU_MAX_HW_QUEUES` (the shim sets the class's
/// value at load unless the user chose) read as CLR reads a `uint` flag (`atoi`, stored in the
/// flag's bits), else [`CLR_DEFAULT_MAX_HW_QUEUES`] when unset or empty. Read once.
fn max_hw_queues() -> u32 {
    const UNKNOWN: u64 = u64::MAX;
    static CAP: AtomicU64 = AtomicU64::new(UNKNOWN);
    match CAP.load(Ordering::Relaxed) {
        UNKNOWN => {
            let cap = std::env::var("GPU_MAX_HW_QUEUES")
                .ok()
                .filter(|v| !v.is_empty())
                .map_or(CLR_DEFAULT_MAX_HW_QUEUES, |v| atoi(&v) as i32 as u32);
            CAP.store(u64::from(cap), Ordering::Relaxed);
            cap
        }
        v => v as u32,
    }
}

/// A boolean CLR flag's value as `Flag::setValue` reads it (`rocclr/utils/flags.cpp`):
/// `strcmp(value, "true") == 0 || atoi(value) != 0`.
pub(super) fn clr_bool(v: &str) -> bool {
    v == "true" || atoi(v) != 0
}

/// C's `atoi`: leading blanks, an optional sign, then the digits up to the first other
/// character (none: 0); saturating where C's is undefined.
pub(super) fn atoi(v: &str) -> i64 {
    let t = v.trim_start();
    let (neg, t) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let n = t.bytes().take_while(u8::is_ascii_digit).fold(0i64, |n, d| {
        n.saturating_mul(10).saturating_add(i64::from(d - b'0'))
    });
    if neg { -n } else { n }
}
