//! Block cloning in the workload (`copy_file_range`, `Engine::fs_clone_range`): a range of
//! whole blocks of one file cloned into a file of the same dataset (the same file too, at a
//! range that does not overlap) or of another dataset, among every other operation, so that
//! snapshots, rollback, destroy, crashes and faults land around the clones.
//!
//! Model: a clone that succeeds reads as a copy of the bytes it cloned (`FsModel::write` of
//! the source's range at the target's offset; the target grows to the range's end). The
//! engine may refuse a range it cannot clone with EXDEV (a block size the workload's guess
//! missed, files of different block sizes): the kernel would copy instead, and the run
//! checks that nothing changed (the next checker pass walks every file). The verb may
//! commit txgs before it installs anything (a dirty source is synced first; an admission
//! may sync), which the run follows as it follows a write's admission.
//!
//! The checks are the pool checker's (`check::verify_pool` after every commit and import):
//! every cloned block's pointers counted against the block reference table, the table
//! replayed from the space log, `bcloneused` and `bclonesaved` equal to its entries, each
//! dataset's `referenced` equal to its blocks (each clone in full), space closing.
//!
//! Not here: ranges that start inside a block (refused with EXDEV by the engine whatever
//! the workload does; the unit tests of tarn-posix `clone` cover them).

use tarn_engine::posix::{Attr, Fs, PosixError};
use tarn_engine::{EngineError, FileRange, FsOp};

use super::fsops::{full_name, lost, resolve};
use super::{Flow, POOL, Sim, Step};
use crate::fsmodel::{Content, FsModel};

/// A planned clone: both sides' datasets, paths and offsets, and the length asked for.
struct Plan {
    source: (String, String, u64),
    target: (String, String, u64),
    len: u64,
}

impl Sim {
    /// One clone between two files of the model (module docs): from a file with data, into
    /// a new file a third of the time (an empty file takes the source's block size), else
    /// into any file (the source itself at a range past the source's).
    pub(super) fn fs_clone(&mut self) -> Step {
        let datasets: Vec<String> = self.open.fs.keys().cloned().collect();
        let Some(source_ds) = self.pick_of(&datasets) else {
            return Ok(Flow::Continue);
        };
        let target_ds = if self.rng.chance(1, 2) {
            source_ds.clone()
        } else {
            self.pick_of(&datasets).unwrap_or_default()
        };
        let source_model = self.open.fs[&source_ds].clone();
        let with_data: Vec<String> = source_model
            .files()
            .into_iter()
            .filter(|f| source_model.size(f) > 0)
            .collect();
        let Some(source_path) = self.pick_of(&with_data) else {
            return Ok(Flow::Continue);
        };
        let target_path = if self.rng.chance(1, 3) {
            match self.clone_target(&target_ds)? {
                (_, Flow::End(why)) => return Ok(Flow::End(why)),
                (None, Flow::Continue) => return Ok(Flow::Continue),
                (Some(path), Flow::Continue) => path,
            }
        } else {
            let target_files = self.open.fs[&target_ds].files();
            let Some(path) = self.pick_of(&target_files) else {
                return Ok(Flow::Continue);
            };
            path
        };
        let Some(plan) = self.plan_clone(&source_ds, &source_path, &target_ds, &target_path)?
        else {
            return Ok(Flow::Continue);
        };
        self.run_clone(&plan)
    }

    /// A new empty file in `dataset` for a clone to fill: its path when it was made.
    fn clone_target(&mut self, dataset: &str) -> Result<(Option<String>, Flow), String> {
        let model = self.open.fs[dataset].clone();
        if model.entries().len() >= self.cfg.fs_entries_max {
            return Ok((None, Flow::Continue));
        }
        let dir = self.pick_of(&model.dirs()).unwrap_or_default();
        let name = self.fresh_name();
        let path = crate::fsmodel::join(&dir, &name);
        let what = format!("create {path} (clone target)");
        let change = |m: &mut FsModel| m.create(&path, Content::File(Default::default()));
        let flow = self.fs_change(dataset, &what, FsOp::Modify, change, |fs| {
            let parent = resolve(fs, &dir)?;
            let creds = tarn_engine::posix::Creds::default();
            let kind = tarn_engine::posix::FileKind::Regular;
            fs.mknod(parent, name.as_bytes(), kind, 0o644, 0, creds)
                .map(drop)
        })?;
        let made = self
            .open
            .fs
            .get(dataset)
            .and_then(|m| m.node(&path))
            .is_some_and(|n| n.content == Content::File(Default::default()));
        Ok((made.then_some(path), flow))
    }

    /// Offsets on block boundaries (as `stat` shows the block size) and a length of whole
    /// blocks or to the source's end; `None` when a file could not be looked at (beyond
    /// budget, a loss the checkers count).
    fn plan_clone(
        &mut self,
        source_ds: &str,
        source_path: &str,
        target_ds: &str,
        target_path: &str,
    ) -> Result<Option<Plan>, String> {
        let (Some(source), Some(target)) = (
            self.stat(source_ds, source_path)?,
            self.stat(target_ds, target_path)?,
        ) else {
            return Ok(None);
        };
        let block = u64::from(source.blksize);
        let source_blocks = source.size.div_ceil(block);
        let first = self.rng.below(source_blocks);
        let blocks = 1 + self.rng.below(source_blocks - first);
        let same = (source_ds, source_path) == (target_ds, target_path);
        // To the source's end (as `cp` asks: more than there is) or whole blocks.
        let len = match self.rng.below(3) {
            0 if !same => u64::MAX,
            _ => block * blocks,
        };
        let at = if same {
            // Past the source range: one file's ranges may not overlap.
            first + blocks + self.rng.below(2)
        } else {
            self.rng.below(target.size.div_ceil(block) + 2)
        };
        Ok(Some(Plan {
            source: (source_ds.into(), source_path.into(), first * block),
            target: (target_ds.into(), target_path.into(), at * block),
            len,
        }))
    }

    /// `getattr` of `path` in `dataset`: `None` beyond budget when it fails.
    fn stat(&mut self, dataset: &str, path: &str) -> Result<Option<Attr>, String> {
        let result = self
            .engine
            .find_dataset(&full_name(dataset))
            .and_then(|(_, id)| {
                self.engine.fs_op(POOL, id, FsOp::Read, |fs: &mut Fs<'_>| {
                    let ino = resolve(fs, path)?;
                    fs.getattr(ino)
                })
            });
        match result {
            Ok(attr) => Ok(Some(attr)),
            Err(e) if self.within() => Err(format!(
                "stat {}:{path} failed within budget: {e}",
                full_name(dataset)
            )),
            Err(_) => Ok(None),
        }
    }

    /// The inode `path` names in `dataset`, and the dataset's id.
    fn file_range(&self, dataset: &str, path: &str, offset: u64) -> Result<FileRange, EngineError> {
        let (_, id) = self.engine.find_dataset(&full_name(dataset))?;
        let ino = self
            .engine
            .fs_op(POOL, id, FsOp::Read, |fs| resolve(fs, path))?;
        Ok(FileRange {
            dataset: id,
            ino,
            offset,
        })
    }

    fn run_clone(&mut self, plan: &Plan) -> Step {
        let (sds, spath, soff) = &plan.source;
        let (tds, tpath, toff) = &plan.target;
        let what = format!(
            "clone {}:{spath} at {soff} len {} to {}:{tpath} at {toff}",
            full_name(sds),
            plan.len,
            full_name(tds)
        );
        let result = self.file_range(sds, spath, *soff).and_then(|source| {
            let target = self.file_range(tds, tpath, *toff)?;
            self.engine.fs_clone_range(POOL, source, target, plan.len)
        });
        // A dirty source is synced, and an admission may sync, before anything is installed.
        let synced = self.follow_commit()?;
        match result {
            Ok(0) => {
                // Nothing of the source from its offset on: nothing changes (a target
                // offset past its end does not grow it).
                self.trace.line(format!("{what}: cloned 0"));
                Ok(Flow::Continue)
            }
            Ok(cloned) => {
                let bytes = clone_bytes(&self.open.fs[sds], spath, *soff, cloned)?;
                let target = self
                    .open
                    .fs
                    .get_mut(tds)
                    .expect("datasets come from the model");
                target.write(tpath, *toff, &bytes);
                self.counts.clones += 1;
                self.trace.line(format!("{what}: cloned {cloned}"));
                if synced {
                    return self.check_all("clone sync");
                }
                Ok(Flow::Continue)
            }
            Err(EngineError::Posix(PosixError::CannotClone(why))) => {
                self.counts.clones_refused += 1;
                self.trace.line(format!("{what}: refused: {why}"));
                Ok(Flow::Continue)
            }
            Err(EngineError::NoSpace) => {
                self.counts.no_space += 1;
                self.trace.line(format!("{what}: out of space"));
                Ok(Flow::Continue)
            }
            Err(e) if !self.within() && lost(&e) => {
                self.trace.line(format!("{what}: error: {e}"));
                self.check_loss(&what, &e)?;
                self.counts.errors_reported += 1;
                self.hold_in_flight();
                self.crash_and_import("clone error")
            }
            Err(e) => Err(format!("{what}: the engine answered error: {e}")),
        }
    }
}

/// The `len` bytes at `offset` of the model's file `path`: what a clone of them reads as.
fn clone_bytes(model: &FsModel, path: &str, offset: u64, len: u64) -> Result<Vec<u8>, String> {
    let Some(Content::File(bytes)) = model.node(path).map(|n| &n.content) else {
        return Err(format!("clone: the model's '{path}' is not a file"));
    };
    let start = usize::try_from(offset).map_err(|e| e.to_string())?;
    let end = usize::try_from(offset + len).map_err(|e| e.to_string())?;
    bytes
        .get(start..end)
        .map(<[u8]>::to_vec)
        .ok_or_else(|| format!("clone of {len} bytes at {offset} past the end of '{path}'"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Budget;
    use crate::config::Config;
    use crate::sim::fsops::FsKind;

    #[test]
    fn clones_share_blocks_and_survive_syncs_snapshots_and_crashes() {
        // Goal: the workload's clones succeed most of the time, read as the model's copies,
        // and the pool checker (the table against the pointers, bcloneused/bclonesaved,
        // referenced) passes after syncs and a crash. Method: a within-budget run with two
        // datasets of files, clones among writes, syncs and a crash.
        let mut sim = Sim::new(Config::from_seed(11, Some(Budget::Within)), false);
        assert!(matches!(sim.create().unwrap(), Flow::Continue));
        sim.op_dataset().unwrap();
        assert_eq!(sim.open.fs.len(), 2, "the root and a new dataset");
        for round in 0..12 {
            for kind in [FsKind::Create, FsKind::Write, FsKind::Write] {
                sim.op_fs(kind).unwrap();
            }
            sim.op_sync().unwrap();
            for _ in 0..4 {
                sim.op_fs(FsKind::Clone).unwrap();
            }
            if round % 4 == 3 {
                sim.op_crash().unwrap();
            } else {
                sim.op_sync().unwrap();
            }
            sim.check_all("round").unwrap();
        }
        assert!(sim.counts.clones >= 10, "{:?}", sim.counts);
        let props = sim.engine.get_props(POOL, &["bclonesaved".into()]).unwrap();
        let saved: u64 = props[0].value.parse().unwrap();
        assert!(saved > 0, "clones that share blocks save space: {saved}");
    }
}
