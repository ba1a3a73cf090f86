//! The manifest of a replication stream (`send -R`) and what `receive -R` does with it:
//! with `-F`, destroy the snapshots and datasets of the destination's tree that the sender
//! no longer has, and (with or without `-F`) rename the snapshots and move the datasets the
//! sender renamed, as OpenZFS's `zfs receive` of a replication stream does. Thin: the
//! record is tarn-send's `Manifest`, the plan tarn-dataset's `replicate::prune`; here the
//! tree is read, holds and clones are checked, and the plan is applied.
//!
//! ```text
//!  sender:   BEGIN(MANIFEST) MANIFEST(tank/p: @a @b) MANIFEST(tank/p/k: @a @b) END
//!            then the substreams, as before
//!  receiver: manifest read -> plan against the destination, checked (a refusal here comes
//!            before the first substream: nothing has changed) -> substreams received ->
//!            plan again, checked again, applied and committed in one txg
//! ```
//!
//! Rules: a snapshot to destroy, or a snapshot of a dataset to destroy, that has a user
//! hold or a clone outside what is destroyed refuses the receive (OpenZFS: EBUSY, EEXIST)
//! in one line; renames the plan cannot order refuse it too. Without `-F` nothing is
//! destroyed. `-n` plans and reports without changing anything. A stream without a
//! manifest (from a build before it) is received as before: nothing is destroyed or
//! renamed.
//!
//! Failure model: the first check refuses before any change. The substreams are held in
//! hidden datasets (`receive_atomic`: those that need what a held one brings too, on top of
//! it or below it) and placed in the prune's txg: a hold or clone made on a doomed snapshot
//! while they came in refuses at the end, the held ones discarded, so nothing changed.
//!
//! `receive -s` (resumable): the substreams are not held; each commits at its END, so a
//! cut stream keeps every substream before the cut, the one it cut keeps its partial state
//! (a resume token on its dataset), and nothing is pruned or moved. The admin finishes it
//! with `send -t TOKEN | receive -s DS`, then receives the same `send -R` stream again:
//! every substream whose snapshot the destination has (by GUID) is read and skipped
//! (`ReceiveReport::skipped`), the rest is received, and the prune and moves follow. (A
//! `send -t` token resumes one substream, as in OpenZFS, whose re-sent `-R` stream is
//! refused for the datasets it already received; skipping them is what tarn adds.)
//!
//! Datasets the sender renamed or moved (found by their snapshots' GUIDs) are moved too,
//! with or without `-F`, in the same txg: `receive_moves`; until then their substreams go
//! to their local names. Under `-s`, when a new dataset of the stream goes to a name a
//! move vacates, the moves are made when the manifest arrives instead
//! (`receive_moves::apply_early`), and the substreams go to the new names.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use tarn_base::ObjectId;
use tarn_dataset::replicate::{self, Listing};
use tarn_dataset::snapshot;
use tarn_send::{Begin, Manifest, ManifestSnapshot, Record, StreamReader};

use crate::dataset_ops::{invalid, pool_of};
use crate::receive_atomic::Held;
use crate::send_ops::{ReceiveReport, ReceiveSpec, stream_error};
use crate::{DatasetId, Engine, EngineError, Imported};

/// The sender's tree, as its manifest listed it.
pub(crate) struct Sent {
    /// The tree's root on the sender (`pool/ds`).
    pub(crate) root: String,
    /// Each dataset, paths below the root.
    listings: Vec<Listing>,
    /// The substreams the stream carries after its manifest.
    pub(crate) substreams: u64,
    /// The datasets the sender renamed or moved (`receive_moves`), as planned when the
    /// manifest arrived: only its `moves` are set.
    pub(crate) moves: replicate::Prune,
    /// The full names of the datasets the stream makes here (each sent dataset not here
    /// when the manifest arrived, by its local name): what `receive -n` orders the moves
    /// with, as nothing is held.
    pub(crate) published: Vec<String>,
    /// The full names here of the datasets the moves take away (and no move takes): a new
    /// dataset of the stream at one of them is placed after the moves (`receive_moves`).
    pub(crate) vacated: Vec<String>,
    /// Under `receive -s`, the moves made when the manifest arrived (old, new full names:
    /// `receive_moves::apply_early`), for the report.
    pub(crate) moved_early: Vec<(String, String)>,
}

impl Sent {
    /// The local name a substream for the sent dataset at `path` (below the root) writes to
    /// while the stream comes in: before the moves.
    pub(crate) fn local_path(&self, path: &str) -> String {
        self.moves.local_path(path)
    }

    /// Whether the full name `target` is one the moves take a dataset away from.
    pub(crate) fn vacated(&self, target: &str) -> bool {
        self.vacated.iter().any(|v| v == target)
    }
}

/// The MANIFEST records of a `send -R` of `root@snap`: every dataset of the subtree, each
/// with the number of substreams `plan` (the datasets of the substreams, in order) sends of
/// it and its snapshots up to its own `@snap` (or the root's, when it has none).
pub(crate) fn manifest(
    inner: &Imported,
    root: DatasetId,
    snap: &str,
    plan: &[&str],
) -> Vec<Manifest> {
    let txg_of = |id: DatasetId| {
        let node = inner.datasets.node(id);
        node.snapshot(snap).map(|(_, s)| s.header.txg)
    };
    let root_txg = txg_of(root);
    let mut out = Vec::new();
    for (id, _) in inner.datasets.subtree(root) {
        let node = inner.datasets.node(id);
        let upto = txg_of(id).or(root_txg);
        let snapshots: Vec<ManifestSnapshot> = node
            .snapshots
            .iter()
            .filter(|s| upto.is_none_or(|t| s.header.txg <= t))
            .map(|s| ManifestSnapshot {
                guid: s.header.guid.0,
                txg: s.header.txg.0,
                name: s.name.clone(),
            })
            .collect();
        let substreams = plan.iter().filter(|d| **d == node.name).count();
        let substreams = u32::try_from(substreams).unwrap_or(u32::MAX);
        out.extend(Manifest::split(&node.name, substreams, &snapshots));
    }
    out
}

/// Reads a manifest substream (its BEGIN read) to its END: the sender's tree.
fn read_manifest(
    begin: &Begin,
    reader: &mut StreamReader<&mut dyn Read>,
) -> Result<Sent, EngineError> {
    let root = begin
        .to_name
        .split('@')
        .next()
        .unwrap_or_default()
        .to_string();
    let mut listings: Vec<Listing> = Vec::new();
    let mut substreams = 0u64;
    loop {
        let record = reader.next_record().map_err(stream_error)?;
        let manifest = match record {
            Some(Record::Manifest(manifest)) => manifest,
            Some(Record::End { .. }) => {
                return Ok(Sent {
                    root,
                    listings,
                    substreams,
                    moves: replicate::Prune::default(),
                    published: Vec::new(),
                    vacated: Vec::new(),
                    moved_early: Vec::new(),
                });
            }
            Some(_) => return Err(invalid("invalid stream: a record in the manifest")),
            None => {
                let record = reader.sequence();
                return Err(stream_error(tarn_send::StreamError::Truncated { record }));
            }
        };
        let path = match manifest.dataset.strip_prefix(root.as_str()) {
            Some(rest) if rest.is_empty() || rest.starts_with('/') => rest.to_string(),
            _ => {
                return Err(invalid(format!(
                    "invalid stream: the manifest lists '{}' outside the stream's root '{root}'",
                    manifest.dataset
                )));
            }
        };
        substreams += u64::from(manifest.substreams);
        let snapshots = manifest.snapshots.into_iter().map(|s| (s.guid, s.name));
        // A long list comes in several records of the same dataset.
        match listings.last_mut().filter(|l| l.path == path) {
            Some(last) => last.snapshots.extend(snapshots),
            None => listings.push(Listing {
                path,
                snapshots: snapshots.collect(),
            }),
        }
    }
}

/// The destination's tree under `target` (none when it does not exist yet).
fn local_tree(inner: &Imported, target: &str) -> Vec<(DatasetId, Listing)> {
    let Some(root) = inner.datasets.by_name(target) else {
        return Vec::new();
    };
    inner
        .datasets
        .subtree(root)
        .into_iter()
        .map(|(id, _)| {
            let node = inner.datasets.node(id);
            let path = node
                .name
                .strip_prefix(target)
                .unwrap_or_default()
                .to_string();
            let snapshots = node
                .snapshots
                .iter()
                .map(|s| (s.header.guid.0, s.name.clone()))
                .collect();
            (id, Listing { path, snapshots })
        })
        .collect()
}

/// The plan for the destination `target`, checked: without `force` only its renames.
fn plan(inner: &Imported, target: &str, sent: &Sent, force: bool) -> Result<Planned, EngineError> {
    let tree = local_tree(inner, target);
    let listings: Vec<Listing> = tree.iter().map(|(_, l)| l.clone()).collect();
    let mut prune = replicate::prune(&sent.listings, &listings)
        .map_err(|e| invalid(format!("cannot follow the sender: {e}")))?;
    if !force {
        prune.datasets.clear();
        prune.snapshots.clear();
    }
    let id_of = |path: &str| {
        tree.iter()
            .find(|(_, l)| l.path == path)
            .map(|(id, _)| *id)
            .expect("a path of the plan is one of the tree's")
    };
    let planned = Planned {
        moves: prune
            .moves
            .iter()
            .map(|(old, _, new)| (id_of(old), format!("{target}{new}")))
            .collect(),
        paths: prune.moves.clone(),
        datasets: prune.datasets.iter().map(|p| id_of(p)).collect(),
        snapshots: prune
            .snapshots
            .iter()
            .map(|(p, name)| (id_of(p), name.clone()))
            .collect(),
        renames: prune
            .renames
            .iter()
            .map(|(p, old, new)| (id_of(p), old.clone(), new.clone()))
            .collect(),
    };
    check(inner, &planned)?;
    Ok(planned)
}

/// A plan on this pool's datasets.
struct Planned {
    /// Datasets to destroy, children first.
    datasets: Vec<DatasetId>,
    /// Snapshots to destroy (dataset, short name).
    snapshots: Vec<(DatasetId, String)>,
    /// Snapshot renames in order (dataset, old, new).
    renames: Vec<(DatasetId, String, String)>,
    /// Datasets to move (dataset, new full name: `receive_moves`).
    moves: Vec<(DatasetId, String)>,
    /// The moves as planned on paths (`replicate::Prune::moves`).
    paths: Vec<(String, String, String)>,
}

impl Planned {
    /// The moves ordered and checked against the tree under `target` and the names the held
    /// new datasets take (`receive_moves::order`).
    fn order(
        &self,
        inner: &Imported,
        target: &str,
        published: &[String],
    ) -> Result<crate::receive_moves::Ordered, EngineError> {
        let doomed: BTreeSet<DatasetId> = self.datasets.iter().copied().collect();
        match inner.datasets.by_name(target) {
            Some(root) => crate::receive_moves::order(inner, root, &self.moves, &doomed, published),
            None => Ok(crate::receive_moves::Ordered {
                early: doomed,
                moves: Vec::new(),
                late: BTreeSet::new(),
            }),
        }
    }

    /// `change` (what the held substreams place) with what the plan destroys and moves
    /// (`ordered`), for the limits.
    fn change(
        &self,
        inner: &Imported,
        ordered: &crate::receive_moves::Ordered,
        mut change: crate::limits::Change,
    ) -> crate::limits::Change {
        change.destroyed.extend(self.datasets.iter().copied());
        for (id, name) in &self.snapshots {
            if let Some((_, snapshot)) = inner.datasets.node(*id).snapshot(name) {
                change.snapshots.entry(*id).or_default().insert(snapshot.id);
            }
        }
        change.moves.clone_from(&ordered.moves);
        change
    }
}

/// Refuses a plan that would destroy a held snapshot or one with clones outside it.
fn check(inner: &Imported, planned: &Planned) -> Result<(), EngineError> {
    let tree = &inner.datasets;
    let doomed: BTreeSet<DatasetId> = planned.datasets.iter().copied().collect();
    let mut snapshots: Vec<(DatasetId, ObjectId, String)> = Vec::new();
    for &id in &planned.datasets {
        let node = tree.node(id);
        snapshots.extend(node.snapshots.iter().map(|s| (id, s.id, s.name.clone())));
    }
    for (id, name) in &planned.snapshots {
        let found = tree.node(*id).snapshot(name).map(|(_, s)| s.id);
        snapshots.extend(found.map(|s| (*id, s, name.clone())));
    }
    for (id, snap, name) in snapshots {
        let node = tree.node(id);
        let full = format!("{}@{name}", node.name);
        let held = node
            .snapshots
            .iter()
            .any(|s| s.id == snap && !s.holds.is_empty());
        if held {
            return Err(invalid(format!(
                "destination snapshot '{full}' is not on the sender and is held (dataset is \
                 busy): release its holds to receive"
            )));
        }
        let dependents = crate::clone_ops::dependents(tree, &[(id, snap)]);
        if let Some(clone) = dependents.iter().find(|d| !doomed.contains(d)) {
            return Err(invalid(format!(
                "destination snapshot '{full}' is not on the sender and has dependent clones \
                 (eg. '{}'): destroy or promote them to receive",
                tree.node(*clone).name
            )));
        }
    }
    Ok(())
}

/// What a plan does, as full names for the report: destroyed, then renamed (old, new).
fn names(inner: &Imported, planned: &Planned) -> (Vec<String>, Vec<(String, String)>) {
    let name = |id: DatasetId| inner.datasets.node(id).name.clone();
    let mut destroyed: Vec<String> = planned.datasets.iter().map(|d| name(*d)).collect();
    destroyed.extend(
        planned
            .snapshots
            .iter()
            .map(|(d, s)| format!("{}@{s}", name(*d))),
    );
    let mut renamed: Vec<(String, String)> = planned
        .renames
        .iter()
        .map(|(d, old, new)| (format!("{}@{old}", name(*d)), format!("{}@{new}", name(*d))))
        .collect();
    renamed.extend(planned.moves.iter().map(|(d, new)| (name(*d), new.clone())));
    (destroyed, renamed)
}

/// Applies a checked plan in open context (the caller commits): the datasets no move
/// needs, the snapshots, the snapshot renames, the moves in their order, the datasets the
/// moves emptied.
fn apply(
    inner: &mut Imported,
    planned: &Planned,
    ordered: &crate::receive_moves::Ordered,
) -> Result<(), EngineError> {
    crate::clone_ops::destroy_set(inner, &ordered.early, false)?;
    // A snapshot the plan names may have gone already: a held forced receive destroys the
    // destination's snapshots after its source when it adopts (`receive_atomic`).
    for (id, name) in &planned.snapshots {
        let index = inner.datasets.node(*id).snapshot(name).map(|(i, _)| i);
        if let Some(index) = index {
            crate::snapshot_ops::destroy_one_snapshot(inner, *id, index)?;
        }
    }
    let Imported {
        pool,
        mos,
        datasets,
        ..
    } = inner;
    let reader = pool.reader();
    for (id, old, new) in &planned.renames {
        let node = datasets.node_mut(*id);
        let Some(index) = node.snapshot(old).map(|(i, _)| i) else {
            continue;
        };
        let head = node.header;
        snapshot::rename(
            mos.objset(),
            &reader,
            &head,
            &mut node.snapshots[index],
            new,
        )?;
    }
    crate::receive_moves::apply(inner, &ordered.moves)?;
    crate::clone_ops::destroy_set(inner, &ordered.late, false)
}

/// The checks at the end of a replication receive, before any change: the plan again
/// (checked again), the held substreams, the moves as planned when the manifest arrived,
/// their order, the limits of it all, and the reads of the adopted heads. Returns the plan,
/// its order, the reads and what the end changes (`limits::Change`).
fn end_checks(
    inner: &Imported,
    spec: &ReceiveSpec,
    sent: &Sent,
    held: &[Held],
) -> Result<End, EngineError> {
    let planned = plan(inner, &spec.target, sent, spec.force)?;
    crate::receive_atomic::check(inner, held, &sent.vacated)?;
    if planned.paths != sent.moves.moves {
        return Err(invalid(
            "the destination's datasets were renamed during the receive",
        ));
    }
    // A dry run holds nothing: the datasets the stream would make are the manifest's.
    let made = match spec.dry_run {
        true => sent.published.clone(),
        false => published(held),
    };
    let ordered = planned.order(inner, &spec.target, &made)?;
    let change = crate::receive_atomic::change(inner, held);
    let change = planned.change(inner, &ordered, change);
    crate::limits::check_change(&inner.datasets, &change)?;
    let reads = crate::receive_atomic::reads(inner, held)?;
    Ok((planned, ordered, reads, change))
}

/// Whether a dataset the manifest `sent` lists goes, by its local name, to a name a move
/// takes a dataset away from (`receive_moves`): a new dataset at a vacated name.
fn takes_vacated(spec: &ReceiveSpec, sent: &Sent) -> bool {
    sent.listings.iter().any(|listing| {
        let name = format!("{}{}", spec.target, sent.local_path(&listing.path));
        sent.vacated(&name)
    })
}

/// What [`end_checks`] found.
type End = (
    Planned,
    crate::receive_moves::Ordered,
    Vec<Option<crate::snapshot_ops::RollbackReads>>,
    crate::limits::Change,
);

/// The names the held new datasets take when they are published (`receive_atomic`).
fn published(held: &[Held]) -> Vec<String> {
    held.iter()
        .filter_map(|h| match &h.into {
            crate::send_ops::Destination::New { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect()
}

impl Engine {
    /// A manifest substream whose BEGIN was read: reads it, and checks the plan against the
    /// destination before any substream is received (a refusal changes nothing).
    pub(crate) fn receive_manifest(
        &self,
        spec: &ReceiveSpec,
        begin: &Begin,
        reader: &mut StreamReader<&mut dyn Read>,
        first: bool,
    ) -> Result<Sent, EngineError> {
        if !first {
            return Err(invalid(
                "invalid stream: a manifest after the stream's first substream",
            ));
        }
        if spec.target.contains('@') {
            return Err(invalid(
                "invalid stream: a replication stream names datasets outside its root",
            ));
        }
        let mut sent = read_manifest(begin, reader)?;
        let _admin = self.admin();
        let handle = self.pool(pool_of(&spec.target))?;
        let mut inner = handle.lock();
        let planned = plan(&inner, &spec.target, &sent, spec.force)?;
        sent.moves.moves = planned.paths.clone();
        // What the stream will publish: each sent dataset not here yet, by its local name.
        let published: Vec<String> = sent
            .listings
            .iter()
            .map(|l| format!("{}{}", spec.target, sent.local_path(&l.path)))
            .filter(|name| inner.datasets.by_name(name).is_none())
            .collect();
        let ordered = planned.order(&inner, &spec.target, &published)?;
        // The moves and destroys alone, before any substream: the end checks them again
        // with what the substreams bring.
        let change = planned.change(&inner, &ordered, crate::limits::Change::default());
        crate::limits::check_change(&inner.datasets, &change)?;
        sent.published = published;
        sent.vacated = crate::receive_moves::vacated(&inner, &planned.moves);
        if spec.resumable && !spec.dry_run && takes_vacated(spec, &sent) {
            // Nothing is held under -s: the moves go first (`receive_moves::apply_early`).
            let moved =
                crate::receive_moves::apply_early(&mut inner, &spec.target, &planned.moves)?;
            let mut command = format!("receive -R -s {}:", spec.target);
            for (old, new) in &moved {
                command.push_str(&format!(" rename {old} {new}"));
            }
            inner.history.push(self.history_record(&command, false));
            inner.sync()?;
            sent.moves = replicate::Prune::default();
            sent.vacated.clear();
            sent.moved_early = moved;
        }
        Ok(sent)
    }

    /// After the last substream: plans again, checks again (with the substreams `held`,
    /// `receive_atomic`) and (unless `-n`) applies it all and commits, in one txg; a refusal
    /// discards what is held. `report` gets what was (or would be) destroyed and renamed.
    pub(crate) fn receive_prune(
        &self,
        spec: &ReceiveSpec,
        sent: &Sent,
        held: &[Held],
        report: &mut ReceiveReport,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let handle = self.pool(pool_of(&spec.target))?;
        let mut inner = handle.lock();
        // A hold or clone made while the substreams came in refuses here, after them.
        let checked = end_checks(&inner, spec, sent, held).and_then(|end| match spec.dry_run {
            true => Ok((end, BTreeMap::new())),
            false => crate::receive_atomic::read_adopted(&mut inner, held)
                .and_then(|()| crate::receive_atomic::read_ahead(&mut inner, &end.3))
                .map(|w| (end, w)),
        });
        let ((planned, ordered, reads, _), walked) = match checked {
            Ok(checked) => checked,
            Err(error) => {
                crate::receive_atomic::discard(&mut inner, held)?;
                // Under -s each substream took its place at its END (none is held).
                let what = match held.len() == report.snapshots.len() {
                    true => "nothing was received, destroyed or renamed",
                    false => "the snapshots received stay; nothing was destroyed or renamed",
                };
                return Err(invalid(format!("{error} ({what})")));
            }
        };
        (report.destroyed, report.renamed) = names(&inner, &planned);
        report
            .renamed
            .splice(0..0, sent.moved_early.iter().cloned());
        if spec.dry_run {
            return Ok(());
        }
        inner.check_writable()?;
        crate::receive_atomic::with_read_ahead(&mut inner, walked, |inner| {
            let after_moves = crate::receive_atomic::apply(inner, held, reads)?;
            apply(inner, &planned, &ordered)?;
            crate::receive_moves::publish_vacated(inner, &after_moves)
        })?;
        for h in held {
            let command = format!("receive {}@{}", h.spec.target, h.snap);
            inner.history.push(self.history_record(&command, false));
        }
        if !report.destroyed.is_empty() || !report.renamed.is_empty() {
            let mut command = format!("receive -R {}:", spec.target);
            for name in &report.destroyed {
                command.push_str(&format!(" destroy {name}"));
            }
            for (old, new) in &report.renamed {
                command.push_str(&format!(" rename {old} {new}"));
            }
            inner.history.push(self.history_record(&command, false));
        }
        inner.sync()?;
        Ok(())
    }

    /// Whether the substream `begin` of a replication stream into `target` was received
    /// already: `target` has its snapshot, by GUID. Such a substream is read (checked) and
    /// skipped, so that the stream received again finishes a `receive -s` it cut (module
    /// doc).
    pub(crate) fn already_received(
        &self,
        target: &str,
        begin: &Begin,
    ) -> Result<bool, EngineError> {
        let handle = self.pool(pool_of(target))?;
        let inner = handle.lock();
        let Some(id) = inner.datasets.by_name(target) else {
            return Ok(false);
        };
        let node = inner.datasets.node(id);
        Ok(node
            .snapshots
            .iter()
            .any(|s| s.header.guid.0 == begin.to_guid))
    }

    /// A cut or refused stream: what is held is discarded.
    pub(crate) fn receive_discard(
        &self,
        spec: &ReceiveSpec,
        held: &[Held],
    ) -> Result<(), EngineError> {
        if held.is_empty() {
            return Ok(());
        }
        let _admin = self.admin();
        let handle = self.pool(pool_of(&spec.target))?;
        let mut inner = handle.lock();
        crate::receive_atomic::discard(&mut inner, held)
    }
}
