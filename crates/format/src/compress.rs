//! Block compression: lz4 (default), zstd at a level, zle (zero-length encoding of zero runs),
//! or none. A block is stored compressed only if that saves at least 12.5% of its logical size;
//! otherwise it is stored as is and the block pointer says `off`.

use crate::FormatError;

/// Compression algorithm recorded in a block pointer: enough to decompress. The level used
/// to compress is not needed to decompress and is not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CompressKind {
    /// Stored as is.
    Off = 0,
    /// LZ4 block format, prefixed with the compressed length (u32 LE).
    Lz4 = 1,
    /// Zstandard frame.
    Zstd = 2,
    /// Zero-length encoding (runs of zeros).
    Zle = 3,
}

impl CompressKind {
    /// Decodes the on-disk byte.
    pub fn from_u8(value: u8) -> Result<Self, FormatError> {
        Ok(match value {
            0 => CompressKind::Off,
            1 => CompressKind::Lz4,
            2 => CompressKind::Zstd,
            3 => CompressKind::Zle,
            _ => {
                return Err(FormatError::Invalid { what: "block pointer", why: "unknown compression" });
            }
        })
    }
}

/// What to compress with: the algorithm plus, for zstd, its level (negative levels are
/// zstd's "fast" levels, written `zstd-fast-N` in properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompressSetting {
    /// Do not compress.
    Off,
    /// LZ4.
    Lz4,
    /// Zstandard at a level (1..=19, or -1..=-1000 for fast levels).
    Zstd(i32),
    /// Zero-length encoding.
    Zle,
}

impl CompressSetting {
    /// The algorithm recorded in block pointers.
    #[must_use]
    pub fn kind(self) -> CompressKind {
        match self {
            CompressSetting::Off => CompressKind::Off,
            CompressSetting::Lz4 => CompressKind::Lz4,
            CompressSetting::Zstd(_) => CompressKind::Zstd,
            CompressSetting::Zle => CompressKind::Zle,
        }
    }
}

/// The largest compressed size worth keeping for a block of `logical` bytes (saves >= 12.5%).
#[must_use]
pub fn compressed_size_limit(logical: usize) -> usize {
    logical - (logical >> 3)
}

/// Compresses `data`. Returns `None` when the result would not save at least 12.5% (the caller
/// then stores the block uncompressed).
#[must_use]
pub fn compress(setting: CompressSetting, data: &[u8]) -> Option<Vec<u8>> {
    let limit = compressed_size_limit(data.len());
    let out = match setting {
        CompressSetting::Off => return None,
        CompressSetting::Lz4 => {
            let mut out = vec![0u8; 4 + lz4_flex::block::get_maximum_output_size(data.len())];
            let written = lz4_flex::block::compress_into(data, &mut out[4..]).ok()?;
            if written + 4 > limit {
                return None;
            }
            out[..4].copy_from_slice(&(written as u32).to_le_bytes());
            out.truncate(written + 4);
            out
        }
        CompressSetting::Zstd(level) => zstd::bulk::compress(data, level).ok()?,
        CompressSetting::Zle => zle_compress(data, limit)?,
    };
    (out.len() <= limit).then_some(out)
}

/// Decompresses `data` (a block's physical bytes) into exactly `logical_size` bytes.
pub fn decompress(kind: CompressKind, data: &[u8], logical_size: usize) -> Result<Vec<u8>, FormatError> {
    let bad = |why| FormatError::Invalid { what: "compressed block", why };
    match kind {
        CompressKind::Off => {
            let mut out = data.get(..logical_size.min(data.len())).ok_or(bad("short"))?.to_vec();
            out.resize(logical_size, 0);
            Ok(out)
        }
        CompressKind::Lz4 => {
            let header: [u8; 4] = data.get(..4).and_then(|h| h.try_into().ok()).ok_or(bad("short"))?;
            let len = u32::from_le_bytes(header) as usize;
            let body = data.get(4..4 + len).ok_or(bad("lz4 length beyond block"))?;
            let mut out = vec![0u8; logical_size];
            let written =
                lz4_flex::block::decompress_into(body, &mut out).map_err(|_| bad("lz4 data"))?;
            if written != logical_size {
                return Err(bad("lz4 size mismatch"));
            }
            Ok(out)
        }
        CompressKind::Zstd => {
            let mut out = vec![0u8; logical_size];
            // The frame is followed by zero padding up to the sector size; zstd stops at the
            // end of the frame.
            let written = zstd::bulk::decompress_to_buffer(data, &mut out).map_err(|_| bad("zstd data"))?;
            if written != logical_size {
                return Err(bad("zstd size mismatch"));
            }
            Ok(out)
        }
        CompressKind::Zle => zle_decompress(data, logical_size),
    }
}

/// ZLE: a sequence of runs; a header byte `n < 128` means `n + 1` literal bytes follow,
/// `n >= 128` means `n - 127` zero bytes. The stream ends when `logical_size` bytes are out.
fn zle_compress(data: &[u8], limit: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(limit);
    let mut i = 0;
    while i < data.len() {
        if out.len() > limit {
            return None;
        }
        if data[i] == 0 {
            let run = data[i..].iter().take(128).take_while(|&&b| b == 0).count();
            out.push(127 + run as u8);
            i += run;
        } else {
            let run = data[i..].iter().take(128).take_while(|&&b| b != 0).count();
            out.push((run - 1) as u8);
            out.extend_from_slice(&data[i..i + run]);
            i += run;
        }
    }
    (out.len() <= limit).then_some(out)
}

fn zle_decompress(data: &[u8], logical_size: usize) -> Result<Vec<u8>, FormatError> {
    let bad = FormatError::Invalid { what: "compressed block", why: "zle data" };
    let mut out = Vec::with_capacity(logical_size);
    let mut i = 0;
    while out.len() < logical_size {
        let header = *data.get(i).ok_or(bad.clone())?;
        i += 1;
        if header < 128 {
            let len = usize::from(header) + 1;
            out.extend_from_slice(data.get(i..i + len).ok_or(bad.clone())?);
            i += len;
        } else {
            out.resize(out.len() + usize::from(header - 127), 0);
        }
    }
    if out.len() != logical_size {
        return Err(bad);
    }
    Ok(out)
}

/// True when every byte is zero (such blocks become holes and take no space).
#[must_use]
pub fn is_all_zero(data: &[u8]) -> bool {
    let mut words = data.chunks_exact(8);
    words.all(|c| c == [0u8; 8]) && words.remainder().iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(setting: CompressSetting, data: &[u8]) -> Option<usize> {
        let compressed = compress(setting, data)?;
        let back = decompress(setting.kind(), &compressed, data.len()).expect("decompress");
        assert_eq!(back, data, "{setting:?} round trip");
        Some(compressed.len())
    }

    #[test]
    fn compressible_data_shrinks_and_round_trips() {
        let data: Vec<u8> = (0..131_072u32).map(|i| (i / 64) as u8).collect();
        for setting in [CompressSetting::Lz4, CompressSetting::Zstd(3), CompressSetting::Zstd(-5)] {
            let size = round_trip(setting, &data).expect("should compress");
            assert!(size < data.len() / 2, "{setting:?} gave {size}");
        }
        let mut sparse = vec![0u8; 65536];
        sparse[1000] = 9;
        assert!(round_trip(CompressSetting::Zle, &sparse).is_some());
    }

    #[test]
    fn incompressible_data_is_refused() {
        let mut rng = tarn_base::SeededRng::new(1);
        let mut data = vec![0u8; 131_072];
        rng.fill(&mut data);
        for setting in [CompressSetting::Lz4, CompressSetting::Zstd(3), CompressSetting::Zle] {
            assert_eq!(compress(setting, &data), None, "{setting:?}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = tarn_base::SeededRng::new(2);
        for _ in 0..200 {
            let len = rng.below(300) as usize;
            let mut data = vec![0u8; len];
            rng.fill(&mut data);
            for kind in [CompressKind::Lz4, CompressKind::Zstd, CompressKind::Zle, CompressKind::Off] {
                let _ = decompress(kind, &data, 4096);
            }
        }
    }

    #[test]
    fn zero_detection() {
        assert!(is_all_zero(&[0u8; 4099]));
        let mut data = [0u8; 4099];
        data[4098] = 1;
        assert!(!is_all_zero(&data));
    }
}
