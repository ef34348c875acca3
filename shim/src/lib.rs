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
//! Module map: `exports` (entry points), `launch` (fast/slow path, attribution, level-1 gate),
//! `hook` (ioctl observer), `control` (agent session, levels 0-3, registry file), `state` (the
//! registry), `window` (the in-flight window), `init` (lazy init, fork, exit), `config` (environment), `real` (resolution of the
//! real functions), `dl` (`dlsym`/`dlvsym` on runtime handles), `sys` (pthread mutex, dladdr, backtrace), `log`. See `docs/shim.md`.
#![deny(clippy::undocumented_unsafe_blocks)]
// The unit-test build leaves out the exported entry points (see `exports`), so much is unused there.
#![cfg_attr(test, allow(dead_code))]

mod config;
mod control;
mod dl;
#[cfg(not(test))]
mod exports;
mod hook;
mod init;
mod launch;
mod log;
mod real;
mod state;
mod sys;
mod window;
