//! Fletcher-4 with AVX2: eight u64 lanes held in two 256-bit registers per sum, combined into
//! the scalar result by [`super::fletcher::LaneSums::combine`]. Used only when the CPU reports
//! AVX2 at run time (`is_x86_feature_detected!`); every test compares it with the scalar
//! reference.
//!
//! One round is 32 bytes: words 0..4 are zero-extended into the first register set (lanes
//! 0..4) and words 4..8 into the second (lanes 4..8), so lane `j` sees words `j, j + 8, ...`
//! exactly as the portable kernel's lanes do.
#![allow(unsafe_code)]

use super::Checksum;
use super::fletcher::{LaneSums, split_rounds};
use std::arch::x86_64::{
    __m256i, _mm_loadu_si128, _mm256_add_epi64, _mm256_cvtepu32_epi64, _mm256_setzero_si256,
    _mm256_storeu_si256,
};

/// Lanes of the AVX2 kernel.
const LANES: usize = 8;

/// True when this CPU can run the AVX2 kernel.
pub(crate) fn is_available() -> bool {
    is_x86_feature_detected!("avx2")
}

/// Fletcher-4 with AVX2, or `None` when the CPU lacks AVX2.
pub(crate) fn fletcher4(data: &[u8]) -> Option<Checksum> {
    if !is_available() {
        return None;
    }
    let (rounds, tail) = split_rounds::<LANES>(data);
    // SAFETY: `lane_sums` only requires AVX2, and AVX2 support was detected just above.
    let lanes = unsafe { lane_sums(rounds) };
    let mut sums = lanes.combine();
    sums.update(tail);
    Some(sums.checksum())
}

/// Runs the eight lanes over whole 32-byte rounds (a trailing partial round is ignored; the
/// caller passes whole rounds).
#[target_feature(enable = "avx2")]
fn lane_sums(data: &[u8]) -> LaneSums<LANES> {
    let zero = _mm256_setzero_si256();
    let (mut a0, mut b0, mut c0, mut d0) = (zero, zero, zero, zero);
    let (mut a1, mut b1, mut c1, mut d1) = (zero, zero, zero, zero);
    for round in data.chunks_exact(4 * LANES) {
        let pointer = round.as_ptr();
        // SAFETY: `round` is exactly 32 readable bytes, so both 16-byte loads (at offsets 0
        // and 16) stay inside it; `loadu` has no alignment requirement.
        let (low, high) = unsafe {
            (
                _mm_loadu_si128(pointer.cast()),
                _mm_loadu_si128(pointer.add(16).cast()),
            )
        };
        let low = _mm256_cvtepu32_epi64(low);
        let high = _mm256_cvtepu32_epi64(high);
        a0 = _mm256_add_epi64(a0, low);
        a1 = _mm256_add_epi64(a1, high);
        b0 = _mm256_add_epi64(b0, a0);
        b1 = _mm256_add_epi64(b1, a1);
        c0 = _mm256_add_epi64(c0, b0);
        c1 = _mm256_add_epi64(c1, b1);
        d0 = _mm256_add_epi64(d0, c0);
        d1 = _mm256_add_epi64(d1, c1);
    }
    let mut out = LaneSums::<LANES>::zero();
    store(&mut out.a, a0, a1);
    store(&mut out.b, b0, b1);
    store(&mut out.c, c0, c1);
    store(&mut out.d, d0, d1);
    out
}

/// Writes lanes 0..4 from `low` and lanes 4..8 from `high`.
#[target_feature(enable = "avx2")]
fn store(lanes: &mut [u64; LANES], low: __m256i, high: __m256i) {
    let (first, second) = lanes.split_at_mut(LANES / 2);
    // SAFETY: `first` and `second` are each four u64 (32 bytes) of writable memory, exactly
    // what one unaligned 256-bit store writes; `storeu` has no alignment requirement.
    unsafe {
        _mm256_storeu_si256(first.as_mut_ptr().cast(), low);
        _mm256_storeu_si256(second.as_mut_ptr().cast(), high);
    }
}
