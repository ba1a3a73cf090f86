//! The persistent index of a cache device (persistent L2ARC, docs/FORMAT.md section 19): a
//! device header in two slots at the front of the cache device's data area, and log blocks
//! written into the ring itself, each describing the block copies written to the ring since
//! the previous one and naming that previous one, newest first from the header.
//!
//! ```text
//!  data area:  | header slot 0 | header slot 1 | ring (from L2_RING_START) ............ |
//!  header ──► newest log block ──prev──► older log block ──prev──► ... (until a block
//!             fails its checksum, or lies where the ring has written since)
//!
//!  log block (format version 1, little-endian):
//!    0 magic u64        8 version u64      16 pool_guid u64   24 device_guid u64
//!   32 position u64    40 count u32       44 zero u32        48 prev pointer (48 bytes)
//!   96 count entries of 64 bytes          96 + 64 count: sha256 of all bytes before it
//!  entry: 0 vdev u32  4 psize u32  8 offset u64  16 birth u64  24 position u64
//!         32 checksum of the copy [u64; 4]
//!  pointer: 0 position u64  8 length u32  12 zero u32  16 sha256 of the block [u64; 4]
//!  header: 0 magic u64  8 version u64  16 pool_guid u64  24 device_guid u64
//!          32 sequence u64  40 capacity u64  48 reserved u64  56 newest pointer (48 bytes)
//!          104 sha256 of bytes 0..104
//! ```
//! Positions are *logical* ring positions: they only grow, and the byte at logical position
//! `p` sits at data-area offset `L2_RING_START + p % capacity` (a block that does not fit
//! before the end of the ring skips the tail, so every lap is exactly `capacity` bytes).

use crate::checksum::{Checksum, ChecksumKind, check_sha256, checksum, seal_sha256};
use crate::wire::{Reader, Writer};
use crate::{FORMAT_VERSION, FormatError};
use tarn_base::Guid;

/// Header slots at the front of a cache device's data area.
pub const L2_HEADER_SLOTS: u64 = 2;
/// Distance between header slots: one sector of the largest ashift.
pub const L2_HEADER_STRIDE: u64 = 1 << tarn_base::limits::ASHIFT_MAX;
/// Data-area offset where the ring starts (after the header slots).
pub const L2_RING_START: u64 = L2_HEADER_SLOTS * L2_HEADER_STRIDE;
/// Encoded size of a header (the rest of its slot is zero).
pub const L2_HEADER_SIZE: usize = 136;
/// Encoded size of one log entry.
pub const L2_ENTRY_SIZE: usize = 64;
/// Size of a log block's fixed part before its entries.
pub const L2_LOG_HEAD_SIZE: usize = 96;
/// Largest log block, in bytes (before padding to a sector).
pub const L2_LOG_BLOCK_MAX: usize = 64 << 10;
/// Most entries one log block holds.
pub const L2_LOG_ENTRIES_MAX: usize = (L2_LOG_BLOCK_MAX - L2_LOG_HEAD_SIZE - 32) / L2_ENTRY_SIZE;

const HEADER_MAGIC: u64 = 0x0068_326c_6e72_6174; // "tarnl2h\0"
const LOG_MAGIC: u64 = 0x006c_326c_6e72_6174; // "tarnl2l\0"
const POINTER_SIZE: usize = 48;
const HEADER_BODY: usize = L2_HEADER_SIZE - 32;

const _: () = assert!(
    L2_LOG_ENTRIES_MAX == 1022,
    "a full log block is exactly 64 KiB"
);
const _: () = assert!(
    L2_LOG_HEAD_SIZE + L2_LOG_ENTRIES_MAX * L2_ENTRY_SIZE + 32 <= L2_LOG_BLOCK_MAX,
    "a full log block fits its bound"
);
const _: () = assert!(HEADER_BODY == 56 + POINTER_SIZE, "header layout");
const _: () = assert!(L2_HEADER_SIZE as u64 <= 1 << tarn_base::limits::ASHIFT_MIN);

/// Where a log block is: its logical ring position, its length and its SHA-256. A length of
/// zero means "none" (the first log block of a device names no previous one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L2LogPtr {
    /// Logical ring position of the block.
    pub position: u64,
    /// Bytes of the block (head, entries, checksum; not the sector padding).
    pub length: u32,
    /// SHA-256 of the block's bytes before its trailer (the trailer itself).
    pub checksum: Checksum,
}

impl L2LogPtr {
    /// Whether this pointer names a block.
    #[must_use]
    pub fn is_some(&self) -> bool {
        self.length > 0
    }

    fn write(&self, w: &mut Writer) {
        w.u64(self.position);
        w.u32(self.length);
        w.u32(0);
        for word in self.checksum.0 {
            w.u64(word);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, FormatError> {
        let position = r.u64()?;
        let length = r.u32()?;
        let _zero = r.u32()?;
        Ok(L2LogPtr {
            position,
            length,
            checksum: read_checksum(r)?,
        })
    }
}

fn read_checksum(r: &mut Reader<'_>) -> Result<Checksum, FormatError> {
    let mut words = [0u64; 4];
    for word in &mut words {
        *word = r.u64()?;
    }
    Ok(Checksum(words))
}

/// One block copy in the ring: the key the pool looks it up by (first DVA and birth txg, and
/// the block pointer's checksum, which is the checksum of exactly these `psize` bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L2Entry {
    /// Top-level vdev of the block's first DVA.
    pub vdev: u32,
    /// Physical bytes of the block (the copy takes this, rounded up to a sector).
    pub psize: u32,
    /// Offset of the block's first DVA.
    pub offset: u64,
    /// Birth txg of the block.
    pub birth: u64,
    /// Logical ring position of the copy.
    pub position: u64,
    /// The block pointer's checksum (of the copy's `psize` bytes).
    pub checksum: Checksum,
}

/// A log block: the entries written to the ring since the previous log block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct L2LogBlock {
    /// The pool the cache device belongs to.
    pub pool_guid: Guid,
    /// The cache device (its leaf GUID).
    pub device_guid: Guid,
    /// Logical ring position of this block.
    pub position: u64,
    /// The previous log block of the device (none for the first).
    pub prev: L2LogPtr,
    /// At most [`L2_LOG_ENTRIES_MAX`] entries, oldest first.
    pub entries: Vec<L2Entry>,
}

impl L2LogBlock {
    /// Encodes the block; returns the bytes (not padded) and the pointer naming them.
    #[must_use]
    pub fn encode(&self) -> (Vec<u8>, L2LogPtr) {
        assert!(
            self.entries.len() <= L2_LOG_ENTRIES_MAX,
            "a log block holds at most {L2_LOG_ENTRIES_MAX} entries, got {}",
            self.entries.len()
        );
        let mut w = Writer::new();
        w.u64(LOG_MAGIC);
        w.u64(FORMAT_VERSION);
        w.u64(self.pool_guid.0);
        w.u64(self.device_guid.0);
        w.u64(self.position);
        w.u32(self.entries.len() as u32);
        w.u32(0);
        self.prev.write(&mut w);
        assert_eq!(w.len(), L2_LOG_HEAD_SIZE, "log block head size");
        for entry in &self.entries {
            w.u32(entry.vdev);
            w.u32(entry.psize);
            w.u64(entry.offset);
            w.u64(entry.birth);
            w.u64(entry.position);
            for word in entry.checksum.0 {
                w.u64(word);
            }
        }
        let mut bytes = w.finish();
        let sum = checksum(ChecksumKind::Sha256, &bytes);
        seal_sha256(&mut bytes);
        assert!(bytes.len() <= L2_LOG_BLOCK_MAX, "log block size bounded");
        let ptr = L2LogPtr {
            position: self.position,
            length: bytes.len() as u32,
            checksum: sum,
        };
        (bytes, ptr)
    }

    /// Decodes the block `ptr` names from `bytes` (read at its position, possibly padded):
    /// its SHA-256 must be the pointer's and its own, its position the pointer's. Anything
    /// else (a torn or rotted block, another block written there since, garbage) is an
    /// error, never a panic.
    pub fn decode(bytes: &[u8], ptr: &L2LogPtr) -> Result<Self, FormatError> {
        const WHAT: &str = "cache log block";
        let length = ptr.length as usize;
        if !(L2_LOG_HEAD_SIZE + 32..=L2_LOG_BLOCK_MAX).contains(&length) {
            return Err(FormatError::Invalid {
                what: WHAT,
                why: "length out of range",
            });
        }
        let block = bytes
            .get(..length)
            .ok_or(FormatError::Truncated { what: WHAT })?;
        let (body, trailer) = block.split_at(length - 32);
        let mut r = Reader::new(body, WHAT);
        if r.u64()? != LOG_MAGIC {
            return Err(FormatError::BadMagic { what: WHAT });
        }
        check_sha256(body, trailer, WHAT)?;
        if checksum(ChecksumKind::Sha256, body) != ptr.checksum {
            return Err(FormatError::ChecksumMismatch { what: WHAT });
        }
        let version = r.u64()?;
        if version > FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                version,
            });
        }
        let pool_guid = Guid(r.u64()?);
        let device_guid = Guid(r.u64()?);
        let position = r.u64()?;
        let count = r.u32()? as usize;
        let _zero = r.u32()?;
        let prev = L2LogPtr::read(&mut r)?;
        if position != ptr.position {
            return Err(FormatError::Invalid {
                what: WHAT,
                why: "position differs from its pointer",
            });
        }
        if L2_LOG_HEAD_SIZE + count * L2_ENTRY_SIZE != body.len() {
            return Err(FormatError::Invalid {
                what: WHAT,
                why: "entry count does not match the length",
            });
        }
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push(L2Entry {
                vdev: r.u32()?,
                psize: r.u32()?,
                offset: r.u64()?,
                birth: r.u64()?,
                position: r.u64()?,
                checksum: read_checksum(&mut r)?,
            });
        }
        Ok(L2LogBlock {
            pool_guid,
            device_guid,
            position,
            prev,
            entries,
        })
    }
}

/// The device header: which pool and device the persistent index belongs to, the ring's
/// capacity, how far the ring may have been written (`reserved`), and the newest log block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct L2Header {
    /// The pool the cache device belongs to.
    pub pool_guid: Guid,
    /// The cache device (its leaf GUID).
    pub device_guid: Guid,
    /// Increases with every header write; the slot with the larger one is newer.
    pub sequence: u64,
    /// Bytes of the ring (a multiple of the sector size).
    pub capacity: u64,
    /// Logical position the ring is never written up to or past before a newer header
    /// raises it: everything at logical positions below `reserved - capacity` may have
    /// been overwritten.
    pub reserved: u64,
    /// The newest log block (none before the first).
    pub newest: L2LogPtr,
}

impl L2Header {
    /// Encodes into [`L2_HEADER_SIZE`] bytes with its embedded checksum.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(HEADER_MAGIC);
        w.u64(FORMAT_VERSION);
        w.u64(self.pool_guid.0);
        w.u64(self.device_guid.0);
        w.u64(self.sequence);
        w.u64(self.capacity);
        w.u64(self.reserved);
        self.newest.write(&mut w);
        let mut bytes = w.finish();
        assert_eq!(bytes.len(), HEADER_BODY, "cache header body size");
        seal_sha256(&mut bytes);
        assert_eq!(bytes.len(), L2_HEADER_SIZE, "cache header size");
        bytes
    }

    /// Decodes a header slot. A blank slot, a torn write or bit rot are errors.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "cache device header";
        let body = bytes
            .get(..HEADER_BODY)
            .ok_or(FormatError::Truncated { what: WHAT })?;
        let trailer = bytes
            .get(HEADER_BODY..L2_HEADER_SIZE)
            .ok_or(FormatError::Truncated { what: WHAT })?;
        let mut r = Reader::new(body, WHAT);
        if r.u64()? != HEADER_MAGIC {
            return Err(FormatError::BadMagic { what: WHAT });
        }
        check_sha256(body, trailer, WHAT)?;
        let version = r.u64()?;
        if version > FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                version,
            });
        }
        Ok(L2Header {
            pool_guid: Guid(r.u64()?),
            device_guid: Guid(r.u64()?),
            sequence: r.u64()?,
            capacity: r.u64()?,
            reserved: r.u64()?,
            newest: L2LogPtr::read(&mut r)?,
        })
    }
}

/// Data-area offset of the header slot that header `sequence` goes to.
#[must_use]
pub fn l2_header_offset(sequence: u64) -> u64 {
    (sequence % L2_HEADER_SLOTS) * L2_HEADER_STRIDE
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(n: u64) -> L2Entry {
        L2Entry {
            vdev: n as u32 % 3,
            psize: 4096,
            offset: n << 17,
            birth: 10 + n,
            position: n * 4096,
            checksum: Checksum([n, n + 1, n + 2, n + 3]),
        }
    }

    fn block(count: u64) -> L2LogBlock {
        L2LogBlock {
            pool_guid: Guid(5),
            device_guid: Guid(6),
            position: 1 << 30,
            prev: L2LogPtr {
                position: 7,
                length: 4000,
                checksum: Checksum([9; 4]),
            },
            entries: (0..count).map(entry).collect(),
        }
    }

    #[test]
    fn log_blocks_round_trip_empty_and_full() {
        for count in [0, 1, 17, L2_LOG_ENTRIES_MAX as u64] {
            let b = block(count);
            let (mut bytes, ptr) = b.encode();
            assert_eq!(ptr.length as usize, bytes.len());
            assert!(bytes.len() <= L2_LOG_BLOCK_MAX);
            bytes.resize(bytes.len().next_multiple_of(4096), 0);
            assert_eq!(L2LogBlock::decode(&bytes, &ptr), Ok(b), "{count} entries");
        }
    }

    #[test]
    fn every_flipped_byte_a_wrong_pointer_and_short_input_are_errors() {
        let (bytes, ptr) = block(3).encode();
        for at in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(L2LogBlock::decode(&bad, &ptr).is_err(), "byte {at}");
        }
        let other = L2LogPtr {
            checksum: Checksum([1; 4]),
            ..ptr
        };
        assert!(
            L2LogBlock::decode(&bytes, &other).is_err(),
            "not the block named"
        );
        let moved = L2LogPtr {
            position: ptr.position + 1,
            ..ptr
        };
        assert!(
            L2LogBlock::decode(&bytes, &moved).is_err(),
            "another position"
        );
        assert!(L2LogBlock::decode(&bytes[..bytes.len() - 1], &ptr).is_err());
        let huge = L2LogPtr {
            length: u32::MAX,
            ..ptr
        };
        assert!(L2LogBlock::decode(&bytes, &huge).is_err());
        assert!(L2LogBlock::decode(&[0; 8192], &ptr).is_err(), "blank");
    }

    #[test]
    fn headers_round_trip_and_reject_damage() {
        let header = L2Header {
            pool_guid: Guid(1),
            device_guid: Guid(2),
            sequence: 3,
            capacity: 1 << 30,
            reserved: 5 << 20,
            newest: block(2).encode().1,
        };
        let mut slot = header.encode();
        slot.resize(4096, 0);
        assert_eq!(L2Header::decode(&slot), Ok(header));
        for at in 0..L2_HEADER_SIZE {
            let mut bad = slot.clone();
            bad[at] ^= 1;
            assert!(L2Header::decode(&bad).is_err(), "byte {at}");
        }
        assert!(L2Header::decode(&[0; 4096]).is_err());
        assert!(L2Header::decode(&slot[..100]).is_err());
        assert_eq!(l2_header_offset(4), 0);
        assert_eq!(l2_header_offset(5), L2_HEADER_STRIDE);
    }
}
