//! Summaries of repeated samples (p50, p99, spread) and the least-squares fit of the preempt
//! costs (fixed + per wave saved + per wave restored) with its error.

use serde::Serialize;

/// Repeated samples of one measurement, µs.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Samples.
    pub n: usize,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank; the maximum below 100 samples).
    pub p99: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// `max - min`.
    pub spread: f64,
}

impl Summary {
    /// The summary of `samples` (None when empty).
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let rank = |q: f64| s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1];
        Some(Summary {
            n: s.len(),
            p50: rank(0.5),
            p99: rank(0.99),
            min: s[0],
            max: s[s.len() - 1],
            spread: s[s.len() - 1] - s[0],
        })
    }
}

/// One observed stall: a bystander's dispatch delayed by `stall_ns` across a device-wide
/// preempt that saved `saved` waves and restored `restored` waves.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StallSample {
    /// Waves context-saved by the preempt.
    pub saved: u64,
    /// Waves restored when the new runlist was mapped.
    pub restored: u64,
    /// Delay of the bystander's dispatch, ns.
    pub stall_ns: f64,
}

/// `stall = fixed + save x saved + restore x restored`, fitted by least squares.
#[derive(Debug, Clone, Serialize)]
pub struct Fit {
    /// Fixed cost of a device-wide preempt, ns.
    pub fixed_ns: f64,
    /// CWSR save per wave, ns.
    pub save_wave_ns: f64,
    /// CWSR restore per wave, ns.
    pub restore_wave_ns: f64,
    /// Standard errors of the three, ns.
    pub fixed_error_ns: f64,
    /// Standard error of `save_wave_ns`.
    pub save_error_ns: f64,
    /// Standard error of `restore_wave_ns`.
    pub restore_error_ns: f64,
    /// Root mean square of the residuals, ns.
    pub rms_residual_ns: f64,
    /// Samples fitted.
    pub samples: usize,
    /// Distinct wave counts saved (the fit needs two or more).
    pub wave_counts: usize,
}

/// Why the samples cannot be fitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    /// Fewer than two distinct (saved, restored) designs separate the per-wave costs.
    #[error("the stalls were seen at too few wave counts to separate save from restore costs")]
    Degenerate,
}

/// Fits the stall model to `samples`.
pub fn fit(samples: &[StallSample]) -> Result<Fit, FitError> {
    let rows: Vec<([f64; 3], f64)> = samples
        .iter()
        .map(|s| ([1.0, s.saved as f64, s.restored as f64], s.stall_ns))
        .collect();
    let mut xtx = [[0.0f64; 3]; 3];
    let mut xty = [0.0f64; 3];
    for (x, y) in &rows {
        for i in 0..3 {
            xty[i] += x[i] * y;
            for j in 0..3 {
                xtx[i][j] += x[i] * x[j];
            }
        }
    }
    let inv = invert(xtx).ok_or(FitError::Degenerate)?;
    let beta: Vec<f64> = (0..3)
        .map(|i| (0..3).map(|j| inv[i][j] * xty[j]).sum())
        .collect();
    let rss: f64 = rows
        .iter()
        .map(|(x, y)| {
            let pred: f64 = (0..3).map(|i| x[i] * beta[i]).sum();
            (y - pred).powi(2)
        })
        .sum();
    let n = rows.len();
    let sigma2 = if n > 3 { rss / (n - 3) as f64 } else { 0.0 };
    let se = |i: usize| (inv[i][i] * sigma2).max(0.0).sqrt();
    let mut waves: Vec<u64> = samples.iter().map(|s| s.saved).collect();
    waves.sort_unstable();
    waves.dedup();
    Ok(Fit {
        fixed_ns: beta[0],
        save_wave_ns: beta[1],
        restore_wave_ns: beta[2],
        fixed_error_ns: se(0),
        save_error_ns: se(1),
        restore_error_ns: se(2),
        rms_residual_ns: (rss / n as f64).sqrt(),
        samples: n,
        wave_counts: waves.len(),
    })
}

/// The inverse of a 3x3 matrix (None when singular relative to its scale).
fn invert(m: [[f64; 3]; 3]) -> Option<[[f64; 3]; 3]> {
    let det = m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
        - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
        + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
    let scale = m.iter().flatten().fold(0.0f64, |a, v| a.max(v.abs()));
    if !det.is_finite() || det.abs() <= 1e-9 * scale.powi(3) {
        return None;
    }
    let c =
        |r0: usize, c0: usize, r1: usize, c1: usize| m[r0][c0] * m[r1][c1] - m[r0][c1] * m[r1][c0];
    let adj = [
        [c(1, 1, 2, 2), -c(0, 1, 2, 2), c(0, 1, 1, 2)],
        [-c(1, 0, 2, 2), c(0, 0, 2, 2), -c(0, 0, 1, 2)],
        [c(1, 0, 2, 1), -c(0, 0, 2, 1), c(0, 0, 1, 1)],
    ];
    let mut inv = [[0.0; 3]; 3];
    for i in 0..3 {
        for j in 0..3 {
            inv[i][j] = adj[i][j] / det;
        }
    }
    Some(inv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fit_recovers_known_costs_and_refuses_one_design() {
        let truth =
            |saved: u64, restored: u64| 200_000.0 + 300.0 * saved as f64 + 700.0 * restored as f64;
        let mut samples = Vec::new();
        for (i, (s, r)) in [(32, 32), (672, 32), (32, 672), (1312, 32), (32, 1312)]
            .into_iter()
            .enumerate()
        {
            let noise = if i % 2 == 0 { 50.0 } else { -50.0 };
            samples.push(StallSample {
                saved: s,
                restored: r,
                stall_ns: truth(s, r) + noise,
            });
        }
        let f = fit(&samples).unwrap();
        assert!((f.fixed_ns - 200_000.0).abs() < 200.0, "{f:?}");
        assert!((f.save_wave_ns - 300.0).abs() < 1.0, "{f:?}");
        assert!((f.restore_wave_ns - 700.0).abs() < 1.0, "{f:?}");
        assert!(f.fixed_error_ns > 0.0 && f.rms_residual_ns > 0.0);
        let same: Vec<_> = (0..4)
            .map(|_| StallSample {
                saved: 64,
                restored: 64,
                stall_ns: 1.0,
            })
            .collect();
        assert_eq!(fit(&same).unwrap_err(), FitError::Degenerate);
    }

    #[test]
    fn summaries_use_nearest_ranks() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.p50, s.p99, s.spread, s.n), (3.0, 5.0, 4.0, 5));
        assert!(Summary::of(&[]).is_none());
    }
}
