//! `libkfdq_shim.so`: the LD_PRELOAD half of kfdq.
//!
//! Loaded into a GPU process in front of the HIP runtime, it
//!
//! * exports the HIP launch, stream, stream-ordered work (copies, fills, host functions, event
//!   records, stream waits) and synchronisation entry points under HIP's own symbol versions
//!   (`hipLaunchKernel@@hip_4.2`, `hipLaunchKernel_spt@@hip_5.2`, `hipGetProcAddress@@hip_6.1`,
//!   ...) and `ioctl`, forwarding each to the real definition found behind it;
//! * observes every amdkfd CREATE/UPDATE/DESTROY_QUEUE through `ioctl`, learning which KFD queue
//!   backs which stream (null, per-thread, created by the application or by a library) and
//!   rewriting queue priorities by the process's class;
//! * executes the agent's commands on its own process: level 0 priority, level 1 hold, level 2
//!   deactivate (UPDATE_QUEUE percentage 0), level 3 suspend (DBG_TRAP on itself); it releases
//!   everything when the agent goes away.
//!
//! Modules, in layers: each uses only modules of the layers below it (and of its own layer where
//! listed in that order), so that they import each other in no circle
//! (`tools/test-support/tests/module_graph.rs` checks it). See `docs/shim.md`.
//!
//! 1. Ground: `log` (diagnostics), `libc_dlsym` (glibc's own `dlsym`/`dlvsym`), `pmutex` (the
//!    fork-safe pthread mutex), `sys` (loaded objects, symbol resolution, caller lookup), `config` (environment),
//!    `kfd_fd` (the runtime's `/dev/kfd` fd, re-validated per command), `window_setting` (the
//!    in-flight window's size and cache generation), `index_reads` (reading queue indices
//!    without the lock, and the generation rule that makes it sound), `self_mem` (reading our
//!    own memory without faulting on what is no longer mapped), `slice` (the watcher's
//!    scheduling slice), `bypass` (the shim's own ioctls pass the
//!    hook), `libc_ioctl` (libc's `ioctl`, `forward`), `context` (a thread's stream context),
//!    `edges` (the launch's busy-edge
//!    wake-up), `fd_stream` (the agent's socket read with the descriptors it passes), `chain`
//!    (the control thread's reaction-chain timestamps).
//! 2. `state`: the registry behind its lock.
//! 3. `command_error` (why a command failed, typed), `targets` (what an agent's target names),
//!    then `levels` (levels 0-3, CU masks, the agent's
//!    window, fail open), `watch` (direct edges: the watches of edge boards, which apply
//!    level 2 themselves), and `registry_file` (the registry published for `kfdq ps`).
//! 4. `guard`: panics never unwind into C; a panic stops control (fail open).
//! 5. `commands` (an agent message answered), `lease` (the preemptions' lease), `hint` (request hints: their
//!    open count, their bound, what the agent is told), then `control`
//!    (the control thread: agent session, activity sampling).
//! 6. `init`: lazy initialisation, fork and exit.
//! 7. `real` (the real HIP functions), `window` (the in-flight window's wait), `launch`
//!    (fast/slow path, attribution, level-1 gate), `hook` (ioctl observer).
//! 8. Entry points: `exports` (HIP functions and `ioctl`), `dl` (`dlsym`/`dlvsym`).
#![deny(clippy::undocumented_unsafe_blocks)]
#![deny(missing_debug_implementations)]
// The unit-test build leaves out the exported entry points (see `exports`), so much is unused there.
#![cfg_attr(test, allow(dead_code))]

mod bypass;
mod chain;
mod command_error;
mod commands;
mod config;
mod context;
mod control;
mod edges;
mod escapes;
mod fd_stream;
// The entry points are not in the unit-test binary: exported there, they would interpose on the
// test harness.
#[cfg(not(test))]
mod dl;
#[cfg(not(test))]
mod exports;
mod guard;
mod hint;
mod hook;
mod index_reads;
mod init;
mod kfd_fd;
mod launch;
mod launch_config;
mod lease;
mod levels;
mod libc_dlsym;
mod libc_ioctl;
mod log;
// Public only for its doctests (which show what must not compile); nothing outside uses it.
pub mod pmutex;
mod real;
mod registry_file;
mod self_mem;
mod slice;
mod state;
mod sys;
mod targets;
mod watch;
mod window;
mod window_setting;
