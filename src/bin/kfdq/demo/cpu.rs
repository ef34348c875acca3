//! Host CPU in a phase's window: how many of this machine's cores the batch job, kfdqd and
//! kfd-emu used while the latency client ran. Each is counted as its process group (the demo
//! starts every child in a group of its own, so a workload started through a launcher or a
//! sandbox counts whole), from `/proc/<pid>/stat`'s user and system time at the window's start
//! and end. On a node of many cores this is small; on a VM of two it says whose host work a
//! request competes with (docs/demo.md, "Host CPU").

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;

/// A process group the window watches: its name in the report and its id.
pub type Group = (&'static str, u32);

/// CPU time per watched group at one moment, in clock ticks, and that moment.
pub struct Sample {
    ticks: BTreeMap<&'static str, u64>,
    at: Instant,
}

/// Cores used per group over a window: CPU seconds / window seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HostCpu {
    /// The batch job (its process group).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lp: Option<f64>,
    /// kfdqd.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kfdqd: Option<f64>,
    /// kfd-emu, when the demo mounted it (its CP, its FUSE threads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator: Option<f64>,
}

/// The process group and the user + system ticks of one `/proc/<pid>/stat` text (fields 5,
/// 14 and 15).
fn group_and_ticks(stat: &str) -> Option<(u32, u64)> {
    let [pgrp, utime, stime] = kfdq::procfs::stat_fields(stat, [5, 14, 15])?;
    Some((u32::try_from(pgrp).ok()?, utime + stime))
}

/// The watched groups' CPU time now (a process that left its group, or exited, no longer
/// counts: the figure is a lower bound).
pub fn sample(groups: &[Group]) -> Sample {
    let mut ticks: BTreeMap<&'static str, u64> = groups.iter().map(|g| (g.0, 0)).collect();
    let at = Instant::now();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Sample { ticks, at };
    };
    for e in dir.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        if let Some((pgrp, t)) = group_and_ticks(&stat) {
            for (g, id) in groups {
                if *id == pgrp {
                    *ticks.entry(g).or_default() += t;
                }
            }
        }
    }
    Sample { ticks, at }
}

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`).
fn ticks_per_s() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |t| t as f64)
}

/// Cores each group used from sample `a` to the later sample `b`.
pub fn between(a: &Sample, b: &Sample) -> HostCpu {
    let hz = ticks_per_s();
    let window_s = b.at.duration_since(a.at).as_secs_f64();
    let cores = |g: &str| {
        let (x, y) = (a.ticks.get(g)?, b.ticks.get(g)?);
        (window_s > 0.0).then(|| y.saturating_sub(*x) as f64 / hz / window_s)
    };
    HostCpu {
        lp: cores(LP),
        kfdqd: cores(KFDQD),
        emulator: cores(EMULATOR),
    }
}

/// The groups' names.
pub const LP: &str = "lp";
pub const KFDQD: &str = "kfdqd";
pub const EMULATOR: &str = "emulator";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_text_gives_its_group_and_cpu_whatever_the_name_holds() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
        let line = "4242 (a (b) c) S 1 4240 4240 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 3 0";
        assert_eq!(group_and_ticks(line), Some((4240, 300)));
        assert_eq!(group_and_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn this_process_group_spends_cpu_while_it_spins() {
        let me = (LP, nix::unistd::getpgrp().as_raw() as u32);
        let a = sample(&[me]);
        let mut x = 0u64;
        // Until the group's ticks moved (never a fixed time: a busy machine only delays it).
        let b = loop {
            for _ in 0..1_000_000 {
                x = x.wrapping_add(std::hint::black_box(1));
            }
            let b = sample(&[me]);
            if b.ticks[LP] > a.ticks[LP] {
                break b;
            }
        };
        let c = between(&a, &b);
        assert!(c.lp.is_some_and(|v| v > 0.0), "{c:?} {x}");
        assert_eq!(c.kfdqd, None);
    }
}
