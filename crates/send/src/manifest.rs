//! The MANIFEST record of a replication stream (`send -R`): the sender's list of the
//! datasets of the sent tree and, per dataset, its snapshots with their GUIDs
//! (docs/FORMAT.md section 21.3). A receiver with `-F` destroys what its copy of the tree
//! has and the sender no longer does, and renames snapshots the sender renamed, matching
//! by GUID (OpenZFS carries the same list as the nvlist of its compound stream's first
//! BEGIN).
//!
//! Model: the first substream of a `-R` stream is a *manifest substream*: a BEGIN with the
//! MANIFEST feature, MANIFEST records only, END. One record lists one dataset, or part of
//! one when its list is long ([`Manifest::split`] keeps each record under
//! [`MANIFEST_BYTES`]); a receiver joins the parts of a dataset. The record carries its own
//! version, so its layout can grow without a new stream version; a receiver refuses a
//! version it does not know by name.
//!
//! Invariants, checked by the decoder (so a receiver never sees otherwise): the dataset
//! name is not empty and has no `@`; every snapshot has a GUID other than 0 and a name
//! without `@` or `/`; snapshots come in strictly ascending txg order; the snapshot count
//! fits the payload before anything is allocated for it.
//!
//! Not here: which datasets and snapshots a sender lists (the engine), and what a receiver
//! does with the list (tarn-dataset `replicate`).

use crate::record::{Cursor, NAME_MAX, put_str16};

/// The layout version of a MANIFEST payload this build writes and reads.
pub const MANIFEST_VERSION: u16 = 1;
/// Payload bytes a sender puts in one MANIFEST record before it starts another for the
/// same dataset (well under [`crate::PAYLOAD_MAX`]).
pub const MANIFEST_BYTES: usize = 1 << 20;
/// Bytes of the fixed part of a MANIFEST payload before the dataset name's bytes.
const FIXED: usize = 2 + 2 + 4 + 4 + 2;
/// Fewest bytes one snapshot entry takes (guid, txg, a one-byte name).
const ENTRY_MIN: usize = 8 + 8 + 2 + 1;

/// One snapshot of a dataset in a [`Manifest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestSnapshot {
    /// Its GUID (never 0): what a receiver matches on.
    pub guid: u64,
    /// The txg it was taken in on the sender (ascending within a record).
    pub txg: u64,
    /// Its short name (after the `@`).
    pub name: String,
}

/// A MANIFEST record: one dataset of the sent tree (full name on the sender), how many
/// substreams of the stream carry it, and its snapshots, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// The dataset's full name on the sender.
    pub dataset: String,
    /// Substreams of this stream that carry the dataset (0 in the second and later records
    /// of a split list): a receiver whose input ends before the sum over the manifest of
    /// these has come refuses the stream as cut, even at a substream's boundary.
    pub substreams: u32,
    /// Its snapshots, oldest first.
    pub snapshots: Vec<ManifestSnapshot>,
}

impl Manifest {
    /// The records that list `dataset`, carried by `substreams` substreams, with
    /// `snapshots` (at least one record, each payload under [`MANIFEST_BYTES`]).
    #[must_use]
    pub fn split(dataset: &str, substreams: u32, snapshots: &[ManifestSnapshot]) -> Vec<Manifest> {
        let mut out = vec![Manifest {
            dataset: dataset.to_string(),
            substreams,
            snapshots: Vec::new(),
        }];
        let mut bytes = FIXED + dataset.len();
        for snapshot in snapshots {
            let entry = entry_len(snapshot);
            if bytes + entry > MANIFEST_BYTES {
                out.push(Manifest {
                    dataset: dataset.to_string(),
                    substreams: 0,
                    snapshots: Vec::new(),
                });
                bytes = FIXED + dataset.len();
            }
            bytes += entry;
            if let Some(last) = out.last_mut() {
                last.snapshots.push(snapshot.clone());
            }
        }
        out
    }

    pub(crate) fn payload_len(&self) -> usize {
        FIXED + self.dataset.len() + self.snapshots.iter().map(entry_len).sum::<usize>()
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MANIFEST_VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(self.snapshots.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.substreams.to_le_bytes());
        put_str16(out, &self.dataset);
        for snapshot in &self.snapshots {
            out.extend_from_slice(&snapshot.guid.to_le_bytes());
            out.extend_from_slice(&snapshot.txg.to_le_bytes());
            put_str16(out, &snapshot.name);
        }
    }

    /// Decodes a payload; every bound and the module's invariants are checked.
    pub(crate) fn decode(r: &mut Cursor<'_>) -> Result<Manifest, &'static str> {
        let version = r.u16()?;
        if version != MANIFEST_VERSION {
            return Err("manifest version this build does not read (it reads version 1)");
        }
        let _reserved = r.u16()?;
        let count = r.u32()? as usize;
        let substreams = r.u32()?;
        let dataset = r.str16(NAME_MAX)?;
        if dataset.is_empty() || dataset.contains('@') {
            return Err("manifest dataset name is empty or has '@'");
        }
        if count > r.bytes.len() / ENTRY_MIN {
            return Err("manifest snapshot count exceeds its payload");
        }
        let mut snapshots = Vec::with_capacity(count);
        let mut last_txg = None;
        for _ in 0..count {
            let guid = r.u64()?;
            let txg = r.u64()?;
            let name = r.str16(NAME_MAX)?;
            if guid == 0 || name.is_empty() || name.contains(['@', '/']) {
                return Err("manifest snapshot without a GUID or a valid name");
            }
            if last_txg.is_some_and(|last| txg <= last) {
                return Err("manifest snapshots not in ascending txg order");
            }
            last_txg = Some(txg);
            snapshots.push(ManifestSnapshot { guid, txg, name });
        }
        Ok(Manifest {
            dataset,
            substreams,
            snapshots,
        })
    }
}

fn entry_len(snapshot: &ManifestSnapshot) -> usize {
    8 + 8 + 2 + snapshot.name.len()
}
