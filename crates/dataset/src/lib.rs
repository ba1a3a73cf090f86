//! tarn-dataset: the dataset tree of a pool and its properties (ZFS's DSL directory and
//! property layer).
//!
//! # Purpose
//! A pool holds a tree of datasets (`tank`, `tank/home`, `tank/home/ann`), each with its own
//! object set and its own properties, most of them inherited from the parent unless set
//! locally. This crate owns the rules: which names are valid, which properties exist, what
//! values they take, how inheritance resolves (with ZFS's SOURCE column), and how a dataset
//! node is stored in the pool's meta object set (MOS). It does no accounting policy and no
//! I/O scheduling: the engine decides when to sync and what a quota refuses.
//!
//! # Model
//! ```text
//!  MOS object 4 (root dataset node)          every node: a MOS object of type DATASET
//!   bonus: DatasetHeader ─────────────┐        bonus = DatasetHeader (objset bp, parent,
//!   │  children ZAP: "home" -> 17     │                 children ZAP, props ZAP, creation,
//!   │  props ZAP: "compression"->"lz4"│                 guid, space counters)
//!   ▼                                 │
//!  node 17 (tank/home) ── children ZAP: "ann" -> 23 ...
//! ```
//! A property is *local* when its node's props ZAP has it, *inherited from X* when the
//! nearest ancestor X with a local value has it (only for inheritable properties), otherwise
//! *default*. Statistics (`used`, `available`, ...) are computed by the engine and have
//! source `-`. Values are stored normalized (sizes in bytes, `on`/`off` lowercase) so that
//! comparing and inheriting never re-parses admin input.
//!
//! Snapshots ([`snapshot`]) are MOS nodes naming a committed object-set root; the blocks a
//! snapshot holds that the head let go of are on dead lists ([`deadlist`], keyed by birth
//! txg) and the sync of a dataset with snapshots writes through [`deadlist::KillStore`], the
//! block-kill rule (docs/FORMAT.md section 20).
//!
//! Clones ([`clone`]) are datasets whose object set starts as a snapshot's: blocks born up to
//! the origin snapshot's txg stay the origin's (filed, never freed, under that txg in the
//! clone's dead lists), so the clone's `used` counts only what it wrote.
//!
//! Limits ([`limits`]): `filesystem_limit` and `snapshot_limit` of a change made as a whole
//! (a receive's end), counted as ZFS counts the same change made step by step, removals
//! first.
//!
//! Volumes ([`volume`]) are datasets whose object set holds one data object of
//! `volblocksize` blocks and its size (ZFS's zvols): block devices served by a front end.
//!
//! # Invariants
//! - I1: a node's parent lists it in its children ZAP under its last name component, and
//!   only there; the root's parent is 0.
//! - I2: every stored property value passed [`props::validate`] (values from disk are still
//!   checked when read, because bytes from disk are input).
//! - I3: names are validated before anything is written: a refused create changes nothing.
//! - I4: the dead lists of a dataset hold exactly the blocks some snapshot references and the
//!   head does not, each once, in the bucket of the first snapshot holding it; their space is
//!   the header's `usedbysnapshots`. A destroyed snapshot's exclusive blocks are exactly the
//!   next dead list's buckets born after the previous snapshot.
//!
//! # Failure model
//! Bad names and values are [`DatasetError`]s naming what was wrong and what is valid.
//! Damaged headers or property values read from disk are [`DatasetError::Corrupt`], never a
//! panic.
//!
//! # Not here
//! Redaction bookmarks; the stream format (tarn-send) and the
//! verbs of send and receive (the engine); space
//! accounting arithmetic and quota enforcement (the engine, which sees dirty data); the
//! per-owner counts behind `userused@` (the POSIX layer) and their enforcement (engine and
//! POSIX layer). This crate only names and validates the `userquota@ID` family
//! ([`props::owner_prop`]): ids are numeric here, names are the front end's business.

pub mod bookmark;
pub mod clone;
pub mod corrective;
pub mod deadlist;
pub mod limits;
pub mod name;
pub mod node;
pub mod props;
pub mod replicate;
pub mod send;
pub mod snapshot;
pub mod volume;
pub mod volume_log;

pub use name::{parent_name, validate_name};
pub use node::{
    DatasetHeader, HEADER_LEN, HEADER_LEN_WITH_LOG, HEADER_LEN_WITH_SNAPSHOTS, LogHead, SnapHead,
};
pub use props::{PropDef, PropKind, Source};

use tarn_objects::ObjectError;

/// Why a dataset operation was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DatasetError {
    /// The name is not a valid dataset name.
    #[error("invalid dataset name: {0}")]
    InvalidName(String),
    /// A property name or value is invalid.
    #[error("{0}")]
    InvalidProperty(String),
    /// A volume range that does not lie inside the volume.
    #[error("range {offset}+{len} is past the end of the volume ({size} bytes)")]
    OutOfRange {
        /// Start of the range.
        offset: u64,
        /// Its length.
        len: u64,
        /// The volume's size.
        size: u64,
    },
    /// Metadata read from disk does not decode.
    #[error("dataset metadata is corrupt: {0}")]
    Corrupt(String),
    /// The object layer failed.
    #[error(transparent)]
    Objects(#[from] ObjectError),
    /// A send stream could not be read or written.
    #[error(transparent)]
    Stream(#[from] tarn_send::StreamError),
}
