//! The multihost heartbeat record: what the host that owns a `multihost=on` pool writes to
//! every leaf at a fixed interval, so that another host can tell a live owner from a dead one
//! before it imports (docs/FORMAT.md section 17).
//!
//! Encoded in the first 128 bytes of a heartbeat slot, little-endian (format version 1):
//!
//! ```text
//!    0 magic u64        8 version u64       16 pool_guid u64     24 hostid u64
//!   32 sequence u64    40 interval_ms u64   48 txg u64           56 time_ms u64
//!   64 fail_intervals  72 gap_ms u64        80 reserved (zero) ..96
//!   96 sha256 of bytes 0..96 [u64; 4]
//! ```
//! `fail_intervals` and `gap_ms` were reserved zeros before they were recorded: a heartbeat
//! of an older writer decodes with both 0, "not recorded", and the same checksum.
//! Each leaf has [`HEARTBEAT_SLOTS`] slots at [`HEARTBEAT_OFFSET`] in its boot reserve;
//! heartbeat `n` goes to slot `n % HEARTBEAT_SLOTS`, so a torn write leaves the previous one.

use crate::checksum::{check_sha256, seal_sha256};
use crate::wire::{Reader, Writer};
use crate::{FORMAT_VERSION, FormatError};
use tarn_base::{Guid, Txg};

/// Encoded size of a heartbeat (the rest of its slot is zero).
pub const HEARTBEAT_SIZE: usize = 128;
/// Offset of the first heartbeat slot from the start of the device (inside the boot reserve,
/// aligned for the largest sector).
pub const HEARTBEAT_OFFSET: u64 = 1 << 20;
/// Distance between heartbeat slots: one sector of the largest ashift.
pub const HEARTBEAT_SLOT_STRIDE: u64 = 1 << tarn_base::limits::ASHIFT_MAX;
/// Heartbeat slots per leaf.
pub const HEARTBEAT_SLOTS: u64 = 2;
const HEARTBEAT_MAGIC: u64 = 0x0070_6d6d_6e72_6174; // "tarnmmp\0"
const CHECKSUM_OFFSET: usize = HEARTBEAT_SIZE - 32;

const _: () = assert!(
    2 * crate::label::LABEL_SIZE <= HEARTBEAT_OFFSET,
    "heartbeats sit after the front labels"
);
const _: () = assert!(
    HEARTBEAT_OFFSET + HEARTBEAT_SLOTS * HEARTBEAT_SLOT_STRIDE <= crate::label::DATA_START,
    "heartbeats sit inside the boot reserve"
);

/// Size of one heartbeat slot write for a pool with `ashift`: one sector, at least 1 KiB.
#[must_use]
pub fn heartbeat_slot_size(ashift: u8) -> u64 {
    (1u64 << ashift).max(1 << 10)
}

/// Device offset of the slot that heartbeat `sequence` goes to.
#[must_use]
pub fn heartbeat_slot_offset(sequence: u64) -> u64 {
    HEARTBEAT_OFFSET + (sequence % HEARTBEAT_SLOTS) * HEARTBEAT_SLOT_STRIDE
}

/// One heartbeat of the host that owns a pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heartbeat {
    /// The pool it belongs to.
    pub pool_guid: Guid,
    /// Host id of the writer.
    pub hostid: u64,
    /// Increases by one per heartbeat of one import.
    pub sequence: u64,
    /// The writer's heartbeat interval in milliseconds (importers wait a multiple of it).
    pub interval_ms: u64,
    /// The pool's last committed txg when it was written.
    pub txg: Txg,
    /// The writer's clock, Unix milliseconds (for messages only; clocks of hosts differ).
    pub time_ms: u64,
    /// Intervals without a counted heartbeat after which the writer stops writing (its
    /// `MULTIHOST_FAIL_INTERVALS`); 0: not recorded (written before this field existed).
    pub fail_intervals: u64,
    /// Milliseconds between the start of the writer's previous counted heartbeat and this
    /// one's: how often its heartbeats really land (ZFS's `ub_mmp_delay` plays this part);
    /// 0: not recorded.
    pub gap_ms: u64,
}

impl Heartbeat {
    /// Encodes into [`HEARTBEAT_SIZE`] bytes with its embedded checksum.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u64(HEARTBEAT_MAGIC);
        w.u64(FORMAT_VERSION);
        w.u64(self.pool_guid.0);
        w.u64(self.hostid);
        w.u64(self.sequence);
        w.u64(self.interval_ms);
        w.u64(self.txg.0);
        w.u64(self.time_ms);
        w.u64(self.fail_intervals);
        w.u64(self.gap_ms);
        w.pad_to(CHECKSUM_OFFSET);
        let mut bytes = w.finish();
        seal_sha256(&mut bytes);
        assert_eq!(bytes.len(), HEARTBEAT_SIZE, "heartbeat encoding size");
        bytes
    }

    /// Decodes a slot. A blank slot, a torn write or bit rot are errors, never a panic.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        const WHAT: &str = "heartbeat";
        let body = bytes
            .get(..CHECKSUM_OFFSET)
            .ok_or(FormatError::Truncated { what: WHAT })?;
        let sum_bytes = bytes
            .get(CHECKSUM_OFFSET..HEARTBEAT_SIZE)
            .ok_or(FormatError::Truncated { what: WHAT })?;
        let mut r = Reader::new(body, WHAT);
        if r.u64()? != HEARTBEAT_MAGIC {
            return Err(FormatError::BadMagic { what: WHAT });
        }
        check_sha256(body, sum_bytes, WHAT)?;
        let version = r.u64()?;
        if version > FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                what: WHAT,
                version,
            });
        }
        Ok(Heartbeat {
            pool_guid: Guid(r.u64()?),
            hostid: r.u64()?,
            sequence: r.u64()?,
            interval_ms: r.u64()?,
            txg: Txg(r.u64()?),
            time_ms: r.u64()?,
            // Older writers left zeros here (the padding before the checksum).
            fail_intervals: r.u64()?,
            gap_ms: r.u64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Heartbeat {
        Heartbeat {
            pool_guid: Guid(11),
            hostid: 0x2a,
            sequence: 7,
            interval_ms: 1000,
            txg: Txg(99),
            time_ms: 1_700_000_000_123,
            fail_intervals: 10,
            gap_ms: 1003,
        }
    }

    #[test]
    fn round_trips_in_a_padded_slot() {
        let mut slot = sample().encode();
        slot.resize(heartbeat_slot_size(12) as usize, 0);
        assert_eq!(Heartbeat::decode(&slot), Ok(sample()));
    }

    /// Goal: a heartbeat written before `fail_intervals` and `gap_ms` existed (zeros in
    /// their place, the old reserved bytes) decodes with both 0, meaning "not recorded".
    #[test]
    fn an_older_heartbeat_records_neither_fail_intervals_nor_gap() {
        let old = Heartbeat {
            fail_intervals: 0,
            gap_ms: 0,
            ..sample()
        };
        let bytes = old.encode();
        assert!(
            bytes[64..96].iter().all(|b| *b == 0),
            "the old reserved bytes"
        );
        assert_eq!(Heartbeat::decode(&bytes).unwrap(), old);
        let recorded = sample().encode();
        assert_eq!(
            &recorded[..64],
            &bytes[..64],
            "the older fields did not move"
        );
    }

    #[test]
    fn damage_blank_and_short_input_are_errors() {
        let mut bytes = sample().encode();
        bytes[33] ^= 1;
        assert!(matches!(
            Heartbeat::decode(&bytes),
            Err(FormatError::ChecksumMismatch { .. })
        ));
        assert!(matches!(
            Heartbeat::decode(&[0u8; HEARTBEAT_SIZE]),
            Err(FormatError::BadMagic { .. })
        ));
        assert!(matches!(
            Heartbeat::decode(&sample().encode()[..40]),
            Err(FormatError::Truncated { .. })
        ));
    }

    #[test]
    fn consecutive_heartbeats_alternate_between_slots() {
        assert_eq!(heartbeat_slot_offset(0), HEARTBEAT_OFFSET);
        assert_eq!(
            heartbeat_slot_offset(1),
            HEARTBEAT_OFFSET + HEARTBEAT_SLOT_STRIDE
        );
        assert_eq!(heartbeat_slot_offset(2), HEARTBEAT_OFFSET);
        assert!(heartbeat_slot_size(16) <= HEARTBEAT_SLOT_STRIDE);
        assert_eq!(heartbeat_slot_size(9), 1024);
    }
}
