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

fn set_default_env(key: &str, value: &str) {
    if std::env::var_os(key).is_none() {
        // SAFETY: setenv races with concurrent getenv in other threads. This runs from the
        // load-time constructor below (before `main`, one thread) or, if that did not run, at the
        // first intercepted call, before the call is forwarded to the runtime.
        unsafe { std::env::set_var(key, value) };
    }
}

/// The runtime's environment defaults, set when the shim is loaded: the runtime reads them at
/// its initialisation, which the first HIP call of any kind triggers — possibly one the shim
/// does not wrap (`hipGetDeviceCount`, as PyTorch does first). Nothing else happens at load
/// (docs/field-reports.md, lesson 4: work in constructors hung `import torch`).
extern "C" fn env_defaults_at_load() {
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
    // Give every stream its own hardware queue where the runtime allows it, and the null stream
    // a dedicated one (ROCclr); the user's own settings win. Normally done at load already.
    env_defaults_at_load();
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
