//! Order statistics the reports share: the nearest-rank quantile, one definition for the
//! agent's status figures (`kfdq status`, the metrics), `kfdq demo`'s table and JSON, and
//! preempt-lab's reports (which recompute the demo's numbers, so the two must agree).

/// The nearest-rank `q`-quantile of `sorted` (ascending order): the value of rank ⌈q·n⌉
/// (1-based, at least 1), the smallest value with at least a fraction `q` of the `n` values at
/// or below it. It is always one of the values: `q = 0.5` gives the lower median of an even
/// count, `q = 1` the maximum, `q = 0` the minimum. Empty: 0.
pub fn nearest_rank_sorted(sorted: &[f64], q: f64) -> f64 {
    debug_assert!(
        sorted.windows(2).all(|w| w[0].total_cmp(&w[1]).is_le()),
        "nearest_rank_sorted needs ascending values"
    );
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// [`nearest_rank_sorted`] of `values` in any order.
pub fn nearest_rank<'a>(values: impl IntoIterator<Item = &'a f64>, q: f64) -> f64 {
    let mut v: Vec<f64> = values.into_iter().copied().collect();
    v.sort_by(f64::total_cmp);
    nearest_rank_sorted(&v, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_percentiles_of_one_to_a_hundred_are_their_ranks() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank_sorted(&v, 0.5), 50.0);
        assert_eq!(nearest_rank_sorted(&v, 0.99), 99.0);
        assert_eq!(nearest_rank_sorted(&v, 1.0), 100.0);
        assert_eq!(nearest_rank_sorted(&v, 0.0), 1.0);
        assert_eq!(nearest_rank_sorted(&v, 0.001), 1.0);
    }

    #[test]
    fn an_even_count_has_the_lower_median_and_any_order_is_sorted_first() {
        assert_eq!(nearest_rank(&[4.0, 1.0, 3.0, 2.0], 0.5), 2.0);
        assert_eq!(nearest_rank(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert_eq!(nearest_rank(&[7.0], 0.99), 7.0);
        assert_eq!(nearest_rank(&[], 0.5), 0.0);
        assert_eq!(nearest_rank_sorted(&[], 1.0), 0.0);
    }

    #[test]
    fn the_result_is_the_smallest_value_with_a_fraction_q_at_or_below_it() {
        // q in eighths (exact in binary), n up to 24, distinct values: count(v <= x) >= q n and
        // count(v < x) < q n, except that the rank is at least 1.
        for n in 1..=24usize {
            let v: Vec<f64> = (0..n).map(|i| (i * 10) as f64).collect();
            for k in 0..=8 {
                let q = f64::from(k) / 8.0;
                let x = nearest_rank_sorted(&v, q);
                let at_or_below = v.iter().filter(|&&y| y <= x).count() as f64;
                let below = v.iter().filter(|&&y| y < x).count() as f64;
                let qn = q * n as f64;
                assert!(at_or_below >= qn, "n {n} q {q}: {x}");
                assert!(below < qn || below == 0.0, "n {n} q {q}: {x}");
            }
        }
    }
}
