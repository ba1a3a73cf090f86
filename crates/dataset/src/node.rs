//! A dataset node in the MOS: the header in its bonus buffer, its children and its local
//! properties (two ZAP objects the header names). A header that names an intent-log chain
//! ([`LogHead`]) is 248 bytes instead of 208 (docs/FORMAT.md "Datasets", "Intent log").

use std::collections::BTreeMap;

use tarn_base::{Guid, ObjectId, Txg};
use tarn_format::BlockPtr;
use tarn_format::intent_log::LogPtr;
use tarn_format::wire::{Reader, Writer};
use tarn_objects::ObjectSet;
use tarn_zio::BlockStore;

use crate::DatasetError;

/// Object type of a dataset node in the MOS.
pub const TYPE_DATASET: u8 = 17;
/// Object type of a node's children and props ZAPs (tarn-objects' ZAP type).
const TYPE_ZAP: u8 = tarn_format::dnode::OBJECT_TYPE_ZAP;

/// Encoded length of [`DatasetHeader`] (the node's bonus length) without an intent log.
pub const HEADER_LEN: u16 = 208;
/// Encoded length of a header naming an intent log (feature `org.tarn:intent_log`).
pub const HEADER_LEN_WITH_LOG: u16 = 248;
/// Encoded length of a header of a dataset that has had snapshots (feature
/// `org.tarn:snapshots`): the log fields (zero when there is no log), then the snapshot
/// fields.
pub const HEADER_LEN_WITH_SNAPSHOTS: u16 = 280;
const HEADER_VERSION: u64 = 1;

/// What a dataset node records (docs/FORMAT.md, "Datasets").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DatasetHeader {
    /// Root of the dataset's object set (a hole before its first sync).
    pub objset: BlockPtr,
    /// Parent node (0 for a pool's root dataset).
    pub parent: ObjectId,
    /// ZAP: child name -> child node.
    pub children: ObjectId,
    /// ZAP: property name -> normalized value (only local values).
    pub props: ObjectId,
    /// Unix seconds of creation.
    pub creation_time: u64,
    /// Txg of creation.
    pub creation_txg: Txg,
    /// The dataset's GUID.
    pub guid: Guid,
    /// Allocated bytes of the object set's blocks, deflated by the parity of their vdevs
    /// (what `referenced` shows).
    pub referenced: u64,
    /// Logical bytes of those blocks (`logicalreferenced`).
    pub logical: u64,
    /// Physical (compressed) bytes of those blocks (for `compressratio`).
    pub physical: u64,
    /// The intent log: its first block and chain id (empty when the dataset has none).
    pub log: LogHead,
    /// Snapshot fields (all zero until the dataset's first snapshot).
    pub snap: SnapHead,
}

/// What a dataset header records about its snapshots (docs/FORMAT.md "Snapshots").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapHead {
    /// ZAP: snapshot name -> snapshot node (0: the dataset never had a snapshot).
    pub snapshots: ObjectId,
    /// The head's dead list (ZAP of buckets): blocks of the latest snapshot that the head no
    /// longer references (0 until the first snapshot).
    pub deadlist: ObjectId,
    /// Deflated bytes of every dead list of the dataset (head and snapshots):
    /// `usedbysnapshots`.
    pub used: u64,
    /// The origin snapshot's node when the dataset is a clone (0 otherwise; feature
    /// `org.tarn:clones`, [`crate::clone`]).
    pub origin: ObjectId,
}

impl SnapHead {
    /// Whether the dataset ever had a snapshot (the header then carries these fields).
    #[must_use]
    pub fn is_present(&self) -> bool {
        self.snapshots.0 != 0
    }
}

/// The head of a dataset's intent-log chain (docs/FORMAT.md "Intent log").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogHead {
    /// The first block (allocated when this header was committed; written by the first
    /// `fsync` after that).
    pub first: LogPtr,
    /// The chain id every block of this chain carries.
    pub chain: u64,
}

impl DatasetHeader {
    /// Encodes into [`HEADER_LEN`] bytes, or [`HEADER_LEN_WITH_LOG`] when it names a log.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.objset.encode_into(&mut w);
        for value in [
            self.parent.0,
            self.children.0,
            self.props.0,
            self.creation_time,
            self.creation_txg.0,
            self.guid.0,
            self.referenced,
            self.logical,
            self.physical,
            HEADER_VERSION,
        ] {
            w.u64(value);
        }
        let mut len = HEADER_LEN;
        if !self.log.first.is_empty() || self.snap.is_present() {
            self.log.first.encode_into(&mut w);
            w.u64(self.log.chain);
            len = HEADER_LEN_WITH_LOG;
        }
        if self.snap.is_present() {
            w.u64(self.snap.snapshots.0);
            w.u64(self.snap.deadlist.0);
            w.u64(self.snap.used);
            w.u64(self.snap.origin.0);
            len = HEADER_LEN_WITH_SNAPSHOTS;
        }
        let bytes = w.finish();
        assert_eq!(bytes.len(), usize::from(len), "dataset header length");
        bytes
    }

    /// Decodes a header read from disk (garbage is an error, never a panic).
    pub fn decode(bytes: &[u8]) -> Result<Self, DatasetError> {
        let corrupt = |e: tarn_format::FormatError| DatasetError::Corrupt(e.to_string());
        let mut r = Reader::new(bytes, "dataset header");
        let objset = BlockPtr::decode(&mut r).map_err(corrupt)?;
        let mut next = || r.u64().map_err(corrupt);
        let header = DatasetHeader {
            objset,
            parent: ObjectId(next()?),
            children: ObjectId(next()?),
            props: ObjectId(next()?),
            creation_time: next()?,
            creation_txg: Txg(next()?),
            guid: Guid(next()?),
            referenced: next()?,
            logical: next()?,
            physical: next()?,
            log: LogHead::default(),
            snap: SnapHead::default(),
        };
        let version = next()?;
        if version != HEADER_VERSION {
            return Err(DatasetError::Corrupt(format!(
                "dataset header version {version} (this build reads {HEADER_VERSION})"
            )));
        }
        let mut header = header;
        if r.remaining() >= usize::from(HEADER_LEN_WITH_LOG - HEADER_LEN) {
            let first = LogPtr::decode(&mut r).map_err(corrupt)?;
            let chain = r.u64().map_err(corrupt)?;
            // An empty first block names no log whatever its other fields say (the encoder
            // writes none then): decoding it as no log keeps decode(encode(h)) == h.
            if !first.is_empty() {
                header.log = LogHead { first, chain };
            }
        }
        if r.remaining() >= usize::from(HEADER_LEN_WITH_SNAPSHOTS - HEADER_LEN_WITH_LOG) {
            let mut next = || r.u64().map_err(corrupt);
            header.snap = SnapHead {
                snapshots: ObjectId(next()?),
                deadlist: ObjectId(next()?),
                used: next()?,
                origin: ObjectId(next()?),
            };
            if (header.snap.snapshots.0 == 0) != (header.snap.deadlist.0 == 0) {
                return Err(DatasetError::Corrupt(
                    "dataset header names only one of its snapshot ZAP and dead list".into(),
                ));
            }
            // Without a snapshot ZAP the fields mean nothing (the encoder writes none then):
            // decoding them as absent keeps decode(encode(h)) == h.
            if !header.snap.is_present() {
                header.snap = SnapHead::default();
            }
        }
        Ok(header)
    }
}

/// Makes a new dataset node with empty children and props. With `at`, the node takes that
/// fixed object id (the pool's root dataset); otherwise the MOS picks one.
pub fn create_node(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    at: Option<ObjectId>,
    mut header: DatasetHeader,
) -> Result<ObjectId, DatasetError> {
    let id = match at {
        Some(id) => {
            mos.claim_object(store, id, TYPE_DATASET, 512, 0, HEADER_LEN)?;
            id
        }
        None => mos.allocate_object(store, TYPE_DATASET, 512, 0, HEADER_LEN)?,
    };
    header.children = mos.zap_create(store, TYPE_ZAP)?;
    header.props = mos.zap_create(store, TYPE_ZAP)?;
    mos.set_bonus(store, id, &header.encode())?;
    Ok(id)
}

/// Reads a node's header.
pub fn read_header(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    id: ObjectId,
) -> Result<DatasetHeader, DatasetError> {
    DatasetHeader::decode(&mos.bonus(store, id)?)
}

/// Writes a node's header.
pub fn write_header(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    id: ObjectId,
    header: &DatasetHeader,
) -> Result<(), DatasetError> {
    mos.set_bonus(store, id, &header.encode())?;
    Ok(())
}

/// A node's children, sorted by name.
pub fn children(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    header: &DatasetHeader,
) -> Result<Vec<(String, ObjectId)>, DatasetError> {
    mos.zap_list_sorted(store, header.children)?
        .into_iter()
        .map(|(name, value)| {
            let bytes = <[u8; 8]>::try_from(value.as_slice())
                .map_err(|_| DatasetError::Corrupt(format!("child '{name}' is not a u64")))?;
            Ok((name, ObjectId(u64::from_le_bytes(bytes))))
        })
        .collect()
}

/// Adds (`Some`) or removes (`None`) child `name` of the node with `header`.
pub fn set_child(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    header: &DatasetHeader,
    name: &str,
    child: Option<ObjectId>,
) -> Result<(), DatasetError> {
    match child {
        Some(id) => mos.zap_insert_u64(store, header.children, name, id.0)?,
        None => mos.zap_remove(store, header.children, name)?,
    }
    Ok(())
}

/// A node's local properties.
pub fn local_props(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    header: &DatasetHeader,
) -> Result<BTreeMap<String, String>, DatasetError> {
    mos.zap_list_sorted(store, header.props)?
        .into_iter()
        .map(|(name, value)| {
            String::from_utf8(value)
                .map(|value| (name.clone(), value))
                .map_err(|_| DatasetError::Corrupt(format!("property '{name}' is not UTF-8")))
        })
        .collect()
}

/// Sets (`Some`) or removes (`None`) a local property.
pub fn set_local_prop(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    header: &DatasetHeader,
    name: &str,
    value: Option<&str>,
) -> Result<(), DatasetError> {
    match value {
        Some(value) => mos.zap_update(store, header.props, name, value.as_bytes())?,
        None => {
            if mos.zap_lookup(store, header.props, name)?.is_some() {
                mos.zap_remove(store, header.props, name)?;
            }
        }
    }
    Ok(())
}

/// Frees a node and its two ZAPs (the caller has unlinked it and freed its object set).
pub fn free_node(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    id: ObjectId,
    header: &DatasetHeader,
) -> Result<(), DatasetError> {
    mos.free_object(store, header.children)?;
    mos.free_object(store, header.props)?;
    mos.free_object(store, id)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_garbage_is_an_error() {
        let header = DatasetHeader {
            parent: ObjectId(4),
            children: ObjectId(9),
            props: ObjectId(10),
            creation_time: 1_700_000_000,
            creation_txg: Txg(12),
            guid: Guid(0xdead_beef),
            referenced: 1 << 20,
            logical: 2 << 20,
            physical: 1 << 19,
            ..DatasetHeader::default()
        };
        let bytes = header.encode();
        assert_eq!(DatasetHeader::decode(&bytes).unwrap(), header);
        let with_snapshots = DatasetHeader {
            snap: SnapHead {
                snapshots: ObjectId(30),
                deadlist: ObjectId(31),
                used: 4096,
                origin: ObjectId(44),
            },
            ..header
        };
        let long = with_snapshots.encode();
        assert_eq!(long.len(), usize::from(HEADER_LEN_WITH_SNAPSHOTS));
        assert_eq!(DatasetHeader::decode(&long).unwrap(), with_snapshots);
        // A 280-byte header naming no snapshot ZAP decodes as one without snapshots.
        let mut stray = long.clone();
        stray[248..264].fill(0);
        assert_eq!(
            DatasetHeader::decode(&stray).unwrap().snap,
            SnapHead::default()
        );
        stray[248] = 1;
        assert!(
            DatasetHeader::decode(&stray).is_err(),
            "a ZAP without a dead list"
        );
        assert!(DatasetHeader::decode(&bytes[..100]).is_err());
        let mut bad = bytes.clone();
        bad[200] = 9;
        assert!(DatasetHeader::decode(&bad).is_err());
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0xff;
            let _ = DatasetHeader::decode(&flipped);
        }
    }
}
