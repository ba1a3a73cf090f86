//! The vdev layer's error type.

use tarn_base::Guid;
use tarn_format::label::VdevKind;

/// Why a vdev operation failed. Healed problems are not errors: they show up in counters and
/// reports. Every variant names the vdev (`guid`) and, for I/O, the top-level byte range.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VdevError {
    /// A vdev configuration is not valid (width, parity, ashift, duplicate leaves, sizes).
    #[error("vdev {guid}: invalid configuration: {why}")]
    InvalidConfig {
        /// The top-level vdev (or leaf) concerned.
        guid: Guid,
        /// What is wrong, and what would be valid.
        why: &'static str,
    },
    /// The vdev tree holds a kind this layer does not build (spares, replacing, ...).
    #[error("vdev {guid}: kind '{}' is not supported here", kind.name())]
    UnsupportedKind {
        /// The node concerned.
        guid: Guid,
        /// Its kind.
        kind: VdevKind,
    },
    /// A leaf device is too small to hold labels and a data area.
    #[error("leaf {guid}: device of {size} bytes is too small")]
    DeviceTooSmall {
        /// The leaf.
        guid: Guid,
        /// Its size in bytes.
        size: u64,
    },
    /// Offset or length is not a positive multiple of the sector size.
    #[error("vdev {guid}: access of {len} bytes at {offset} is not aligned to {sector} bytes")]
    Misaligned {
        /// The top-level vdev.
        guid: Guid,
        /// Top-level byte offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
        /// Sector size.
        sector: u64,
    },
    /// The access (with its allocated size) does not fit in the vdev's address space.
    #[error("vdev {guid}: access of {len} bytes at {offset} is beyond its size {asize}")]
    OutOfRange {
        /// The top-level vdev.
        guid: Guid,
        /// Top-level byte offset.
        offset: u64,
        /// Allocated length in bytes.
        len: u64,
        /// The vdev's address-space size.
        asize: u64,
    },
    /// Too few children took the write for the block to survive.
    #[error(
        "vdev {guid}: write of {len} bytes at {offset} reached too few children \
         ({} failed, {tolerated} tolerated)", failed.len()
    )]
    WriteFailed {
        /// The top-level vdev.
        guid: Guid,
        /// Top-level byte offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
        /// Leaves that did not take their part (I/O error, missing or not online).
        failed: Vec<Guid>,
        /// How many failed leaves the layout tolerates.
        tolerated: usize,
    },
    /// No copy or reconstruction of the block verified: its data is lost on this vdev.
    #[error("vdev {guid}: {len} bytes at {offset} are unrecoverable: {why}")]
    Unrecoverable {
        /// The top-level vdev.
        guid: Guid,
        /// Top-level byte offset.
        offset: u64,
        /// Length in bytes.
        len: u64,
        /// What failed last.
        why: &'static str,
    },
    /// Flushing failed on more leaves than the layout tolerates.
    #[error("vdev {guid}: flush failed on {} leaves ({tolerated} tolerated)", failed.len())]
    FlushFailed {
        /// The top-level vdev.
        guid: Guid,
        /// Leaves whose flush failed or that are not usable.
        failed: Vec<Guid>,
        /// How many failed leaves the layout tolerates.
        tolerated: usize,
    },
}
