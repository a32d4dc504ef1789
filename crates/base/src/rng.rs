//! SplitMix64: a small, fast generator (one add and a few multiply/xor-shifts per number, the
//! same sequence on every platform), not of cryptographic quality. Seeded, it gives tests
//! replayable random cases; [`random_unit`] draws from a per-thread one seeded from the OS, for
//! sampling (`$rand`, `$sampleRate`, `$sample`).

/// The generator; its `u64` is the state (the seed to start from).
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 uniformly distributed bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n` > 0; modulo bias is irrelevant for tests).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub fn bytes<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0; N];
        for byte in &mut out {
            *byte = self.next_u64() as u8;
        }
        out
    }

    /// A uniformly distributed number in `[0, 1)` (53 random bits).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A uniformly distributed number in `[0, 1)` from this thread's generator, seeded from the
/// standard library's random hasher keys.
pub fn random_unit() -> f64 {
    use std::cell::RefCell;
    use std::hash::{BuildHasher, Hasher};
    thread_local! {
        static GENERATOR: RefCell<SplitMix64> = RefCell::new(SplitMix64(
            std::collections::hash_map::RandomState::new().build_hasher().finish(),
        ));
    }
    GENERATOR.with(|generator| generator.borrow_mut().unit())
}
