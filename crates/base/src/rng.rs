//! A deterministic generator: xoshiro256** seeded through splitmix64. The simulator's promise
//! "same seed, same run" rests on this stream being identical on every platform.

/// Seeded pseudo-random generator. Not cryptographic; used for GUIDs, fault plans, workloads.
#[derive(Clone, Debug)]
pub struct SeededRng {
    s: [u64; 4],
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl SeededRng {
    /// A generator whose whole stream is decided by `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        let mut state = seed;
        let s = [
            splitmix64(&mut state),
            splitmix64(&mut state),
            splitmix64(&mut state),
            splitmix64(&mut state),
        ];
        SeededRng { s }
    }

    /// A generator seeded from the operating system's entropy, for GUIDs in production.
    #[must_use]
    pub fn from_entropy() -> Self {
        let mut seed = [0u8; 8];
        let ok = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut seed))
            .is_ok();
        let mut value = u64::from_le_bytes(seed);
        if !ok {
            // Entropy is only needed for GUID uniqueness; fall back to the address of a stack
            // value and the process id, which is unique enough across pools on one host.
            let local = 0u8;
            value = (std::ptr::addr_of!(local) as u64) ^ u64::from(std::process::id()) << 32;
        }
        SeededRng::new(value)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A value uniformly in `0..bound` (bound > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "SeededRng::below needs a positive bound");
        // Lemire's multiply-shift; the tiny bias is irrelevant for testing.
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// True with probability `numerator / denominator`.
    pub fn chance(&mut self, numerator: u64, denominator: u64) -> bool {
        assert!(
            denominator > 0,
            "SeededRng::chance needs a positive denominator"
        );
        self.below(denominator) < numerator
    }

    /// A nonzero GUID.
    pub fn guid(&mut self) -> crate::Guid {
        loop {
            let value = self.next_u64();
            if value != 0 {
                return crate::Guid(value);
            }
        }
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
    fn same_seed_same_stream() {
        let mut a = SeededRng::new(42);
        let mut b = SeededRng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = SeededRng::new(43);
        assert_ne!(SeededRng::new(42).next_u64(), c.next_u64());
    }

    #[test]
    fn below_stays_in_bounds() {
        let mut rng = SeededRng::new(7);
        for bound in 1..200 {
            assert!(rng.below(bound) < bound);
        }
    }
}
