//! Portable parity lanes: a 32-byte chunk as four u64 words. Multiplying packed bytes by two
//! is a shift plus, for bytes whose top bit was set, an XOR with 0x1d (the polynomial without
//! its x^8 term); multiplying by another constant uses a 256-byte product table.

use super::{Lanes, Sink, gf, sweep};

const WORDS: usize = 4;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
const LOW_SEVEN: u64 = 0xfefe_fefe_fefe_fefe;
const REDUCE: u64 = 0x1d;

#[derive(Clone, Copy)]
pub(crate) struct Scalar([u64; WORDS]);

impl Lanes for Scalar {
    const BYTES: usize = WORDS * 8;
    type Table = [u8; 256];

    #[inline(always)]
    fn zero() -> Self {
        Scalar([0; WORDS])
    }

    #[inline(always)]
    fn load(src: &[u8]) -> Self {
        assert_eq!(src.len(), Self::BYTES);
        let mut words = [0u64; WORDS];
        for (word, bytes) in words.iter_mut().zip(src.chunks_exact(8)) {
            let mut array = [0u8; 8];
            array.copy_from_slice(bytes);
            *word = u64::from_le_bytes(array);
        }
        Scalar(words)
    }

    #[inline(always)]
    fn store(self, dst: &mut [u8]) {
        assert_eq!(dst.len(), Self::BYTES);
        for (word, bytes) in self.0.iter().zip(dst.chunks_exact_mut(8)) {
            bytes.copy_from_slice(&word.to_le_bytes());
        }
    }

    #[inline(always)]
    fn xor(self, other: Self) -> Self {
        let mut out = self.0;
        for (word, o) in out.iter_mut().zip(other.0) {
            *word ^= o;
        }
        Scalar(out)
    }

    #[inline(always)]
    fn mul2(self) -> Self {
        let mut out = self.0;
        for word in &mut out {
            // One byte per lane: the top bits, moved to bit 0 of each byte, times 0x1d put the
            // reduction into exactly the bytes that overflowed (no carries between bytes).
            let overflow = ((*word & HIGH_BITS) >> 7).wrapping_mul(REDUCE);
            *word = ((*word << 1) & LOW_SEVEN) ^ overflow;
        }
        Scalar(out)
    }

    #[inline(always)]
    fn table(c: u8) -> Self::Table {
        let mut table = [0u8; 256];
        for (x, product) in table.iter_mut().enumerate() {
            *product = gf::mul(c, x as u8);
        }
        table
    }

    #[inline(always)]
    fn mul(self, table: &Self::Table) -> Self {
        let mut out = self.0;
        for word in &mut out {
            let mut bytes = word.to_le_bytes();
            for byte in &mut bytes {
                *byte = table[usize::from(*byte)];
            }
            *word = u64::from_le_bytes(bytes);
        }
        Scalar(out)
    }
}

/// [`sweep`] on portable lanes for the row set `rows`.
pub(crate) fn sweep_rows(rows: u8, data: &[Option<&[u8]>], len: usize, sink: &mut Sink<'_, '_>) {
    match rows {
        1 => sweep::<Scalar, 1>(data, len, sink),
        2 => sweep::<Scalar, 2>(data, len, sink),
        3 => sweep::<Scalar, 3>(data, len, sink),
        4 => sweep::<Scalar, 4>(data, len, sink),
        5 => sweep::<Scalar, 5>(data, len, sink),
        6 => sweep::<Scalar, 6>(data, len, sink),
        7 => sweep::<Scalar, 7>(data, len, sink),
        _ => panic!("parity row set {rows:#b} out of range"),
    }
}
