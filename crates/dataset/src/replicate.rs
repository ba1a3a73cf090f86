//! What a replication receive (`receive -R`) does beyond its substreams: given the sender's
//! list of the sent tree (the stream's MANIFEST records) and the receiver's copy of that
//! tree, which snapshots and datasets of the copy the sender no longer has (destroyed with
//! `-F`, as OpenZFS's `zfs receive -F` of a replication stream does), which snapshots the
//! sender renamed (renamed here too) and which datasets the sender renamed or moved (moved
//! here too). Pure: names and GUIDs in, a [`Prune`] out; the engine checks holds, clones
//! and the moves' parents and applies it in one txg.
//!
//! # Model
//! ```text
//!  sent:   ""      @a(1) @b(2)            local: ""      @z(9) @a(1) @x(2)
//!          "/kid"  @a(3)                          "/kid"  @a(3)
//!          "/new/m" @a(5)                         "/m"    @a(5)
//!                                                 "/old"  @a(4)
//!  prune:  destroy @z (9 not sent), rename @x -> @b (GUID 2), move "/m" -> "/new/m"
//!          (GUID 5), destroy "/old" (no GUID of it sent, and the sender has no "/old")
//! ```
//! Paths are relative to the tree's root (`""` the root, `"/kid"` a child), so the sender's
//! and the receiver's names of the root need not agree.
//!
//! Rules (OpenZFS's `recv_incremental_replication`, by GUID, never by name). A dataset's
//! GUID differs between pools, so a dataset is known by its snapshots' GUIDs, which a
//! receive keeps:
//! - A local dataset's *twin* is the sent dataset that lists the GUID of the first of its
//!   snapshots the sender lists at all. A local dataset (not the root) whose twin's path
//!   differs from the path it has once its ancestors' moves are applied *moves* there (the
//!   sender renamed it, or moved it under another parent); its descendants go with it.
//! - A local dataset is *matched* when it has a twin, or when the sender has a dataset at
//!   its path once the moves are applied (the stream may write there, or below it: only its
//!   snapshots the sender lacks go), unless a moving dataset takes that path (then the
//!   sender's dataset there is the one that moves). The root is always kept. An unmatched
//!   dataset is destroyed with its descendants, unless a matched dataset ends up below it
//!   (once the moves are applied): then it stays.
//! - In a dataset that stays, a snapshot whose GUID the sender does not list is destroyed;
//!   one whose GUID the sender lists under another name in its twin is renamed to it.
//!   Renames come in an order in which each new name is free when it is taken (after the
//!   destroys); renames that trade names among themselves cannot be ordered so and are
//!   refused ([`PruneError`]), as is a new name that a snapshot that stays keeps.
//! - Two datasets moving to one path, or a dataset moving to a path another keeps, are
//!   refused ([`PruneError::MoveBlocked`]).
//!
//! # Invariants
//! - P1: nothing listed by GUID in `sent` is destroyed (a snapshot whose GUID the sender
//!   has, and every dataset holding one, stays).
//! - P2: every dataset destroyed has all its descendants destroyed too, listed after them
//!   (children first), except those that move away.
//! - P3: applying the moves in order, each as a prefix substitution of paths, takes every
//!   moving dataset to its twin's path; [`Prune::local_path`] undoes them.
//!
//! # Not here
//! Holds, clones, the moves' parents and applying the plan (the engine's `receive_prune`).

use std::collections::{BTreeMap, BTreeSet};

/// One dataset of a tree: its path below the tree's root (`""` or `/a/b`) and its
/// snapshots (GUID, short name), oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Path below the root: `""` for the root, else starting with `/`.
    pub path: String,
    /// (GUID, short name) of each snapshot.
    pub snapshots: Vec<(u64, String)>,
}

/// What the receiver's copy must lose or change to be the sender's tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prune {
    /// Datasets to destroy (paths), children before their parents.
    pub datasets: Vec<String>,
    /// Snapshots to destroy in datasets that stay: (path, short name).
    pub snapshots: Vec<(String, String)>,
    /// Snapshots to rename, in the order to do it: (path, old short name, new short name).
    pub renames: Vec<(String, String, String)>,
    /// Datasets to move, in order (P3): (path before any move, path once the earlier moves
    /// are applied, new path). Every other path in this plan is one before any move.
    pub moves: Vec<(String, String, String)>,
}

impl Prune {
    /// Nothing to do.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.datasets.is_empty()
            && self.snapshots.is_empty()
            && self.renames.is_empty()
            && self.moves.is_empty()
    }

    /// Where the sent dataset at `path` is before the moves (P3): the local path a
    /// substream for it writes to until they are applied.
    #[must_use]
    pub fn local_path(&self, path: &str) -> String {
        let mut path = path.to_string();
        for (_, from, to) in self.moves.iter().rev() {
            if let Some(rest) = strip_path(&path, to) {
                path = format!("{from}{rest}");
            }
        }
        path
    }
}

/// `path` without the prefix `parent` when it is `parent` or below it (`""` or `/...`).
fn strip_path<'a>(path: &'a str, parent: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(parent)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Why the sender's renames cannot be followed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PruneError {
    /// Renames that trade names, or a new name a staying snapshot keeps.
    #[error(
        "snapshot '{path}@{old}' was renamed '{new}' by the sender, and that name is taken \
         here by a snapshot that keeps or swaps its name: rename it first"
    )]
    RenameBlocked {
        /// The dataset's path below the root.
        path: String,
        /// The local name.
        old: String,
        /// The sender's name.
        new: String,
    },
    /// A move onto a path another dataset keeps or also moves to.
    #[error(
        "dataset '{old}' was renamed '{new}' by the sender, and that path is taken here by a \
         dataset that keeps or takes it: rename it first"
    )]
    MoveBlocked {
        /// The local path below the root.
        old: String,
        /// The sender's path.
        new: String,
    },
}

/// The prune of `local` against `sent` (module doc).
pub fn prune(sent: &[Listing], local: &[Listing]) -> Result<Prune, PruneError> {
    // GUID -> (sent path, name); the sent paths.
    let mut by_guid: BTreeMap<u64, (&str, &str)> = BTreeMap::new();
    for listing in sent {
        for (guid, name) in &listing.snapshots {
            by_guid.insert(*guid, (listing.path.as_str(), name.as_str()));
        }
    }
    let sent_paths: BTreeSet<&str> = sent.iter().map(|l| l.path.as_str()).collect();
    let mut out = Prune::default();
    // Each local dataset's path once the moves are applied.
    let now = plan_moves(local, &by_guid, &mut out)?;
    // Paths a dataset moves to (itself or with an ancestor): a dataset there that does not
    // move is not the sender's by its path.
    let moved = |l: &Listing| now[l.path.as_str()] != l.path;
    let claimed: BTreeSet<&str> = local
        .iter()
        .filter(|l| moved(l))
        .map(|l| now[l.path.as_str()].as_str())
        .collect();
    let matched = |l: &Listing| {
        let at = now[l.path.as_str()].as_str();
        l.path.is_empty()
            || twin_of(l, &by_guid).is_some()
            || (sent_paths.contains(at) && (moved(l) || !claimed.contains(at)))
    };
    let kept: Vec<&str> = local
        .iter()
        .filter(|l| matched(l))
        .map(|l| now[l.path.as_str()].as_str())
        .collect();
    let mut doomed: Vec<&str> = Vec::new();
    for l in local {
        // A matched dataset that ends up below it keeps it (P2).
        let at = now[l.path.as_str()].as_str();
        let keeps = kept
            .iter()
            .any(|k| k.len() > at.len() && strip_path(k, at).is_some());
        if !(matched(l) || keeps) {
            doomed.push(&l.path);
            continue;
        }
        prune_snapshots(l, &by_guid, &mut out)?;
    }
    // Two datasets that stay at one path once every move is applied.
    let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
    for l in local.iter().filter(|l| !doomed.contains(&l.path.as_str())) {
        let at = now[l.path.as_str()].as_str();
        if let Some(other) = seen.insert(at, l.path.as_str()) {
            let moved = |p: &str| out.moves.iter().any(|(old, _, _)| old == p);
            let old = if moved(&l.path) {
                l.path.as_str()
            } else {
                other
            };
            return Err(PruneError::MoveBlocked {
                old: old.to_string(),
                new: at.to_string(),
            });
        }
    }
    // Children first: a longer path below another goes before it (P2).
    doomed.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
    out.datasets = doomed.into_iter().map(str::to_string).collect();
    Ok(out)
}

/// The sent path of `l`'s twin (module doc).
fn twin_of<'a>(l: &Listing, by_guid: &BTreeMap<u64, (&'a str, &str)>) -> Option<&'a str> {
    l.snapshots
        .iter()
        .find_map(|(g, _)| by_guid.get(g).map(|(path, _)| *path))
}

/// The moves of `local` (module doc, P3) into `out`; returns each local dataset's path
/// once they are applied (descendants go with a moved dataset).
fn plan_moves<'a>(
    local: &'a [Listing],
    by_guid: &BTreeMap<u64, (&str, &str)>,
    out: &mut Prune,
) -> Result<BTreeMap<&'a str, String>, PruneError> {
    let mut ordered: Vec<&Listing> = local.iter().filter(|l| !l.path.is_empty()).collect();
    ordered.sort_by_key(|l| l.path.matches('/').count());
    let mut now: BTreeMap<&str, String> = local
        .iter()
        .map(|l| (l.path.as_str(), l.path.clone()))
        .collect();
    for l in ordered {
        let Some(twin) = twin_of(l, by_guid).filter(|t| !t.is_empty()) else {
            continue;
        };
        let at = now[l.path.as_str()].clone();
        if at == twin {
            continue;
        }
        if strip_path(twin, &at).is_some() {
            // Under itself: only a sender's tree that lists GUIDs twice can ask it.
            return Err(PruneError::MoveBlocked {
                old: l.path.clone(),
                new: twin.to_string(),
            });
        }
        for path in now.values_mut() {
            if let Some(rest) = strip_path(path, &at) {
                *path = format!("{twin}{rest}");
            }
        }
        out.moves.push((l.path.clone(), at, twin.to_string()));
    }
    Ok(now)
}

/// The destroys and renames of the snapshots of `l`, a dataset that stays.
fn prune_snapshots(
    l: &Listing,
    by_guid: &BTreeMap<u64, (&str, &str)>,
    out: &mut Prune,
) -> Result<(), PruneError> {
    let twin = twin_of(l, by_guid);
    let mut staying: BTreeSet<&str> = BTreeSet::new();
    let mut pending: Vec<(&str, &str)> = Vec::new();
    for (guid, name) in &l.snapshots {
        match by_guid.get(guid) {
            None => out.snapshots.push((l.path.clone(), name.clone())),
            Some((path, new)) if Some(*path) == twin && new != name => pending.push((name, new)),
            Some(_) => {
                staying.insert(name);
            }
        }
    }
    // Each round renames what no other pending rename still needs as its old name.
    while !pending.is_empty() {
        let ready = pending.iter().position(|(_, new)| {
            !staying.contains(new) && !pending.iter().any(|(old, _)| old == new)
        });
        let Some(at) = ready else {
            let (old, new) = pending[0];
            return Err(PruneError::RenameBlocked {
                path: l.path.clone(),
                old: old.to_string(),
                new: new.to_string(),
            });
        };
        let (old, new) = pending.remove(at);
        staying.insert(new);
        out.renames
            .push((l.path.clone(), old.to_string(), new.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(path: &str, snapshots: &[(u64, &str)]) -> Listing {
        Listing {
            path: path.into(),
            snapshots: snapshots.iter().map(|(g, n)| (*g, n.to_string())).collect(),
        }
    }

    fn check(sent: &[Listing], local: &[Listing], expected: &Prune) {
        assert_eq!(&prune(sent, local).unwrap(), expected);
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    // The module doc's example: an old snapshot, a renamed one, a dataset the sender moved
    // under a new parent, a dataset the sender lost.
    #[test]
    fn the_model_example() {
        let sent = [
            listing("", &[(1, "a"), (2, "b")]),
            listing("/kid", &[(3, "a")]),
            listing("/new", &[(6, "a")]),
            listing("/new/m", &[(5, "a")]),
        ];
        let local = [
            listing("", &[(9, "z"), (1, "a"), (2, "x")]),
            listing("/kid", &[(3, "a")]),
            listing("/m", &[(5, "a")]),
            listing("/old", &[(4, "a")]),
            listing("/old/deeper", &[]),
        ];
        let expected = Prune {
            datasets: strings(&["/old/deeper", "/old"]),
            snapshots: vec![("".into(), "z".into())],
            renames: vec![("".into(), "x".into(), "b".into())],
            moves: vec![("/m".into(), "/m".into(), "/new/m".into())],
        };
        check(&sent, &local, &expected);
    }

    // P1: a dataset holding a sent GUID stays, wherever the sender moved it; a dataset at a
    // sent path stays (only the snapshots the sender lacks go); the root stays. A parent the
    // moved one leaves, that holds no sent GUID and is at no sent path, is destroyed.
    #[test]
    fn what_the_sender_has_stays() {
        let sent = [
            listing("", &[(1, "a")]),
            listing("/new", &[(5, "a")]),
            listing("/here", &[(7, "a")]),
        ];
        let local = [
            listing("", &[]),
            listing("/moved", &[]),
            listing("/moved/kid", &[(5, "a"), (6, "mine")]),
            listing("/here", &[(8, "other")]),
        ];
        let expected = Prune {
            datasets: strings(&["/moved"]),
            snapshots: vec![
                ("/moved/kid".into(), "mine".into()),
                ("/here".into(), "other".into()),
            ],
            moves: vec![("/moved/kid".into(), "/moved/kid".into(), "/new".into())],
            ..Prune::default()
        };
        check(&sent, &local, &expected);
        assert!(
            prune(&sent, &sent).unwrap().is_empty(),
            "a copy loses nothing"
        );
    }

    // P3: a renamed parent carries its children (one move), a child moved into another
    // parent moves on its own, after it; `local_path` takes the sent paths back; a move onto
    // a path a dataset keeps is refused, and one onto a path whose dataset goes is not.
    #[test]
    fn moves_follow_the_sender_by_guid() {
        let sent = [
            listing("", &[(1, "a")]),
            listing("/b", &[(5, "a")]),
            listing("/b/c", &[(6, "a")]),
            listing("/x", &[(8, "a")]),
            listing("/x/y", &[(7, "a")]),
        ];
        let local = [
            listing("", &[(1, "a")]),
            listing("/a", &[(5, "a")]),
            listing("/a/c", &[(6, "a")]),
            listing("/x", &[(8, "a")]),
            listing("/a/c/y", &[(7, "a")]),
        ];
        let plan = prune(&sent, &local).unwrap();
        assert_eq!(
            plan.moves,
            vec![
                ("/a".into(), "/a".into(), "/b".into()),
                ("/a/c/y".into(), "/b/c/y".into(), "/x/y".into()),
            ]
        );
        assert!(plan.datasets.is_empty() && plan.snapshots.is_empty());
        assert_eq!(plan.local_path("/b/c"), "/a/c");
        assert_eq!(plan.local_path("/x/y"), "/a/c/y");
        assert_eq!(plan.local_path("/b/new"), "/a/new");
        assert_eq!(plan.local_path("/x"), "/x");
        assert_eq!(plan.local_path("/bb"), "/bb");

        // A dataset with none of the sender's GUIDs at the path one moves to is not the
        // sender's "/b" (the sender's is the one that moves): it goes (with -F).
        let sent_b = [
            listing("", &[(1, "a")]),
            listing("/b", &[(5, "a"), (55, "b")]),
        ];
        let gone = [
            listing("", &[(1, "a")]),
            listing("/a", &[(5, "a")]),
            listing("/b", &[(99, "mine")]),
        ];
        let plan = prune(&sent_b, &gone).unwrap();
        assert_eq!(plan.datasets, strings(&["/b"]));
        assert_eq!(plan.moves, vec![("/a".into(), "/a".into(), "/b".into())]);
        // Two datasets the sender's "/b" GUIDs both name cannot both become it.
        let twice = [
            listing("", &[(1, "a")]),
            listing("/a", &[(5, "a")]),
            listing("/c", &[(55, "b")]),
        ];
        let error = prune(&sent_b, &twice).unwrap_err();
        assert!(matches!(error, PruneError::MoveBlocked { .. }), "{error}");
    }

    // Renames that chain are ordered; renames that swap, or onto a name that stays, are
    // refused; a GUID the sender lists in another dataset is not renamed here.
    #[test]
    fn renames_are_ordered_or_refused() {
        let sent = [listing("", &[(1, "b"), (2, "c")])];
        let local = [listing("", &[(1, "a"), (2, "b")])];
        let expected = Prune {
            renames: vec![
                ("".into(), "b".into(), "c".into()),
                ("".into(), "a".into(), "b".into()),
            ],
            ..Prune::default()
        };
        check(&sent, &local, &expected);

        let swapped = [listing("", &[(1, "b"), (2, "a")])];
        let error = prune(&swapped, &local).unwrap_err();
        assert!(matches!(error, PruneError::RenameBlocked { .. }), "{error}");

        // GUID 2 not sent: destroyed first, then its name is free.
        let root_only = [listing("", &[(1, "b"), (7, "keep")])];
        let expected = Prune {
            snapshots: vec![("".into(), "b".into())],
            renames: vec![("".into(), "a".into(), "b".into())],
            ..Prune::default()
        };
        check(&root_only, &local, &expected);
        // GUID 2 sent in another dataset: it stays here as `b`, so `a` cannot become `b`.
        let onto_staying = [root_only[0].clone(), listing("/k", &[(2, "b")])];
        let error = prune(&onto_staying, &local).unwrap_err();
        assert!(matches!(error, PruneError::RenameBlocked { .. }), "{error}");
    }
}
