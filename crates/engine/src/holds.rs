//! User holds on snapshots (`tarn hold`, `release`, `holds`; ZFS's `dsl_userhold`): a held
//! snapshot cannot be destroyed, `destroy -d` marks it to go when its last hold is released.
//! Holds and the mark live in the snapshot's property ZAP under keys no user property can
//! take (`tarn_dataset::snapshot`, docs/FORMAT.md 20.1). Each verb checks every name first,
//! changes nothing when it refuses, and commits in one txg.

use tarn_dataset::snapshot;

use crate::dataset_ops::invalid;
use crate::snapshot_ops::destroy_one_snapshot;
use crate::{DatasetId, Engine, EngineError, Imported};

/// One row of `tarn holds`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldRow {
    /// Full snapshot name.
    pub name: String,
    /// The hold's tag.
    pub tag: String,
    /// Unix seconds the hold was placed.
    pub time: u64,
    /// The same for humans, as `zfs holds` shows it (`Tue Nov 14 22:13 2023`, UTC).
    pub when: String,
}

/// C's `ctime` without the seconds (`%a %b %e %H:%M %Y`, the `TIMESTAMP` of `zfs holds`).
fn hold_time(unix: u64) -> String {
    let full = crate::scrub::ctime(unix);
    match (full.get(..16), full.get(19..)) {
        (Some(head), Some(tail)) => format!("{head}{tail}"),
        _ => full,
    }
}

/// The snapshots `names` select (with `recursive`, the same snapshot of every descendant
/// that has one), as (dataset, snapshot name, full name): all in `pool`, each existing.
fn targets(
    inner: &Imported,
    pool: &str,
    names: &[String],
    recursive: bool,
) -> Result<Vec<(DatasetId, String, String)>, EngineError> {
    let mut out: Vec<(DatasetId, String, String)> = Vec::new();
    for full in names {
        let (dataset, snap) = snapshot::split_name(full)?;
        if dataset.split('/').next() != Some(pool) {
            return Err(invalid("snapshots must be in the same pool"));
        }
        let id = inner.datasets.lookup(dataset)?;
        if inner.datasets.node(id).snapshot(snap).is_none() {
            return Err(EngineError::NoSuchDataset);
        }
        let ids = inner.datasets.selected(id, recursive);
        for at in ids {
            let node = inner.datasets.node(at);
            let full = format!("{}@{snap}", node.name);
            if node.snapshot(snap).is_some() && !out.iter().any(|(_, _, f)| *f == full) {
                out.push((at, snap.to_string(), full));
            }
        }
    }
    Ok(out)
}

/// Refuses, naming the first snapshot's problem, unless every target has hold `tag`
/// (`held`, for a release) or none has it (for a hold).
fn check_tag(
    inner: &Imported,
    targets: &[(DatasetId, String, String)],
    tag: &str,
    held: bool,
) -> Result<(), EngineError> {
    for (id, snap, _) in targets {
        let (_, found) = inner.datasets.node(*id).snapshot(snap).expect("checked");
        match (found.holds.contains_key(tag), held) {
            (true, false) => return Err(invalid("tag already exists on this dataset")),
            (false, true) => return Err(invalid("no such tag on this dataset")),
            _ => {}
        }
    }
    Ok(())
}

fn pool_of(names: &[String]) -> Result<&str, EngineError> {
    let first = names
        .first()
        .ok_or_else(|| invalid("missing snapshot name"))?;
    Ok(first.split(['/', '@']).next().unwrap_or(first))
}

impl Engine {
    /// `tarn hold [-r] TAG SNAP...`: every named snapshot (with `-r` every descendant's of
    /// the same name) gets hold `tag`, all in one txg; refused when one has it already.
    pub fn hold(
        &self,
        tag: &str,
        names: &[String],
        recursive: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        snapshot::validate_hold_tag(tag)?;
        let _admin = self.admin();
        let handle = self.pool(pool_of(names)?)?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let targets = targets(&inner, &handle.name, names, recursive)?;
        check_tag(&inner, &targets, tag, false)?;
        let now = self.clock.now_unix_secs();
        let Imported {
            pool,
            mos,
            datasets,
            ..
        } = &mut *inner;
        let reader = pool.reader();
        for (id, snap, _) in &targets {
            let node = datasets.node_mut(*id);
            let (index, _) = node.snapshot(snap).expect("checked");
            snapshot::hold(mos.objset(), &reader, &mut node.snapshots[index], tag, now)?;
        }
        self.commit_holds(&mut inner, command)
    }

    /// `tarn release [-r] TAG SNAP...`: removes hold `tag` from every named snapshot (all
    /// must have it); one marked by `destroy -d` whose last hold this was is destroyed in
    /// the same txg.
    pub fn release(
        &self,
        tag: &str,
        names: &[String],
        recursive: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        snapshot::validate_hold_tag(tag)?;
        let _admin = self.admin();
        let handle = self.pool(pool_of(names)?)?;
        let mut inner = handle.lock();
        inner.check_writable()?;
        let targets = targets(&inner, &handle.name, names, recursive)?;
        check_tag(&inner, &targets, tag, true)?;
        let mut doomed = Vec::new();
        {
            let Imported {
                pool,
                mos,
                datasets,
                ..
            } = &mut *inner;
            let reader = pool.reader();
            for (id, snap, _) in &targets {
                let node = datasets.node_mut(*id);
                let (index, _) = node.snapshot(snap).expect("checked");
                let held = &mut node.snapshots[index];
                snapshot::release(mos.objset(), &reader, held, tag)?;
                if held.holds.is_empty() && held.defer_destroy {
                    doomed.push((*id, snap.clone()));
                }
            }
        }
        for (id, snap) in doomed {
            let (index, found) = inner.datasets.node(id).snapshot(&snap).expect("checked");
            // A deferred destroy also waits for the snapshot's last clone (as in ZFS).
            if crate::clone_ops::clones_of(&inner.datasets, found.id).is_empty() {
                destroy_one_snapshot(&mut inner, id, index)?;
            }
        }
        self.commit_holds(&mut inner, command)
    }

    /// `tarn holds [-r] SNAP...`: the holds of every named snapshot (with `-r` every
    /// descendant's of the same name), by snapshot in the order named, then by tag.
    pub fn holds(&self, names: &[String], recursive: bool) -> Result<Vec<HoldRow>, EngineError> {
        let handle = self.pool(pool_of(names)?)?;
        let inner = handle.lock_open();
        let mut rows = Vec::new();
        for (id, snap, full) in targets(&inner, &handle.name, names, recursive)? {
            let (_, found) = inner.datasets.node(id).snapshot(&snap).expect("checked");
            for (tag, time) in &found.holds {
                rows.push(HoldRow {
                    name: full.clone(),
                    tag: tag.clone(),
                    time: *time,
                    when: hold_time(*time),
                });
            }
        }
        Ok(rows)
    }

    fn commit_holds(&self, inner: &mut Imported, command: &str) -> Result<(), EngineError> {
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_times_drop_the_seconds() {
        assert_eq!(hold_time(1_700_000_000), "Tue Nov 14 22:13 2023");
        assert_eq!(hold_time(0), "Thu Jan  1 00:00 1970");
    }
}
