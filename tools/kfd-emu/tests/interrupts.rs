//! A signal ends a blocked WAIT_EVENTS as it ends amdkfd's wait: the kernel sends FUSE_INTERRUPT
//! for the held request and the emulator answers it. A process that aborts while one of its
//! threads waits exits at once (its core dump waits for every thread to leave the kernel); a
//! handler installed with `SA_RESTART` sees the wait restarted, one without gets `EINTR` with
//! the remaining timeout written back and the auto-reset event the wait had taken set again.
//! All through real signals, threads and processes on the FUSE mount.

mod common;

use std::os::unix::process::ExitStatusExt as _;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use kfd_emu::Preset;
use kfd_sys::*;

use common::events::{Waited, event_data, wait_events};
use common::*;

/// Set in the environment of the child that aborts while it waits: the mount's root.
const CHILD_ENV: &str = "KFD_EMU_TEST_ABORTING_CHILD";
/// How long a signalled wait may take to end (it ends in milliseconds; the bound is for a
/// loaded machine).
const PROMPT: Duration = Duration::from_secs(10);

fn signal_event(kfd: &Kfd, auto_reset: bool) -> u32 {
    let mut a = kfd_ioctl_create_event_args {
        event_type: KFD_IOC_EVENT_SIGNAL,
        auto_reset: u32::from(auto_reset),
        ..Default::default()
    };
    kfd.ioctl(AMDKFD_IOC_CREATE_EVENT, &mut a)
        .expect("CREATE_EVENT");
    a.event_id
}

fn set_event(kfd: &Kfd, id: u32) {
    let mut a = kfd_ioctl_set_event_args {
        event_id: id,
        ..Default::default()
    };
    kfd.ioctl(AMDKFD_IOC_SET_EVENT, &mut a).expect("SET_EVENT");
}

/// WAIT_EVENTS on the events `ids` (ages not tracked).
fn wait(kfd: &Kfd, ids: &[u32], all: bool, timeout_ms: u32) -> Waited {
    let events: Vec<[u8; 48]> = ids.iter().map(|id| event_data(*id, 0)).collect();
    wait_events(kfd, &events, all, timeout_ms)
}

/// WAIT_EVENTS calls of process `pid` the emulator holds now.
fn blocked(emu: &TestEmu, pid: u32) -> u32 {
    emu.emu
        .stats()
        .processes
        .iter()
        .find(|p| p.pid == pid)
        .map_or(0, |p| p.blocked_waits)
}

fn own_thread() -> libc::pthread_t {
    // SAFETY: pthread_self has no preconditions.
    unsafe { libc::pthread_self() }
}

fn signal_thread(t: libc::pthread_t, sig: i32) {
    // SAFETY: `t` is a live thread of this process (it is joined after the signal).
    assert_eq!(unsafe { libc::pthread_kill(t, sig) }, 0);
}

/// Installs `handler` for `sig`, with or without `SA_RESTART`.
fn install(sig: i32, handler: extern "C" fn(i32), restart: bool) {
    // SAFETY: a zeroed sigaction is valid; the handler only touches atomics.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = if restart { libc::SA_RESTART } else { 0 };
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
    }
}

static RESTART_HANDLED: AtomicU32 = AtomicU32::new(0);
static EINTR_HANDLED: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_restart_signal(_: i32) {
    RESTART_HANDLED.fetch_add(1, Ordering::SeqCst);
}

extern "C" fn on_eintr_signal(_: i32) {
    EINTR_HANDLED.fetch_add(1, Ordering::SeqCst);
}

/// The child: waits forever on an event in a second thread, then aborts once the emulator
/// holds the wait (the parent watches).
fn aborting_child(root: &str) -> ! {
    let kfd = Kfd {
        file: open_rw(&std::path::Path::new(root).join("dev/kfd")),
    };
    let id = signal_event(&kfd, false);
    let kfd = std::sync::Arc::new(kfd);
    let k = kfd.clone();
    std::thread::spawn(move || wait(&k, &[id], false, u32::MAX));
    // The parent sees the held wait in stats.json; give it the pid to watch, then wait to be
    // told (by stdin closing) to abort.
    println!("waiting {}", std::process::id());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    // No core file (the kernel still stops every thread for the dump before it looks at the
    // limit: that wait is what a held request used to block).
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit reads the struct it is given.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
    std::process::abort();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_process_that_aborts_while_its_thread_waits_exits_at_once() {
    if let Ok(root) = std::env::var(CHILD_ENV) {
        aborting_child(&root);
    }
    require_root();
    let emu = mount_preset(Preset::Mi210);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_process_that_aborts_while_its_thread_waits_exits_at_once",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, emu.path(""))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let pid = loop {
        let mut line = String::new();
        if std::io::BufRead::read_line(&mut out, &mut line).unwrap() == 0 {
            panic!("the child ended before it waited: {:?}", child.wait());
        }
        // libtest may print "test NAME ... " on the same line first.
        if let Some(at) = line.find("waiting ") {
            break line[at + 8..].trim().parse::<u32>().unwrap();
        }
    };
    assert!(
        wait_until(PROMPT, || blocked(&emu, pid) == 1),
        "the child's WAIT_EVENTS is not held"
    );
    let start = Instant::now();
    drop(child.stdin.take());
    let mut status = None;
    let ended = wait_until(PROMPT, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !ended {
        // Without FUSE_INTERRUPT the child sits in D state until the mount goes: unmounting
        // (dropping the emulator) frees it; the test fails either way.
        drop(emu);
        let _ = child.wait();
        panic!("the aborting child did not exit within {PROMPT:?} (its waiting thread held it)");
    }
    let status = status.unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
    eprintln!(
        "aborting child exited {:?} after the abort",
        start.elapsed()
    );
    assert!(
        wait_until(PROMPT, || blocked(&emu, pid) == 0),
        "the emulator still holds the dead child's wait"
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_signal_with_sa_restart_restarts_the_wait() {
    require_root();
    install(libc::SIGUSR1, on_restart_signal, true);
    let emu = mount_preset(Preset::Mi210);
    let kfd = std::sync::Arc::new(emu.open_kfd());
    let id = signal_event(&kfd, true);
    let pid = std::process::id();
    let k = kfd.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        tx.send(own_thread()).unwrap();
        wait(&k, &[id], false, 60_000)
    });
    let thread = rx.recv().unwrap();
    assert!(wait_until(PROMPT, || blocked(&emu, pid) == 1));
    signal_thread(thread, libc::SIGUSR1);
    assert!(
        wait_until(PROMPT, || RESTART_HANDLED.load(Ordering::SeqCst) == 1),
        "the handler did not run while the thread waited"
    );
    // The call is restarted: the emulator holds a wait again, which the event ends.
    assert!(
        wait_until(PROMPT, || blocked(&emu, pid) == 1),
        "the wait was not restarted"
    );
    assert!(
        !waiter.is_finished(),
        "the wait returned instead of restarting"
    );
    set_event(&kfd, id);
    let w = waiter.join().unwrap();
    assert_eq!(w.result, Ok(0));
    assert_eq!(w.wait_result, KFD_IOC_WAIT_RESULT_COMPLETE);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_signal_without_sa_restart_ends_the_wait_with_eintr() {
    require_root();
    install(libc::SIGUSR2, on_eintr_signal, false);
    let emu = mount_preset(Preset::Mi210);
    let kfd = std::sync::Arc::new(emu.open_kfd());
    // An auto-reset event that is set (the wait takes it) and one that is not: a wait for all
    // blocks with the first consumed.
    let taken = signal_event(&kfd, true);
    let other = signal_event(&kfd, true);
    set_event(&kfd, taken);
    let pid = std::process::id();
    let k = kfd.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        tx.send(own_thread()).unwrap();
        wait(&k, &[taken, other], true, 60_000)
    });
    let thread = rx.recv().unwrap();
    assert!(wait_until(PROMPT, || blocked(&emu, pid) == 1));
    let sent = Instant::now();
    signal_thread(thread, libc::SIGUSR2);
    let w = waiter.join().unwrap();
    let left = w.timeout_left;
    assert!(sent.elapsed() < PROMPT);
    assert_eq!(EINTR_HANDLED.load(Ordering::SeqCst), 1);
    assert_eq!(w.result, Err(libc::EINTR));
    assert_eq!(w.wait_result, KFD_IOC_WAIT_RESULT_FAIL);
    assert!(
        left < 60_000 && left > 60_000 - PROMPT.as_millis() as u32,
        "the remaining timeout is written back: {left}"
    );
    assert_eq!(blocked(&emu, pid), 0);
    // The interrupted wait gave back the signal it had taken.
    let w = wait(&kfd, &[taken], false, 0);
    assert_eq!(
        (w.result, w.wait_result),
        (Ok(0), KFD_IOC_WAIT_RESULT_COMPLETE)
    );
}
