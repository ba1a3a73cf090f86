//! Block checksums: fletcher4 (the default, fast), sha256 and blake3 (cryptographic).
//! A checksum is always 256 bits, stored as four little-endian u64 words in the block pointer.

use crate::FormatError;

/// Checksum algorithm of a block, as stored in the block pointer's `checksum` byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ChecksumKind {
    /// No checksum (only for blocks that carry their own, such as labels). Never chosen for data.
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
            _ => return Err(FormatError::Invalid { what: "block pointer", why: "unknown checksum" }),
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

/// Fletcher-4 over little-endian 32-bit words. A trailing partial word is zero-padded
/// (blocks are always sector multiples, so this only matters for odd-sized inputs).
#[must_use]
pub fn fletcher4(data: &[u8]) -> Checksum {
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let word = u64::from(u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]));
        a = a.wrapping_add(word);
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0u8; 4];
        word[..tail.len()].copy_from_slice(tail);
        a = a.wrapping_add(u64::from(u32::from_le_bytes(word)));
        b = b.wrapping_add(a);
        c = c.wrapping_add(b);
        d = d.wrapping_add(c);
    }
    Checksum([a, b, c, d])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fletcher4_known_values() {
        assert_eq!(fletcher4(&[]), Checksum([0, 0, 0, 0]));
        assert_eq!(fletcher4(&1u32.to_le_bytes()), Checksum([1, 1, 1, 1]));
        let two: Vec<u8> = [1u32, 2].iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(fletcher4(&two), Checksum([3, 4, 5, 6]));
    }

    #[test]
    fn kinds_differ_and_detect_flips() {
        let mut data = vec![7u8; 4096];
        for kind in [ChecksumKind::Fletcher4, ChecksumKind::Sha256, ChecksumKind::Blake3] {
            let before = checksum(kind, &data);
            data[100] ^= 1;
            assert_ne!(before, checksum(kind, &data), "{kind:?} missed a bit flip");
            data[100] ^= 1;
        }
    }
}
