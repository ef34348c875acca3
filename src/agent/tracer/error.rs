//! Why the tracer could not take a process or carry out a command.

use nix::errno::Errno;

/// Why the tracer could not take a process or carry out a command (the text of its refusal or
/// of the command's failed ack).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TracerError {
    /// `/dev/kfd` could not be opened.
    #[error("the agent cannot open {}: {source}", path.display())]
    OpenKfd {
        /// The device.
        path: std::path::PathBuf,
        /// The error.
        source: crate::kfd::Error,
    },
    /// No KFD device is open.
    #[error("no KFD device")]
    NoKfd,
    /// The process is gone.
    #[error("it exited")]
    Exited,
    /// The pid named another process at `PTRACE_SEIZE` than at discovery (another start
    /// time): the discovered process exited and its pid was reused.
    #[error(
        "its pid was reused by another process between discovery and PTRACE_SEIZE; the new process is looked at again by the next scans"
    )]
    Reused,
    /// Another tracer holds it.
    #[error(
        "it is already traced by pid {tracer} ({comm}): a debugger or strace is attached, and a process has one tracer; kfdqd leaves it alone and takes it once that tracer detaches"
    )]
    AlreadyTraced {
        /// The tracer's pid.
        tracer: u32,
        /// The tracer's command name.
        comm: String,
    },
    /// PTRACE_SEIZE refused for lack of permission.
    #[error(
        "PTRACE_SEIZE was refused ({0}): kfdqd needs CAP_SYS_PTRACE over it, and the kernel's kernel.yama.ptrace_scope must be below 3 (or another tracer attached first)"
    )]
    SeizeRefused(Errno),
    /// PTRACE_SEIZE failed otherwise.
    #[error("PTRACE_SEIZE: {0}")]
    Seize(Errno),
    /// The process never enabled the debugger runtime.
    #[error(
        "it did not call RUNTIME_ENABLE before its first queue (ROCr does; a program that drives /dev/kfd itself must), and the kernel suspends only runtime-enabled processes' queues"
    )]
    NotRuntimeEnabled,
    /// A DBG_TRAP call failed.
    #[error("{op}: {source}")]
    Call {
        /// The operation.
        op: &'static str,
        /// The error.
        source: crate::kfd::Error,
    },
    /// Its memory could not be opened.
    #[error("/proc/{pid}/mem: {source}")]
    Mem {
        /// The process.
        pid: u32,
        /// The error.
        source: std::io::Error,
    },
    /// The process is not (or no longer) traced.
    #[error("not traced")]
    NotTraced,
    /// Queues the suspend did not stop.
    #[error(
        "DBG_TRAP SUSPEND_QUEUES left queue(s) {missing:?} running (being destroyed, or the hardware did not preempt them)"
    )]
    LeftRunning {
        /// Their ids.
        missing: Vec<u32>,
    },
    /// A command only the shim can carry out.
    #[error(
        "not possible through the tracer: only the process itself may change its queues (run it under the shim, e.g. `kfdq run`)"
    )]
    NeedsShim,
}

impl TracerError {
    pub(super) fn call(op: &'static str) -> impl FnOnce(crate::kfd::Error) -> TracerError {
        move |source| TracerError::Call { op, source }
    }
}
