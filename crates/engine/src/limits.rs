//! `snapshot_limit` and `filesystem_limit` (ZFS's `dsl_dir` limits): a dataset with a limit
//! refuses a snapshot, or a new filesystem or volume, anywhere in its subtree that would
//! take the subtree's count past it. The counts (`snapshot_count`, `filesystem_count`) are
//! computed from the tree in memory, never stored, so they cannot drift; a limit set below
//! the current count refuses only what would add more, as in ZFS. Unlike ZFS, the limit
//! binds every caller (tarn has no delegated administration whose holders would be exempt;
//! ZFS exempts whoever may change the limit, root in the global zone included). A receive
//! counts as the dataset and the snapshot it brings (checked when its stream begins); its
//! hidden dataset meanwhile is not counted, so a replication receive, whose substreams are
//! held until its end, is checked there for all of them together with what its end
//! destroys and moves ([`check_change`], the rule in tarn-dataset's `limits`: removals
//! first, as ZFS destroys before it receives), and a `receive -F` whose source is not the
//! destination's latest snapshot is checked with the later snapshots it destroys gone.

use std::collections::{BTreeMap, BTreeSet};

use tarn_base::ObjectId;
use tarn_dataset::limits::Counted;

use crate::dataset_ops::invalid;
use crate::datasets::{Tree, is_hidden};
use crate::{DatasetId, EngineError, ROOT_DATASET_ID};

/// `snapshot_count` (snapshots in the subtree) or `filesystem_count` (datasets below it).
pub(crate) fn count(tree: &Tree, id: DatasetId, property: &str) -> u64 {
    let subtree = tree.subtree(id);
    let count = match property {
        "snapshot_count" => subtree
            .iter()
            .map(|(d, _)| tree.node(*d).snapshots.len())
            .sum(),
        _ => subtree.len() - 1,
    };
    count as u64
}

/// The limit `property` set on `id`, if any.
fn limit(tree: &Tree, id: DatasetId, property: &str) -> Option<u64> {
    tree.node(id).local.get(property)?.parse().ok()
}

/// Refuses adding `added` snapshots (per dataset of `targets`, each one snapshot) or, for
/// `filesystem_limit`, `added` datasets under `parent`, when an ancestor's limit would be
/// passed. `kind` is `snapshot` or `filesystem`.
fn check(tree: &Tree, added: &[(DatasetId, u64)], kind: &str) -> Result<(), EngineError> {
    let (property, counted) = match kind {
        "snapshot" => ("snapshot_limit", "snapshot_count"),
        _ => ("filesystem_limit", "filesystem_count"),
    };
    let mut seen: Vec<DatasetId> = Vec::new();
    for (at, _) in added {
        for ancestor in tree.lineage(*at) {
            if seen.contains(&ancestor) || is_hidden(&tree.node(ancestor).name) {
                continue;
            }
            seen.push(ancestor);
            let Some(max) = limit(tree, ancestor, property) else {
                continue;
            };
            let new: u64 = added
                .iter()
                .filter(|(d, _)| tree.lineage(*d).contains(&ancestor))
                .map(|(_, n)| n)
                .sum();
            if count(tree, ancestor, counted) + new > max {
                return Err(invalid(format!(
                    "{kind} limit exceeded ({property}={max} on '{}')",
                    tree.node(ancestor).name
                )));
            }
        }
    }
    Ok(())
}

/// Refuses a snapshot of each of `targets` past a `snapshot_limit`.
pub(crate) fn check_snapshots(tree: &Tree, targets: &[DatasetId]) -> Result<(), EngineError> {
    let added: Vec<(DatasetId, u64)> = targets.iter().map(|d| (*d, 1)).collect();
    check(tree, &added, "snapshot")
}

/// Refuses `count` new datasets below `parent` (a filesystem counts itself only for its
/// ancestors) past a `filesystem_limit`.
pub(crate) fn check_filesystems(
    tree: &Tree,
    parent: DatasetId,
    count: u64,
) -> Result<(), EngineError> {
    check(tree, &[(parent, count)], "filesystem")
}

/// What a receive changes at once, for [`check_change`].
#[derive(Debug, Default)]
pub(crate) struct Change {
    /// Datasets destroyed (each one listed, descendants too).
    pub(crate) destroyed: BTreeSet<DatasetId>,
    /// Snapshots destroyed in datasets that stay.
    pub(crate) snapshots: BTreeMap<DatasetId, BTreeSet<ObjectId>>,
    /// Datasets moved, in order: (dataset, new full name), each a prefix substitution.
    pub(crate) moves: Vec<(DatasetId, String)>,
    /// Datasets that gain a snapshot (one per entry).
    pub(crate) snapshotted: Vec<DatasetId>,
    /// New datasets (their hidden dataset, full name, how many snapshots they bring).
    pub(crate) created: Vec<(DatasetId, String, usize)>,
}

/// Refuses `change` when it passes a `filesystem_limit` or `snapshot_limit`, counted as
/// ZFS counts the same change made one step at a time, removals first
/// (`tarn_dataset::limits`).
pub(crate) fn check_change(tree: &Tree, change: &Change) -> Result<(), EngineError> {
    let ids: Vec<DatasetId> = tree
        .subtree(ROOT_DATASET_ID)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let counted = |id: DatasetId, name: String, snapshots: usize, added: usize| Counted {
        key: id.0,
        name,
        snapshots: snapshots as u64,
        added: added as u64,
        filesystem_limit: limit(tree, id, "filesystem_limit"),
        snapshot_limit: limit(tree, id, "snapshot_limit"),
    };
    let before: Vec<Counted> = ids
        .iter()
        .map(|&id| {
            counted(
                id,
                tree.node(id).name.clone(),
                tree.node(id).snapshots.len(),
                0,
            )
        })
        .collect();
    let mut names: BTreeMap<DatasetId, String> = ids
        .iter()
        .map(|&id| (id, tree.node(id).name.clone()))
        .collect();
    for (id, new) in &change.moves {
        let old = names[id].clone();
        for name in names.values_mut() {
            if let Some(rest) = name.strip_prefix(old.as_str())
                && (rest.is_empty() || rest.starts_with('/'))
            {
                *name = format!("{new}{rest}");
            }
        }
    }
    let mut after: Vec<Counted> = Vec::new();
    for (id, name) in names {
        if change.destroyed.contains(&id) {
            continue;
        }
        let node = tree.node(id);
        let gone = change.snapshots.get(&id).map_or(0, |doomed| {
            node.snapshots
                .iter()
                .filter(|s| doomed.contains(&s.id))
                .count()
        });
        let added = change.snapshotted.iter().filter(|d| **d == id).count();
        after.push(counted(
            id,
            name,
            node.snapshots.len() - gone + added,
            added,
        ));
    }
    for (id, name, snapshots) in &change.created {
        after.push(Counted {
            filesystem_limit: None,
            snapshot_limit: None,
            ..counted(*id, name.clone(), *snapshots, *snapshots)
        });
    }
    tarn_dataset::limits::check(&before, &after).map_err(|e| invalid(e.to_string()))
}

/// Refuses moving `id` and its subtree under `new_parent` (`rename`) when a new ancestor's
/// `filesystem_limit` or `snapshot_limit` would be passed (ancestors it already had keep
/// their counts).
pub(crate) fn check_move(
    tree: &Tree,
    id: DatasetId,
    new_parent: DatasetId,
) -> Result<(), EngineError> {
    let moved = count(tree, id, "filesystem_count") + 1;
    let snapshots = count(tree, id, "snapshot_count");
    let old = tree.lineage(id);
    for ancestor in tree.lineage(new_parent) {
        if old.contains(&ancestor) {
            continue;
        }
        for (property, counted, adds, kind) in [
            ("filesystem_limit", "filesystem_count", moved, "filesystem"),
            ("snapshot_limit", "snapshot_count", snapshots, "snapshot"),
        ] {
            if let Some(max) = limit(tree, ancestor, property)
                && count(tree, ancestor, counted) + adds > max
            {
                return Err(invalid(format!(
                    "{kind} limit exceeded ({property}={max} on '{}')",
                    tree.node(ancestor).name
                )));
            }
        }
    }
    Ok(())
}
