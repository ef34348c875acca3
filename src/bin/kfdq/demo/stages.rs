//! Where a reaction's time goes: each paired request's chain, from the timestamps the latency
//! client's shim, kfdqd and the batch job's shim recorded (`KFDQ_CHAIN_TRACE`, `kfdq::chain`)
//! and the emulator's stop time, cut into stages (docs/demo.md, "Stages").

use std::path::Path;

use kfdq::chain::Stage;
use kfdq::stats::nearest_rank_sorted;
use serde::Serialize;

use super::reaction::Paired;

/// The events each side recorded, in file order.
#[derive(Debug, Clone, Default)]
pub struct Traces {
    /// The latency client's shim.
    pub hp: Vec<(Stage, f64)>,
    /// kfdqd.
    pub agent: Vec<(Stage, f64)>,
    /// The batch job's shim.
    pub lp: Vec<(Stage, f64)>,
}

impl Traces {
    /// The three files a phase's processes appended to (a missing one recorded nothing).
    pub fn read(hp: &Path, agent: &Path, lp: &Path) -> Traces {
        let read = |p: &Path| {
            std::fs::read_to_string(p)
                .map(|t| kfdq::chain::parse(&t))
                .unwrap_or_default()
        };
        Traces {
            hp: read(hp),
            agent: read(agent),
            lp: read(lp),
        }
    }
}

/// A stage of the chain, between two of its points.
#[derive(Debug, Clone, Copy)]
struct Span {
    name: &'static str,
    from: Point,
    to: Point,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    Start,
    Woke,
    Edge,
    Read,
    Decided,
    Written,
    Recv,
    IoctlIn,
    Stopped,
    IoctlOut,
    Ack,
    /// The direct path: the batch job's watch thread woke on the board.
    Watcher,
}

const POINTS: usize = 12;

/// The stages, in chain order, then the three the lab takes (`preempt-lab sim --edge-us`,
/// `--decision-us`, `--command-us`), then the direct path's (`direct_edges`: no agent in the
/// chain; the batch job's watch thread woke instead of its control thread reading a command).
/// A stage whose points a chain lacks is left out for that request.
const SPANS: [Span; 15] = [
    span("launch_to_wake", Point::Start, Point::Woke),
    span("wake_to_edge_sent", Point::Woke, Point::Edge),
    span("edge_to_agent", Point::Edge, Point::Read),
    span("agent_decide", Point::Read, Point::Decided),
    span("agent_write", Point::Decided, Point::Written),
    span("command_to_shim", Point::Written, Point::Recv),
    span("shim_to_ioctl", Point::Recv, Point::IoctlIn),
    span("ioctl_to_stop", Point::IoctlIn, Point::Stopped),
    span("stop_to_return", Point::Stopped, Point::IoctlOut),
    span("return_to_ack", Point::IoctlOut, Point::Ack),
    span("edge", Point::Start, Point::Read),
    span("decision", Point::Read, Point::Written),
    span("command", Point::Written, Point::Stopped),
    span("launch_to_watcher", Point::Start, Point::Watcher),
    span("watcher_to_ioctl", Point::Watcher, Point::IoctlIn),
];

const fn span(name: &'static str, from: Point, to: Point) -> Span {
    Span { name, from, to }
}

/// The first event of `stage` at or after `after` and before `before`: its index and time.
fn first(ev: &[(Stage, f64)], stage: Stage, after: f64, before: f64) -> Option<(usize, f64)> {
    ev.iter()
        .enumerate()
        .find(|(_, (s, t))| *s == stage && *t >= after && *t < before)
        .map(|(i, (_, t))| (i, *t))
}

/// One request's points (NaN: a point its chain does not have), or `None` when a side recorded
/// no step of it.
fn chain(p: &Paired, tr: &Traces) -> Option<[f64; POINTS]> {
    let c = agent_chain(p, tr)
        .or_else(|| direct_chain(p, tr))
        .or_else(|| traced_chain(p, tr))?;
    causal(&c).then_some(c)
}

/// Every stage of the chain ends no earlier than it starts. A chain found by the searches that
/// is not (under load: the batch job was stopped by an earlier command, whose ioctl came before
/// this request's start, and the search took a later command's ioctl) is not this request's
/// chain and is left out, as an incomplete one is.
fn causal(c: &[f64; POINTS]) -> bool {
    SPANS.iter().all(|s| {
        c[s.to as usize].partial_cmp(&c[s.from as usize]) != Some(std::cmp::Ordering::Less)
    })
}

/// A latency client without the shim (`level2-traced`): it stamps nothing, so the chain starts
/// at the agent's read of the tracer's busy sample; the rest is the agent's chain.
fn traced_chain(p: &Paired, tr: &Traces) -> Option<[f64; POINTS]> {
    if !tr.hp.is_empty() {
        return None;
    }
    let end = p.next_us;
    let (_, read) = first(&tr.agent, Stage::AgentRead, p.start_us, end)?;
    agent_side(p, tr, read, &[])
}

/// The direct path's chain: the batch job's watch thread woke on the board, its ioctls, its
/// report (no agent, no edge message).
fn direct_chain(p: &Paired, tr: &Traces) -> Option<[f64; POINTS]> {
    let end = p.next_us;
    let (_, recv) = first(&tr.lp, Stage::CmdRecv, p.start_us, end)?;
    if first(&tr.agent, Stage::AgentWritten, p.start_us, recv).is_some() {
        return None;
    }
    let (ioctl_in, ioctl_out, ack) = batch_side(tr, recv, end)?;
    Some(points(&[
        (Point::Start, p.start_us),
        (Point::Watcher, recv),
        (Point::IoctlIn, ioctl_in),
        (Point::Stopped, p.stopped_us),
        (Point::IoctlOut, ioctl_out),
        (Point::Ack, ack),
    ]))
}

/// The batch side of a chain after its shim had the command (or its watch woke) at `recv`:
/// the first ioctl in, the last ioctl out before the ack, the ack.
fn batch_side(tr: &Traces, recv: f64, end: f64) -> Option<(f64, f64, f64)> {
    let (ai, ack) = first(&tr.lp, Stage::AckSent, recv, end)?;
    let (_, ioctl_in) = first(&tr.lp, Stage::IoctlIn, recv, ack)?;
    // The last ioctl of the command.
    let ioctl_out = tr.lp[..ai]
        .iter()
        .rev()
        .find(|(s, t)| *s == Stage::IoctlOut && *t >= ioctl_in)
        .map(|(_, t)| *t)?;
    Some((ioctl_in, ioctl_out, ack))
}

/// A chain's points; those not given are NaN.
fn points(given: &[(Point, f64)]) -> [f64; POINTS] {
    let mut v = [f64::NAN; POINTS];
    for &(pt, t) in given {
        v[pt as usize] = t;
    }
    v
}

/// The agent's chain: edge, decision, command.
fn agent_chain(p: &Paired, tr: &Traces) -> Option<[f64; POINTS]> {
    let end = p.next_us;
    let (ei, edge) = first(&tr.hp, Stage::EdgeSent, p.start_us, end)?;
    // Marked just before its edge, at the wake-up that sent it.
    let woke = match ei.checked_sub(1).map(|i| tr.hp[i]) {
        Some((Stage::HpWoke, t)) if t >= p.start_us => t,
        _ => edge,
    };
    // Each side stamps a message before writing it, so the reader's stamp comes after.
    let (_, read) = first(&tr.agent, Stage::AgentRead, edge, end)?;
    agent_side(p, tr, read, &[(Point::Woke, woke), (Point::Edge, edge)])
}

/// The agent's chain from its read of the edge at `read` on, with the latency side's points
/// `hp`.
fn agent_side(p: &Paired, tr: &Traces, read: f64, hp: &[(Point, f64)]) -> Option<[f64; POINTS]> {
    let end = p.next_us;
    let (_, decided) = first(&tr.agent, Stage::AgentDecided, read, end)?;
    let (_, written) = first(&tr.agent, Stage::AgentWritten, decided, end)?;
    let (_, recv) = first(&tr.lp, Stage::CmdRecv, written, end)?;
    let (ioctl_in, ioctl_out, ack) = batch_side(tr, recv, end)?;
    let mut given = vec![(Point::Start, p.start_us)];
    given.extend_from_slice(hp);
    given.extend([
        (Point::Read, read),
        (Point::Decided, decided),
        (Point::Written, written),
        (Point::Recv, recv),
        (Point::IoctlIn, ioctl_in),
        (Point::Stopped, p.stopped_us),
        (Point::IoctlOut, ioctl_out),
        (Point::Ack, ack),
    ]);
    Some(points(&given))
}

/// Every paired request's stage durations, µs: one vector per stage of [`SPANS`], in
/// request order, over the requests whose chain was complete in the traces.
pub fn samples(pairs: &[Paired], tr: &Traces) -> Vec<(&'static str, Vec<f64>)> {
    let chains: Vec<[f64; POINTS]> = pairs.iter().filter_map(|p| chain(p, tr)).collect();
    SPANS
        .iter()
        .map(|s| {
            (
                s.name,
                chains
                    .iter()
                    .map(|c| c[s.to as usize] - c[s.from as usize])
                    .filter(|d| !d.is_nan())
                    .collect(),
            )
        })
        .collect()
}

/// One stage's figures over a phase's requests, µs (nearest rank).
#[derive(Debug, Clone, Serialize)]
pub struct StageFigures {
    /// The stage (docs/demo.md, "Stages").
    pub stage: &'static str,
    /// Requests.
    pub n: usize,
    /// Smallest.
    pub min_us: f64,
    /// 10th percentile.
    pub p10_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// The figures of each stage's samples (stages without samples are left out).
pub fn figures(samples: &[(&'static str, Vec<f64>)]) -> Vec<StageFigures> {
    samples
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(stage, v)| {
            let mut s = v.clone();
            s.sort_by(f64::total_cmp);
            let q = |x| nearest_rank_sorted(&s, x);
            StageFigures {
                stage,
                n: s.len(),
                min_us: s[0],
                p10_us: q(0.1),
                p50_us: q(0.5),
                p99_us: q(0.99),
                max_us: q(1.0),
            }
        })
        .collect()
}

/// Every repetition's samples of a phase, pooled stage by stage.
pub fn pool<'a>(
    reps: impl Iterator<Item = &'a [(&'static str, Vec<f64>)]>,
) -> Vec<(&'static str, Vec<f64>)> {
    let mut out: Vec<(&'static str, Vec<f64>)> = Vec::new();
    for rep in reps {
        for (name, v) in rep {
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, all)) => all.extend(v),
                None => out.push((name, v.clone())),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traces() -> Traces {
        use Stage::*;
        Traces {
            // Request 0's edge; request 1's; a release-side edge before request 0 is ignored.
            hp: vec![
                (EdgeSent, 50.0),
                (HpWoke, 110.0),
                (EdgeSent, 115.0),
                (HpWoke, 1010.0),
                (EdgeSent, 1012.0),
            ],
            agent: vec![
                (AgentRead, 130.0),
                (AgentDecided, 140.0),
                (AgentWritten, 150.0),
                (AgentRead, 1030.0),
                (AgentDecided, 1040.0),
                (AgentWritten, 1048.0),
            ],
            lp: vec![
                (CmdRecv, 170.0),
                (IoctlIn, 180.0),
                (IoctlOut, 230.0),
                (IoctlIn, 232.0),
                (IoctlOut, 260.0),
                (AckSent, 270.0),
                (CmdRecv, 1050.0),
                (IoctlIn, 1060.0),
                (IoctlOut, 1100.0),
                (AckSent, 1105.0),
            ],
        }
    }

    #[test]
    fn each_request_is_cut_at_its_own_events_and_incomplete_chains_are_left_out() {
        let pairs = [
            Paired {
                start_us: 100.0,
                stopped_us: 250.0,
                next_us: 1000.0,
            },
            Paired {
                start_us: 1000.0,
                stopped_us: 1080.0,
                next_us: 2000.0,
            },
            // No edge recorded after it: left out.
            Paired {
                start_us: 2000.0,
                stopped_us: 2100.0,
                next_us: f64::INFINITY,
            },
        ];
        let s = samples(&pairs, &traces());
        let get = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get("launch_to_wake"), Some(vec![10.0, 10.0]));
        assert_eq!(get("wake_to_edge_sent"), Some(vec![5.0, 2.0]));
        assert_eq!(get("edge_to_agent"), Some(vec![15.0, 18.0]));
        assert_eq!(get("command_to_shim"), Some(vec![20.0, 2.0]));
        // The first ioctl in, the last out: the stop lies between.
        assert_eq!(get("ioctl_to_stop"), Some(vec![70.0, 20.0]));
        assert_eq!(get("stop_to_return"), Some(vec![10.0, 20.0]));
        assert_eq!(get("return_to_ack"), Some(vec![10.0, 5.0]));
        // The lab's three add up to the reaction.
        assert_eq!(get("edge"), Some(vec![30.0, 30.0]));
        assert_eq!(get("decision"), Some(vec![20.0, 18.0]));
        assert_eq!(get("command"), Some(vec![100.0, 32.0]));
        let f = figures(&pool([s.as_slice(), s.as_slice()].into_iter()));
        let cmd = f.iter().find(|x| x.stage == "command").unwrap();
        assert_eq!((cmd.n, cmd.min_us, cmd.max_us), (4, 32.0, 100.0));
    }

    #[test]
    fn a_chain_whose_stop_came_before_its_ioctl_is_left_out() {
        // The first request's stop (at 150) precedes the ioctl its chain found (180): the
        // batch job was stopped by another command. The second request's chain is whole.
        let pairs = [
            Paired {
                start_us: 100.0,
                stopped_us: 150.0,
                next_us: 1000.0,
            },
            Paired {
                start_us: 1000.0,
                stopped_us: 1080.0,
                next_us: 2000.0,
            },
        ];
        let s = samples(&pairs, &traces());
        for (name, v) in &s {
            assert!(v.iter().all(|d| *d >= 0.0), "{name}: {v:?}");
        }
        let get = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get("ioctl_to_stop"), Some(vec![20.0]));
        assert_eq!(get("edge_to_agent"), Some(vec![18.0]));
    }

    #[test]
    fn a_direct_chain_has_the_watcher_stages_and_no_agent_ones() {
        use Stage::*;
        let tr = Traces {
            hp: vec![],
            agent: vec![],
            lp: vec![
                (CmdRecv, 140.0),
                (IoctlIn, 150.0),
                (IoctlOut, 320.0),
                (AckSent, 325.0),
            ],
        };
        let pairs = [Paired {
            start_us: 100.0,
            stopped_us: 300.0,
            next_us: 1000.0,
        }];
        let s = samples(&pairs, &tr);
        let get = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get("launch_to_watcher"), Some(vec![40.0]));
        assert_eq!(get("watcher_to_ioctl"), Some(vec![10.0]));
        assert_eq!(get("ioctl_to_stop"), Some(vec![150.0]));
        assert_eq!(get("edge"), Some(vec![]));
        // The agent's chain has no watcher stage.
        let s = samples(&pairs[..1], &traces());
        let get = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get("launch_to_watcher"), Some(vec![]));
    }

    #[test]
    fn a_traced_chain_starts_at_the_agents_read_of_the_sample() {
        use Stage::*;
        // The latency client stamps nothing; the agent read the tracer's busy sample at 900.
        let tr = Traces {
            hp: vec![],
            agent: vec![
                (AgentRead, 900.0),
                (AgentDecided, 920.0),
                (AgentWritten, 930.0),
            ],
            lp: vec![
                (CmdRecv, 1000.0),
                (IoctlIn, 1010.0),
                (IoctlOut, 1150.0),
                (AckSent, 1160.0),
            ],
        };
        let pairs = [Paired {
            start_us: 100.0,
            stopped_us: 1100.0,
            next_us: 5000.0,
        }];
        let s = samples(&pairs, &tr);
        let get = |n: &str| s.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get("edge"), Some(vec![800.0]));
        assert_eq!(get("decision"), Some(vec![30.0]));
        assert_eq!(get("command"), Some(vec![170.0]));
        assert_eq!(get("launch_to_wake"), Some(vec![]));
        assert_eq!(get("edge_to_agent"), Some(vec![]));
        assert_eq!(get("launch_to_watcher"), Some(vec![]));
        // With the latency side's stamps, a chain without its edge is left out as before.
        let tr = Traces {
            hp: vec![(HpWoke, 50.0)],
            ..tr
        };
        assert_eq!(
            samples(&pairs, &tr)
                .iter()
                .find(|(k, _)| *k == "edge")
                .map(|(_, v)| v.len()),
            Some(0)
        );
    }
}
