//! Snapshot verbs (`tarn snapshot`, `destroy DS@SNAP`, `rollback`, and snapshots in `list`,
//! `get` and `set`): thin checks and calls into `tarn_dataset::snapshot`, which owns the
//! snapshot nodes and dead lists. Each verb checks everything first, changes nothing when it
//! refuses, and commits in one txg: a snapshot is taken by the sync that writes its
//! dataset's object set (`Tree::sync`), so every snapshot one command names, with `-r`
//! every descendant's, records the same txg.

use tarn_base::{Guid, ObjectId};
use tarn_dataset::props::{self, Source};
use tarn_dataset::snapshot::{self, NewSnapshot};
use tarn_dataset::{DatasetError, name as dsname};
use tarn_format::BlockPtr;
use tarn_objects::ObjectSet;

use crate::dataset_ops::{DatasetProp, DatasetRow};
use crate::dataset_ops::{invalid, pool_of};
use crate::{DatasetId, Engine, EngineError, Imported};

/// What `tarn destroy DS@SNAP...` destroyed (or with `-n` would destroy).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotDestroyReport {
    /// Full names of the snapshots, in the order they were (or would be) destroyed.
    pub destroyed: Vec<String>,
    /// Deflated bytes freed (or that would be freed).
    pub reclaimed: u64,
    /// Full names of the clones (and their descendants) `-R` destroyed with them.
    pub datasets: Vec<String>,
}

/// The snapshot names a destroy argument selects in one dataset's list (oldest first):
/// `a`, `a,b`, `a%c` (a range, either end may be empty), combined with commas.
fn select(names: &[String], spec: &str) -> Result<Vec<usize>, EngineError> {
    let mut picked = Vec::new();
    for part in spec.split(',') {
        if let Some((from, to)) = part.split_once('%') {
            let find = |name: &str, default: usize| -> Result<usize, EngineError> {
                if name.is_empty() {
                    return Ok(default);
                }
                names
                    .iter()
                    .position(|n| n == name)
                    .ok_or_else(|| invalid(format!("snapshot '{name}' does not exist")))
            };
            let start = find(from, 0)?;
            let end = find(to, names.len().saturating_sub(1))?;
            if names.is_empty() || start > end {
                return Err(invalid("range of snapshots is empty or reversed"));
            }
            picked.extend(start..=end);
        } else {
            snapshot::validate_snapshot_name(part)?;
            if let Some(index) = names.iter().position(|n| n == part) {
                picked.push(index);
            }
        }
    }
    picked.sort_unstable();
    picked.dedup();
    Ok(picked)
}

impl Engine {
    /// `tarn snapshot [-r] [-o prop=val]... DS@SNAP...`: every snapshot (and with `-r`
    /// every descendant's of the same name) is taken in one txg.
    pub fn snapshot(
        &self,
        names: &[String],
        recursive: bool,
        properties: &[(String, String)],
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let first = names
            .first()
            .ok_or_else(|| invalid("missing snapshot name"))?;
        let (dataset, _) = snapshot::split_name(first)?;
        let handle = self.pool(pool_of(dataset))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let mut props = Vec::new();
        for (property, value) in properties {
            if !props::is_user_prop(property) {
                return Err(EngineError::InvalidProperty(format!(
                    "property '{property}' cannot be set on snapshots (only user properties)"
                )));
            }
            if let Some(value) = crate::dataset_ops::validate_prop(property, value)? {
                props.push((property.clone(), value));
            }
        }
        let targets = snapshot_targets(&inner, &handle.name, names, recursive)?;
        let ids: Vec<DatasetId> = targets.iter().map(|(d, _)| *d).collect();
        for id in &ids {
            inner.datasets.check_available(*id)?;
        }
        crate::limits::check_snapshots(&inner.datasets, &ids)?;
        let now = self.clock.now_unix_secs();
        for (id, name) in targets {
            let guid = Guid(self.rng.lock().expect("rng lock poisoned").next_u64());
            inner.datasets.node_mut(id).snapshot_pending = Some(NewSnapshot {
                name,
                creation_time: now,
                guid,
                props: props.clone(),
            });
        }
        self.commit_admin(&mut inner, command)?;
        Ok(())
    }

    /// `tarn destroy [-n] [-r] DS@SNAP[,SNAP|%RANGE]...`. With `dry_run` nothing changes and
    /// the report says what would be destroyed and reclaimed. A held snapshot refuses it
    /// (`dataset is busy`).
    pub fn destroy_snapshots(
        &self,
        spec: &str,
        recursive: bool,
        dry_run: bool,
        command: &str,
    ) -> Result<SnapshotDestroyReport, EngineError> {
        self.destroy_snapshots_or_defer(spec, recursive, dry_run, false, command)
    }

    /// [`Engine::destroy_snapshots`]; with `defer` (`destroy -d`) a held snapshot is
    /// marked `defer_destroy=on` instead (destroyed when its last hold is released) and the
    /// others are destroyed.
    pub fn destroy_snapshots_or_defer(
        &self,
        spec: &str,
        recursive: bool,
        dry_run: bool,
        defer: bool,
        command: &str,
    ) -> Result<SnapshotDestroyReport, EngineError> {
        self.destroy_snapshots_with(spec, recursive, dry_run, defer, false, command)
    }

    /// [`Engine::destroy_snapshots_or_defer`]; a snapshot with clones refuses it unless
    /// `dependents` (`-R`): then the clones and what depends on them go first, in the same
    /// txg.
    pub fn destroy_snapshots_with(
        &self,
        spec: &str,
        recursive: bool,
        dry_run: bool,
        defer: bool,
        dependents: bool,
        command: &str,
    ) -> Result<SnapshotDestroyReport, EngineError> {
        let _admin = self.admin();
        let (dataset, list) = spec
            .split_once('@')
            .ok_or_else(|| invalid("missing '@' delimiter in snapshot name"))?;
        dsname::validate_name(dataset)?;
        let handle = self.pool(pool_of(dataset))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let id = inner.datasets.lookup(dataset)?;
        let ids = inner.datasets.selected(id, recursive);
        let (plan, held) = destroy_plan(&inner, &ids, list, defer)?;
        let clones = plan_dependents(&inner, &plan, dependents)?;
        if !held.is_empty() && !dry_run {
            // Marked before the destroys below shift the indices.
            mark_deferred(&mut inner, &held)?;
        }
        if plan.is_empty() && !held.is_empty() {
            if !dry_run {
                self.commit_admin(&mut inner, command)?;
            }
            return Ok(SnapshotDestroyReport::default());
        }
        if plan.is_empty() {
            return Err(invalid(
                "could not find any snapshots to destroy; check snapshot names",
            ));
        }
        let mut report = SnapshotDestroyReport {
            datasets: clones
                .iter()
                .map(|d| inner.datasets.node(*d).name.clone())
                .collect(),
            ..SnapshotDestroyReport::default()
        };
        for (at, picked) in &plan {
            let name = inner.datasets.node(*at).name.clone();
            for index in picked {
                let snap = &inner.datasets.node(*at).snapshots[*index].name;
                report.destroyed.push(format!("{name}@{snap}"));
            }
        }
        if dry_run {
            for (at, picked) in &plan {
                report.reclaimed += reclaim_estimate(&mut inner, *at, picked)?;
            }
            return Ok(report);
        }
        crate::clone_ops::destroy_set(&mut inner, &clones, false)?;
        for (at, picked) in plan {
            for index in picked.into_iter().rev() {
                report.reclaimed += destroy_one_snapshot(&mut inner, at, index)?;
            }
        }
        self.commit_admin(&mut inner, command)?;
        Ok(report)
    }

    /// `tarn rollback [-r] DS@SNAP`: the dataset becomes exactly what the snapshot holds
    /// (uncommitted changes are dropped); later snapshots are destroyed with `-r` and refuse
    /// the rollback otherwise. The caller remounts the dataset.
    pub fn rollback(&self, full: &str, recursive: bool, command: &str) -> Result<(), EngineError> {
        self.rollback_with(full, recursive, false, command)
    }

    /// `tarn rollback [-r] [-R] DS@SNAP`: with `dependents` (`-R`, implying `-r`) the clones
    /// of the later snapshots (and what depends on them) are destroyed too, in the same txg;
    /// without it such clones refuse the rollback.
    pub fn rollback_with(
        &self,
        full: &str,
        recursive: bool,
        dependents: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let (dataset, snap) = snapshot::split_name(full)?;
        let handle = self.pool(pool_of(dataset))?;
        let mut inner = handle.lock();
        let clones = self.rollback_check(&inner, full, recursive || dependents, dependents)?;
        let id = inner.datasets.lookup(dataset)?;
        let (index, _) = inner.datasets.node(id).snapshot(snap).expect("checked");
        // The reads first: beyond parity one may fail, and then nothing has changed yet.
        let reads = rollback_reads(&inner, id, index)?;
        crate::clone_ops::destroy_set(&mut inner, &clones, false)?;
        let later = inner.datasets.node(id).snapshots.len() - 1 - index;
        for _ in 0..later {
            let last = inner.datasets.node(id).snapshots.len() - 1;
            destroy_one_snapshot(&mut inner, id, last)?;
        }
        rollback_apply(&mut inner, id, reads)?;
        self.commit_admin(&mut inner, command)?;
        Ok(())
    }

    /// Whether `tarn rollback [-r] DS@SNAP` would be refused (front ends ask before they
    /// unmount).
    pub fn rollback_check_name(&self, full: &str, recursive: bool) -> Result<(), EngineError> {
        self.rollback_targets(full, recursive, false).map(|_| ())
    }

    /// The clones `tarn rollback [-r] [-R] DS@SNAP` would destroy (full names), or why it
    /// would be refused (front ends ask before they unmount).
    pub fn rollback_targets(
        &self,
        full: &str,
        recursive: bool,
        dependents: bool,
    ) -> Result<Vec<String>, EngineError> {
        let (dataset, _) = snapshot::split_name(full)?;
        let handle = self.pool(pool_of(dataset))?;
        let inner = handle.lock();
        let clones = self.rollback_check(&inner, full, recursive || dependents, dependents)?;
        Ok(clones
            .into_iter()
            .map(|d| inner.datasets.node(d).name.clone())
            .collect())
    }

    /// The checks of a rollback; returns the clones `-R` destroys with the later snapshots.
    fn rollback_check(
        &self,
        inner: &Imported,
        full: &str,
        recursive: bool,
        dependents: bool,
    ) -> Result<std::collections::BTreeSet<DatasetId>, EngineError> {
        let (dataset, snap) = snapshot::split_name(full)?;
        inner.check_writable()?;
        let id = inner.datasets.lookup(dataset)?;
        let node = inner.datasets.node(id);
        let (index, _) = node
            .snapshot(snap)
            .ok_or_else(|| invalid("snapshot does not exist"))?;
        let later: Vec<String> = node.snapshots[index + 1..]
            .iter()
            .map(|s| format!("{}@{}", node.name, s.name))
            .collect();
        if node.snapshots[index + 1..]
            .iter()
            .any(|s| !s.holds.is_empty())
        {
            return Err(invalid("dataset is busy"));
        }
        if !later.is_empty() && !recursive {
            return Err(invalid(format!(
                "more recent snapshots or bookmarks exist (use '-r' to force deletion of the \
                 following snapshots and bookmarks: {})",
                later.join(", ")
            )));
        }
        let picked = vec![(id, (index + 1..node.snapshots.len()).collect())];
        let clones = plan_dependents(inner, &picked, dependents)?;
        assert!(dependents || clones.is_empty(), "clones refuse without -R");
        Ok(clones)
    }

    /// `tarn set PROP=VAL... DS@SNAP`: only user properties exist on snapshots.
    pub(crate) fn set_snapshot_props(
        &self,
        full: &str,
        assignments: &[(String, String)],
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let (dataset, snap) = snapshot::split_name(full)?;
        let handle = self.pool(pool_of(dataset))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let id = inner.datasets.lookup(dataset)?;
        let (index, _) = inner
            .datasets
            .node(id)
            .snapshot(snap)
            .ok_or(EngineError::NoSuchDataset)?;
        let mut values = Vec::new();
        for (property, value) in assignments {
            if !props::is_user_prop(property) {
                crate::dataset_ops::validate_prop(property, value)?;
                return Err(EngineError::InvalidProperty(
                    "this property can not be modified for snapshots".into(),
                ));
            }
            values.push((
                property,
                crate::dataset_ops::validate_prop(property, value)?,
            ));
        }
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = &mut *inner;
        let reader = pool.reader();
        let snapshot = &mut datasets.node_mut(id).snapshots[index];
        for (property, value) in values {
            snapshot::set_prop(mos.objset(), &reader, snapshot, property, value.as_deref())?;
        }
        self.commit_admin(&mut inner, command)?;
        Ok(())
    }

    /// `tarn rename DS@A DS@B`: the snapshot keeps its node, txg, GUID, holds and
    /// properties under the new name.
    pub(crate) fn rename_snapshot(
        &self,
        old: &str,
        new: &str,
        command: &str,
    ) -> Result<(), EngineError> {
        self.rename_snapshot_with(old, new, false, command)
    }

    /// `tarn rename -r DS@A DS@B` (or `@B`): the snapshot `A` of `DS` and of every
    /// descendant that has one becomes `B`, in one txg; any descendant already having `B`
    /// refuses the whole rename.
    pub fn rename_snapshots(&self, old: &str, new: &str, command: &str) -> Result<(), EngineError> {
        self.rename_snapshot_with(old, new, true, command)
    }

    fn rename_snapshot_with(
        &self,
        old: &str,
        new: &str,
        recursive: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let (dataset, from) = snapshot::split_name(old)?;
        let new = match new.strip_prefix('@') {
            Some(short) => format!("{dataset}@{short}"),
            None => new.to_string(),
        };
        let (new_dataset, to) = snapshot::split_name(&new)?;
        if new_dataset != dataset {
            return Err(invalid("snapshots must be part of same dataset"));
        }
        let handle = self.pool(pool_of(dataset))?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let id = inner.datasets.lookup(dataset)?;
        let mut renamed = Vec::new();
        for at in inner.datasets.selected(id, recursive) {
            let node = inner.datasets.node(at);
            let Some((index, _)) = node.snapshot(from) else {
                continue;
            };
            if node.snapshot(to).is_some() {
                return Err(invalid(format!(
                    "dataset already exists: '{}@{to}'",
                    node.name
                )));
            }
            renamed.push((at, index));
        }
        if inner.datasets.node(id).snapshot(from).is_none() {
            return Err(EngineError::NoSuchDataset);
        }
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = &mut *inner;
        let reader = pool.reader();
        for (at, index) in renamed {
            let node = datasets.node_mut(at);
            let head = node.header;
            snapshot::rename(mos.objset(), &reader, &head, &mut node.snapshots[index], to)?;
        }
        self.commit_admin(&mut inner, command)
    }

    fn commit_admin(&self, inner: &mut Imported, command: &str) -> Result<(), EngineError> {
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        Ok(())
    }
}

/// Per dataset of `ids`, the indices of the snapshots `list` selects that are to be
/// destroyed, and the held ones among them (dataset, index) when `defer` (refused without).
type DestroyPlan = (Vec<(DatasetId, Vec<usize>)>, Vec<(DatasetId, usize)>);

fn destroy_plan(
    inner: &Imported,
    ids: &[DatasetId],
    list: &str,
    defer: bool,
) -> Result<DestroyPlan, EngineError> {
    let (mut plan, mut held) = (Vec::new(), Vec::new());
    for &at in ids {
        let node = inner.datasets.node(at);
        let names: Vec<String> = node.snapshots.iter().map(|s| s.name.clone()).collect();
        let held_now = |i: &usize| !node.snapshots[*i].holds.is_empty();
        if !defer && select(&names, list)?.iter().any(held_now) {
            return Err(invalid("dataset is busy"));
        }
        // With -d a held snapshot, or one with clones, is marked to go at its last release
        // or with its last clone, as in ZFS.
        let cloned = |i: &usize| {
            !crate::clone_ops::clones_of(&inner.datasets, node.snapshots[*i].id).is_empty()
        };
        let (kept, picked): (Vec<usize>, Vec<usize>) = select(&names, list)?
            .into_iter()
            .partition(|i| held_now(i) || (defer && cloned(i)));
        held.extend(kept.into_iter().map(|i| (at, i)));
        if !picked.is_empty() {
            plan.push((at, picked));
        }
    }
    Ok((plan, held))
}

/// The datasets that depend on the snapshots of `plan` through clones: refused unless
/// `dependents` (`-R`), then every one of them, none held.
fn plan_dependents(
    inner: &Imported,
    plan: &[(DatasetId, Vec<usize>)],
    dependents: bool,
) -> Result<std::collections::BTreeSet<DatasetId>, EngineError> {
    let tree = &inner.datasets;
    let roots: Vec<(DatasetId, ObjectId)> = plan
        .iter()
        .flat_map(|(at, picked)| {
            picked
                .iter()
                .map(move |i| (*at, tree.node(*at).snapshots[*i].id))
        })
        .collect();
    let none = std::collections::BTreeSet::new();
    if !dependents {
        crate::clone_ops::refuse_dependents(tree, &roots, &none, "snapshot")?;
        return Ok(none);
    }
    let set = crate::clone_ops::dependents(tree, &roots);
    let held = set
        .iter()
        .any(|d| tree.node(*d).snapshots.iter().any(|s| !s.holds.is_empty()));
    if held {
        return Err(invalid("dataset is busy"));
    }
    Ok(set)
}

/// Marks the held snapshots `held` (dataset, index) `defer_destroy=on` (`destroy -d`).
fn mark_deferred(inner: &mut Imported, held: &[(DatasetId, usize)]) -> Result<(), EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let reader = pool.reader();
    for &(at, index) in held {
        let snap = &mut datasets.node_mut(at).snapshots[index];
        snapshot::defer_destroy(mos.objset(), &reader, snap)?;
    }
    Ok(())
}

/// The datasets `tarn snapshot` names (with `recursive`, their descendants too) and the
/// snapshot name each gets, checked: one pool, existing datasets, new names, one snapshot
/// per dataset.
fn snapshot_targets(
    inner: &Imported,
    pool: &str,
    names: &[String],
    recursive: bool,
) -> Result<Vec<(DatasetId, String)>, EngineError> {
    let mut targets: Vec<(DatasetId, String)> = Vec::new();
    for full in names {
        let (dataset, snap) = snapshot::split_name(full)?;
        if pool_of(dataset) != pool {
            return Err(invalid("snapshots must be in the same pool"));
        }
        let id = inner.datasets.lookup(dataset)?;
        let ids = inner.datasets.selected(id, recursive);
        for at in ids {
            let node = inner.datasets.node(at);
            if node.snapshot(snap).is_some() {
                return Err(invalid(format!(
                    "dataset already exists: '{}@{snap}'",
                    node.name
                )));
            }
            if targets.iter().any(|(d, _)| *d == at) {
                return Err(invalid("multiple snapshots of same fs not allowed"));
            }
            targets.push((at, snap.to_string()));
        }
    }
    Ok(targets)
}

/// Destroys snapshot `index` of dataset `id` in open context: its exclusive blocks are
/// freed by the next sync. Returns the bytes reclaimed.
pub(crate) fn destroy_one_snapshot(
    inner: &mut Imported,
    id: DatasetId,
    index: usize,
) -> Result<u64, EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        destroyed,
        ..
    } = inner;
    let reader = pool.reader();
    let node = datasets.node_mut(id);
    let floor = node.floor();
    let (blocks, space) = snapshot::destroy(
        mos.objset(),
        &reader,
        &mut node.header,
        &mut node.snapshots,
        index,
        floor,
    )?;
    node.header_dirty = true;
    destroyed.extend(blocks);
    Ok(space.used)
}

/// What destroying the snapshots `picked` (indexes, ascending) of `id` would free: for each
/// run of adjacent snapshots, the buckets born after the run's predecessor in the dead lists
/// of the run's later members and of the snapshot (or head) after it.
fn reclaim_estimate(
    inner: &mut Imported,
    id: DatasetId,
    picked: &[usize],
) -> Result<u64, EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let reader = pool.reader();
    let node = datasets.node(id);
    let snaps = &node.snapshots;
    let mut total = 0;
    let mut at = 0;
    while at < picked.len() {
        let start = picked[at];
        let mut end = start;
        while at + 1 < picked.len() && picked[at + 1] == end + 1 {
            at += 1;
            end += 1;
        }
        at += 1;
        let after = start
            .checked_sub(1)
            .map_or(node.floor(), |p| snaps[p].header.txg.0);
        let upto = snaps[end].header.txg.0;
        let mut lists: Vec<ObjectId> = snaps[start + 1..=end]
            .iter()
            .map(|s| s.header.deadlist)
            .collect();
        lists.push(
            snaps
                .get(end + 1)
                .map_or(node.header.snap.deadlist, |s| s.header.deadlist),
        );
        for list in lists {
            total +=
                tarn_dataset::deadlist::space_in(mos.objset(), &reader, list, after, upto)?.used;
        }
    }
    Ok(total)
}

/// Rolls dataset `id` back to its latest snapshot: the head's blocks born after it are freed
/// by the next sync, the head's dead list is emptied (the head holds those blocks again) and
/// the object set is reopened at the snapshot's root, dropping uncommitted changes.
pub(crate) fn rollback_head(inner: &mut Imported, id: DatasetId) -> Result<(), EngineError> {
    let latest = inner.datasets.node(id).snapshots.len() - 1;
    let reads = rollback_reads(inner, id, latest)?;
    rollback_apply(inner, id, reads)
}

/// What rolling `id` back to its snapshot `index` reads from the devices, read before the
/// rollback (or the destroy of the later snapshots) changes anything: the head's blocks born
/// after the snapshot (they are the head's alone once the later snapshots are gone) and the
/// snapshot's object set.
pub(crate) struct RollbackReads {
    born_after: Vec<BlockPtr>,
    objset: ObjectSet,
}

pub(crate) fn rollback_reads(
    inner: &Imported,
    id: DatasetId,
    index: usize,
) -> Result<RollbackReads, EngineError> {
    let reader = inner.pool.reader();
    let node = inner.datasets.node(id);
    let target = &node.snapshots[index];
    // Only what the head wrote since the snapshot: subtrees born before it are skipped.
    let born_after = node.head_blocks_born_after(&reader, Some(target.header.txg))?;
    let objset = ObjectSet::open(&reader, &target.header.objset)?;
    Ok(RollbackReads { born_after, objset })
}

/// The rollback itself, once the snapshot read is the latest (see [`rollback_reads`]).
pub(crate) fn rollback_apply(
    inner: &mut Imported,
    id: DatasetId,
    reads: RollbackReads,
) -> Result<(), EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        destroyed,
        ..
    } = inner;
    let reader = pool.reader();
    let node = datasets.node_mut(id);
    let latest = node
        .snapshots
        .last()
        .expect("checked: a snapshot exists")
        .clone();
    let floor = node.floor();
    snapshot::rollback(mos.objset(), &reader, &mut node.header, &latest, floor)?;
    // The head's dead list went: what a clone let go of of its origin is counted again.
    node.load_origin(mos.objset(), &reader)?;
    node.objset = reads.objset;
    node.pending = tarn_posix::Pending::default();
    node.header_dirty = true;
    destroyed.extend(reads.born_after);
    datasets.apply_objset_config(id)?;
    Ok(())
}

/// A snapshot statistic or property row.
fn row(property: &str, value: String, parsable: String, source: &Source) -> DatasetProp {
    DatasetProp {
        property: property.to_string(),
        value,
        parsable,
        source: source.text(),
        source_kind: source.kind_word().to_string(),
    }
}

fn size_row(property: &str, bytes: u64) -> DatasetProp {
    row(
        property,
        tarn_base::units::format_size(bytes),
        bytes.to_string(),
        &Source::None,
    )
}

/// Properties `tarn get all` shows for a snapshot, in ZFS's order.
const SNAPSHOT_PROPS: &[&str] = &[
    "type",
    "creation",
    "used",
    "referenced",
    "compressratio",
    "createtxg",
    "guid",
    "written",
    "clones",
    "logicalreferenced",
    "userrefs",
    "defer_destroy",
];

/// The rows of the snapshots of `id` (oldest first) with `properties`.
pub(crate) fn snapshot_rows(
    inner: &mut Imported,
    id: DatasetId,
    properties: &[String],
    only: Option<&str>,
) -> Result<Vec<DatasetRow>, EngineError> {
    let count = inner.datasets.node(id).snapshots.len();
    let mut rows = Vec::new();
    for index in 0..count {
        let node = inner.datasets.node(id);
        let snap = &node.snapshots[index];
        if only.is_some_and(|name| name != snap.name) {
            continue;
        }
        let full = format!("{}@{}", node.name, snap.name);
        let wanted: Vec<String> = if properties.iter().any(|p| p == "all") {
            let mut all: Vec<String> = SNAPSHOT_PROPS.iter().map(|p| (*p).to_string()).collect();
            all.extend(user_props(inner, id, index).into_iter().map(|(k, _, _)| k));
            all
        } else {
            properties.to_vec()
        };
        let mut props = Vec::with_capacity(wanted.len());
        for property in &wanted {
            props.push(snapshot_prop(inner, id, index, property)?);
        }
        rows.push(DatasetRow { name: full, props });
    }
    Ok(rows)
}

/// User properties of snapshot `index` of `id` in effect (its own, then those its dataset
/// has or inherits), sorted by name: (name, value, source).
fn user_props(inner: &Imported, id: DatasetId, index: usize) -> Vec<(String, String, Source)> {
    let tree = &inner.datasets;
    let mut out: std::collections::BTreeMap<String, (String, Source)> = Default::default();
    for at in tree.lineage(id).into_iter().rev() {
        for (name, value) in &tree.node(at).local {
            if props::is_user_prop(name) {
                let from = Source::Inherited(tree.node(at).name.clone());
                out.insert(name.clone(), (value.clone(), from));
            }
        }
    }
    for (name, value) in &tree.node(id).snapshots[index].props {
        out.insert(name.clone(), (value.clone(), Source::Local));
    }
    out.into_iter().map(|(k, (v, s))| (k, v, s)).collect()
}

fn snapshot_prop(
    inner: &mut Imported,
    id: DatasetId,
    index: usize,
    property: &str,
) -> Result<DatasetProp, EngineError> {
    let node = inner.datasets.node(id);
    let snap = node.snapshots[index].clone();
    let header = snap.header;
    let text = |value: String| row(property, value.clone(), value, &Source::None);
    Ok(match property {
        "name" => text(format!("{}@{}", node.name, snap.name)),
        "type" => text("snapshot".into()),
        "creation" => row(
            property,
            crate::scrub::ctime(header.creation_time),
            header.creation_time.to_string(),
            &Source::None,
        ),
        "used" => size_row(property, unique(inner, id, index)?),
        "referenced" | "refer" => size_row(property, header.referenced),
        "logicalreferenced" => size_row(property, header.logical),
        "compressratio" => {
            let ratio = if header.physical == 0 {
                1.0
            } else {
                header.logical as f64 / header.physical as f64
            };
            row(
                property,
                format!("{ratio:.2}x"),
                format!("{ratio:.2}"),
                &Source::None,
            )
        }
        "createtxg" => text(header.txg.0.to_string()),
        "guid" => text(header.guid.0.to_string()),
        "written" => size_row(property, written_of_snapshot(inner, id, index)?),
        "userrefs" => text(snap.holds.len().to_string()),
        _ if property.starts_with("written@") => {
            let since = &property["written@".len()..];
            size_row(property, written_since(inner, id, since, Some(index))?)
        }
        "clones" => text(crate::clone_ops::clone_names(&inner.datasets, snap.id)),
        "defer_destroy" => text(if snap.defer_destroy { "on" } else { "off" }.into()),
        _ if props::is_user_prop(property) => {
            let found = user_props(inner, id, index)
                .into_iter()
                .find(|(name, _, _)| name == property);
            match found {
                Some((_, value, source)) => row(property, value.clone(), value, &source),
                None => row(property, "-".into(), "-".into(), &Source::None),
            }
        }
        _ if props::find(property).is_some() || SNAPSHOT_ONLY.contains(&property) => {
            text("-".into())
        }
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

/// Names that are valid for `list -o` of snapshots even though datasets lack them.
const SNAPSHOT_ONLY: &[&str] = &["avail", "userrefs", "defer_destroy", "clones"];

fn unique(inner: &mut Imported, id: DatasetId, index: usize) -> Result<u64, EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let node = datasets.node(id);
    let space = snapshot::unique_space(
        mos.objset(),
        &pool.reader(),
        &node.header,
        &node.snapshots,
        index,
        node.floor(),
    )?;
    Ok(space.used)
}

/// `written` of snapshot `index`: what it references that its previous snapshot did not
/// (referenced minus the previous one's, plus what the previous one had and this one let go).
fn written_of_snapshot(
    inner: &mut Imported,
    id: DatasetId,
    index: usize,
) -> Result<u64, EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let node = datasets.node(id);
    let snap = &node.snapshots[index];
    // A clone's first snapshot is measured against its origin, as ZFS does.
    let previous = index.checked_sub(1).map_or_else(
        || node.origin.map_or(0, |o| o.referenced),
        |p| node.snapshots[p].header.referenced,
    );
    let dead = snapshot::deadlist_space(mos.objset(), &pool.reader(), snap.header.deadlist)?;
    Ok((snap.header.referenced + dead.used).saturating_sub(previous))
}

/// `written` of a dataset: what its head references that its latest snapshot did not (all
/// of `referenced` without snapshots).
pub(crate) fn written_of_head(inner: &mut Imported, id: DatasetId) -> Result<u64, EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let node = datasets.node(id);
    // Measured against the latest snapshot, or a clone's origin without one.
    let previous = match (node.snapshots.last(), node.origin) {
        (Some(latest), _) => latest.header.referenced,
        (None, Some(origin)) => origin.referenced,
        (None, None) => return Ok(node.header.referenced),
    };
    let dead = snapshot::deadlist_space(mos.objset(), &pool.reader(), node.header.snap.deadlist)?;
    Ok((node.header.referenced + dead.used).saturating_sub(previous))
}

/// `written@SNAP` of dataset `id` (`at`: `None`) or of its snapshot `at`: what it references
/// that the earlier snapshot `since` did not. The space `since` held that died after it lies
/// in the dead lists of the later snapshots (and the head) under buckets up to its txg.
pub(crate) fn written_since(
    inner: &mut Imported,
    id: DatasetId,
    since: &str,
    at: Option<usize>,
) -> Result<u64, EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let node = datasets.node(id);
    let Some((from, earlier)) = node.snapshot(since) else {
        return Err(invalid(format!(
            "snapshot '{}@{since}' does not exist",
            node.name
        )));
    };
    let (referenced, mut lists) = match at {
        Some(index) if index <= from => {
            return Err(invalid(format!(
                "'{since}' is not an earlier snapshot of '{}'",
                node.name
            )));
        }
        Some(index) => (
            node.snapshots[index].header.referenced,
            node.snapshots[from + 1..=index]
                .iter()
                .map(|s| s.header.deadlist)
                .collect::<Vec<_>>(),
        ),
        None => (
            node.header.referenced,
            node.snapshots[from + 1..]
                .iter()
                .map(|s| s.header.deadlist)
                .collect(),
        ),
    };
    if at.is_none() {
        lists.push(node.header.snap.deadlist);
    }
    let reader = pool.reader();
    let mut died = 0;
    for list in lists {
        died +=
            tarn_dataset::deadlist::space_in(mos.objset(), &reader, list, 0, earlier.header.txg.0)?
                .used;
    }
    Ok((referenced + died).saturating_sub(earlier.header.referenced))
}

/// Frees every snapshot structure of dataset `id` being destroyed and returns the blocks of
/// its dead lists (freed with the head's blocks).
pub(crate) fn destroy_all_snapshots(
    inner: &mut Imported,
    id: DatasetId,
) -> Result<Vec<BlockPtr>, EngineError> {
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let reader = pool.reader();
    let node = datasets.node_mut(id);
    let snapshots = std::mem::take(&mut node.snapshots);
    let floor = node.floor();
    Ok(snapshot::destroy_all(
        mos.objset(),
        &reader,
        &mut node.header,
        &snapshots,
        floor,
    )?)
}

/// The datasets' snapshot names under `ids`, as `DS@SNAP` (for refusals).
pub(crate) fn snapshot_names(inner: &Imported, ids: &[DatasetId]) -> Vec<String> {
    ids.iter()
        .flat_map(|id| {
            let node = inner.datasets.node(*id);
            node.snapshots
                .iter()
                .map(|s| format!("{}@{}", node.name, s.name))
                .collect::<Vec<_>>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::select;

    #[test]
    fn destroy_arguments_select_names_and_ranges() {
        let names: Vec<String> = ["a", "b", "c", "d"].iter().map(|s| (*s).into()).collect();
        assert_eq!(select(&names, "b").unwrap(), vec![1]);
        assert_eq!(select(&names, "b%d").unwrap(), vec![1, 2, 3]);
        assert_eq!(select(&names, "%b").unwrap(), vec![0, 1]);
        assert_eq!(select(&names, "c%").unwrap(), vec![2, 3]);
        assert_eq!(select(&names, "a,c,a").unwrap(), vec![0, 2]);
        assert_eq!(select(&names, "x").unwrap(), Vec::<usize>::new());
        assert!(select(&names, "d%a").is_err());
        assert!(select(&names, "x%b").is_err());
    }
}
