//! A deterministic stream of pseudo-random numbers (splitmix64): the same seed gives the same
//! arrivals and sampling phases, so the same seed gives byte-identical results.

/// splitmix64.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A stream from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next value in `[0, 1)`.
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponentially distributed gap with mean `mean_ns`.
    pub fn exp_ns(&mut self, mean_ns: f64) -> u64 {
        (-(1.0 - self.next_f64()).ln() * mean_ns) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_values_in_range() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..1000 {
            let x = a.next_f64();
            assert_eq!(x, b.next_f64());
            assert!((0.0..1.0).contains(&x));
        }
        assert_ne!(Rng::new(1).next_f64(), Rng::new(2).next_f64());
        let mut r = Rng::new(3);
        let mean = (0..20_000).map(|_| r.exp_ns(1000.0) as f64).sum::<f64>() / 20_000.0;
        assert!((900.0..1100.0).contains(&mean), "{mean}");
    }
}
