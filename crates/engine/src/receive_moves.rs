//! Datasets a replication receive (`receive -R`) moves because the sender renamed or moved
//! them (found by snapshot GUIDs: tarn-dataset `replicate::prune`, its `moves`). Thin: the
//! plan is tarn-dataset's; here the order is found and checked on names before anything
//! changes, and the moves are applied in the prune's txg (`receive_prune`).
//!
//! ```text
//!  until the stream ends: substreams of a moved dataset go to its local (old) name
//!                         (`Prune::local_path`); nothing is moved yet
//!  at the end, checked first on names, then in one txg:
//!      destroy the doomed datasets no moving dataset is below
//!      move, in rounds: each when its new name is free and its new parent is there
//!      destroy the doomed datasets the moves emptied
//! ```
//!
//! Failure model: every check runs on a copy of the names (the tree's, and the names the
//! held new datasets take when published) before the first change: a move whose new name
//! stays taken or whose new parent never appears refuses the receive in one line, with
//! nothing changed. The moves are counted against `filesystem_limit` and `snapshot_limit`
//! with the rest of the receive's end (`limits::check_change`): a move into a parent whose
//! limit it passes refuses the receive in one line, checked when the manifest arrives (the
//! moves and destroys alone) and again at the end (with what the substreams bring).
//!
//! A name a move vacates may be taken by a new dataset of the same stream (the sender
//! renamed `k` to `k2`, then made a new `k`): the new one is received beside the old, in a
//! hidden dataset of its own name ([`vacated_hidden_name`]: the moved dataset's substream
//! has `PARENT/%k`), and placed after the moves ([`publish_vacated`]), its later snapshots
//! and the datasets below it with it (they are held on top of it and below it:
//! `receive_atomic`: nothing held is placed before the stream's end). Under `receive -s`
//! nothing is held and each substream is placed at its END, so there a stream with a new
//! dataset at a vacated name has its moves applied when its manifest arrives, before any
//! substream ([`apply_early`], in their own txg, as OpenZFS renames before it receives),
//! and the new dataset is received at its name like any other (its partial state, if cut,
//! is the ordinary hidden dataset of a full receive, which `send -t` resumes); the
//! moved datasets' substreams go to their new names. A cut then leaves the moves made, as
//! it leaves the substreams before it; the stream received again finds nothing to move and
//! skips what is there. The moves are ordered without the destroys of `-F` (which come at
//! the end) and without the new datasets: one that needs either refuses the stream in one
//! line before any change.
//!
//! Why not hold the new dataset in `%%LEAF` under `-s` too, with its token: a cut would
//! then have to keep held hidden datasets (completed ones have no token, and the next
//! import destroys a token-less hidden dataset), `send -t` and `receive -A` would have to
//! find `%%` names, and the stream received again would have to take a hidden dataset an
//! earlier receive left into its held list and skip the snapshots on it: three states
//! that outlive a receive, where the early moves need none.

use std::collections::BTreeSet;

use tarn_dataset::name as dsname;

use crate::dataset_ops::invalid;
use crate::{DatasetId, EngineError, Imported};

/// The moves of a checked plan, in the order to apply them, and the doomed datasets split
/// around them.
pub(crate) struct Ordered {
    /// Doomed datasets destroyed before the moves (no moving dataset below them).
    pub(crate) early: BTreeSet<DatasetId>,
    /// (dataset, new full name), in order.
    pub(crate) moves: Vec<(DatasetId, String)>,
    /// Doomed datasets destroyed after the moves.
    pub(crate) late: BTreeSet<DatasetId>,
}

/// Whether full name `name` is `parent` or below it.
fn below(name: &str, parent: &str) -> bool {
    name.strip_prefix(parent)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Orders `moves` (dataset, new full name) of the tree under `root` with `doomed` to destroy
/// and `published` (names the held new datasets take before the moves), checking each step
/// on names; a move that cannot be made refuses (module doc).
pub(crate) fn order(
    inner: &Imported,
    root: DatasetId,
    moves: &[(DatasetId, String)],
    doomed: &BTreeSet<DatasetId>,
    published: &[String],
) -> Result<Ordered, EngineError> {
    let tree = &inner.datasets;
    let name = |id: DatasetId| tree.node(id).name.clone();
    let moving: Vec<String> = moves.iter().map(|(id, _)| name(*id)).collect();
    let (early, late): (BTreeSet<DatasetId>, BTreeSet<DatasetId>) = doomed
        .iter()
        .partition(|id| !moving.iter().any(|m| below(m, &name(**id))));
    // Every name once the early destroys and the publishing are done; the moving ones by
    // their index in `moves`.
    let mut names: Vec<String> = tree
        .subtree(root)
        .into_iter()
        .filter(|(id, _)| !early.contains(id))
        .map(|(id, _)| name(id))
        .collect();
    names.extend(published.iter().cloned());
    let mut current = moving;
    let mut pending: Vec<usize> = (0..moves.len()).collect();
    let mut ordered = Vec::new();
    while !pending.is_empty() {
        let ready = pending.iter().position(|&i| {
            let new = &moves[i].1;
            let parent = dsname::parent_name(new).unwrap_or(new);
            !names.contains(new) && names.iter().any(|n| n == parent)
        });
        let Some(at) = ready else {
            let i = pending[0];
            return Err(invalid(format!(
                "cannot follow the sender: dataset '{}' was renamed '{}' by the sender, and \
                 that name is taken here or its parent is missing: rename it first",
                current[i], moves[i].1
            )));
        };
        let i = pending.remove(at);
        let (old, new) = (current[i].clone(), moves[i].1.clone());
        for n in names.iter_mut().chain(current.iter_mut()) {
            if below(n, &old) {
                *n = format!("{new}{}", &n[old.len()..]);
            }
        }
        ordered.push(moves[i].clone());
    }
    Ok(Ordered {
        early,
        moves: ordered,
        late,
    })
}

/// Applies checked moves in order (open context; the caller commits).
pub(crate) fn apply(
    inner: &mut Imported,
    moves: &[(DatasetId, String)],
) -> Result<(), EngineError> {
    for (id, new) in moves {
        let parent_name = dsname::parent_name(new).unwrap_or(new);
        let parent = inner
            .datasets
            .by_name(parent_name)
            .expect("checked: a move's new parent is there");
        assert!(
            inner.datasets.by_name(new).is_none(),
            "checked: a move's new name is free"
        );
        crate::dataset_ops::move_dataset(inner, *id, parent, new)?;
    }
    Ok(())
}

/// Under `receive -s`, when a new dataset of the stream goes to a name a move vacates: the
/// `moves` of the manifest's plan for `target` applied now, before any substream,
/// in an order found without the destroys and the new datasets (which come later), and
/// within the limits (module doc); the caller commits. Returns them (old, new full names).
/// A move that cannot be made now refuses the stream in one line, with nothing changed.
pub(crate) fn apply_early(
    inner: &mut Imported,
    target: &str,
    moves: &[(DatasetId, String)],
) -> Result<Vec<(String, String)>, EngineError> {
    let root = inner
        .datasets
        .by_name(target)
        .expect("a move is of a dataset of the destination's tree");
    let ordered = order(inner, root, moves, &BTreeSet::new(), &[]).map_err(|error| {
        invalid(format!(
            "{error} (under -s a stream that makes a dataset at a name a move vacates is \
             received with its moves first)"
        ))
    })?;
    let change = crate::limits::Change {
        moves: ordered.moves.clone(),
        ..crate::limits::Change::default()
    };
    crate::limits::check_change(&inner.datasets, &change)?;
    inner.check_writable()?;
    let name = |inner: &Imported, id: DatasetId| inner.datasets.node(id).name.clone();
    let moved = ordered
        .moves
        .iter()
        .map(|(id, new)| (name(inner, *id), new.clone()))
        .collect();
    apply(inner, &ordered.moves)?;
    Ok(moved)
}

/// The full names `moves` take datasets away from, which no move takes: where a new
/// dataset of the stream may go (module doc).
pub(crate) fn vacated(inner: &Imported, moves: &[(DatasetId, String)]) -> Vec<String> {
    let old = moves
        .iter()
        .map(|(id, _)| inner.datasets.node(*id).name.clone());
    old.filter(|name| !moves.iter().any(|(_, new)| new == name))
        .collect()
}

/// The hidden dataset a new dataset at a vacated name is received into: not the hidden
/// name of the moved dataset's own substream (`send_ops::hidden_name`), which it takes too.
pub(crate) fn vacated_hidden_name(target: &str) -> String {
    match target.rsplit_once('/') {
        Some((parent, leaf)) => format!("{parent}/%%{leaf}"),
        None => format!("{target}/%%"),
    }
}

/// After the moves (open context; the caller commits): the new datasets at vacated names
/// take them, from `receive_atomic::apply`: (hidden dataset, parent, name).
pub(crate) fn publish_vacated(
    inner: &mut Imported,
    after_moves: &[(DatasetId, DatasetId, String)],
) -> Result<(), EngineError> {
    for (id, parent, name) in after_moves {
        assert!(
            inner.datasets.by_name(name).is_none(),
            "checked: a vacated name is free after the moves"
        );
        crate::send_ops::publish(inner, *id, *parent, name)?;
    }
    Ok(())
}
