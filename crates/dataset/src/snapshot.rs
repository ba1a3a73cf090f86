//! Snapshots (ZFS's `dsl_dataset` snapshot half): a snapshot node in the MOS records the
//! root block pointer of a dataset's object set as one txg committed it, so taking one copies
//! nothing; the dead lists ([`crate::deadlist`]) keep the blocks a snapshot still holds once
//! the head has moved on, and destroying a snapshot frees exactly the blocks only it held.
//!
//! ```text
//!  dataset header ── snapshots ZAP: "monday" -> node 40, "tuesday" -> node 41
//!                └─ head dead list   (blocks of "tuesday" the head no longer references)
//!  node 40 (type SNAPSHOT) bonus SnapshotHeader: objset bp, dataset, txg, guid,
//!                                                dead list (blocks of the previous snapshot
//!                                                "monday" no longer holds), props ZAP, space
//! ```
//! Rules (s = a snapshot's txg, p = its previous snapshot's txg or 0):
//! - Taking a snapshot in txg `s` (after the dataset's object set synced in it): the head's
//!   dead list becomes the snapshot's, the head gets an empty one.
//! - Killing a block born in `b`: kept in the head's dead list when some snapshot has txg >= b
//!   (bucket: the smallest such txg), freed otherwise ([`crate::deadlist::KillStore`]).
//! - Destroying a snapshot: in the dead list of the next snapshot (or the head), the buckets
//!   keyed in `(p, s]` hold the blocks only it had: they are freed; its own dead list (blocks
//!   the previous snapshot still holds) is merged into that one.
//! - A snapshot's `used` (unique bytes) is the space of those buckets; `usedbysnapshots` of
//!   the dataset is the space of all its dead lists.

use std::collections::BTreeMap;

use tarn_base::{Guid, ObjectId, Txg};
use tarn_format::BlockPtr;
use tarn_format::wire::{Reader, Writer};
use tarn_objects::ObjectSet;
use tarn_zio::BlockStore;

use crate::DatasetError;
use crate::deadlist::{self, DeadSpace};
use crate::node::{DatasetHeader, SnapHead};

/// Object type of a snapshot node in the MOS.
pub const TYPE_SNAPSHOT: u8 = 18;
/// Encoded length of [`SnapshotHeader`] (the node's bonus length).
pub const SNAPSHOT_HEADER_LEN: u16 = 208;
const SNAPSHOT_HEADER_VERSION: u64 = 1;
/// Longest snapshot name component.
pub const SNAPSHOT_NAME_MAX: usize = 255;

/// What a snapshot node records (docs/FORMAT.md "Snapshots").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Root of the object set as the snapshot's txg committed it.
    pub objset: BlockPtr,
    /// The dataset (node) it is a snapshot of.
    pub dataset: ObjectId,
    /// The txg the snapshot was taken in (`createtxg`).
    pub txg: Txg,
    /// Unix seconds of creation.
    pub creation_time: u64,
    /// The snapshot's GUID.
    pub guid: Guid,
    /// Dead list: blocks of the previous snapshot this one no longer references.
    pub deadlist: ObjectId,
    /// ZAP: user property name -> value.
    pub props: ObjectId,
    /// The dataset's `referenced` when the snapshot was taken.
    pub referenced: u64,
    /// Its logical bytes.
    pub logical: u64,
    /// Its physical bytes.
    pub physical: u64,
}

impl SnapshotHeader {
    /// Encodes into [`SNAPSHOT_HEADER_LEN`] bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        self.objset.encode_into(&mut w);
        for value in [
            self.dataset.0,
            self.txg.0,
            self.creation_time,
            self.guid.0,
            self.deadlist.0,
            self.props.0,
            self.referenced,
            self.logical,
            self.physical,
            SNAPSHOT_HEADER_VERSION,
        ] {
            w.u64(value);
        }
        let bytes = w.finish();
        assert_eq!(
            bytes.len(),
            usize::from(SNAPSHOT_HEADER_LEN),
            "snapshot header"
        );
        bytes
    }

    /// Decodes a header read from disk (garbage is an error, never a panic).
    pub fn decode(bytes: &[u8]) -> Result<Self, DatasetError> {
        let corrupt = |e: tarn_format::FormatError| DatasetError::Corrupt(e.to_string());
        let mut r = Reader::new(bytes, "snapshot header");
        let objset = BlockPtr::decode(&mut r).map_err(corrupt)?;
        let mut next = || r.u64().map_err(corrupt);
        let header = SnapshotHeader {
            objset,
            dataset: ObjectId(next()?),
            txg: Txg(next()?),
            creation_time: next()?,
            guid: Guid(next()?),
            deadlist: ObjectId(next()?),
            props: ObjectId(next()?),
            referenced: next()?,
            logical: next()?,
            physical: next()?,
        };
        let version = next()?;
        if version != SNAPSHOT_HEADER_VERSION {
            return Err(DatasetError::Corrupt(format!(
                "snapshot header version {version} (this build reads {SNAPSHOT_HEADER_VERSION})"
            )));
        }
        if header.deadlist.0 == 0 || header.props.0 == 0 || header.objset.is_hole() {
            return Err(DatasetError::Corrupt(
                "snapshot header without a dead list, props or object set".into(),
            ));
        }
        Ok(header)
    }
}

/// One snapshot as its dataset keeps it in memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Its node in the MOS.
    pub id: ObjectId,
    /// The part after `@`.
    pub name: String,
    /// Its header.
    pub header: SnapshotHeader,
    /// Its user properties.
    pub props: BTreeMap<String, String>,
    /// Its user holds (`tarn hold`): tag -> Unix seconds the hold was placed.
    pub holds: BTreeMap<String, u64>,
    /// `destroy -d` asked for it: it goes when its last hold is released.
    pub defer_destroy: bool,
}

/// Key prefix of a hold in a snapshot's property ZAP (`Hold/TAG` -> Unix seconds in
/// decimal): uppercase and `/`, so no user property can take it (docs/FORMAT.md 20.1).
const HOLD_PREFIX: &str = "Hold/";
/// Key of the deferred-destroy mark in a snapshot's property ZAP (value `on`).
const DEFER_KEY: &str = "DeferDestroy";
/// Longest hold tag, in bytes: its key (`Hold/TAG`) must fit a ZAP key.
pub const HOLD_TAG_MAX: usize = tarn_objects::ZAP_KEY_MAX - HOLD_PREFIX.len();

/// Checks a hold tag: 1 to [`HOLD_TAG_MAX`] bytes, no control characters.
pub fn validate_hold_tag(tag: &str) -> Result<(), DatasetError> {
    if tag.is_empty() {
        return Err(DatasetError::InvalidName("empty hold tag".into()));
    }
    if tag.len() > HOLD_TAG_MAX {
        return Err(DatasetError::InvalidName("hold tag is too long".into()));
    }
    if tag.chars().any(char::is_control) {
        return Err(DatasetError::InvalidName(
            "control character in hold tag".into(),
        ));
    }
    Ok(())
}

/// Splits what a snapshot's property ZAP holds into user properties, holds and the
/// deferred-destroy mark.
type Split = (BTreeMap<String, String>, BTreeMap<String, u64>, bool);

fn split_props(entries: Vec<(String, String)>) -> Result<Split, DatasetError> {
    let (mut props, mut holds, mut defer) = (BTreeMap::new(), BTreeMap::new(), false);
    for (key, value) in entries {
        if let Some(tag) = key.strip_prefix(HOLD_PREFIX) {
            let time = value
                .parse::<u64>()
                .map_err(|_| DatasetError::Corrupt(format!("hold '{tag}' has no time")))?;
            holds.insert(tag.to_string(), time);
        } else if key == DEFER_KEY {
            if value != "on" {
                return Err(DatasetError::Corrupt(format!("{DEFER_KEY} is '{value}'")));
            }
            defer = true;
        } else {
            props.insert(key, value);
        }
    }
    Ok((props, holds, defer))
}

/// Places hold `tag` on `snapshot` at `time` (Unix seconds); the caller checked it has none
/// of that tag.
pub fn hold(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    snapshot: &mut Snapshot,
    tag: &str,
    time: u64,
) -> Result<(), DatasetError> {
    assert!(
        !snapshot.holds.contains_key(tag),
        "S5: one hold per tag and snapshot"
    );
    let key = format!("{HOLD_PREFIX}{tag}");
    mos.zap_update(
        store,
        snapshot.header.props,
        &key,
        time.to_string().as_bytes(),
    )?;
    snapshot.holds.insert(tag.to_string(), time);
    Ok(())
}

/// Releases hold `tag` of `snapshot`; the caller checked it is there.
pub fn release(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    snapshot: &mut Snapshot,
    tag: &str,
) -> Result<(), DatasetError> {
    assert!(
        snapshot.holds.contains_key(tag),
        "S5: only a hold that is there is released"
    );
    mos.zap_remove(store, snapshot.header.props, format!("{HOLD_PREFIX}{tag}"))?;
    snapshot.holds.remove(tag);
    Ok(())
}

/// Marks `snapshot` to be destroyed when its last hold is released (`destroy -d`).
pub fn defer_destroy(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    snapshot: &mut Snapshot,
) -> Result<(), DatasetError> {
    mos.zap_update(store, snapshot.header.props, DEFER_KEY, b"on")?;
    snapshot.defer_destroy = true;
    Ok(())
}

/// Checks the part of a snapshot name after `@`.
pub fn validate_snapshot_name(name: &str) -> Result<(), DatasetError> {
    let bad = |why: &str| Err(DatasetError::InvalidName(why.to_string()));
    if name.is_empty() {
        return bad("empty component or misplaced '@' or '#' delimiter in name");
    }
    if name.len() > SNAPSHOT_NAME_MAX {
        return bad("name is too long");
    }
    if name.contains('@') || name.contains('#') || name.contains('/') || name == "." {
        return bad("invalid character in snapshot name");
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':' | ' ')))
    {
        return Err(DatasetError::InvalidName(format!(
            "invalid character '{c}' (valid: letters, digits, '_', '-', '.', ':', ' ')"
        )));
    }
    Ok(())
}

/// Splits `tank/a@snap` into the dataset and the snapshot name, validating both.
pub fn split_name(full: &str) -> Result<(&str, &str), DatasetError> {
    let Some((dataset, snapshot)) = full.split_once('@') else {
        return Err(DatasetError::InvalidName(
            "missing '@' delimiter in snapshot name".into(),
        ));
    };
    crate::name::validate_name(dataset)?;
    validate_snapshot_name(snapshot)?;
    if dataset.len() + 1 + snapshot.len() > crate::name::NAME_MAX {
        return Err(DatasetError::InvalidName("name is too long".into()));
    }
    Ok((dataset, snapshot))
}

/// Loads the snapshots of a dataset, oldest first.
pub fn load(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &DatasetHeader,
) -> Result<Vec<Snapshot>, DatasetError> {
    if !head.snap.is_present() {
        return Ok(Vec::new());
    }
    let mut headers = Vec::new();
    for (name, value) in mos.zap_list_sorted(store, head.snap.snapshots)? {
        let bytes = <[u8; 8]>::try_from(value.as_slice())
            .map_err(|_| DatasetError::Corrupt(format!("snapshot '{name}' is not a u64")))?;
        let id = ObjectId(u64::from_le_bytes(bytes));
        let header = SnapshotHeader::decode(&mos.bonus(store, id)?)?;
        headers.push((name, id, header));
    }
    // Each snapshot's property list is a block of its own: read them all at once rather
    // than one device read after another (10,000 snapshots took 2 s more to import).
    let lists: Vec<ObjectId> = headers.iter().map(|(_, _, header)| header.props).collect();
    mos.prefetch_single_blocks(store, &lists);
    let mut out = Vec::new();
    for (name, id, header) in headers {
        let entries = mos
            .zap_list_sorted(store, header.props)?
            .into_iter()
            .map(|(key, value)| {
                String::from_utf8(value)
                    .map(|value| (key.clone(), value))
                    .map_err(|_| DatasetError::Corrupt(format!("property '{key}' is not UTF-8")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (props, holds, defer_destroy) = split_props(entries)?;
        out.push(Snapshot {
            id,
            name,
            header,
            props,
            holds,
            defer_destroy,
        });
    }
    out.sort_by_key(|s| s.header.txg);
    if out.windows(2).any(|w| w[0].header.txg == w[1].header.txg) {
        return Err(DatasetError::Corrupt(
            "two snapshots of one dataset share a txg".into(),
        ));
    }
    Ok(out)
}

/// What a new snapshot is called and carries.
#[derive(Clone, Debug)]
pub struct NewSnapshot {
    /// The part after `@`.
    pub name: String,
    /// Unix seconds.
    pub creation_time: u64,
    /// Its GUID.
    pub guid: Guid,
    /// User properties (validated).
    pub props: Vec<(String, String)>,
}

/// Takes snapshot `new` of the dataset node `dataset` whose object set the syncing txg just
/// wrote (`head.objset` is that root): records the root, hands the head's dead list to the
/// snapshot and gives the head an empty one. Runs in syncing context, after the dataset's
/// object set synced and before the MOS does.
pub fn take(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    dataset: ObjectId,
    head: &mut DatasetHeader,
    new: &NewSnapshot,
) -> Result<Snapshot, DatasetError> {
    assert!(
        !head.objset.is_hole(),
        "S1: a snapshot is taken of a synced object set"
    );
    if !head.snap.is_present() {
        head.snap = SnapHead {
            snapshots: mos.zap_create(store, tarn_format::dnode::OBJECT_TYPE_ZAP)?,
            deadlist: deadlist::create(mos, store)?,
            ..head.snap
        };
    }
    let props = mos.zap_create(store, tarn_format::dnode::OBJECT_TYPE_ZAP)?;
    for (name, value) in &new.props {
        mos.zap_update(store, props, name, value.as_bytes())?;
    }
    let header = SnapshotHeader {
        objset: head.objset,
        dataset,
        txg: store.txg(),
        creation_time: new.creation_time,
        guid: new.guid,
        deadlist: head.snap.deadlist,
        props,
        referenced: head.referenced,
        logical: head.logical,
        physical: head.physical,
    };
    let id = mos.allocate_object(store, TYPE_SNAPSHOT, 512, 0, SNAPSHOT_HEADER_LEN)?;
    mos.set_bonus(store, id, &header.encode())?;
    mos.zap_insert_u64(store, head.snap.snapshots, &new.name, id.0)?;
    head.snap.deadlist = deadlist::create(mos, store)?;
    Ok(Snapshot {
        id,
        name: new.name.clone(),
        header,
        props: new.props.iter().cloned().collect(),
        holds: BTreeMap::new(),
        defer_destroy: false,
    })
}

/// The dead list that holds what snapshot `index` alone references: the next snapshot's, or
/// the head's for the latest.
fn next_deadlist(head: &DatasetHeader, snapshots: &[Snapshot], index: usize) -> ObjectId {
    snapshots
        .get(index + 1)
        .map_or(head.snap.deadlist, |next| next.header.deadlist)
}

/// The txg of the snapshot before `index`: for the first one, `floor` (the origin's txg of
/// a clone, whose blocks born up to it are the origin's; 0 otherwise).
fn previous_txg(snapshots: &[Snapshot], index: usize, floor: u64) -> u64 {
    index
        .checked_sub(1)
        .and_then(|i| snapshots.get(i))
        .map_or(floor, |prev| prev.header.txg.0)
}

/// Space only snapshot `index` holds (its `used`); `floor` as for [`destroy`].
pub fn unique_space(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &DatasetHeader,
    snapshots: &[Snapshot],
    index: usize,
    floor: u64,
) -> Result<DeadSpace, DatasetError> {
    let list = next_deadlist(head, snapshots, index);
    let s = snapshots[index].header.txg.0;
    deadlist::space_in(mos, store, list, previous_txg(snapshots, index, floor), s)
}

/// Space of every bucket of a dead list.
pub fn deadlist_space(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    list: ObjectId,
) -> Result<DeadSpace, DatasetError> {
    deadlist::space_in(mos, store, list, 0, u64::MAX)
}

/// Destroys snapshot `index` of the dataset with header `head` (whose snapshot list is
/// `snapshots`, oldest first): removes its node and returns the blocks only it held (the
/// caller frees them in the next txg) and their space; `head.snap.used` drops by it.
/// `floor` is the origin's txg for a clone (0 otherwise): dead-list buckets up to it hold
/// the origin's blocks, never freed here ([`crate::clone`]).
pub fn destroy(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &mut DatasetHeader,
    snapshots: &mut Vec<Snapshot>,
    index: usize,
    floor: u64,
) -> Result<(Vec<BlockPtr>, DeadSpace), DatasetError> {
    assert!(index < snapshots.len(), "S2: destroy of a listed snapshot");
    let target = next_deadlist(head, snapshots, index);
    let doomed = snapshots[index].clone();
    let after = previous_txg(snapshots, index, floor);
    let (blocks, space) = deadlist::take_range(mos, store, target, after, doomed.header.txg.0)?;
    deadlist::merge(mos, store, doomed.header.deadlist, target)?;
    mos.free_object(store, doomed.header.props)?;
    mos.free_object(store, doomed.id)?;
    mos.zap_remove(store, head.snap.snapshots, &doomed.name)?;
    head.snap.used = head.snap.used.checked_sub(space.used).ok_or_else(|| {
        DatasetError::Corrupt("usedbysnapshots is smaller than a dead list".into())
    })?;
    snapshots.remove(index);
    Ok((blocks, space))
}

/// Reads every dead-list block [`destroy`] of snapshot `index` reads (its own dead list and
/// the next one's), changing nothing: a caller that must not fail after its first change
/// reads first, and [`destroy`] then finds the blocks in the MOS object set's clean cache.
pub fn destroy_reads(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &DatasetHeader,
    snapshots: &[Snapshot],
    index: usize,
) -> Result<(), DatasetError> {
    assert!(index < snapshots.len(), "S2: destroy of a listed snapshot");
    for list in [
        snapshots[index].header.deadlist,
        next_deadlist(head, snapshots, index),
    ] {
        deadlist::entries(mos, store, list)?;
    }
    Ok(())
}

/// [`destroy_reads`] for [`destroy_all`]: every snapshot's dead list and the head's.
pub fn destroy_all_reads(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &DatasetHeader,
    snapshots: &[Snapshot],
) -> Result<(), DatasetError> {
    if !head.snap.is_present() {
        return Ok(());
    }
    let lists = snapshots.iter().map(|s| s.header.deadlist);
    for list in lists.chain([head.snap.deadlist]) {
        deadlist::entries(mos, store, list)?;
    }
    Ok(())
}

/// Rolls the head back to its latest snapshot: the head's dead list (blocks of that snapshot
/// the head had let go of) is emptied without freeing them, since the head references them
/// again, and the header takes the snapshot's root and counters. The caller frees the head's
/// blocks born after the snapshot and reopens the object set. A clone's buckets up to
/// `floor` (its origin's txg) were never counted in `usedbysnapshots`.
pub fn rollback(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &mut DatasetHeader,
    latest: &Snapshot,
    floor: u64,
) -> Result<(), DatasetError> {
    assert!(
        head.snap.is_present(),
        "S3: rollback of a dataset with snapshots"
    );
    let counted = deadlist::space_in(mos, store, head.snap.deadlist, floor, u64::MAX)?;
    deadlist::destroy(mos, store, head.snap.deadlist)?;
    head.snap.deadlist = deadlist::create(mos, store)?;
    head.snap.used = head.snap.used.checked_sub(counted.used).ok_or_else(|| {
        DatasetError::Corrupt("usedbysnapshots is smaller than the head's dead list".into())
    })?;
    head.objset = latest.header.objset;
    head.referenced = latest.header.referenced;
    head.logical = latest.header.logical;
    head.physical = latest.header.physical;
    Ok(())
}

/// Frees every snapshot of a dataset being destroyed and its snapshot structures, returning
/// the blocks of every dead list (the caller frees them with the head's own blocks: together
/// they are every block any snapshot or the head referenced, each once). Blocks born up to
/// `floor` (a clone's origin txg) are the origin's and are left out.
pub fn destroy_all(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &mut DatasetHeader,
    snapshots: &[Snapshot],
    floor: u64,
) -> Result<Vec<BlockPtr>, DatasetError> {
    if !head.snap.is_present() {
        return Ok(Vec::new());
    }
    let mut blocks = Vec::new();
    for snapshot in snapshots {
        blocks.extend(deadlist::destroy(mos, store, snapshot.header.deadlist)?.0);
        mos.free_object(store, snapshot.header.props)?;
        mos.free_object(store, snapshot.id)?;
    }
    blocks.extend(deadlist::destroy(mos, store, head.snap.deadlist)?.0);
    mos.free_object(store, head.snap.snapshots)?;
    head.snap = SnapHead::default();
    blocks.retain(|bp| bp.birth.0 > floor);
    Ok(blocks)
}

/// Renames `snapshot` of the dataset `head` to `new` (validated, not taken: the caller
/// checked); its node, txg and GUID stay.
pub fn rename(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    head: &DatasetHeader,
    snapshot: &mut Snapshot,
    new: &str,
) -> Result<(), DatasetError> {
    assert!(head.snap.is_present(), "S3: a snapshot has a snapshots ZAP");
    mos.zap_remove(store, head.snap.snapshots, &snapshot.name)?;
    mos.zap_insert_u64(store, head.snap.snapshots, new, snapshot.id.0)?;
    snapshot.name = new.to_string();
    Ok(())
}

/// Sets (`Some`) or removes (`None`) a user property of a snapshot.
pub fn set_prop(
    mos: &mut ObjectSet,
    store: &dyn BlockStore,
    snapshot: &mut Snapshot,
    name: &str,
    value: Option<&str>,
) -> Result<(), DatasetError> {
    match value {
        Some(value) => {
            mos.zap_update(store, snapshot.header.props, name, value.as_bytes())?;
            snapshot.props.insert(name.to_string(), value.to_string());
        }
        None => {
            if mos
                .zap_lookup(store, snapshot.header.props, name)?
                .is_some()
            {
                mos.zap_remove(store, snapshot.header.props, name)?;
            }
            snapshot.props.remove(name);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_garbage_is_an_error() {
        let mut objset = BlockPtr {
            birth: Txg(9),
            lsize: 2048,
            psize: 2048,
            ..BlockPtr::default()
        };
        objset.dvas[0].asize = 4096;
        let header = SnapshotHeader {
            objset,
            dataset: ObjectId(4),
            txg: Txg(9),
            creation_time: 1_700_000_000,
            guid: Guid(77),
            deadlist: ObjectId(20),
            props: ObjectId(21),
            referenced: 1 << 20,
            logical: 2 << 20,
            physical: 1 << 19,
        };
        let bytes = header.encode();
        assert_eq!(SnapshotHeader::decode(&bytes).unwrap(), header);
        let hole = SnapshotHeader {
            objset: BlockPtr::default(),
            ..header
        };
        assert!(SnapshotHeader::decode(&hole.encode()).is_err());
        assert!(SnapshotHeader::decode(&bytes[..100]).is_err());
        let mut bad = bytes.clone();
        bad[200] = 9;
        assert!(SnapshotHeader::decode(&bad).is_err());
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0xff;
            let _ = SnapshotHeader::decode(&flipped);
        }
    }

    #[test]
    fn holds_and_the_defer_mark_are_not_user_properties() {
        let entries = vec![
            ("Hold/keep".to_string(), "1700000000".to_string()),
            ("DeferDestroy".to_string(), "on".to_string()),
            ("com.x:y".to_string(), "v".to_string()),
        ];
        let (props, holds, defer) = split_props(entries).unwrap();
        assert_eq!(props.len(), 1);
        assert_eq!(holds.get("keep"), Some(&1_700_000_000));
        assert!(defer);
        assert!(!crate::props::is_user_prop("Hold/keep"));
        assert!(!crate::props::is_user_prop(DEFER_KEY));
        for bad in [("Hold/a", "soon"), ("DeferDestroy", "off")] {
            let entries = vec![(bad.0.to_string(), bad.1.to_string())];
            assert!(split_props(entries).is_err(), "{bad:?}");
        }
        assert!(validate_hold_tag("").is_err());
        assert!(validate_hold_tag("a\nb").is_err());
        assert!(validate_hold_tag(&"x".repeat(HOLD_TAG_MAX + 1)).is_err());
        assert!(validate_hold_tag(&"x".repeat(HOLD_TAG_MAX)).is_ok());
        assert!(validate_hold_tag("keep it").is_ok());
    }

    #[test]
    fn snapshot_names() {
        assert_eq!(split_name("tank/a@monday").unwrap(), ("tank/a", "monday"));
        for bad in ["tank/a", "tank/a@", "tank@a@b", "tank@a/b", "tank@a*", "@a"] {
            assert!(split_name(bad).is_err(), "{bad}");
        }
    }
}
