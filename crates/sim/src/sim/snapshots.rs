//! Snapshots in the workload (`--snapshots`, or a seed's own draw): take one (a quarter of
//! them with `-r`), destroy one (`-R` when it has clones: they go too, and theirs), or roll
//! a dataset back to one of its snapshots (`-r`), or (one operation in four) clone a
//! snapshot into a new top-level dataset (half the time a clone's own snapshot when there
//! is one: nested clones) or promote a clone, each committing a txg. The dataset operations
//! destroy with `-R` when a clone depends on the dataset (and sometimes anyway). Rolling
//! back past an origin, which the engine refuses, is not drawn; the model keeps every
//! clone's origin (`Model::destroy_dependents` is what `-R` takes). The
//! model keeps every snapshot's filesystem and, for the root dataset, its objects; the
//! checkers compare the snapshot list with the engine's and, within budget, every object
//! of every root snapshot with what it held when it was taken, and the pool checker
//! (`check::verify_pool`, after every commit) checks the dead lists, sharing and that
//! space closes.

use tarn_base::ObjectId;
use tarn_engine::{DatasetQuery, check};

use super::{CHECK_CHUNK, Flow, POOL, Sim, Step};

/// Most snapshots of one dataset: beyond it the operation destroys one instead.
const SNAPSHOTS_PER_DATASET_MAX: usize = 4;

fn full_name(dataset: &str) -> String {
    if dataset.is_empty() {
        POOL.to_string()
    } else {
        format!("{POOL}/{dataset}")
    }
}

impl Sim {
    /// One snapshot operation (module doc).
    pub(super) fn op_snapshot(&mut self) -> Step {
        if self.rng.chance(1, 4) {
            return self.op_clone();
        }
        let datasets: Vec<String> = self
            .open
            .fs
            .keys()
            .chain(self.open.volumes.keys())
            .cloned()
            .collect();
        let dataset = datasets[self.rng.below(datasets.len() as u64) as usize].clone();
        let taken: Vec<String> = self
            .open
            .snapshots
            .get(&dataset)
            .map(|l| l.iter().map(|s| s.name.clone()).collect())
            .unwrap_or_default();
        let mut model = self.open.clone();
        let choice = self.rng.below(4);
        let full = full_name(&dataset);
        let (what, result) =
            if taken.is_empty() || (choice < 2 && taken.len() < SNAPSHOTS_PER_DATASET_MAX) {
                self.snapshot_serial += 1;
                let snap = format!("s{}", self.snapshot_serial);
                let recursive = self.rng.chance(1, 4);
                model.snapshot(&dataset, &snap, recursive);
                let name = format!("{full}@{snap}");
                let result =
                    self.engine
                        .snapshot(std::slice::from_ref(&name), recursive, &[], "snapshot");
                (format!("snapshot {name} (-r {recursive})"), result)
            } else if choice == 2 || taken.len() >= SNAPSHOTS_PER_DATASET_MAX {
                let snap = taken[self.rng.below(taken.len() as u64) as usize].clone();
                let name = format!("{full}@{snap}");
                // A snapshot with clones goes only with -R, which takes its clones (and
                // theirs) along.
                if model.has_clones(&dataset, &snap) {
                    // Refused by the engine (a promoted clone's cycle): not drawn.
                    if model.snapshot_dependents_refused(&dataset, &snap) {
                        return Ok(Flow::Continue);
                    }
                    model.destroy_snapshot_dependents(&dataset, &snap);
                    let result = self
                        .engine
                        .destroy_dataset_with(&name, false, true, "destroy -R");
                    (format!("destroy -R {name}"), result)
                } else {
                    model.destroy_snapshot(&dataset, &snap);
                    let result = self.engine.destroy_dataset(&name, false, "destroy");
                    (format!("destroy {name}"), result)
                }
            } else {
                let index = self.rng.below(taken.len() as u64) as usize;
                if taken[index + 1..]
                    .iter()
                    .any(|s| model.has_clones(&dataset, s))
                {
                    return Ok(Flow::Continue);
                }
                model.rollback(&dataset, index);
                let name = format!("{full}@{}", taken[index]);
                let result = self.engine.rollback(&name, true, "rollback");
                (format!("rollback -r {name}"), result)
            };
        self.follow_admin(&what, model, result, true)
    }

    /// Clones a random snapshot (a new top-level dataset `c<N>`), or promotes a random
    /// clone whose snapshot names do not collide; one txg each.
    fn op_clone(&mut self) -> Step {
        let clones: Vec<String> = self.open.origins.keys().cloned().collect();
        let mut model = self.open.clone();
        let (what, result) = if !clones.is_empty() && self.rng.chance(1, 3) {
            let name = clones[self.rng.below(clones.len() as u64) as usize].clone();
            let (origin, snap) = &model.origins[&name];
            let list = &model.snapshots[origin];
            let upto = list.iter().position(|s| s.name == *snap).unwrap_or(0);
            let own = model.snapshots.get(&name);
            let collide = list[..=upto]
                .iter()
                .any(|s| own.is_some_and(|o| o.iter().any(|m| m.name == s.name)));
            if collide {
                return Ok(Flow::Continue);
            }
            model.promote(&name);
            let result = self.engine.promote(&full_name(&name), "promote");
            (format!("promote {name}"), result)
        } else {
            let all: Vec<(String, String)> = model
                .snapshots
                .iter()
                .flat_map(|(d, l)| l.iter().map(move |s| (d.clone(), s.name.clone())))
                .collect();
            if all.is_empty() {
                return Ok(Flow::Continue);
            }
            // Half the time a clone's own snapshot when there is one: nested clones.
            let nested: Vec<(String, String)> = all
                .iter()
                .filter(|(d, _)| model.origins.contains_key(d))
                .cloned()
                .collect();
            let all = match nested.is_empty() || self.rng.chance(1, 2) {
                true => all,
                false => nested,
            };
            let (dataset, snap) = all[self.rng.below(all.len() as u64) as usize].clone();
            self.dataset_serial += 1;
            let name = format!("c{}", self.dataset_serial);
            model.clone_snapshot(&dataset, &snap, &name);
            let origin = format!("{}@{snap}", full_name(&dataset));
            let result = self
                .engine
                .clone_dataset(&origin, &full_name(&name), &[], false, "clone");
            (format!("clone {origin} {name}"), result)
        };
        self.follow_admin(&what, model, result, true)
    }

    /// The engine lists exactly the model's snapshots and, within budget, every root
    /// snapshot reads as it was taken.
    pub(super) fn check_snapshots(&mut self, when: &str) -> Step {
        // Runs without snapshots ask the engine nothing more than before.
        if self.cfg.weights.snapshot == 0 {
            return Ok(Flow::Continue);
        }
        let query = DatasetQuery {
            names: vec![POOL.into()],
            recursive: true,
            properties: vec!["name".into()],
            types: vec!["snapshot".into()],
            ..DatasetQuery::default()
        };
        let rows = match self.engine.dataset_props(&query) {
            Ok(rows) => rows,
            Err(e) => return self.engine_error(&format!("list snapshots after {when}"), &e),
        };
        let mut listed: Vec<String> = rows
            .into_iter()
            .map(|r| r.name[POOL.len()..].trim_start_matches('/').to_string())
            .collect();
        let mut expected = self.open.snapshot_names();
        listed.sort();
        expected.sort();
        if listed != expected {
            return Err(format!(
                "after {when}: snapshots {listed:?}, the model has {expected:?}"
            ));
        }
        if !self.within() {
            return Ok(Flow::Continue);
        }
        self.check_volume_snapshots(when)?;
        let root = self.open.snapshots.get("").cloned().unwrap_or_default();
        for snapshot in root {
            let full = format!("{POOL}@{}", snapshot.name);
            for (id, object) in &snapshot.objects {
                self.check_frozen(&full, *id, object, when)?;
            }
        }
        Ok(Flow::Continue)
    }

    fn check_frozen(
        &mut self,
        full: &str,
        id: ObjectId,
        object: &crate::model::ModelObject,
        when: &str,
    ) -> Result<(), String> {
        let mut frozen = crate::model::Model::default();
        frozen.objects.insert(id, object.clone());
        let span = object.bytes.len() as u64;
        let mut offset = 0;
        while offset < span {
            let len = CHECK_CHUNK.min(span - offset);
            let mut buf = vec![0u8; usize::try_from(len).unwrap_or(0)];
            check::snapshot_read(&self.engine, full, id, offset, &mut buf)
                .map_err(|e| format!("after {when}: read {full} object {}: {e}", id.0))?;
            if let Some(wrong) = frozen.compare(id, offset, &buf) {
                return Err(format!(
                    "after {when}: {full} object {} at {}: expected {:#04x}, read {:#04x}",
                    id.0, wrong.offset, wrong.expected, wrong.actual
                ));
            }
            offset += len;
        }
        Ok(())
    }
}
