//! Lazy initialisation (never in a constructor: docs/field-reports.md, lesson 4), fork and exit handling.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::config::{DEFAULT_DYNAMIC_QUEUES, config};
use crate::guard::guarded;
use crate::state::{F_READY, FLAGS, FORK_GEN, STATE};

static INIT: AtomicU8 = AtomicU8::new(0);
const INIT_NONE: u8 = 0;
const INIT_RUNNING: u8 = 1;
const INIT_DONE: u8 = 2;

static HANDLERS: AtomicBool = AtomicBool::new(false);

thread_local! {
    static IN_INIT: Cell<bool> = const { Cell::new(false) };
}

/// Initialises the shim on first use. Re-entrant: a call from inside initialisation on the
/// same thread returns at once; other threads wait for it to finish.
#[inline(always)]
pub fn ensure_init() {
    if FLAGS.load(Ordering::Acquire) & F_READY == 0 {
        init_slow();
    }
}

#[cold]
#[inline(never)]
fn init_slow() {
    loop {
        match INIT.compare_exchange(INIT_NONE, INIT_RUNNING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                IN_INIT.with(|c| c.set(true));
                guarded(do_init);
                IN_INIT.with(|c| c.set(false));
                FLAGS.fetch_or(F_READY, Ordering::AcqRel);
                INIT.store(INIT_DONE, Ordering::Release);
                return;
            }
            Err(INIT_DONE) => return,
            Err(_) => {
                if IN_INIT.with(Cell::get) {
                    return;
                }
                std::thread::yield_now();
            }
        }
    }
}

/// The environment defaults were not set at load: the process already ran other threads (the
/// shim was `dlopen`ed), where `setenv` would race their `getenv`. Reported at initialisation.
static ENV_NOT_SET: AtomicBool = AtomicBool::new(false);

/// The number of threads of this process (`/proc/self/stat`, field 20), when it can be read.
fn threads() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    kfdq::procfs::stat_fields(&stat, [20]).map(|[n]| n)
}

#[cfg_attr(test, allow(dead_code))]
fn set_default_env(key: &str, value: &str) {
    if std::env::var_os(key).is_none() {
        // SAFETY: setenv races only with other threads' getenv/setenv, and the caller
        // (`env_defaults_at_load`) runs this only when the process has one thread, the calling
        // one: no other thread exists to race it, and none can start while this one is here.
        unsafe { std::env::set_var(key, value) };
    }
}

/// The runtime's environment defaults, set when the shim is loaded: the runtime reads them at
/// its initialisation, which the first HIP call of any kind triggers — possibly one the shim
/// does not wrap (`hipGetDeviceCount`, as PyTorch does first). Nothing else happens at load
/// (docs/field-reports.md, lesson 4: work in constructors hung `import torch`). Preloaded, the
/// shim loads before `main`, with one thread; `dlopen`ed into a process that already runs
/// threads, nothing is set (a warning says so at initialisation).
#[cfg_attr(test, allow(dead_code))]
extern "C" fn env_defaults_at_load() {
    if threads() != Some(1) {
        ENV_NOT_SET.store(true, Ordering::Relaxed);
        return;
    }
    // The built-in value for the class, unless the user or `kfdq run` (the agent's value)
    // chose; docs/policy.md, "Hardware queues per class".
    let class = std::env::var("KFDQ_CLASS").ok();
    set_default_env(
        "GPU_MAX_HW_QUEUES",
        &kfdq::policy::class::hw_queues_for(class.as_deref()).to_string(),
    );
    set_default_env("DEBUG_HIP_DYNAMIC_QUEUES", DEFAULT_DYNAMIC_QUEUES);
}

#[cfg(not(test))]
#[used]
#[unsafe(link_section = ".init_array")]
static ENV_DEFAULTS_AT_LOAD: extern "C" fn() = env_defaults_at_load;

fn do_init() {
    let cfg = config();
    crate::log::VERBOSE.store(cfg.log, Ordering::Relaxed);
    {
        let mut st = STATE.lock();
        st.policy = cfg.policy;
        crate::window_setting::set(cfg.window);
        // The built-in name's canonical spelling, else the name as given (for the agent).
        st.class = cfg
            .policy
            .class
            .map(|c| c.name().to_string())
            .or_else(|| cfg.class.clone());
        for w in &cfg.warnings {
            st.report(w.clone());
        }
        // The runtime's defaults (a hardware queue per stream where it allows, a dedicated one
        // for the null stream; the user's own settings win) are set at load only.
        if ENV_NOT_SET.load(Ordering::Relaxed) {
            let hw_queues = kfdq::policy::class::hw_queues_for(st.class.as_deref());
            st.report(format!(
                "the shim was loaded into a process that already ran threads (dlopen), so it did not set \
                 GPU_MAX_HW_QUEUES={} and DEBUG_HIP_DYNAMIC_QUEUES={DEFAULT_DYNAMIC_QUEUES} (setting the \
                 environment then races the other threads); set them before the process starts, or preload \
                 the shim (LD_PRELOAD, `kfdq run`)",
                hw_queues
            ));
        }
        st.refresh_flags();
    }
    if !HANDLERS.swap(true, Ordering::AcqRel) {
        // SAFETY: registering plain `extern "C"` handlers that live as long as the process (a
        // preloaded library is never unloaded).
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
            libc::atexit(at_exit);
        }
    }
    crate::log::debug(|| {
        format!(
            "initialised: policy {:?}, agent socket {:?}",
            cfg.policy, cfg.socket
        )
    });
    crate::control::start();
}

/// `pthread_atfork` child handler: the child inherits none of the parent's KFD state (its
/// `/dev/kfd` fd is unusable), so it starts with an empty registry, no holds and no control
/// thread, and initialises again on its next HIP call.
extern "C" fn after_fork_child() {
    // SAFETY: pthread_atfork child handler: the calling thread is the only one.
    unsafe { crate::state::reset_after_fork() };
    crate::index_reads::reset_after_fork();
    FORK_GEN.fetch_add(1, Ordering::Relaxed);
    // The parent's queue indices are private copies in the child: never wait on them.
    crate::window_setting::WINDOW_GEN.fetch_add(1, Ordering::AcqRel);
    FLAGS.store(0, Ordering::Release);
    INIT.store(INIT_NONE, Ordering::Release);
    crate::control::STARTED.store(false, Ordering::Release);
    crate::registry_file::WROTE_PID.store(0, Ordering::Relaxed);
    crate::context::reset_thread_after_fork();
    crate::edges::reset_after_fork();
    crate::hint::reset_after_fork();
    crate::watch::reset_after_fork();
    crate::fd_stream::reset_after_fork();
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(crate::registry_file::remove_registry_file);
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_thread_count_is_read() {
        let n = super::threads().expect("/proc/self/stat");
        assert!(n >= 1, "{n}");
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || rx.recv());
        assert!(super::threads().unwrap() >= 2, "a second thread is counted");
        drop(tx);
        let _ = t.join();
    }
}
