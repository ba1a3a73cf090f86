//! Block checksums: fletcher4 (the default, fast), sha256 and blake3 (cryptographic).
//! A checksum is always 256 bits, stored as four little-endian u64 words in the block pointer.
//!
//! Fletcher-4 has several implementations ([`Fletcher4Impl`]): the scalar definition, a
//! portable two-lane kernel and an AVX2 kernel chosen at run time. The lane kernels split
//! the words over independent lanes and combine the lane sums into the exact scalar value
//! (the derivation is in `checksum/fletcher.rs`); tests compare every implementation with the
//! scalar one on random inputs of many lengths.

mod fletcher;
#[cfg(target_arch = "x86_64")]
mod fletcher_avx2;

use crate::FormatError;

/// Checksum algorithm of a block, as stored in the block pointer's `checksum` byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum ChecksumKind {
    /// No checksum (only for blocks that carry their own, such as labels). Never chosen for data.
    #[default]
    Off = 0,
    /// Fletcher-4 over 32-bit words: four running 64-bit sums. Fast; detects bit rot and torn
    /// writes but not deliberate tampering.
    Fletcher4 = 1,
    /// SHA-256.
    Sha256 = 2,
    /// BLAKE3, 256-bit output.
    Blake3 = 3,
}

impl ChecksumKind {
    /// Decodes the on-disk byte.
    pub fn from_u8(value: u8) -> Result<Self, FormatError> {
        Ok(match value {
            0 => ChecksumKind::Off,
            1 => ChecksumKind::Fletcher4,
            2 => ChecksumKind::Sha256,
            3 => ChecksumKind::Blake3,
            _ => {
                return Err(FormatError::Invalid {
                    what: "block pointer",
                    why: "unknown checksum",
                });
            }
        })
    }

    /// The property value name (`fletcher4`, `sha256`, `blake3`, `off`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ChecksumKind::Off => "off",
            ChecksumKind::Fletcher4 => "fletcher4",
            ChecksumKind::Sha256 => "sha256",
            ChecksumKind::Blake3 => "blake3",
        }
    }
}

/// A 256-bit checksum value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Checksum(pub [u64; 4]);

/// Computes the checksum of `data` with `kind`.
#[must_use]
pub fn checksum(kind: ChecksumKind, data: &[u8]) -> Checksum {
    match kind {
        ChecksumKind::Off => Checksum::default(),
        ChecksumKind::Fletcher4 => fletcher4(data),
        ChecksumKind::Sha256 => {
            use sha2::Digest;
            words(sha2::Sha256::digest(data).into())
        }
        ChecksumKind::Blake3 => words(*blake3::hash(data).as_bytes()),
    }
}

fn words(bytes: [u8; 32]) -> Checksum {
    let mut out = [0u64; 4];
    for (word, chunk) in out.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut array = [0u8; 8];
        array.copy_from_slice(chunk);
        *word = u64::from_le_bytes(array);
    }
    Checksum(out)
}

/// Fletcher-4 over little-endian 32-bit words: four wrapping u64 sums `a += w; b += a;
/// c += b; d += c` for each word `w`. A trailing partial word is zero-padded (blocks are
/// always sector multiples, so this only matters for odd-sized inputs). Runs the fastest
/// implementation this CPU has ([`Fletcher4Impl::fastest`]); all give the same value.
#[must_use]
pub fn fletcher4(data: &[u8]) -> Checksum {
    // Below a few rounds the lane setup and combination cost more than they save.
    if data.len() < SMALL_INPUT_BYTES {
        return fletcher::scalar(data);
    }
    #[cfg(target_arch = "x86_64")]
    if let Some(sum) = fletcher_avx2::fletcher4(data) {
        return sum;
    }
    fletcher::portable(data)
}

/// Inputs shorter than this use the scalar loop directly.
const SMALL_INPUT_BYTES: usize = 256;

/// A Fletcher-4 implementation. Every implementation computes exactly the same value (the
/// scalar definition); they differ only in speed. Tests and benchmarks pick one explicitly with
/// [`fletcher4_with`]; production code calls [`fletcher4`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fletcher4Impl {
    /// One word at a time: the definition, and the reference the others are tested against.
    Scalar,
    /// Portable Rust over two interleaved lanes, combined into the scalar result.
    Lanes,
    /// AVX2 over eight lanes in two 256-bit registers per sum (x86_64 CPUs with AVX2).
    Avx2,
}

impl Fletcher4Impl {
    /// Every implementation, available on this CPU or not.
    pub const ALL: [Fletcher4Impl; 3] = [
        Fletcher4Impl::Scalar,
        Fletcher4Impl::Lanes,
        Fletcher4Impl::Avx2,
    ];

    /// True when this CPU can run the implementation.
    #[must_use]
    pub fn is_available(self) -> bool {
        match self {
            Fletcher4Impl::Scalar | Fletcher4Impl::Lanes => true,
            #[cfg(target_arch = "x86_64")]
            Fletcher4Impl::Avx2 => fletcher_avx2::is_available(),
            #[cfg(not(target_arch = "x86_64"))]
            Fletcher4Impl::Avx2 => false,
        }
    }

    /// Short lowercase name (`scalar`, `lanes`, `avx2`) for benchmarks and logs.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Fletcher4Impl::Scalar => "scalar",
            Fletcher4Impl::Lanes => "lanes",
            Fletcher4Impl::Avx2 => "avx2",
        }
    }

    /// The implementation [`fletcher4`] uses for large inputs on this CPU.
    #[must_use]
    pub fn fastest() -> Fletcher4Impl {
        if Fletcher4Impl::Avx2.is_available() {
            Fletcher4Impl::Avx2
        } else {
            Fletcher4Impl::Lanes
        }
    }
}

/// Fletcher-4 with a chosen implementation, or `None` when this CPU cannot run it.
#[must_use]
pub fn fletcher4_with(implementation: Fletcher4Impl, data: &[u8]) -> Option<Checksum> {
    match implementation {
        Fletcher4Impl::Scalar => Some(fletcher::scalar(data)),
        Fletcher4Impl::Lanes => Some(fletcher::portable(data)),
        #[cfg(target_arch = "x86_64")]
        Fletcher4Impl::Avx2 => fletcher_avx2::fletcher4(data),
        #[cfg(not(target_arch = "x86_64"))]
        Fletcher4Impl::Avx2 => None,
    }
}

/// Appends the SHA-256 of `bytes` to them as four little-endian words: the self-checksummed
/// trailer of uberblocks and multihost heartbeats.
pub(crate) fn seal_sha256(bytes: &mut Vec<u8>) {
    let sum = checksum(ChecksumKind::Sha256, bytes);
    for word in sum.0 {
        bytes.extend_from_slice(&word.to_le_bytes());
    }
}

/// Checks a trailer written by [`seal_sha256`]: `trailer` starts with the SHA-256 of `body`.
pub(crate) fn check_sha256(
    body: &[u8],
    trailer: &[u8],
    what: &'static str,
) -> Result<(), FormatError> {
    let mut r = crate::wire::Reader::new(trailer, what);
    let mut words = [0u64; 4];
    for word in &mut words {
        *word = r.u64()?;
    }
    if checksum(ChecksumKind::Sha256, body) != Checksum(words) {
        return Err(FormatError::ChecksumMismatch { what });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn available() -> Vec<Fletcher4Impl> {
        Fletcher4Impl::ALL
            .into_iter()
            .filter(|i| i.is_available())
            .collect()
    }

    /// Compares every available implementation, and the dispatching `fletcher4`, with the
    /// scalar definition.
    fn check_all(data: &[u8]) {
        let expected = fletcher4_with(Fletcher4Impl::Scalar, data).expect("scalar always runs");
        for implementation in available() {
            let got = fletcher4_with(implementation, data).expect("available");
            assert_eq!(
                got,
                expected,
                "{} differs at {} bytes",
                implementation.name(),
                data.len()
            );
        }
        assert_eq!(
            fletcher4(data),
            expected,
            "dispatch differs at {} bytes",
            data.len()
        );
    }

    #[test]
    fn fletcher4_known_values() {
        for implementation in available() {
            let f = |data: &[u8]| fletcher4_with(implementation, data).expect("available");
            assert_eq!(f(&[]), Checksum([0, 0, 0, 0]));
            assert_eq!(f(&1u32.to_le_bytes()), Checksum([1, 1, 1, 1]));
            let two: Vec<u8> = [1u32, 2].iter().flat_map(|w| w.to_le_bytes()).collect();
            assert_eq!(f(&two), Checksum([3, 4, 5, 6]));
            // A partial word is zero-padded: [1, 0, 0] is the word 1.
            assert_eq!(f(&[1, 0, 0]), Checksum([1, 1, 1, 1]));
        }
    }

    /// Goal: every implementation equals the scalar definition for every length from 0 to
    /// 4 KiB (all tail shapes, all lane phases), from unaligned starts. Method: one random
    /// buffer, every prefix length, starting at offsets 0..4.
    #[test]
    fn implementations_agree_on_every_small_length() {
        let mut rng = tarn_base::SeededRng::new(11);
        let mut data = vec![0u8; 4096 + 3];
        rng.fill(&mut data);
        for start in 0..4 {
            for len in 0..=4096 {
                check_all(&data[start..start + len]);
            }
        }
    }

    /// Goal: agreement on block-sized inputs (128 KiB, 1 MiB, odd sizes near them) where the
    /// lane sums wrap many times. Method: random contents and all-0xff contents (the largest
    /// sums).
    #[test]
    fn implementations_agree_on_large_blocks() {
        let mut rng = tarn_base::SeededRng::new(12);
        for len in [131_072usize, 131_071, 131_077, 1 << 20, (1 << 20) + 5] {
            let mut data = vec![0u8; len];
            rng.fill(&mut data);
            check_all(&data);
            check_all(&vec![0xffu8; len]);
        }
    }

    /// Goal: random lengths and contents beyond the exhaustive range. Method: 200 random
    /// lengths up to 64 KiB with random contents.
    #[test]
    fn implementations_agree_on_random_lengths() {
        let mut rng = tarn_base::SeededRng::new(13);
        for _ in 0..200 {
            let len = rng.below(65_536) as usize;
            let mut data = vec![0u8; len];
            rng.fill(&mut data);
            check_all(&data);
        }
    }

    #[test]
    fn fastest_is_available_and_names_are_distinct() {
        assert!(Fletcher4Impl::fastest().is_available());
        assert!(Fletcher4Impl::Scalar.is_available() && Fletcher4Impl::Lanes.is_available());
        let names: std::collections::HashSet<_> =
            Fletcher4Impl::ALL.iter().map(|i| i.name()).collect();
        assert_eq!(names.len(), Fletcher4Impl::ALL.len());
    }

    #[test]
    fn unavailable_implementation_returns_none() {
        for implementation in Fletcher4Impl::ALL {
            assert_eq!(
                fletcher4_with(implementation, &[1, 2, 3]).is_some(),
                implementation.is_available()
            );
        }
    }

    #[test]
    fn kinds_differ_and_detect_flips() {
        let mut data = vec![7u8; 4096];
        for kind in [
            ChecksumKind::Fletcher4,
            ChecksumKind::Sha256,
            ChecksumKind::Blake3,
        ] {
            let before = checksum(kind, &data);
            data[100] ^= 1;
            assert_ne!(before, checksum(kind, &data), "{kind:?} missed a bit flip");
            data[100] ^= 1;
        }
    }
}
