//! The shim's environment, read once at the first intercepted call.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use kfdq::policy::class::PriorityPolicy;
use kfdq::proto::MAX_WINDOW;
use kfdq::proto::peer::{AGENT_UID_ENV, AgentTrust};

/// Libraries whose own calls are never held. Prefix match on the file name of the object the
/// call comes from.
///
/// The math libraries (rocBLAS, hipBLAS, hipBLASLt, MIOpen and the others that reach HIP the
/// same way) are not on it: held at level 1 with the real libraries, their calls wait and, when
/// released, complete with unchanged statuses and no deadlock (docs/real-rocm.md, "The
/// libraries' root"), so a training job's GEMMs and convolutions are held like the rest of its work.
/// RCCL stays: a collective kernel spins on the GPU until every rank's kernel runs, so holding
/// one rank's launch while the others' already spin keeps their CUs busy instead of freeing
/// them, and ranks in other processes may not be held at all.
pub const DEFAULT_PASSTHROUGH: &[&str] = &["librccl"];

/// `DEBUG_HIP_DYNAMIC_QUEUES` unless the user chose. A boolean in HIP 6.4.3 and 7.2.4 (CLR's
/// `rocclr/utils/flags.hpp`: `release(bool, ..., false, ...)`, read as on for any non-zero
/// number), so 2 turns dynamic queue management on there, as 1 would; later CLR makes it a number
/// whose default is 2 (queue depth plus pipe distribution). It gives the null stream no queue of
/// its own (docs/shim.md, "Environment").
pub const DEFAULT_DYNAMIC_QUEUES: &str = "2";

static CONFIG: OnceLock<Config> = OnceLock::new();

/// The configuration (read from the environment on first use).
pub fn config() -> &'static Config {
    CONFIG.get_or_init(Config::from_env)
}

/// Everything the shim reads from its environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// Static priority policy (`KFDQ_CLASS`, `KFDQ_PRIORITY`).
    pub policy: PriorityPolicy,
    /// `KFDQ_CLASS` as given (trimmed), built-in or not: the agent decides which classes
    /// exist (its configuration), so the shim passes every name on in its hello.
    pub class: Option<String>,
    /// `KFDQ_SOCKET`: the agent's socket.
    pub socket: Option<PathBuf>,
    /// Passthrough library prefixes (`KFDQ_PASSTHROUGH`).
    pub passthrough: Vec<String>,
    /// `KFDQ_WINDOW`: the process's own in-flight window (the agent's class setting replaces it
    /// while connected).
    pub window: Option<u32>,
    /// `KFDQ_ACTIVITY_US`: how often the control thread samples its queues' activity while an
    /// agent is connected ([`DEFAULT_ACTIVITY_PERIOD`]).
    pub activity_period: Duration,
    /// Whose agent this process obeys (root, itself, `KFDQ_AGENT_UID`).
    pub agent_trust: AgentTrust,
    /// `KFDQ_REPROBE_EVERY`: while HIP may move streams, the most launches of a stream between
    /// two comparisons of write indices when no wrapped call gave the runtime a chance to move
    /// it ([`DEFAULT_REPROBE_EVERY`]).
    pub reprobe_every: u32,
    /// `KFDQ_LOG` set: log decisions to stderr.
    pub log: bool,
    /// `KFDQ_CHAIN_TRACE`: the file the control thread appends reaction-chain timestamps to
    /// (`kfdq::chain`, `chain.rs`).
    pub chain_trace: Option<PathBuf>,
    /// Problems with the values above, already worded for the user.
    pub warnings: Vec<String>,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Config {
        let var = |k: &str| std::env::var(k).ok();
        Config::from_lookup(crate::sys::effective_uid(), var)
    }

    /// Builds the configuration of a process running as `own_uid` from a variable lookup
    /// (tests pass a map).
    pub fn from_lookup(own_uid: u32, var: impl Fn(&str) -> Option<String>) -> Config {
        let class = var("KFDQ_CLASS");
        let priority = var("KFDQ_PRIORITY");
        let (policy, mut warnings) =
            PriorityPolicy::from_values(class.as_deref(), priority.as_deref());
        let class = class.map(|c| c.trim().to_owned()).filter(|c| !c.is_empty());
        let socket = var("KFDQ_SOCKET")
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        if socket.is_some() && policy.class.is_none() {
            // A class only the agent's configuration defines: the agent applies it (and says
            // so, or why not, in `kfdq status`); nothing to warn about here.
            warnings.retain(|w| !w.starts_with("KFDQ_CLASS="));
        }
        let (agent_trust, trust_warning) = AgentTrust::new(own_uid, var(AGENT_UID_ENV).as_deref());
        warnings.extend(trust_warning);
        let window = match parse_window(var("KFDQ_WINDOW").as_deref()) {
            Ok(w) => w,
            Err(w) => {
                warnings.push(w.to_string());
                None
            }
        };
        let activity_period = match parse_activity_period(var(ACTIVITY_ENV).as_deref()) {
            Ok(p) => p,
            Err(w) => {
                warnings.push(w.to_string());
                DEFAULT_ACTIVITY_PERIOD
            }
        };
        let reprobe_every = match parse_reprobe_every(var(REPROBE_ENV).as_deref()) {
            Ok(n) => n,
            Err(w) => {
                warnings.push(w.to_string());
                DEFAULT_REPROBE_EVERY
            }
        };
        Config {
            policy,
            activity_period,
            reprobe_every,
            class,
            socket,
            passthrough: passthrough_list(var("KFDQ_PASSTHROUGH").as_deref()),
            agent_trust,
            window,
            log: var("KFDQ_LOG").is_some_and(|v| !v.is_empty() && v != "0"),
            chain_trace: var(kfdq::chain::ENV)
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
            warnings,
        }
    }
}

/// The passthrough list for a `KFDQ_PASSTHROUGH` value: unset = the default list; `a,b` =
/// exactly those; `+a,+b` (first entry starting with `+`) = the default list plus those;
/// empty = no passthrough at all.
pub fn passthrough_list(value: Option<&str>) -> Vec<String> {
    let defaults = || {
        DEFAULT_PASSTHROUGH
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let Some(v) = value else { return defaults() };
    let entries: Vec<&str> = v
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let extend = entries.first().is_some_and(|e| e.starts_with('+'));
    let mut list = if extend { defaults() } else { Vec::new() };
    for e in entries {
        let e = e.trim_start_matches('+');
        if !e.is_empty() && !list.iter().any(|x| x == e) {
            list.push(e.to_string());
        }
    }
    list
}

/// An environment setting the shim ignores, with the rule it broke (the process runs with the
/// default instead, and says so once).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{var}={value:?} ignored: use {rule}")]
pub struct BadSetting {
    /// The variable.
    pub var: &'static str,
    /// Its value, trimmed.
    pub value: String,
    /// What it takes.
    pub rule: String,
}

/// A `KFDQ_WINDOW` value: unset, empty, `0` or `unbounded` = no window; `1`..=`MAX_WINDOW`
/// dispatches in flight per queue. Anything else is refused with the rule (no window).
pub fn parse_window(value: Option<&str>) -> Result<Option<u32>, BadSetting> {
    let Some(v) = value.map(str::trim) else {
        return Ok(None);
    };
    if v.is_empty() || v == "0" || v.eq_ignore_ascii_case("unbounded") {
        return Ok(None);
    }
    match v.parse::<u32>() {
        Ok(w) if w <= MAX_WINDOW => Ok(Some(w)),
        _ => Err(BadSetting {
            var: "KFDQ_WINDOW",
            value: v.to_string(),
            rule: format!("a number of dispatches 1..={MAX_WINDOW}, or 0 / unbounded for none"),
        }),
    }
}

/// Names the re-probe sampling period.
pub const REPROBE_ENV: &str = "KFDQ_REPROBE_EVERY";

/// How many launches of a stream may pass without a comparison of write indices when nothing
/// the shim saw gave the runtime a chance to move it: the staleness bound for moves at release
/// points the shim does not wrap (`HostQueue::finish` from `hipFree`, a blocking copy, a module
/// unload, ...; `state/dynamic.rs`). A named guess (no public source fixes it): 16 makes the
/// comparisons' cost a sixteenth of their cost at every launch (docs/performance.md) while the
/// launches of a stream moved unseen go unattributed (past its in-flight window, beside its
/// level-2/3 target) for at most 17; `KFDQ_REPROBE_EVERY` sets it (1: every launch, the
/// behaviour before sampling).
pub const DEFAULT_REPROBE_EVERY: u32 = 16;

/// A `KFDQ_REPROBE_EVERY` value: unset = [`DEFAULT_REPROBE_EVERY`]; else a whole number of
/// launches from 1 to 65536.
pub fn parse_reprobe_every(value: Option<&str>) -> Result<u32, BadSetting> {
    let Some(v) = value else {
        return Ok(DEFAULT_REPROBE_EVERY);
    };
    match v.trim().parse::<u32>() {
        Ok(n @ 1..=65536) => Ok(n),
        _ => Err(BadSetting {
            var: REPROBE_ENV,
            value: v.trim().to_string(),
            rule: format!(
                "a whole number of launches from 1 to 65536 (1 compares write indices at every launch); using {DEFAULT_REPROBE_EVERY}"
            ),
        }),
    }
}

/// Names the activity sampling period.
pub const ACTIVITY_ENV: &str = "KFDQ_ACTIVITY_US";

/// The sampling period's default and accepted range, shared with the agent's tracer.
pub use kfdq::proto::{ACTIVITY_RANGE_US, DEFAULT_ACTIVITY_PERIOD};

/// A `KFDQ_ACTIVITY_US` value: unset or empty = the default; else µs within [`ACTIVITY_RANGE_US`].
pub fn parse_activity_period(value: Option<&str>) -> Result<Duration, BadSetting> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(DEFAULT_ACTIVITY_PERIOD);
    };
    match v.parse::<u64>() {
        Ok(us) if ACTIVITY_RANGE_US.contains(&us) => Ok(Duration::from_micros(us)),
        _ => Err(BadSetting {
            var: ACTIVITY_ENV,
            value: v.to_string(),
            rule: format!(
                "a period of {}..={} microseconds (default {})",
                ACTIVITY_RANGE_US.start(),
                ACTIVITY_RANGE_US.end(),
                DEFAULT_ACTIVITY_PERIOD.as_micros()
            ),
        }),
    }
}

/// True when a caller in object `file` (file name only) is a passthrough library.
pub fn is_passthrough(list: &[String], file: &str) -> bool {
    list.iter().any(|p| file.starts_with(p.as_str()))
}

/// The HIP runtime itself: never held, whatever `KFDQ_PASSTHROUGH` says (a rule of its own,
/// applied next to the list in `launch::caller_is_passthrough`). libamdhip64 calls some of its
/// own exported functions through its PLT (5.2 does so for `hipMemcpy` and `hipMemcpyAsync`),
/// which lands in the shim's wrappers, possibly while it holds internal locks. The outer call
/// was the application's (gated there if the shim wraps it); the inner one is never held.
pub fn is_hip_runtime(file: &str) -> bool {
    file.starts_with("libamdhip64.")
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn the_hip_runtime_is_recognised() {
        assert!(is_hip_runtime("libamdhip64.so.6"));
        assert!(is_hip_runtime("libamdhip64.so.5.2.21153"));
        assert!(!is_hip_runtime("libamdhip64_wrapper.so"));
        assert!(!is_hip_runtime("libtorch_hip.so"));
    }

    #[test]
    fn passthrough_default_override_extend() {
        assert_eq!(passthrough_list(None).len(), DEFAULT_PASSTHROUGH.len());
        assert_eq!(
            passthrough_list(Some("libfoo, libbar")),
            vec!["libfoo", "libbar"]
        );
        let ext = passthrough_list(Some("+libfoo,+librccl"));
        assert_eq!(ext.len(), DEFAULT_PASSTHROUGH.len() + 1);
        assert!(ext.iter().any(|e| e == "libfoo"));
        assert!(passthrough_list(Some("")).is_empty());
    }

    #[test]
    fn passthrough_matches_file_name_prefixes() {
        let l = passthrough_list(Some("libhipblas,librocblas,libMIOpen"));
        assert!(is_passthrough(&l, "libhipblaslt.so.0"));
        assert!(is_passthrough(&l, "librocblas.so.4.2"));
        assert!(is_passthrough(&l, "libMIOpen.so.1"));
        assert!(!is_passthrough(&l, "libamdhip64.so.6"));
        assert!(!is_passthrough(&l, "app"));
        assert!(
            !is_passthrough(&l, "libmiopen.so.1"),
            "prefixes are case-sensitive, as file names are"
        );
    }

    #[test]
    fn the_default_list_holds_the_math_libraries_and_passes_rccl() {
        let l = passthrough_list(None);
        for lib in [
            "librocblas.so.4",
            "libhipblaslt.so.1",
            "libMIOpen.so.1",
            "libhipblas.so.2",
        ] {
            assert!(!is_passthrough(&l, lib), "{lib} is held at level 1");
        }
        assert!(is_passthrough(&l, "librccl.so.1"));
    }

    #[test]
    fn window_values() {
        assert_eq!(parse_window(None), Ok(None));
        assert_eq!(parse_window(Some("0")), Ok(None));
        assert_eq!(parse_window(Some("unbounded")), Ok(None));
        assert_eq!(parse_window(Some(" 4 ")), Ok(Some(4)));
        for bad in ["-1", "four", "4097"] {
            let e = parse_window(Some(bad)).unwrap_err();
            assert_eq!((e.var, e.value.as_str()), ("KFDQ_WINDOW", bad));
            assert!(e.to_string().contains("1..=4096"), "{e}");
        }
    }

    #[test]
    fn activity_periods() {
        assert_eq!(parse_activity_period(None), Ok(DEFAULT_ACTIVITY_PERIOD));
        assert_eq!(
            parse_activity_period(Some(" ")),
            Ok(DEFAULT_ACTIVITY_PERIOD)
        );
        assert_eq!(
            parse_activity_period(Some("500")),
            Ok(Duration::from_micros(500))
        );
        for bad in ["100", "200000", "2ms", "-1"] {
            let e = parse_activity_period(Some(bad)).unwrap_err().to_string();
            assert!(
                e.contains("KFDQ_ACTIVITY_US") && e.contains("250..=100000"),
                "{e}"
            );
        }
    }

    #[test]
    fn config_from_lookup() {
        let env: HashMap<&str, &str> = [
            ("KFDQ_CLASS", "batch"),
            ("KFDQ_PRIORITY", "abc"),
            ("KFDQ_SOCKET", "/run/kfdq.sock"),
            ("KFDQ_LOG", "1"),
            ("KFDQ_AGENT_UID", "77"),
        ]
        .into();
        let c = Config::from_lookup(1000, |k| env.get(k).map(|v| v.to_string()));
        assert_eq!(c.agent_trust.uids(), &[0, 77, 1000]);
        assert_eq!(c.policy.class, Some(kfdq::policy::class::Class::Batch));
        assert_eq!(c.policy.forced, None);
        assert_eq!(c.warnings.len(), 1);
        assert_eq!(c.socket, Some(PathBuf::from("/run/kfdq.sock")));
        assert!(c.log);
        let c = Config::from_lookup(1000, |_| None);
        assert_eq!(c.agent_trust.uids(), &[0, 1000]);
        assert!(c.socket.is_none() && !c.log && c.warnings.is_empty());
    }
}
