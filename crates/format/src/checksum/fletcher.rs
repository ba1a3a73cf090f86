//! Fletcher-4 kernels: the scalar reference, a portable multi-lane kernel, and the lane
//! combination that turns the sums of `L` interleaved lanes back into the exact scalar result.
//!
//! # Why lanes
//! The scalar loop is one long dependency chain (`a += w; b += a; c += b; d += c` for every
//! word), so a CPU retires about one word per cycle whatever its width. Splitting the words
//! over `L` lanes, where lane `j` runs the same recurrence over words `j, j + L, j + 2L, ...`,
//! gives `L` independent chains that SIMD registers (or the out-of-order core) run side by side.
//!
//! # The combination (derivation)
//! Number the `n` words `w_1..w_n`. Unrolling the scalar recurrence gives each word a weight
//! that depends only on its distance from the end, `t = n - i + 1`:
//!
//! ```text
//!   A = sum w_i          B = sum t w_i          C = sum C(t+1, 2) w_i
//!   D = sum C(t+2, 3) w_i
//! ```
//!
//! With `L` lanes and `n = m L` words, lane `j` (0-based) sees `m` words; its word `k` (0-based)
//! is global word `i = k L + j + 1`. Inside the lane its distance from the lane's end is
//! `r = m - k`, so the lane sums carry weights `1, r, C(r+1, 2), C(r+2, 3)` and the global
//! distance is `t = L r - j`. Each global weight is a polynomial in `r` of degree <= 3, and
//! writing it in the basis `{1, r, C(r+1,2), C(r+2,3)}` gives (checked with a computer algebra
//! system, and by `combination_matches_scalar_for_every_unit_word` below):
//!
//! ```text
//!   A = sum_j  a_j
//!   B = sum_j  L b_j  -  j a_j
//!   C = sum_j  L^2 c_j  -  L (L + 2j - 1) / 2 * b_j  +  j (j - 1) / 2 * a_j
//!   D = sum_j  L^3 d_j  -  L^2 (L + j - 1) c_j
//!            +  L (L^2 + 3Lj - 3L + 3j^2 - 6j + 2) / 6 * b_j  -  j (j - 1)(j - 2) / 6 * a_j
//! ```
//!
//! Every coefficient is an integer (the basis is integer-valued and unitriangular at
//! `r = 0, -1, -2, -3`), so the identity holds over the integers, and therefore also modulo
//! 2^64: the wrapping lane sums combine into exactly the wrapping scalar sums. Words past the
//! last full round of `L` words (and the zero-padded partial word) are then fed to the scalar
//! recurrence starting from the combined state, which is just the scalar loop continuing.

use super::Checksum;

/// Running Fletcher-4 sums: the scalar state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sums {
    a: u64,
    b: u64,
    c: u64,
    d: u64,
}

impl Sums {
    fn push(&mut self, word: u32) {
        self.a = self.a.wrapping_add(u64::from(word));
        self.b = self.b.wrapping_add(self.a);
        self.c = self.c.wrapping_add(self.b);
        self.d = self.d.wrapping_add(self.c);
    }

    /// Feeds `data` one little-endian word at a time; a trailing partial word is zero-padded.
    pub(crate) fn update(&mut self, data: &[u8]) {
        let mut chunks = data.chunks_exact(4);
        for chunk in &mut chunks {
            self.push(le_word(chunk));
        }
        let tail = chunks.remainder();
        if !tail.is_empty() {
            let mut word = [0u8; 4];
            for (to, from) in word.iter_mut().zip(tail) {
                *to = *from;
            }
            self.push(u32::from_le_bytes(word));
        }
    }

    pub(crate) fn checksum(self) -> Checksum {
        Checksum([self.a, self.b, self.c, self.d])
    }
}

/// The little-endian word in a 4-byte chunk (callers pass `chunks_exact(4)` items).
fn le_word(chunk: &[u8]) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(chunk);
    u32::from_le_bytes(word)
}

/// The scalar reference: the definition of Fletcher-4, one word at a time.
pub(crate) fn scalar(data: &[u8]) -> Checksum {
    let mut sums = Sums::default();
    sums.update(data);
    sums.checksum()
}

/// Sums of `L` interleaved lanes: lane `j` has run the recurrence over words `j, j + L, ...`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaneSums<const L: usize> {
    pub(crate) a: [u64; L],
    pub(crate) b: [u64; L],
    pub(crate) c: [u64; L],
    pub(crate) d: [u64; L],
}

/// Coefficients (mod 2^64) that lane `j`'s `a, b, c, d` contribute to the global sums.
#[derive(Clone, Copy, Debug)]
struct LaneCoefficients {
    /// Into B: (a, b).
    b: [u64; 2],
    /// Into C: (a, b, c).
    c: [u64; 3],
    /// Into D: (a, b, c, d).
    d: [u64; 4],
}

/// Reduces an exact integer coefficient modulo 2^64 (two's complement truncation is exactly
/// that reduction, also for negative values).
const fn modular(value: i128) -> u64 {
    value as u64
}

/// The combination coefficients for every lane of an `L`-lane kernel (module docs).
const fn coefficients<const L: usize>() -> [LaneCoefficients; L] {
    let mut out = [LaneCoefficients {
        b: [0; 2],
        c: [0; 3],
        d: [0; 4],
    }; L];
    let l = L as i128;
    let mut lane = 0;
    while lane < L {
        let j = lane as i128;
        out[lane] = LaneCoefficients {
            b: [modular(-j), modular(l)],
            c: [
                modular(j * (j - 1) / 2),
                modular(-(l * (l + 2 * j - 1) / 2)),
                modular(l * l),
            ],
            d: [
                modular(-(j * (j - 1) * (j - 2) / 6)),
                modular(l * (l * l + 3 * l * j - 3 * l + 3 * j * j - 6 * j + 2) / 6),
                modular(-(l * l * (l + j - 1))),
                modular(l * l * l),
            ],
        };
        lane += 1;
    }
    out
}

impl<const L: usize> LaneSums<L> {
    const COEFFICIENTS: [LaneCoefficients; L] = coefficients::<L>();

    pub(crate) const fn zero() -> Self {
        LaneSums {
            a: [0; L],
            b: [0; L],
            c: [0; L],
            d: [0; L],
        }
    }

    /// The scalar state after all the words the lanes consumed (module docs).
    pub(crate) fn combine(&self) -> Sums {
        let mut sums = Sums::default();
        let lanes = self.a.iter().zip(&self.b).zip(&self.c).zip(&self.d);
        for ((((&a, &b), &c), &d), k) in lanes.zip(&Self::COEFFICIENTS) {
            sums.a = sums.a.wrapping_add(a);
            sums.b = sums.b.wrapping_add(mul_add(&k.b, &[a, b]));
            sums.c = sums.c.wrapping_add(mul_add(&k.c, &[a, b, c]));
            sums.d = sums.d.wrapping_add(mul_add(&k.d, &[a, b, c, d]));
        }
        sums
    }
}

/// Wrapping dot product.
fn mul_add(coefficients: &[u64], values: &[u64]) -> u64 {
    coefficients
        .iter()
        .zip(values)
        .fold(0u64, |sum, (&k, &v)| sum.wrapping_add(k.wrapping_mul(v)))
}

/// Runs `L` lanes over `data`, which must be a whole number of `4 * L`-byte rounds.
pub(crate) fn portable_lane_sums<const L: usize>(data: &[u8]) -> LaneSums<L> {
    let (words, rest) = data.as_chunks::<4>();
    assert!(
        rest.is_empty(),
        "lane input of {} bytes is not whole words",
        data.len()
    );
    let (rounds, rest) = words.as_chunks::<L>();
    assert!(
        rest.is_empty(),
        "lane input of {} bytes is not whole rounds",
        data.len()
    );
    // Four rounds per loop iteration (a constant inner loop the optimizer unrolls) so the
    // loop's own pointer, compare and branch are paid once per `4 L` words.
    let (unrolled, remainder) = rounds.as_chunks::<4>();
    let mut sums = LaneSums::<L>::zero();
    for group in unrolled {
        for round in group {
            sums.add_round(round);
        }
    }
    for round in remainder {
        sums.add_round(round);
    }
    sums
}

impl<const L: usize> LaneSums<L> {
    /// One word into each lane.
    #[inline(always)]
    fn add_round(&mut self, round: &[[u8; 4]; L]) {
        #[allow(clippy::needless_range_loop)]
        for lane in 0..L {
            self.a[lane] = self.a[lane].wrapping_add(u64::from(u32::from_le_bytes(round[lane])));
            self.b[lane] = self.b[lane].wrapping_add(self.a[lane]);
            self.c[lane] = self.c[lane].wrapping_add(self.b[lane]);
            self.d[lane] = self.d[lane].wrapping_add(self.c[lane]);
        }
    }
}

/// Splits `data` into the part `L` lanes consume (whole rounds) and the tail.
pub(crate) fn split_rounds<const L: usize>(data: &[u8]) -> (&[u8], &[u8]) {
    data.split_at(data.len() / (4 * L) * (4 * L))
}

/// Lanes in the portable kernel. Two lanes keep all eight accumulators and the loop state
/// in general-purpose registers on x86_64 and aarch64; with four or more the compiler spills
/// (measured: slower than scalar). The baseline x86_64 target (SSE2) does not vectorize this
/// loop, so the gain is modest and comes from unrolling and two independent add chains, not
/// from SIMD: the scalar loop is limited by its instruction count (four adds, a load and the
/// loop overhead per word), which lanes alone cannot shrink. The AVX2 kernel is the fast one.
pub(crate) const PORTABLE_LANES: usize = 2;

/// Fletcher-4 with the portable multi-lane kernel.
pub(crate) fn portable(data: &[u8]) -> Checksum {
    let (rounds, tail) = split_rounds::<PORTABLE_LANES>(data);
    let mut sums = portable_lane_sums::<PORTABLE_LANES>(rounds).combine();
    sums.update(tail);
    sums.checksum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: prove the combination formula for many lane counts. Method: for every lane count
    /// 1..=16 and lane length 0..=4, put a single non-trivial word at each position in turn
    /// (a basis of the input space: the checksum is linear in the words) and compare the
    /// combined lane sums with the scalar reference.
    #[test]
    fn combination_matches_scalar_for_every_unit_word() {
        fn check<const L: usize>() {
            for rounds in 0..=4usize {
                for position in 0..rounds * L {
                    let mut data = vec![0u8; rounds * L * 4];
                    data[position * 4..position * 4 + 4]
                        .copy_from_slice(&0xdead_beefu32.to_le_bytes());
                    let combined = portable_lane_sums::<L>(&data).combine().checksum();
                    assert_eq!(
                        combined,
                        scalar(&data),
                        "L={L} rounds={rounds} word={position}"
                    );
                }
            }
        }
        check::<1>();
        check::<2>();
        check::<3>();
        check::<4>();
        check::<5>();
        check::<7>();
        check::<8>();
        check::<12>();
        check::<16>();
    }

    /// Goal: the combination stays exact when lane sums wrap around 2^64. Method: long input
    /// of 0xffffffff words (d grows like n^4 / 24 * 2^32 and wraps within a few thousand words).
    #[test]
    fn combination_is_exact_after_wrapping() {
        let data = vec![0xffu8; 4 * 16 * 4096];
        assert_eq!(portable(&data), scalar(&data));
        let combined = portable_lane_sums::<16>(&data).combine().checksum();
        assert_eq!(combined, scalar(&data));
    }

    /// Goal: continuing the scalar recurrence from a combined state equals one scalar pass.
    #[test]
    fn tail_continues_from_combined_state() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in 990..1000 {
            assert_eq!(portable(&data[..len]), scalar(&data[..len]), "len {len}");
        }
    }
}
