//! A small, fast, seedable pseudo-random generator (SplitMix64) for picking document ids.
//!
//! Benchmark clients need cheap, reproducible randomness, not cryptographic quality, and one
//! generator per client task avoids any shared state between tasks.

/// SplitMix64: one 64-bit add and a few multiply/xor-shifts per number.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator for `stream` (e.g. the client task index) derived from the run's `seed`,
    /// so that tasks draw different but reproducible sequences.
    pub fn new(seed: u64, stream: u64) -> Self {
        let mut mixer = SplitMix64 {
            state: seed ^ stream.wrapping_mul(0xA076_1D64_78BD_642F),
        };
        // Discard one output so that nearby seeds do not start with correlated values.
        mixer.next_u64();
        mixer
    }

    /// The next 64 uniformly distributed bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniformly distributed value in `0..bound` (`bound` > 0), by the multiply-shift method
    /// (the bias is below 2^-32 for any bound a benchmark uses).
    pub fn below(&mut self, bound: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// True with probability one half.
    pub fn coin(&mut self) -> bool {
        self.next_u64() >> 63 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::SplitMix64;

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = SplitMix64::new(42, 0);
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            let value = rng.below(10);
            assert!(value < 10);
            seen[value as usize] = true;
        }
        assert!(seen.iter().all(|&hit| hit));
    }

    #[test]
    fn streams_differ_and_are_reproducible() {
        let first: Vec<u64> = (0..4).map(|_| SplitMix64::new(7, 1).next_u64()).collect();
        assert!(first.windows(2).all(|pair| pair[0] == pair[1]));
        assert_ne!(
            SplitMix64::new(7, 1).next_u64(),
            SplitMix64::new(7, 2).next_u64()
        );
    }
}
