//! tarn-send: the replication stream codec (what `tarn send` writes and `tarn receive` reads).
//!
//! # Purpose
//! One place that fixes tarn's own send stream: a versioned, self-describing sequence of
//! records that carries a snapshot (or the difference between two snapshots) of a dataset's
//! object set from one pool to another. This crate is pure: it turns [`Record`] values into
//! bytes and bytes back into records, checks every record where it stands, and refuses
//! anything out of order. Walking an object set to produce records, and applying them to
//! one, is tarn-dataset's `send` module; the verbs are the engine's.
//!
//! # Model
//! ```text
//!  stream   = substream+                      (-I and -R concatenate several)
//!  substream= BEGIN PROPERTY* objrec* END
//!           | BEGIN MANIFEST* END             (first of a -R stream: the sent tree)
//!  chain    = substream whose BEGIN counts n, then ones counting n-1, ..., 1
//!                                             (`send -I` without -R: FEATURE_CHAIN)
//!  objrec   = OBJECT (WRITE | FREE)* | FREEOBJECTS
//!
//!  record   = header (24 B) | payload (len B) | check (16 B)
//!             header: magic "TSND", kind u16, reserved u16, sequence u64, len u32,
//!                     header check u32 (of the 20 bytes before it)
//!             check:  first 16 bytes of BLAKE3(header | payload)
//!  END      = records before it, bytes before it, BLAKE3 over the check of every record
//!             since BEGIN (the running checksum)
//! ```
//! Sequence numbers count from 0 at each BEGIN, so a dropped, repeated or reordered record
//! is found at that record; objects come in ascending id order and the writes and frees of
//! one object in ascending offset order ([`Order`]), so a receiver applies a stream in one
//! pass and knows how far it got (the resume point). The substreams of a chain (`send -I`,
//! [`FEATURE_CHAIN`]) count down to 1 in their BEGINs and each starts from the snapshot the
//! one before brings, so an input that ends inside a chain, even at a substream boundary,
//! is a truncation, not a shorter stream. A sender that sized its stream first puts the
//! whole stream's bytes in its first BEGIN ([`FEATURE_STREAM_SIZE`]); the reader passes it
//! on ([`StreamReader::stream_size`]) for a receiver's progress and never checks it, since
//! a wrong size costs only a wrong ETA. Byte layouts: docs/FORMAT.md section 21.
//!
//! # State
//! None on disk. A [`StreamWriter`] and a [`StreamReader`] hold the sequence number, the
//! running checksum and the byte count of the substream they are in; [`Order`] holds the
//! last object and offset seen; the reader also the chain it is in (substreams left, the
//! snapshot the last one brought) and the stream's announced size.
//!
//! # Invariants
//! - I1: a decoder of arbitrary bytes returns a record or a [`StreamError`], never panics,
//!   and never allocates more than [`PAYLOAD_MAX`] bytes for one record (the length is
//!   checked against the bound and the header check before the payload is read).
//! - I2: every record a [`StreamReader`] returns passed its own check, came with the next
//!   sequence number and respects [`Order`]; END is returned only when its record count,
//!   byte count and running checksum match what was read.
//! - I3: encode then decode is the identity on every valid record (proptest), and
//!   [`encoded_len`] is exactly the number of bytes [`StreamWriter::write`] produces.
//! - I4: a feature bit this build does not know is refused at BEGIN by name, never ignored.
//! - I5: a [`StreamReader`] returns `None` (the input's end) only outside a chain: every
//!   chain it started was read to its last substream.
//!
//! # Concurrency and context
//! Plain values and `Read`/`Write` adapters; no threads, no locks.
//!
//! # Failure model
//! Truncation, flipped bits, reordered or repeated records, absurd lengths and values are
//! [`StreamError`]s that name the record (sequence number and kind) where they were found.
//! An I/O error of the underlying reader or writer is [`StreamError::Io`].
//!
//! # Not here
//! Which blocks to send (tarn-dataset `send`), how a receive stays invisible until END and
//! how a partial one is kept for `send -t` (tarn-dataset and the engine), the transport
//! (tarn-daemon passes the CLI's descriptors).

mod frame;
mod manifest;
mod order;
mod record;
mod token;

#[cfg(test)]
mod tests;

pub use frame::{
    HEADER_LEN, StreamReader, StreamWriter, TRAILER_LEN, decode_frame, encoded_len, payload_len,
};
pub use manifest::{MANIFEST_BYTES, MANIFEST_VERSION, Manifest, ManifestSnapshot};
pub use order::Order;
pub use record::{
    BONUS_MAX, Begin, DATA_MAX, END_LEN, Encoding, FEATURE_CHAIN, FEATURE_CLONE,
    FEATURE_COMPRESSED, FEATURE_EMBEDDED, FEATURE_LARGE_BLOCKS, FEATURE_MANIFEST,
    FEATURE_PROPERTIES, FEATURE_REPLICATED, FEATURE_RESUMING, FEATURE_STREAM_SIZE, FEATURES_KNOWN,
    Kind, NAME_MAX, ObjectRecord, Record, STREAM_MAGIC, STREAM_SIZE_MAX, STREAM_VERSION, VALUE_MAX,
    Write as WriteRecord,
};
pub use token::{ResumeToken, TOKEN_VERSION};

/// Largest payload of one record: a write of the largest block plus its fixed fields.
pub const PAYLOAD_MAX: usize = record::DATA_MAX + 64;

/// Why a stream could not be read (or written).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The reader or writer failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The stream ended inside a record, or before the END of its substream.
    #[error("stream is truncated (in record {record})")]
    Truncated {
        /// Sequence number of the record that was cut.
        record: u64,
    },
    /// A record does not start with the record magic.
    #[error("invalid stream (bad magic at record {record})")]
    BadMagic {
        /// Sequence number expected there.
        record: u64,
    },
    /// A record header fails its check (a flipped bit in the kind, sequence or length).
    #[error("checksum mismatch in the header of record {record}")]
    HeaderChecksum {
        /// Sequence number expected there.
        record: u64,
    },
    /// A record's payload or header fails the record check.
    #[error("checksum mismatch in record {record} ({kind})")]
    RecordChecksum {
        /// Its sequence number.
        record: u64,
        /// Its kind.
        kind: &'static str,
    },
    /// A record claims a payload larger than any valid one.
    #[error("record {record} claims {len} bytes (at most {max})")]
    TooLarge {
        /// Its sequence number.
        record: u64,
        /// The claimed length.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// A record arrived out of sequence (dropped, repeated or reordered).
    #[error("record {found} arrived where record {expected} was expected")]
    Sequence {
        /// The sequence number expected.
        expected: u64,
        /// The one found.
        found: u64,
    },
    /// A record kind this build does not know.
    #[error("record {record} has unknown kind {kind}")]
    UnknownKind {
        /// Its sequence number.
        record: u64,
        /// The kind found.
        kind: u16,
    },
    /// A record's payload does not decode or holds an impossible value.
    #[error("record {record} ({kind}) is malformed: {why}")]
    Malformed {
        /// Its sequence number.
        record: u64,
        /// Its kind.
        kind: &'static str,
        /// What was wrong.
        why: &'static str,
    },
    /// A record is valid alone but not where it stands (an earlier object after a later
    /// one, a write before its object, a second BEGIN).
    #[error("record {record} ({kind}) is out of order: {why}")]
    Order {
        /// Its sequence number.
        record: u64,
        /// Its kind.
        kind: &'static str,
        /// What was wrong.
        why: &'static str,
    },
    /// The input ended between two substreams of a chain ([`FEATURE_CHAIN`], `send -I`):
    /// a stream cut at a substream boundary.
    #[error("stream is truncated (after {received} of the {total} substreams of its chain)")]
    ChainTruncated {
        /// Substreams of the chain that came whole.
        received: u32,
        /// Substreams its first BEGIN counted.
        total: u32,
    },
    /// The END record's counts or running checksum differ from what was read.
    #[error("stream checksum mismatch at its end (record {record})")]
    EndChecksum {
        /// The END record's sequence number.
        record: u64,
    },
    /// The stream needs a version or features this build does not have.
    #[error("stream version {version} with features {features:#x} is not supported ({why})")]
    Unsupported {
        /// The stream's version.
        version: u32,
        /// Its feature bits.
        features: u64,
        /// What is missing.
        why: &'static str,
    },
    /// A resume token does not decode.
    #[error("invalid resume token: {0}")]
    BadToken(&'static str),
}

impl StreamError {
    /// True when the stream simply ended early (a cut pipe): what `receive -s` saves state
    /// for, as opposed to damage.
    #[must_use]
    pub fn is_truncation(&self) -> bool {
        matches!(
            self,
            StreamError::Truncated { .. } | StreamError::ChainTruncated { .. }
        )
    }
}
