//! AVX2 parity lanes: a 64-byte chunk as two 256-bit registers.
//!
//! Multiply by two: `vpcmpgtb` against zero marks the bytes whose top bit is set, `vpaddb`
//! doubles every byte, and the marked bytes get 0x1d XORed in. Multiply by a constant c: split
//! each byte into nibbles and look both up with `vpshufb` in 16-entry tables of c*x and
//! c*(x<<4), then XOR (multiplication distributes over the nibble sum).
//!
//! Safety model: the intrinsics need a CPU with AVX2. The lane type is private to this module
//! and only ever created inside [`sweep_avx2`], which is entered solely through
//! [`sweep_rows`] after `is_x86_feature_detected!("avx2")` said yes.
#![allow(unsafe_code)]

use super::{Lanes, Sink, gf, sweep};
use std::arch::x86_64::{
    __m256i, _mm256_add_epi8, _mm256_and_si256, _mm256_cmpgt_epi8, _mm256_loadu_si256,
    _mm256_set1_epi8, _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_srli_epi16,
    _mm256_storeu_si256, _mm256_xor_si256,
};

const REGS: usize = 2;
const REG_BYTES: usize = 32;

/// Whether this CPU has AVX2.
pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

#[derive(Clone, Copy)]
struct Avx2([__m256i; REGS]);

impl Lanes for Avx2 {
    const BYTES: usize = REGS * REG_BYTES;
    type Table = [__m256i; 2];

    #[inline(always)]
    fn zero() -> Self {
        // SAFETY: values of this type exist only inside `sweep_avx2`, after AVX2 detection.
        Avx2(unsafe { [_mm256_setzero_si256(); REGS] })
    }

    #[inline(always)]
    fn load(src: &[u8]) -> Self {
        assert_eq!(src.len(), Self::BYTES);
        let mut regs = Self::zero().0;
        for (i, reg) in regs.iter_mut().enumerate() {
            // SAFETY: AVX2 is present (see `zero`); the pointer addresses 32 bytes inside
            // `src`, whose length was checked above, and `loadu` has no alignment requirement.
            *reg = unsafe { _mm256_loadu_si256(src.as_ptr().add(i * REG_BYTES).cast()) };
        }
        Avx2(regs)
    }

    #[inline(always)]
    fn store(self, dst: &mut [u8]) {
        assert_eq!(dst.len(), Self::BYTES);
        for (i, reg) in self.0.iter().enumerate() {
            // SAFETY: AVX2 is present (see `zero`); the pointer addresses 32 bytes inside
            // `dst`, whose length was checked above, and `storeu` has no alignment requirement.
            unsafe { _mm256_storeu_si256(dst.as_mut_ptr().add(i * REG_BYTES).cast(), *reg) };
        }
    }

    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        let mut out = self.0;
        for (reg, o) in out.iter_mut().zip(other.0) {
            // SAFETY: AVX2 is present (see `zero`); register-only operation.
            *reg = unsafe { _mm256_xor_si256(*reg, o) };
        }
        Avx2(out)
    }

    #[inline(always)]
    fn mul2(self) -> Self {
        let mut out = self.0;
        for reg in &mut out {
            // SAFETY: AVX2 is present (see `zero`); register-only operations.
            *reg = unsafe {
                let overflow = _mm256_cmpgt_epi8(_mm256_setzero_si256(), *reg);
                let doubled = _mm256_add_epi8(*reg, *reg);
                _mm256_xor_si256(doubled, _mm256_and_si256(overflow, _mm256_set1_epi8(0x1d)))
            };
        }
        Avx2(out)
    }

    #[inline(always)]
    fn table(c: u8) -> Self::Table {
        let mut low = [0u8; REG_BYTES];
        let mut high = [0u8; REG_BYTES];
        for x in 0..16u8 {
            let i = usize::from(x);
            low[i] = gf::mul(c, x);
            low[i + 16] = low[i];
            high[i] = gf::mul(c, x << 4);
            high[i + 16] = high[i];
        }
        // SAFETY: AVX2 is present (see `zero`); each array is exactly 32 bytes.
        unsafe {
            [
                _mm256_loadu_si256(low.as_ptr().cast()),
                _mm256_loadu_si256(high.as_ptr().cast()),
            ]
        }
    }

    #[inline(always)]
    fn mul(self, table: &Self::Table) -> Self {
        let mut out = self.0;
        for reg in &mut out {
            // SAFETY: AVX2 is present (see `zero`); register-only operations.
            *reg = unsafe {
                let nibble = _mm256_set1_epi8(0x0f);
                let low = _mm256_and_si256(*reg, nibble);
                let high = _mm256_and_si256(_mm256_srli_epi16::<4>(*reg), nibble);
                _mm256_xor_si256(
                    _mm256_shuffle_epi8(table[0], low),
                    _mm256_shuffle_epi8(table[1], high),
                )
            };
        }
        Avx2(out)
    }
}

/// [`sweep`] on AVX2 lanes for the row set `rows`. Panics if the CPU lacks AVX2.
pub(crate) fn sweep_rows(rows: u8, data: &[Option<&[u8]>], len: usize, sink: &mut Sink<'_, '_>) {
    assert!(available(), "AVX2 parity requested on a CPU without AVX2");
    // SAFETY: the CPU supports AVX2 (checked just above), which is all `sweep_avx2` requires.
    unsafe { sweep_avx2(rows, data, len, sink) }
}

/// Compiled with AVX2 enabled so that the inlined kernel and lane operations use it.
#[target_feature(enable = "avx2")]
fn sweep_avx2(rows: u8, data: &[Option<&[u8]>], len: usize, sink: &mut Sink<'_, '_>) {
    match rows {
        1 => sweep::<Avx2, 1>(data, len, sink),
        2 => sweep::<Avx2, 2>(data, len, sink),
        3 => sweep::<Avx2, 3>(data, len, sink),
        4 => sweep::<Avx2, 4>(data, len, sink),
        5 => sweep::<Avx2, 5>(data, len, sink),
        6 => sweep::<Avx2, 6>(data, len, sink),
        7 => sweep::<Avx2, 7>(data, len, sink),
        _ => panic!("parity row set {rows:#b} out of range"),
    }
}
