//! HIP's dynamic queues: when the runtime may move a stream whose queue the shim knows onto
//! another queue, so that launches must compare write indices again ([`F_REPROBE`]).
//!
//! CLR (Debian's HIP 6.4.3 and 7.2.4; `rocclr/device/rocm/rocvirtual.cpp`, `ReleaseHwQueue` /
//! `profilingBegin`) with `DEBUG_HIP_DYNAMIC_QUEUES` on hands an idle stream's queue back to its
//! pool once the device has more queues of that priority than `GPU_MAX_HW_QUEUES`, and gives the
//! stream the least-loaded active queue of the pool at its next command — no CREATE_QUEUE, so
//! nothing but the write indices tells the shim (docs/shim.md, "HIP 7.2").
//!
//! Comparing write indices costs kernel copies (`process_vm_readv`, about 1.7 µs each on the
//! test VM), so a launch of a stream whose queue is known does not compare at every launch: see
//! [`Sampling`] for when it does, and the staleness that allows.
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

/// Wrapped calls after which the runtime may have handed a stream's queue back to its pool:
/// synchronising calls (`hipStreamSynchronize`, `hipDeviceSynchronize`, `hipStreamQuery`, ...,
/// where CLR's `HostQueue::finish` calls `ReleaseAllHwQueues`, and later CLR's
/// `hipStreamQuery` calls `ReleaseHwQueue`), stream creation (the `HostQueue` constructor
/// releases the new stream's queue until its first command) and destruction. Bumped after each;
/// a stream whose last comparison saw another value compares at its next launch.
static MOVE_CHANCES: AtomicU64 = AtomicU64::new(0);

/// A wrapped call at which the runtime may have moved streams returned (see [`MOVE_CHANCES`]).
#[inline(always)]
pub fn move_chance() {
    MOVE_CHANCES.fetch_add(1, Ordering::Relaxed);
}

/// How many launches of a stream may pass without a comparison (`KFDQ_REPROBE_EVERY`, read with
/// the rest of the shim's environment: [`crate::config::DEFAULT_REPROBE_EVERY`] says why 16).
#[inline(always)]
fn reprobe_every() -> u32 {
    crate::config::config().reprobe_every
}

/// When a launch of a stream whose queue is known compares write indices while streams may
/// move ([`F_REPROBE`](super::F_REPROBE)): at the stream's first launch, at its first launch
/// after a [`move_chance`], at the launch after a comparison that found its own queue did not
/// move (which then compares all compute queues and attributes the stream to the one that
/// moved), and otherwise every [`reprobe_every`]th launch. CLR moves a stream only after
/// releasing its idle queue, and releases queues only in `HostQueue::finish`, the `HostQueue`
/// constructor and (later CLR) `hipStreamQuery`: after a release the shim wraps, the registry
/// follows the stream by its second launch (as when every launch compared); after one it does
/// not wrap, by its `reprobe_every() + 1`th.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sampling {
    /// [`MOVE_CHANCES`] when the stream last compared (`u64::MAX`: never).
    at: u64,
    /// Launches since it last compared.
    since: u32,
    /// Its last comparison looked at its own queue only and found it did not move.
    follow_up: bool,
}

impl Default for Sampling {
    fn default() -> Sampling {
        Sampling {
            at: u64::MAX,
            since: 0,
            follow_up: false,
        }
    }
}

impl Sampling {
    /// Whether this launch compares (and, if so, starts counting from it).
    pub fn due(&mut self) -> bool {
        self.due_at(MOVE_CHANCES.load(Ordering::Relaxed), reprobe_every())
    }

    /// [`Self::due`] at `chances` and `every`.
    pub(super) fn due_at(&mut self, chances: u64, every: u32) -> bool {
        self.since = self.since.saturating_add(1);
        if self.follow_up || self.at != chances || self.since >= every {
            *self = Sampling {
                at: chances,
                since: 0,
                follow_up: false,
            };
            return true;
        }
        false
    }

    /// A comparison ended: `own_only` if it looked at the stream's own queue only, `strayed` if
    /// that queue did not move.
    pub fn compared(&mut self, own_only: bool, strayed: bool) {
        self.follow_up = own_only && strayed;
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
