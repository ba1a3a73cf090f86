//! What a replication receive (`receive -R`) does beyond its substreams: given the sender's
//! list of the sent tree (the stream's MANIFEST records) and the receiver's copy of that
//! tree, which snapshots and datasets of the copy the sender no longer has (destroyed with
//! `-F`, as OpenZFS's `zfs receive -F` of a replication stream does) and which snapshots the
//! sender renamed (renamed here too). Pure: names and GUIDs in, a [`Prune`] out; the
//! engine checks holds and clones and applies it in one txg.
//!
//! # Model
//! ```text
//!  sent:   ""      @a(1) @b(2)            local: ""      @z(9) @a(1) @x(2)
//!          "/kid"  @a(3)                          "/kid"  @a(3)
//!                                                 "/old"  @a(4)
//!  prune:  destroy @z (9 not sent), rename @x -> @b (GUID 2), destroy "/old" (no GUID of it
//!          sent, and the sender has no "/old" to receive into it)
//! ```
//! Paths are relative to the tree's root (`""` the root, `"/kid"` a child), so the sender's
//! and the receiver's names of the root need not agree.
//!
//! Rules (OpenZFS's `recv_incremental_replication`, by GUID, never by name):
//! - A local dataset is *matched* when one of its snapshots' GUIDs is anywhere in the sent
//!   list, or when the sender has a dataset at its path (the stream may write there, or
//!   below it: only its snapshots the sender lacks go). The root is always kept. An
//!   unmatched dataset is destroyed with its descendants, unless a descendant is matched:
//!   then it stays (the sender moved that descendant; tarn does not rename datasets, see
//!   Not here).
//! - In a dataset that stays, a snapshot whose GUID the sender does not list is destroyed;
//!   one whose GUID the sender lists under another name in the dataset the local one
//!   matched is renamed to it. Renames come in an order in which each new name is free
//!   when it is taken (after the destroys); renames that trade names among themselves
//!   cannot be ordered so and are refused ([`PruneError`]), as is a new name that a
//!   snapshot that stays keeps.
//!
//! # Invariants
//! - P1: nothing listed by GUID in `sent` is destroyed (a snapshot whose GUID the sender
//!   has, and every dataset holding one, stays).
//! - P2: every dataset destroyed has all its descendants destroyed too, listed after them
//!   (children first).
//!
//! # Not here
//! Renaming or moving datasets the sender renamed (OpenZFS does; here their copy stays
//! under its old name, and the stream's substream for the new name needs a dataset there);
//! holds, clones and applying the plan (the engine's `receive_prune`).

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
}

impl Prune {
    /// Nothing to do.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.datasets.is_empty() && self.snapshots.is_empty() && self.renames.is_empty()
    }
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
    let matched = |l: &Listing| {
        l.path.is_empty()
            || l.snapshots.iter().any(|(g, _)| by_guid.contains_key(g))
            || sent_paths.contains(l.path.as_str())
    };
    let matched_paths: Vec<&str> = local
        .iter()
        .filter(|l| matched(l))
        .map(|l| l.path.as_str())
        .collect();
    let below = |child: &str, parent: &str| {
        child.len() > parent.len()
            && child.starts_with(parent)
            && child.as_bytes()[parent.len()] == b'/'
    };
    let mut out = Prune::default();
    let mut doomed: Vec<&str> = Vec::new();
    for l in local {
        let stays = matched(l) || matched_paths.iter().any(|m| below(m, &l.path));
        if !stays {
            doomed.push(&l.path);
            continue;
        }
        prune_snapshots(l, &by_guid, &mut out)?;
    }
    // Children first: a longer path below another goes before it (P2).
    doomed.sort_by_key(|p| std::cmp::Reverse(p.matches('/').count()));
    out.datasets = doomed.into_iter().map(str::to_string).collect();
    Ok(out)
}

/// The destroys and renames of the snapshots of `l`, a dataset that stays.
fn prune_snapshots(
    l: &Listing,
    by_guid: &BTreeMap<u64, (&str, &str)>,
    out: &mut Prune,
) -> Result<(), PruneError> {
    // The sent dataset `l` matched: that of its first snapshot the sender lists.
    let twin = l
        .snapshots
        .iter()
        .find_map(|(g, _)| by_guid.get(g).map(|(path, _)| *path));
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

    // The module doc's example: an old snapshot, a renamed one, a dataset the sender lost.
    #[test]
    fn the_model_example() {
        let sent = [
            listing("", &[(1, "a"), (2, "b")]),
            listing("/kid", &[(3, "a")]),
        ];
        let local = [
            listing("", &[(9, "z"), (1, "a"), (2, "x")]),
            listing("/kid", &[(3, "a")]),
            listing("/old", &[(4, "a")]),
            listing("/old/deeper", &[]),
        ];
        let expected = Prune {
            datasets: strings(&["/old/deeper", "/old"]),
            snapshots: vec![("".into(), "z".into())],
            renames: vec![("".into(), "x".into(), "b".into())],
        };
        check(&sent, &local, &expected);
    }

    // P1: a dataset holding a sent GUID stays, whatever its path (the sender moved it),
    // and so does its parent; a dataset at a sent path stays (only the snapshots the sender
    // lacks go); the root stays.
    #[test]
    fn what_the_sender_has_stays() {
        let sent = [listing("", &[(1, "a")]), listing("/new", &[(5, "a")])];
        let local = [
            listing("", &[]),
            listing("/moved", &[]),
            listing("/moved/kid", &[(5, "a"), (6, "mine")]),
            listing("/new", &[(8, "other")]),
        ];
        let expected = Prune {
            snapshots: vec![
                ("/moved/kid".into(), "mine".into()),
                ("/new".into(), "other".into()),
            ],
            ..Prune::default()
        };
        check(&sent, &local, &expected);
        assert!(
            prune(&sent, &sent).unwrap().is_empty(),
            "a copy loses nothing"
        );
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
