//! Control without the shim: the tracer thread. A process whose class says `control =
//! "tracer"` and that has KFD queues but no shim session is `PTRACE_SEIZE`d, debug-enabled
//! (DBG_TRAP ENABLE; it must be runtime-enabled, as every ROCr process is) and from then on
//! driven like a shim session: the executor's level-3 commands become DBG_TRAP SUSPEND/RESUME
//! of all its queues in one call, its activity is sampled from its queues' read and write
//! indexes through `/proc/<pid>/mem`, and its queue set is refreshed by GET_QUEUE_SNAPSHOT.
//!
//! ptrace is per thread: the kernel lets only the thread that seized a process issue DBG_TRAP
//! on it, so one thread owns every tracee, the KFD file descriptor the debugger API needs,
//! and the waits for their stops (a `SIGCHLD` signalfd; `SIGCHLD` is blocked in the agent).
//! The event loop talks to it over two channels, each with a pipe that wakes the other side.
//!
//! Leaving a tracee (its class changed, a shim connected for it, it stopped using the GPU,
//! the agent stops) is DBG_TRAP DISABLE, which resumes whatever was suspended, then
//! `PTRACE_INTERRUPT` and `PTRACE_DETACH` at the stop. If the agent dies instead, the kernel
//! does both: it drops the ptrace link, and releasing the agent's KFD context disables
//! debugging of every process it debugged (docs/kernel-interface.md §4). If the event loop
//! stalls, the suspension's lease runs out and this thread resumes it (`lease.rs`).

//!
//! The files:
//!
//! * `handle.rs`: the event loop's handle on the thread; `channel.rs`: the commands and events
//!   between them, and the wake-up pipes;
//! * `sessions.rs`: the event loop's tracer state (sessions, seizes in flight, the scan);
//! * `thread.rs`: the thread's loop (its waits and deadlines) and its command dispatch;
//! * `attach.rs`: ptrace (seize and debug-enable, restart at stops, leave and detach);
//! * `sampling.rs`: activity sampling and snapshot refreshes; `periods.rs`: the sampling
//!   decisions (the fine period, changes);
//! * `executor.rs`: level-3 commands through DBG_TRAP, with the invalid-queue retry and owed
//!   resumes; `lease.rs`: the suspensions' leases (resumed when the event loop stops renewing);
//! * `tracee.rs`: one traced process; `registry.rs`: the registry it shows the node;
//! * `error.rs`: [`TracerError`]. `[tracer]` of the configuration is parsed beside this folder,
//!   in `src/agent/tracer_settings.rs` (re-exported here).

mod attach;
mod channel;
mod error;
mod executor;
mod handle;
mod lease;
mod periods;
mod registry;
mod sampling;
mod sessions;
mod thread;
mod tracee;

pub use super::tracer_settings::{DEFAULT_SCAN, TracerSettings};
pub use channel::{Cmd, Event};
pub use error::TracerError;
pub use handle::Tracer;
pub use periods::BUSY_SAMPLE;
pub use sessions::Sessions;
