//! `filesystem_limit` and `snapshot_limit` of a change to the tree made as a whole (a
//! receive's end: what `-F` destroys, the datasets it moves, the datasets and snapshots it
//! brings, in one txg), counted as ZFS counts them when it makes the same change one step at
//! a time, removals first. Pure: the tree before and after, by name, in; the first limit
//! passed out. The engine builds both trees and decides when to ask.
//!
//! # Model
//! ```text
//!  before:  tank/p (snapshot_limit=3)  @a @b @c         after:  tank/p  @a @new
//!           tank/p/k                                            tank/p/k  @k1 (moved in)
//!  tank/p: 2 snapshots after (not past 3 on its own) + 1 moved in = 3: fits; one more
//!  moved in would be 4 > 3 and adds, so it is refused.
//! ```
//! A dataset is known by a `key` that stays the same across the change (its id); its name
//! may differ (a move). A dataset's subtree is itself and every dataset whose name is below
//! its name in the same state.
//!
//! # Rules (OpenZFS's `dsl_fs_ss_limit_check`, with the removals done first)
//! - For each dataset L with a limit that is there before and after: its count after is
//!   counted in the after tree (`filesystem_count`: datasets strictly below it;
//!   `snapshot_count`: snapshots in its subtree). What the change *adds* under L is what
//!   is below L after and was not before: every dataset not below L before (new, or moved
//!   in), every snapshot of such a dataset, and the snapshots a dataset below L on both
//!   sides gains (`Counted::added`).
//! - L refuses the change when it adds under L and the count after is past the limit.
//!   A change that adds nothing under L never fails on L (ZFS checks only additions, and a
//!   limit set below the current count refuses only what would add more); removals under
//!   L are subtracted before the additions are checked, as when ZFS destroys first.
//! - A dataset that is new has no limit to check (its limit, if the stream sets one, is set
//!   with the dataset).
//!
//! # Invariants
//! - L1: a change whose after tree equals the before tree (no additions) is never refused.
//! - L2: the answer does not depend on the order of either list.
//!
//! # Failure model
//! Inputs are the engine's in-memory tree: nothing here reads the disk or can fail but by
//! refusing ([`Exceeded`]).

use std::collections::{BTreeMap, BTreeSet};

/// One dataset as counted, in one state of the tree.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    /// The dataset's identity, the same before and after (a new one's is its own).
    pub key: u64,
    /// Its full name in this state.
    pub name: String,
    /// Its snapshots in this state.
    pub snapshots: u64,
    /// How many of `snapshots` the change brings (0 in the before tree).
    pub added: u64,
    /// Its `filesystem_limit`, if set.
    pub filesystem_limit: Option<u64>,
    /// Its `snapshot_limit`, if set.
    pub snapshot_limit: Option<u64>,
}

/// The first limit a change passes.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} limit exceeded ({kind}_limit={limit} on '{name}')")]
pub struct Exceeded {
    /// `filesystem` or `snapshot`.
    pub kind: &'static str,
    /// The limit.
    pub limit: u64,
    /// The limited dataset's name before the change.
    pub name: String,
}

/// Whether full name `name` is `parent` or below it.
fn within(name: &str, parent: &str) -> bool {
    name.strip_prefix(parent)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// The keys of the subtree of the dataset named `root` in `tree` (itself included).
fn subtree(tree: &[Counted], root: &str) -> BTreeSet<u64> {
    tree.iter()
        .filter(|c| within(&c.name, root))
        .map(|c| c.key)
        .collect()
}

/// Refuses the change from `before` to `after` when it passes a limit (module doc).
pub fn check(before: &[Counted], after: &[Counted]) -> Result<(), Exceeded> {
    let now: BTreeMap<u64, &Counted> = after.iter().map(|c| (c.key, c)).collect();
    let mut limited: Vec<&Counted> = before
        .iter()
        .filter(|c| c.filesystem_limit.is_some() || c.snapshot_limit.is_some())
        .filter(|c| now.contains_key(&c.key))
        .collect();
    // Shallowest first, then by name: the same answer for any order of the lists (L2).
    limited.sort_by(|a, b| {
        let depth = |c: &Counted| c.name.matches('/').count();
        depth(a).cmp(&depth(b)).then_with(|| a.name.cmp(&b.name))
    });
    for old in limited {
        let was = subtree(before, &old.name);
        let members: Vec<&Counted> = after
            .iter()
            .filter(|c| within(&c.name, &now[&old.key].name))
            .collect();
        let moved_in = |c: &&&Counted| !was.contains(&c.key);
        if let Some(limit) = old.filesystem_limit {
            let count = members.len() as u64 - 1;
            let adds = members.iter().filter(moved_in).count();
            if adds > 0 && count > limit {
                return Err(exceeded("filesystem", limit, old));
            }
        }
        if let Some(limit) = old.snapshot_limit {
            let count: u64 = members.iter().map(|c| c.snapshots).sum();
            let adds: u64 = members
                .iter()
                .map(|c| match was.contains(&c.key) {
                    true => c.added,
                    false => c.snapshots,
                })
                .sum();
            if adds > 0 && count > limit {
                return Err(exceeded("snapshot", limit, old));
            }
        }
    }
    Ok(())
}

fn exceeded(kind: &'static str, limit: u64, at: &Counted) -> Exceeded {
    Exceeded {
        kind,
        limit,
        name: at.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(key: u64, name: &str, snapshots: u64, added: u64) -> Counted {
        Counted {
            key,
            name: name.into(),
            snapshots,
            added,
            ..Counted::default()
        }
    }

    fn limited(mut c: Counted, filesystems: Option<u64>, snapshots: Option<u64>) -> Counted {
        c.filesystem_limit = filesystems;
        c.snapshot_limit = snapshots;
        c
    }

    fn check_both_orders(before: &[Counted], after: &[Counted]) -> Result<(), Exceeded> {
        let mut reversed_before = before.to_vec();
        reversed_before.reverse();
        let mut reversed_after = after.to_vec();
        reversed_after.reverse();
        let answer = check(before, after);
        assert_eq!(answer, check(&reversed_before, &reversed_after), "L2");
        answer
    }

    // The module doc's example: destroys make room for what comes; one more is refused.
    #[test]
    fn removals_come_before_additions() {
        let p = limited(ds(1, "tank/p", 3, 0), None, Some(3));
        let before = [ds(0, "tank", 0, 0), p.clone(), ds(2, "tank/k", 1, 0)];
        let after = [
            ds(0, "tank", 0, 0),
            limited(ds(1, "tank/p", 2, 1), None, Some(3)),
            ds(2, "tank/p/k", 1, 0),
        ];
        assert_eq!(check_both_orders(&before, &after), Ok(()));
        let mut more = after.to_vec();
        more[1].snapshots = 3;
        more[1].added = 2;
        let error = check_both_orders(&before, &more).unwrap_err();
        assert_eq!(
            error.to_string(),
            "snapshot limit exceeded (snapshot_limit=3 on 'tank/p')"
        );
        // Unchanged at the limit: nothing added, nothing refused (L1), even past it.
        assert_eq!(check_both_orders(&before, &before), Ok(()));
        let mut over = before.to_vec();
        over[1].snapshot_limit = Some(1);
        assert_eq!(check_both_orders(&over, &over), Ok(()));
    }

    // A move in counts the moved subtree for the new ancestors only; a move within the
    // limited subtree adds nothing there; a move out frees room for a new dataset.
    #[test]
    fn moves_count_where_they_land() {
        let before = [
            ds(0, "tank", 0, 0),
            limited(ds(1, "tank/p", 0, 0), Some(1), None),
            ds(2, "tank/p/a", 0, 0),
            ds(3, "tank/k", 2, 0),
            ds(4, "tank/k/c", 0, 0),
        ];
        let moved_in = [
            before[0].clone(),
            before[1].clone(),
            before[2].clone(),
            ds(3, "tank/p/k", 2, 0),
            ds(4, "tank/p/k/c", 0, 0),
        ];
        let error = check_both_orders(&before, &moved_in).unwrap_err();
        assert_eq!(
            error.to_string(),
            "filesystem limit exceeded (filesystem_limit=1 on 'tank/p')"
        );
        // Within p: a rename of a, no addition.
        let within_p = [
            before[0].clone(),
            before[1].clone(),
            ds(2, "tank/p/b", 0, 0),
            before[3].clone(),
            before[4].clone(),
        ];
        assert_eq!(check_both_orders(&before, &within_p), Ok(()));
        // a moves out, a new dataset takes its place: 1 of 1.
        let swapped = [
            before[0].clone(),
            before[1].clone(),
            ds(2, "tank/a", 0, 0),
            ds(9, "tank/p/new", 1, 1),
            before[3].clone(),
            before[4].clone(),
        ];
        assert_eq!(check_both_orders(&before, &swapped), Ok(()));
        // Snapshots move with their datasets.
        let mut snap_limited = before.to_vec();
        snap_limited[1] = limited(ds(1, "tank/p", 0, 0), None, Some(1));
        let mut moved = moved_in.to_vec();
        moved[1] = snap_limited[1].clone();
        let error = check_both_orders(&snap_limited, &moved).unwrap_err();
        assert_eq!(error.kind, "snapshot");
    }

    // A destroyed limited dataset, and a new dataset's own limit, are not checked.
    #[test]
    fn only_limits_there_before_and_after_bind() {
        let before = [
            ds(0, "tank", 0, 0),
            limited(ds(1, "tank/gone", 5, 0), Some(0), Some(0)),
        ];
        let after = [
            ds(0, "tank", 0, 0),
            limited(ds(2, "tank/gone", 1, 1), Some(0), Some(0)),
            ds(3, "tank/gone/x", 1, 1),
        ];
        assert_eq!(check_both_orders(&before, &after), Ok(()));
    }
}
