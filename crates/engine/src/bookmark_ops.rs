//! `tarn bookmark`, bookmarks in `list -t bookmark|all` and `destroy DS#BM`, and a bookmark
//! as the source of `send -i`: thin verbs over `tarn_dataset::bookmark`, which keeps a
//! bookmark (GUID, txg, creation time of a snapshot) among its dataset's hidden local
//! properties. Each verb checks first and commits in one txg.
//!
//! As a send source a bookmark stands in for a snapshot with no object set (a `Snapshot`
//! value whose root is a hole): the sender walks only blocks born after its txg and, not
//! knowing what each changed object was, sends every live object of a changed dnode block.

use tarn_base::ObjectId;
use tarn_dataset::bookmark::{self, Bookmark};
use tarn_dataset::props::{self, Source};
use tarn_dataset::snapshot::{self, Snapshot, SnapshotHeader};
use tarn_dataset::{DatasetError, name as dsname};

use crate::dataset_ops::{DatasetProp, DatasetRow, invalid, pool_of};
use crate::datasets::Node;
use crate::{DatasetId, Engine, EngineError, Imported};

impl Engine {
    /// `tarn bookmark DS@SNAP|DS#BM DS#NEW`: a bookmark of a snapshot (or a copy of another
    /// bookmark) of the same dataset.
    pub fn bookmark(&self, source: &str, target: &str, command: &str) -> Result<(), EngineError> {
        let _admin = self.admin();
        let (dataset, name) = bookmark::split_name(target)?;
        let handle = self.pool(pool_of(dataset))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let id = inner.datasets.lookup(dataset)?;
        let node = inner.datasets.node(id);
        let from = match source.split_once('@') {
            Some((ds, snap)) => {
                snapshot::split_name(source)?;
                same_dataset(ds, dataset)?;
                let (_, found) = node
                    .snapshot(snap)
                    .ok_or_else(|| invalid(format!("snapshot '{source}' does not exist")))?;
                of_snapshot(found)
            }
            None => {
                let (ds, mark) = bookmark::split_name(source)?;
                same_dataset(ds, dataset)?;
                bookmark::find(&node.local, mark)?
                    .ok_or_else(|| invalid(format!("bookmark '{source}' does not exist")))?
            }
        };
        if bookmark::find(&node.local, name)?.is_some() {
            return Err(invalid("bookmark exists"));
        }
        let (key, value) = Bookmark {
            name: name.to_string(),
            ..from
        }
        .entry();
        inner.set_local(id, &key, Some(&value))?;
        self.commit(&mut inner, command)
    }

    /// `tarn destroy DS#BM`.
    pub(crate) fn destroy_bookmark(
        &self,
        full: &str,
        dry_run: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let (dataset, name) = bookmark::split_name(full)?;
        let handle = self.pool(pool_of(dataset))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let id = inner.datasets.lookup(dataset)?;
        let found = bookmark::find(&inner.datasets.node(id).local, name)?
            .ok_or_else(|| invalid("bookmark does not exist"))?;
        if dry_run {
            return Ok(());
        }
        inner.set_local(id, &found.entry().0, None)?;
        self.commit(&mut inner, command)
    }
}

fn same_dataset(source: &str, target: &str) -> Result<(), EngineError> {
    dsname::validate_name(source)?;
    match source == target {
        true => Ok(()),
        false => Err(invalid(
            "a bookmark must be in the same dataset as its source",
        )),
    }
}

fn of_snapshot(snap: &Snapshot) -> Bookmark {
    Bookmark {
        name: snap.name.clone(),
        guid: snap.header.guid,
        txg: snap.header.txg,
        creation_time: snap.header.creation_time,
    }
}

/// A bookmark as a send source: a snapshot with its GUID and txg and no object set.
fn as_source(mark: &Bookmark) -> Snapshot {
    Snapshot {
        id: ObjectId(0),
        name: mark.name.clone(),
        header: SnapshotHeader {
            txg: mark.txg,
            guid: mark.guid,
            creation_time: mark.creation_time,
            ..SnapshotHeader::default()
        },
        props: Default::default(),
        holds: Default::default(),
        defer_destroy: false,
    }
}

/// The bookmark `from` (`#BM` or `DS#BM`) of dataset `dataset` (`node`) as a send source.
pub(crate) fn source(node: &Node, dataset: &str, from: &str) -> Result<Snapshot, EngineError> {
    let (ds, mark) = from.split_once('#').expect("a bookmark name has '#'");
    if !ds.is_empty() && ds != dataset {
        return Err(invalid("incremental source must be in same filesystem"));
    }
    snapshot::validate_snapshot_name(mark)?;
    let found = bookmark::find(&node.local, mark)?
        .ok_or_else(|| invalid(format!("bookmark '{dataset}#{mark}' does not exist")))?;
    Ok(as_source(&found))
}

/// The bookmark with GUID `guid` of `node` as a send source (`send -t` of a stream whose
/// source was a bookmark).
pub(crate) fn source_by_guid(node: &Node, guid: u64) -> Option<Snapshot> {
    let marks = bookmark::list(&node.local).ok()?;
    let found = marks.into_iter().find(|b| b.guid.0 == guid)?;
    Some(as_source(&found))
}

/// Properties `get all` shows for a bookmark.
const BOOKMARK_PROPS: &[&str] = &["type", "creation", "createtxg", "guid"];

/// The rows of the bookmarks of `id` (oldest first; only `only` when given).
pub(crate) fn bookmark_rows(
    inner: &Imported,
    id: DatasetId,
    properties: &[String],
    only: Option<&str>,
) -> Result<Vec<DatasetRow>, EngineError> {
    let node = inner.datasets.node(id);
    let mut rows = Vec::new();
    for mark in bookmark::list(&node.local)? {
        if only.is_some_and(|name| name != mark.name) {
            continue;
        }
        let wanted: Vec<String> = match properties.iter().any(|p| p == "all") {
            true => BOOKMARK_PROPS.iter().map(|p| (*p).to_string()).collect(),
            false => properties.to_vec(),
        };
        let full = format!("{}#{}", node.name, mark.name);
        let props = wanted
            .iter()
            .map(|p| bookmark_prop(&full, &mark, p))
            .collect::<Result<Vec<_>, _>>()?;
        rows.push(DatasetRow { name: full, props });
    }
    Ok(rows)
}

fn bookmark_prop(full: &str, mark: &Bookmark, property: &str) -> Result<DatasetProp, EngineError> {
    let row = |value: String, parsable: String| DatasetProp {
        property: property.to_string(),
        value,
        parsable,
        source: Source::None.text(),
        source_kind: Source::None.kind_word().to_string(),
    };
    let text = |value: String| row(value.clone(), value);
    Ok(match property {
        "name" => text(full.to_string()),
        "type" => text("bookmark".into()),
        "creation" => row(
            crate::scrub::ctime(mark.creation_time),
            mark.creation_time.to_string(),
        ),
        "createtxg" => text(mark.txg.0.to_string()),
        "guid" => text(mark.guid.0.to_string()),
        // A property a bookmark lacks (space, mountpoint, every settable one) is a dash, as
        // in ZFS: `list -t all` asks every row for the same columns.
        _ if crate::dataset_ops::is_dataset_property(property) => text("-".into()),
        _ => {
            return Err(EngineError::Dataset(DatasetError::InvalidProperty(
                format!(
                    "invalid property '{property}' (valid properties: {})",
                    props::names()
                ),
            )));
        }
    })
}
