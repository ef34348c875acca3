//! Being the ptrace tracer that DBG_TRAP on another process requires (docs/kernel-interface.md
//! §4): the kernel allows SUSPEND/RESUME of a process's queues only to the *thread* that is the
//! ptrace parent of its leader. A tracer attached with `PTRACE_SEIZE` does not stop the tracee,
//! but it must then answer every stop the tracee enters so the tracee behaves as untraced:
//! signal-delivery stops re-inject the signal, group-stops (`SIGSTOP`, `SIGTSTP`, ...) are
//! kept with `PTRACE_LISTEN` so `SIGCONT` still ends them, and the traps this layer asked for
//! (`PTRACE_INTERRUPT`, exec) are answered by the caller. `ptrace(2)` is the reference.
#![allow(unsafe_code)]

use nix::errno::Errno;
use nix::sys::ptrace;
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

/// A stop (or the end) a tracee reported, classified by what the tracer must do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Nothing to report now.
    None,
    /// A signal is being delivered: re-inject it ([`cont`] with it) or the tracee never sees it.
    Signal(Signal),
    /// A group-stop (job control): keep the tracee stopped with [`listen`].
    Group(Signal),
    /// A trap the tracer caused (`PTRACE_INTERRUPT`, or the wake-up of a listening tracee on
    /// `SIGCONT`): continue it with no signal, or detach now.
    Trap,
    /// The tracee called `execve`: its old address space, and with it its KFD context, is gone.
    Exec,
    /// Exited or killed.
    Exited,
}

fn pid(p: u32) -> Pid {
    Pid::from_raw(p as i32)
}

/// `PTRACE_SEIZE` with `PTRACE_O_TRACEEXEC`: the tracee keeps running; an `execve` stops it
/// with [`Stop::Exec`]. Only the thread calling this is the tracer.
pub fn seize(tracee: u32) -> Result<(), Errno> {
    ptrace::seize(pid(tracee), ptrace::Options::PTRACE_O_TRACEEXEC)
}

/// `PTRACE_INTERRUPT`: the tracee stops with [`Stop::Trap`] soon (or reports a signal first).
pub fn interrupt(tracee: u32) -> Result<(), Errno> {
    ptrace::interrupt(pid(tracee))
}

/// Restarts a stopped tracee, delivering `sig` if given.
pub fn cont(tracee: u32, sig: Option<Signal>) -> Result<(), Errno> {
    ptrace::cont(pid(tracee), sig)
}

/// Detaches from a stopped tracee, delivering `sig` if given. A tracee detached in a group-stop
/// stays stopped, as job control left it.
pub fn detach(tracee: u32, sig: Option<Signal>) -> Result<(), Errno> {
    ptrace::detach(pid(tracee), sig)
}

/// `PTRACE_LISTEN` on a tracee in a group-stop: it stays stopped but `SIGCONT` wakes it (and
/// then reports [`Stop::Trap`]).
pub fn listen(tracee: u32) -> Result<(), Errno> {
    // SAFETY: PTRACE_LISTEN reads neither `addr` nor `data`; both are null. The kernel checks
    // that the caller traces `tracee` and that it is in a group-stop (else ESRCH / EIO).
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_LISTEN,
            tracee as libc::pid_t,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    Errno::result(r).map(drop)
}

fn is_stopping(sig: Signal) -> bool {
    matches!(
        sig,
        Signal::SIGSTOP | Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU
    )
}

/// The next stop `tracee` reports, without blocking ([`Stop::None`] when there is none).
pub fn poll_stop(tracee: u32) -> Result<Stop, Errno> {
    let flags = WaitPidFlag::WNOHANG | WaitPidFlag::__WALL;
    Ok(match waitpid(pid(tracee), Some(flags))? {
        WaitStatus::StillAlive | WaitStatus::Continued(_) => Stop::None,
        WaitStatus::Exited(..) | WaitStatus::Signaled(..) => Stop::Exited,
        WaitStatus::Stopped(_, sig) => Stop::Signal(sig),
        WaitStatus::PtraceEvent(_, sig, ev) if ev == libc::PTRACE_EVENT_STOP => {
            if is_stopping(sig) {
                Stop::Group(sig)
            } else {
                Stop::Trap
            }
        }
        WaitStatus::PtraceEvent(_, _, ev) if ev == libc::PTRACE_EVENT_EXEC => Stop::Exec,
        WaitStatus::PtraceEvent(..) | WaitStatus::PtraceSyscall(_) => Stop::Trap,
    })
}

/// `TracerPid` of `pid` (0: not traced), from `/proc/<pid>/status`.
pub fn tracer_of(pid: u32) -> Option<u32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracer_of_names_the_thread_that_traces_a_child() {
        assert_eq!(
            tracer_of(u32::MAX / 2),
            None,
            "an unknown pid has no status"
        );
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id();
        let before = tracer_of(pid).expect("the child's status");
        match nix::sys::ptrace::seize(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::ptrace::Options::empty(),
        ) {
            Ok(()) => {
                assert_eq!(before, 0, "an untraced child");
                // TracerPid is the tracing thread's id: this test's thread.
                assert_eq!(tracer_of(pid), Some(nix::unistd::gettid().as_raw() as u32));
            }
            // Already traced (the test runs under `strace -f` or a debugger that follows
            // children): then its status must name that tracer.
            Err(Errno::EPERM) => assert_ne!(before, 0, "PTRACE_SEIZE refused an untraced child"),
            Err(e) => panic!("PTRACE_SEIZE of our own child: {e}"),
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn stops_need_a_tracee() {
        // Not our tracee: the kernel refuses, and the wrappers pass its errno through.
        assert_eq!(listen(1), Err(Errno::ESRCH));
        assert_eq!(poll_stop(1), Err(Errno::ECHILD));
    }
}
