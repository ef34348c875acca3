//! The reaction chain's helpers (`kfdq bench`, docs/hardware.md): the shape of their work and
//! how the batch helper reads its preemption from its completions. Shared by the raw helpers
//! (`kfdq bench --helper ROLE`) and the HIP ones (`tools/bench-hip`), which speak one line
//! protocol on stdin/stdout:
//!
//! | bench says | helper answers |
//! |---|---|
//! | (start) | `ready` |
//! | `stream NS_PER_ITERATION` (batch) | `running` once its first packet completed |
//! | `go NS_PER_ITERATION` (latency) | `done LAUNCH_NS END_NS` (CLOCK_MONOTONIC) |
//! | `report LAUNCH_NS END_NS` (batch) | `reaction US release US`, or `reaction none` |
//! | `quit` | (exits) |

/// Packets of the batch job's stream per sample (200 µs each: 80 ms of work).
pub const BATCH_PACKETS: u32 = 400;
/// Work-group time of every helper packet.
pub const PACKET_NS: u64 = 200_000;
/// The latency request: packets of [`PACKET_NS`] back to back (20 ms). A request of many
/// kernels, as a real one is: the shim sees a queue busy while packets wait in it (its read
/// index behind its write index), so one long dispatch would look idle once fetched.
pub const LATENCY_PACKETS: u32 = 100;
/// Waves (one-wave work-groups) of each helper packet.
pub const WAVES: u32 = 64;
/// The spin kernel's (`kernels/spin.hip`, whose argument is an iteration count) time per
/// iteration in the emulator's model, picoseconds: `s_sleep 1` sleeps about 64 clocks (AMD CDNA3
/// ISA reference, S_SLEEP: "approximately 64 x SIMM16[6:0] clocks") at the MI300X's peak engine
/// clock of 2100 MHz (AMD Instinct MI300X data sheet): 30.476 ns. The loop's own few
/// instructions are not counted (an assumption; on silicon the kernel takes what it takes, which
/// `kfdq bench`'s calibration measures). `kfdq demo` gives it to kfd-emu
/// (`work_group_time_by_arg`) and `kfdq-hipwork` turns work-group times into iterations with it.
pub const SPIN_PS_PER_ITERATION: u64 = 30_476;
/// A gap of this many packets without a completion is the batch job stopped.
pub const GAP_PACKETS: u64 = 4;

/// (start, end) of the batch job's preemption, ns: its longest pause in completions (`changes`,
/// CLOCK_MONOTONIC, ascending) that began before the latency work ended (`end_ns`) and ended
/// after its launch (`launch_ns`), if longer than [`GAP_PACKETS`] packets. The longest, not the
/// first: the completions a process sees come in bursts on a loaded host.
pub fn chain(changes: &[u64], launch_ns: u64, end_ns: u64) -> Option<(u64, u64)> {
    changes
        .windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|&(a, b)| a < end_ns && b > launch_ns)
        .max_by_key(|&(a, b)| b - a)
        .filter(|&(a, b)| b - a > GAP_PACKETS * PACKET_NS)
}

/// The batch helper's answer to `report LAUNCH_NS END_NS`: reaction (launch -> the pause's
/// start) and release (the latency work's end -> the pause's end), µs.
pub fn answer(changes: &[u64], launch_ns: u64, end_ns: u64) -> String {
    let us = |from: u64, to: u64| (to as f64 - from as f64) / 1e3;
    match chain(changes, launch_ns, end_ns) {
        Some((a, b)) => format!("reaction {} release {}", us(launch_ns, a), us(end_ns, b)),
        None => "reaction none".to_string(),
    }
}

/// `report LAUNCH_NS END_NS` -> the two times.
pub fn parse_report(line: &str) -> Option<(u64, u64)> {
    let mut w = line.split_whitespace();
    if w.next() != Some("report") {
        return None;
    }
    let launch = w.next()?.parse().ok()?;
    let end = w.next()?.parse().ok()?;
    w.next().is_none().then_some((launch, end))
}

/// CLOCK_MONOTONIC, ns (the clock every helper's times are on).
pub fn mono_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_is_the_longest_pause_during_the_latency_work() {
        let ms = 1_000_000;
        // A burst pause of 3 ms across the launch (0), the preemption from 2.6 ms to 23.4 ms,
        // the latency work ending at 21.9 ms.
        let launch = 10 * ms;
        let at = |x: f64| (launch as f64 + x * ms as f64) as u64;
        let changes = [at(-2.5), at(-0.5), at(1.7), at(2.6), at(23.4), at(23.6)];
        assert_eq!(chain(&changes, launch, at(21.9)), Some((at(2.6), at(23.4))));
        assert_eq!(
            answer(&changes, launch, at(21.9)),
            "reaction 2600 release 1500"
        );
        // No pause longer than four packets: not stopped.
        let steady: Vec<u64> = (0..200).map(|i| launch + i * PACKET_NS).collect();
        assert_eq!(chain(&steady, launch + ms, launch + 20 * ms), None);
        assert_eq!(
            answer(&steady, launch + ms, launch + 20 * ms),
            "reaction none"
        );
    }

    #[test]
    fn a_report_line_has_exactly_two_times() {
        assert_eq!(parse_report("report 5 9"), Some((5, 9)));
        for bad in ["report 5", "report 5 9 1", "reprot 5 9", "report x 9"] {
            assert_eq!(parse_report(bad), None, "{bad}");
        }
    }
}
