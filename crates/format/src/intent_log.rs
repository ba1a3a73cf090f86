//! Intent-log blocks (docs/FORMAT.md "Intent log"): the self-checksummed, chained blocks an
//! `fsync` writes between txgs.
//!
//! No parent holds a log block's checksum: the dataset header names only the first block
//! (its address, size and the chain's id), and every block names the next one, allocated
//! before this one was written. A block is valid only if its own checksum matches AND it
//! carries the chain id and sequence number the reader expects, so a torn block, a block
//! never written (stale bytes of an older chain, zeros) or garbage all end the chain the
//! same way: [`decode_block`] returns `None`.

use crate::blkptr::{BlockPtr, Dva};
use crate::checksum::{Checksum, ChecksumKind, checksum};
use crate::wire::{Reader, Writer};
use tarn_base::VdevId;

/// Magic number of a log block ("TARNZIL\0" read as a little-endian u64).
pub const LOG_BLOCK_MAGIC: u64 = u64::from_le_bytes(*b"TARNZIL\0");
/// Bytes of the block header before the payload.
pub const LOG_HEADER_LEN: usize = 96;
/// Smallest log block.
pub const LOG_BLOCK_MIN: u32 = 4096;
/// Largest log block.
pub const LOG_BLOCK_MAX: u32 = 128 << 10;

/// Where a log block is and how long it is: what a dataset header or the previous block
/// names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogPtr {
    /// The block's address (one copy).
    pub dva: Dva,
    /// Bytes written there (header and payload, a multiple of 512).
    pub psize: u32,
}

impl LogPtr {
    /// Whether the pointer names nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.dva.asize == 0
    }

    /// Encodes into 32 bytes: vdev u32, psize u32, offset u64, asize u64, 8 zero bytes.
    pub fn encode_into(&self, w: &mut Writer) {
        w.u32(self.dva.vdev.0);
        w.u32(self.psize);
        w.u64(self.dva.offset);
        w.u64(self.dva.asize);
        w.u64(0);
    }

    /// Decodes 32 bytes (garbage is an error, never a panic).
    pub fn decode(r: &mut Reader<'_>) -> Result<Self, crate::FormatError> {
        let vdev = VdevId(r.u32()?);
        let psize = r.u32()?;
        let offset = r.u64()?;
        let asize = r.u64()?;
        let _reserved = r.u64()?;
        Ok(LogPtr {
            dva: Dva {
                vdev,
                offset,
                asize,
            },
            psize,
        })
    }
}

/// The header of one log block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogBlockHeader {
    /// The chain this block belongs to (named by the dataset header).
    pub chain: u64,
    /// Position in the chain: the first block is 1.
    pub seq: u64,
    /// Payload bytes after the header.
    pub payload_len: u32,
    /// The commit this block carries part of goes on in the next block (flags bit 0).
    /// Replay stops after the last block that ends a commit, so a commit cut by a crash is
    /// replayed not at all rather than in part. Blocks of writers before this flag have it
    /// clear: each of them ends a commit, as they were replayed then.
    pub continues: bool,
    /// The next block, allocated before this one was written (never written yet when this
    /// block is the newest).
    pub next: LogPtr,
}

fn summed(bytes: &[u8], payload_len: usize) -> Checksum {
    let mut covered = Vec::with_capacity(64 + payload_len);
    covered.extend_from_slice(&bytes[..64]);
    covered.extend_from_slice(&bytes[LOG_HEADER_LEN..LOG_HEADER_LEN + payload_len]);
    checksum(ChecksumKind::Fletcher4, &covered)
}

/// Encodes a block of `psize` bytes (a multiple of 512, at least the header plus payload).
#[must_use]
pub fn encode_block(header: &LogBlockHeader, payload: &[u8], psize: u32) -> Vec<u8> {
    assert!(
        LOG_HEADER_LEN + payload.len() <= psize as usize && psize.is_multiple_of(512),
        "log block of {psize} bytes cannot hold {} payload bytes",
        payload.len()
    );
    assert_eq!(header.payload_len as usize, payload.len(), "payload length");
    let mut w = Writer::new();
    w.u64(LOG_BLOCK_MAGIC);
    w.u64(header.chain);
    w.u64(header.seq);
    w.u32(header.payload_len);
    w.u32(u32::from(header.continues));
    header.next.encode_into(&mut w);
    let mut bytes = w.finish();
    bytes.resize(psize as usize, 0);
    bytes[LOG_HEADER_LEN..LOG_HEADER_LEN + payload.len()].copy_from_slice(payload);
    let sum = summed(&bytes, payload.len());
    for (i, word) in sum.0.iter().enumerate() {
        bytes[64 + 8 * i..72 + 8 * i].copy_from_slice(&word.to_le_bytes());
    }
    bytes
}

/// Decodes a log block read from disk, valid only if it verifies and is block `seq` of
/// `chain`. Anything else (torn, stale, foreign, garbage) is `None`: the end of the chain.
#[must_use]
pub fn decode_block(bytes: &[u8], chain: u64, seq: u64) -> Option<(LogBlockHeader, &[u8])> {
    let mut r = Reader::new(bytes, "intent-log block");
    if r.u64().ok()? != LOG_BLOCK_MAGIC {
        return None;
    }
    let found_chain = r.u64().ok()?;
    let found_seq = r.u64().ok()?;
    let payload_len = r.u32().ok()?;
    // Bit 0: the commit continues; the other bits are reserved (written zero, ignored).
    let flags = r.u32().ok()?;
    let next = LogPtr::decode(&mut r).ok()?;
    if found_chain != chain || found_seq != seq {
        return None;
    }
    let len = payload_len as usize;
    if LOG_HEADER_LEN.checked_add(len)? > bytes.len() {
        return None;
    }
    let mut stored = [0u64; 4];
    for word in &mut stored {
        *word = r.u64().ok()?;
    }
    if summed(bytes, len) != Checksum(stored) {
        return None;
    }
    let header = LogBlockHeader {
        chain,
        seq,
        payload_len,
        continues: flags & 1 != 0,
        next,
    };
    Some((header, &bytes[LOG_HEADER_LEN..LOG_HEADER_LEN + len]))
}

/// Whether an indirect write record's range (`len` bytes at byte `offset` of its file or
/// volume) lies inside `block`, the data block it names, read from byte `offset mod lsize`
/// on (docs/FORMAT.md "Intent log": record types 16 and 34). A hole names no bytes.
#[must_use]
pub fn indirect_inside(offset: u64, len: u32, block: &BlockPtr) -> bool {
    let lsize = u64::from(block.lsize);
    !block.is_hole() && lsize > 0 && offset % lsize + u64::from(len) <= lsize
}

/// The bytes an indirect write record names: `len` bytes of `block` (the verified logical
/// bytes of the block it points to) from byte `offset mod block.len()` on; `None` when the
/// range leaves the block.
#[must_use]
pub fn indirect_bytes(block: &[u8], offset: u64, len: u32) -> Option<&[u8]> {
    let size = u64::try_from(block.len()).ok().filter(|size| *size > 0)?;
    let within = usize::try_from(offset % size).ok()?;
    block.get(within..within.checked_add(len as usize)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(payload: &[u8]) -> LogBlockHeader {
        LogBlockHeader {
            chain: 0xfeed,
            seq: 3,
            payload_len: payload.len() as u32,
            continues: false,
            next: LogPtr {
                dva: Dva {
                    vdev: VdevId(1),
                    offset: 8192,
                    asize: 4096,
                },
                psize: 4096,
            },
        }
    }

    #[test]
    fn a_block_round_trips_and_only_for_its_chain_and_sequence() {
        let payload = b"records".to_vec();
        let bytes = encode_block(&header(&payload), &payload, 4096);
        let (decoded, body) = decode_block(&bytes, 0xfeed, 3).expect("valid block");
        assert_eq!(decoded, header(&payload));
        assert_eq!(body, payload.as_slice());
        assert!(decode_block(&bytes, 0xfeed, 4).is_none(), "wrong sequence");
        assert!(decode_block(&bytes, 0xbeef, 3).is_none(), "wrong chain");
        let going_on = LogBlockHeader {
            continues: true,
            ..header(&payload)
        };
        let bytes = encode_block(&going_on, &payload, 4096);
        assert_eq!(bytes[28], 1, "flags bit 0");
        assert_eq!(decode_block(&bytes, 0xfeed, 3).expect("valid").0, going_on);
    }

    #[test]
    fn any_flipped_byte_in_header_or_payload_ends_the_chain() {
        let payload = vec![7u8; 300];
        let bytes = encode_block(&header(&payload), &payload, 4096);
        for i in 0..LOG_HEADER_LEN + payload.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(decode_block(&bad, 0xfeed, 3).is_none(), "byte {i} flipped");
        }
    }

    #[test]
    fn garbage_and_short_input_never_panic() {
        let mut rng = tarn_base::SeededRng::new(5);
        for len in [0usize, 1, 63, 95, 96, 512, 4096] {
            let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            assert!(decode_block(&bytes, 0, 0).is_none());
        }
        let mut lying = encode_block(&header(b"x"), b"x", 512);
        lying[24..28].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode_block(&lying, 0xfeed, 3).is_none());
    }
}
