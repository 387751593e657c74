//! A tiny seedable generator (`SplitMix64`) for the simulated disk.
//!
//! Hand-written on purpose: a crash test's seed must replay the same crash
//! forever, independent of any external crate changing its algorithm.

/// Deterministic 64-bit generator.
#[derive(Debug, Clone)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator that always yields the same sequence for `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// A `usize` in `0..n`.
    pub fn index(&mut self, n: usize) -> usize {
        // Lossless: the result is below `n`, which is a usize.
        usize::try_from(self.below(n as u64)).unwrap_or(0)
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let mut a = SimRng::new(7);
        let mut b = SimRng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(SimRng::new(7).next_u64(), SimRng::new(8).next_u64());
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = SimRng::new(1);
        for n in 1..50 {
            assert!(r.below(n) < n);
        }
        assert_eq!(r.below(0), 0);
    }
}
