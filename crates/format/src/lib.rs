//! tarn-format: the on-disk types and their encodings, and the checksum and compression
//! codecs. Bytes in, values or errors out: this crate does no I/O.
//!
//! # Purpose
//! One place that says what every byte tarn writes means. docs/FORMAT.md draws the same
//! structures as byte diagrams; each type's doc comment gives its size and the format version
//! that introduced it.
//!
//! # Model
//! - [`blkptr::BlockPtr`] (128 bytes): up to three DVAs, sizes, compression, checksum, birth
//!   txg. Parents hold their children's checksums, so the pool is a Merkle tree.
//! - [`uberblock::Uberblock`] (1 KiB, self-checksummed): the root of one committed txg.
//! - [`label::PoolConfig`] and [`label::VdevTree`]: the configuration in every label, encoded
//!   as tagged fields (TLV) so that new fields never break old readers.
//! - [`heartbeat::Heartbeat`] (128 bytes, self-checksummed): the multihost heartbeat.
//! - [`intent_log`]: the self-checksummed, chained blocks of a dataset's intent log.
//! - [`l2cache`]: a cache device's header and the chained log blocks of its persistent index.
//! - [`checksum`] (fletcher4, sha256, blake3) and [`compress`] (lz4, zstd, zle).
//!
//! # Invariants
//! - I1: every integer on disk is little-endian (clippy denies host/big-endian conversions).
//! - I2: decoding never panics and never allocates more than the input's size allows: bytes
//!   from a device are input. Every decoder has a garbage test and a fuzz target.
//! - I3: `encode` then `decode` is the identity for every valid value.
//! - I4: a structure with a format version newer than [`FORMAT_VERSION`] is refused, never
//!   half-read.
//!
//! # Failure model
//! All decoding errors are [`FormatError`]; callers treat them like checksum errors (try the
//! next copy, reconstruct, or report the loss).
//!
//! # Not here
//! Device I/O (tarn-device), where structures live on a device (tarn-vdev, tarn-pool),
//! anything above block granularity (tarn-objects).

pub mod blkptr;
pub mod checksum;
pub mod compress;
pub mod dnode;
pub mod heartbeat;
pub mod intent_log;
pub mod l2cache;
pub mod label;
pub mod objset;
pub mod uberblock;
pub mod wire;

pub use blkptr::{BlockPtr, BlockType, Dva};
pub use checksum::{Checksum, ChecksumKind};
pub use compress::{CompressKind, CompressSetting};

/// Current on-disk format version. Version 1 is the first release; later changes are feature
/// flags listed in the labels (`features_for_read` / `features_for_write`).
pub const FORMAT_VERSION: u64 = 1;

/// Feature flags this build understands. A pool whose labels list a read feature not here is
/// refused at import with the feature's name.
pub const FEATURES_SUPPORTED: &[&str] = &[
    "org.tarn:space_log",
    "org.tarn:blake3",
    "org.tarn:userspace",
    "org.tarn:intent_log",
    "org.tarn:l2cache",
    FEATURE_ALLOCATION_CLASSES,
    FEATURE_SNAPSHOTS,
    FEATURE_VOLUMES,
    FEATURE_CLONES,
    FEATURE_DRAID,
    FEATURE_VOLUME_LOG,
    FEATURE_VOLUME_LOG_INDIRECT,
    FEATURE_BLOCK_CLONING,
    FEATURE_FILE_LOG_INDIRECT,
];

/// Feature of pools with cloned blocks (OpenZFS's `com.fudosecurity:block_cloning`, named
/// by tarn's convention): block pointers may carry a physical birth (bytes 112..120) and the
/// space log may hold clone-reference records (ops 3 and 4, docs/FORMAT.md "Block
/// cloning"). Listed only once the pool has cloned a block (active on first use, as in
/// OpenZFS): a build without it would free a cloned block while other files still name it.
pub const FEATURE_BLOCK_CLONING: &str = "org.tarn:block_cloning";

/// Feature of pools whose volumes' intent-log chains may hold indirect write records (type
/// 34, docs/FORMAT.md "Intent log"): a block pointer to data written in place between txgs
/// (`logbias=throughput`) instead of the bytes. A build without it would stop its replay at
/// the first one, and the block it names would be free space at import: writes a flush
/// acknowledged would be lost.
pub const FEATURE_VOLUME_LOG_INDIRECT: &str = "org.tarn:volume_log_indirect";

/// Feature of pools whose filesystems' intent-log chains may hold indirect write records
/// (type 16, docs/FORMAT.md "Intent log"): a block pointer to file data written in place
/// between txgs (`logbias=throughput`) instead of the bytes. A build without it would stop
/// its replay at the first one as undecodable, and the block it names would be free space
/// at import: writes an `fsync` acknowledged would be lost. So it must refuse the pool.
pub const FEATURE_FILE_LOG_INDIRECT: &str = "org.tarn:file_log_indirect";

/// Feature of pools whose volumes may have intent-log chains holding volume records (types
/// 32 and 33, docs/FORMAT.md "Intent log"). A build without it would find records it cannot
/// decode in a volume's chain and drop them, losing writes that a flush acknowledged.
pub const FEATURE_VOLUME_LOG: &str = "org.tarn:volume_log";

/// Feature of pools that may hold clones: dataset headers whose snapshot fields name an
/// origin snapshot (the word at offset 272, zero before), and dead-list buckets up to the
/// origin's txg holding blocks the clone must never free (docs/FORMAT.md "Clones"). A build
/// without it would free the origin's blocks when the clone overwrites them.
pub const FEATURE_CLONES: &str = "org.tarn:clones";

/// Feature of pools with a dRAID top-level vdev (docs/FORMAT.md "dRAID layout"). Listed in
/// a pool's labels only while the pool has one: a build without it cannot map a dRAID
/// block to its columns, so it must refuse the pool rather than call the vdev unknown
/// halfway through an import.
pub const FEATURE_DRAID: &str = "org.tarn:draid";

/// Feature of pools that may hold volumes: datasets whose object set is of kind `Volume`
/// with the volume data object (docs/FORMAT.md "Volumes"). A build without it would take a
/// volume's data object for a filesystem's master node.
pub const FEATURE_VOLUMES: &str = "org.tarn:volumes";

/// Feature of pools whose datasets may have snapshots: dataset headers of 280 bytes naming a
/// snapshot ZAP and a dead list, snapshot nodes and block lists in the MOS (docs/FORMAT.md
/// "Snapshots"). A build without it would free blocks that snapshots still hold, so it must
/// not import the pool.
pub const FEATURE_SNAPSHOTS: &str = "org.tarn:snapshots";

/// Feature of pools with special allocation-class vdevs (ZFS's `allocation_classes`). Unlike
/// the others it is listed in a pool's labels only while the pool has a special vdev (an
/// older build reading such a pool would put metadata anywhere and miss that losing the
/// special vdev loses the pool).
pub const FEATURE_ALLOCATION_CLASSES: &str = "org.tarn:allocation_classes";

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The input ended early.
    #[error("{what} is truncated")]
    Truncated {
        /// Structure being decoded.
        what: &'static str,
    },
    /// The magic number is wrong (blank or foreign data).
    #[error("{what} has a bad magic number")]
    BadMagic {
        /// Structure being decoded.
        what: &'static str,
    },
    /// The embedded checksum does not match.
    #[error("{what} fails its checksum")]
    ChecksumMismatch {
        /// Structure being decoded.
        what: &'static str,
    },
    /// Written by a newer version of tarn.
    #[error("{what} has unsupported format version {version}")]
    UnsupportedVersion {
        /// Structure being decoded.
        what: &'static str,
        /// Version found.
        version: u64,
    },
    /// A field has an impossible value.
    #[error("{what} is invalid: {why}")]
    Invalid {
        /// Structure being decoded.
        what: &'static str,
        /// What was wrong.
        why: &'static str,
    },
}
