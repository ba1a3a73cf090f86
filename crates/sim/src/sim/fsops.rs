//! The POSIX workload: operations on the filesystem of a random dataset through
//! `Engine::fs_op`, each predicted by the model (`fsmodel.rs`: success, or the errno of a
//! refusal), and the checker that walks every dataset's tree and compares it with the model.
//!
//! A failed operation beyond budget (an unreadable block, a suspended pool) may leave the open
//! txg half changed, which no model can follow exactly; the run restarts the engine the way an
//! admin would (crash, import), and the model goes back to the txg the import opened.

use std::collections::BTreeMap;

use tarn_engine::posix::{
    Creds, Fallocate, FileKind, Fs, Ino, PosixError, RenameFlags, SetAttr, XattrSet,
};
use tarn_engine::{EngineError, FsOp};

use super::{Flow, POOL, Sim, Step};
use crate::fsmodel::{Content, FsModel, NodeId, Refusal, join, split};

/// Deepest directory the workload creates.
const DEPTH_MAX: usize = 3;
/// Entries per `readdir` page in the checker (small, so a listing takes several pages).
const READDIR_PAGE: usize = 3;
/// Longest small write.
const SMALL_WRITE_MAX: u64 = 512;
/// Longest large write.
const LARGE_WRITE_MAX: u64 = 128 << 10;
/// Extended attribute names the workload picks from.
const XATTR_NAMES: u64 = 5;

/// The POSIX operations of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FsKind {
    Create,
    Mkdir,
    Symlink,
    Write,
    Truncate,
    Punch,
    Rename,
    Link,
    Unlink,
    Rmdir,
    Xattr,
    Read,
    Fsync,
    Clone,
}

fn depth(path: &str) -> usize {
    if path.is_empty() {
        0
    } else {
        path.split('/').count()
    }
}

/// The inode `path` names, looked up from the root.
pub(super) fn resolve(fs: &mut Fs<'_>, path: &str) -> Result<Ino, PosixError> {
    let mut ino = fs.root()?;
    for name in path.split('/').filter(|n| !n.is_empty()) {
        ino = fs.lookup(ino, name.as_bytes())?.ino;
    }
    Ok(ino)
}

pub(super) fn full_name(dataset: &str) -> String {
    if dataset.is_empty() {
        POOL.to_string()
    } else {
        format!("{POOL}/{dataset}")
    }
}

/// Beyond budget, an error that may have left the open txg half changed: anything but a
/// refusal the POSIX layer decided on its own (which changes nothing).
pub(super) fn lost(error: &EngineError) -> bool {
    match error {
        EngineError::Posix(e) => e.errno() == libc::EIO,
        _ => true,
    }
}

fn describe(result: &Result<(), EngineError>) -> String {
    match result {
        Ok(()) => "success".into(),
        Err(e) => format!("error: {e}"),
    }
}

impl Sim {
    pub(super) fn pick_of<T: Clone>(&mut self, items: &[T]) -> Option<T> {
        if items.is_empty() {
            return None;
        }
        let index = self.rng.below(items.len() as u64) as usize;
        items.get(index).cloned()
    }

    pub(super) fn fresh_name(&mut self) -> String {
        let pad = "_".repeat(self.cfg.fs_name_pad);
        format!("n{}{pad}", self.rng.below(self.cfg.fs_names))
    }

    /// One POSIX operation in a random dataset.
    pub(super) fn op_fs(&mut self, kind: FsKind) -> Step {
        let datasets: Vec<String> = self.open.fs.keys().cloned().collect();
        let dataset = self.pick_of(&datasets).unwrap_or_default();
        let model = self.open.fs[&dataset].clone();
        let full = model.entries().len() >= self.cfg.fs_entries_max;
        match kind {
            FsKind::Create | FsKind::Mkdir | FsKind::Symlink | FsKind::Link if full => {
                self.fs_write(&dataset, &model)
            }
            FsKind::Create | FsKind::Mkdir | FsKind::Symlink => {
                self.fs_create(&dataset, &model, kind)
            }
            FsKind::Write => self.fs_write(&dataset, &model),
            FsKind::Truncate | FsKind::Punch => self.fs_resize(&dataset, &model, kind),
            FsKind::Rename | FsKind::Link => self.fs_rename_or_link(&dataset, &model, kind),
            FsKind::Unlink | FsKind::Rmdir => self.fs_remove(&dataset, &model, kind),
            FsKind::Xattr => self.fs_xattr(&dataset, &model),
            FsKind::Read => self.fs_read(&dataset, &model),
            FsKind::Fsync => self.fs_fsync(&dataset),
            FsKind::Clone => self.fs_clone(),
        }
    }

    /// `fsync` of a file in `dataset` (the intent log commits every pending operation of the
    /// dataset): a crash before the next commit must bring back exactly the dataset as it is
    /// now. Its first fsync may commit a txg instead, which the run follows.
    fn fs_fsync(&mut self, dataset: &str) -> Step {
        if !self.within() {
            // Beyond budget a replay may end early, which the model does not predict.
            return Ok(Flow::Continue);
        }
        if dataset.is_empty() {
            // The root dataset also holds the object workload's raw objects, which no front
            // end creates and the intent log does not record: after a crash they are gone, a
            // replayed create then gets another inode number than its record says, and the
            // replay stops there by design (seeds 1391, 50249). Only created datasets are
            // fsync'd.
            return Ok(Flow::Continue);
        }
        let what = format!("fsync {}", full_name(dataset));
        let result = match self.engine.find_dataset(&full_name(dataset)) {
            Ok((_, id)) => self.engine.fs_sync(POOL, id),
            Err(e) => Err(e),
        };
        let synced = self.follow_commit()?;
        if let Err(e) = result {
            self.hold_in_flight();
            return self.engine_error(&what, &e);
        }
        if !synced {
            let now = self.open.fs[dataset].clone();
            self.fsynced.insert(dataset.to_string(), now);
        }
        self.trace
            .line(format!("{what}: logged (txg committed: {synced})"));
        Ok(Flow::Continue)
    }

    /// Runs `run` on `dataset` and `change` on a copy of the model, and holds the engine to
    /// the model's answer: both succeed, or both refuse with the same errno (and nothing
    /// changes).
    pub(super) fn fs_change(
        &mut self,
        dataset: &str,
        what: &str,
        op: FsOp,
        change: impl FnOnce(&mut FsModel) -> Result<(), Refusal>,
        run: impl FnOnce(&mut Fs<'_>) -> Result<(), PosixError>,
    ) -> Step {
        let what = format!("fs {} {what}", full_name(dataset));
        let mut model = self.open.clone();
        let expected = change(
            model
                .fs
                .get_mut(dataset)
                .expect("datasets come from the model"),
        );
        let result = match self.engine.find_dataset(&full_name(dataset)) {
            Ok((_, id)) => self.engine.fs_op(POOL, id, op, run),
            Err(e) => Err(e),
        };
        // A write's admission may commit the open txg before the change: follow it.
        let synced = self.follow_commit()?;
        match (expected, &result) {
            (Ok(()), Ok(())) => {
                self.open = model;
                self.trace.line(what);
                if synced {
                    return self.check_all("admission sync");
                }
                Ok(Flow::Continue)
            }
            (Err(errno), Err(EngineError::Posix(e))) if e.errno() == errno => {
                self.trace.line(format!("{what}: refused: {e}"));
                Ok(Flow::Continue)
            }
            (_, Err(EngineError::NoSpace)) => {
                self.counts.no_space += 1;
                self.trace.line(format!("{what}: out of space"));
                Ok(Flow::Continue)
            }
            (_, Err(e)) if !self.within() && lost(e) => {
                self.trace.line(format!("{what}: error: {e}"));
                self.check_loss(&what, e)?;
                self.counts.errors_reported += 1;
                self.hold_in_flight();
                self.crash_and_import("fs error")
            }
            (expected, _) => Err(format!(
                "{what}: the model expects {}, the engine answered {}",
                match expected {
                    Ok(()) => "success".to_string(),
                    Err(errno) => format!("errno {errno}"),
                },
                describe(&result)
            )),
        }
    }

    fn fs_create(&mut self, dataset: &str, model: &FsModel, kind: FsKind) -> Step {
        let dirs: Vec<String> = model
            .dirs()
            .into_iter()
            .filter(|d| kind != FsKind::Mkdir || depth(d) < DEPTH_MAX)
            .collect();
        let dir = self.pick_of(&dirs).unwrap_or_default();
        let name = self.fresh_name();
        let path = join(&dir, &name);
        let creds = Creds::default();
        let target: Vec<u8> = {
            let len = if self.rng.chance(1, 3) {
                200 + self.rng.below(400)
            } else {
                1 + self.rng.below(60)
            };
            (0..len).map(|_| b'a' + self.rng.below(26) as u8).collect()
        };
        let (content, what) = match kind {
            FsKind::Mkdir => (Content::Dir, format!("mkdir {path}")),
            FsKind::Symlink => (
                Content::Symlink(target.clone()),
                format!("symlink {path} len {}", target.len()),
            ),
            _ => (Content::File(Default::default()), format!("create {path}")),
        };
        let change = |m: &mut FsModel| m.create(&path, content);
        self.fs_change(dataset, &what, FsOp::Modify, change, |fs| {
            let parent = resolve(fs, &dir)?;
            let name = name.as_bytes();
            match kind {
                FsKind::Mkdir => fs.mkdir(parent, name, 0o755, creds),
                FsKind::Symlink => fs.symlink(parent, name, &target, creds),
                _ => fs.mknod(parent, name, FileKind::Regular, 0o644, 0, creds),
            }
            .map(drop)
        })
    }

    /// A write into a random file of `model`: its path, offset and bytes.
    fn plan_write(&mut self, model: &FsModel) -> Option<(String, u64, Vec<u8>)> {
        let path = self.pick_of(&model.files())?;
        let max = self.cfg.fs_file_max;
        let offset = if self.rng.chance(1, 3) {
            self.rng.below(model.size(&path) + 1).min(max - 1)
        } else {
            self.rng.below(max)
        };
        let cap = if self.rng.chance(1, 3) {
            LARGE_WRITE_MAX
        } else {
            SMALL_WRITE_MAX
        };
        let len = 1 + self.rng.below(cap.min(max - offset));
        let mut data = vec![0u8; usize::try_from(len).expect("writes fit in memory")];
        if !self.rng.chance(1, 6) {
            self.rng.fill(&mut data);
        }
        Some((path, offset, data))
    }

    fn fs_write(&mut self, dataset: &str, model: &FsModel) -> Step {
        let Some((path, offset, data)) = self.plan_write(model) else {
            return self.fs_create(dataset, model, FsKind::Create);
        };
        let len = data.len() as u64;
        let what = format!("write {path} at {offset} len {len}");
        let change = |m: &mut FsModel| {
            m.write(&path, offset, &data);
            Ok(())
        };
        self.fs_change(dataset, &what, FsOp::Write(len), change, |fs| {
            let ino = resolve(fs, &path)?;
            fs.write(ino, offset, &data).map(drop)
        })
    }

    /// A file write in the burst before a power cut: `false` when it failed (the power is
    /// off), and the crash that follows decides what survived.
    pub(super) fn burst_fs_write(&mut self) -> Result<bool, String> {
        let datasets: Vec<String> = self.open.fs.keys().cloned().collect();
        let dataset = self.pick_of(&datasets).unwrap_or_default();
        let model = self.open.fs[&dataset].clone();
        let Some((path, offset, data)) = self.plan_write(&model) else {
            return Ok(true);
        };
        let len = data.len() as u64;
        let result = self
            .engine
            .find_dataset(&full_name(&dataset))
            .and_then(|(_, id)| {
                self.engine.fs_op(POOL, id, FsOp::Write(len), |fs| {
                    let ino = resolve(fs, &path)?;
                    fs.write(ino, offset, &data).map(drop)
                })
            });
        self.follow_commit()?;
        if result.is_err() {
            self.hold_in_flight();
            return Ok(false);
        }
        let fs = self
            .open
            .fs
            .get_mut(&dataset)
            .expect("datasets come from the model");
        fs.write(&path, offset, &data);
        Ok(true)
    }

    fn fs_resize(&mut self, dataset: &str, model: &FsModel, kind: FsKind) -> Step {
        let Some(path) = self.pick_of(&model.files()) else {
            return self.fs_create(dataset, model, FsKind::Create);
        };
        let size = model.size(&path);
        let max = self.cfg.fs_file_max;
        if kind == FsKind::Truncate {
            let new = match self.rng.below(4) {
                0 => 0,
                1 => self.rng.below(max + 1),
                _ => self.rng.below(size + 1),
            };
            let change = |m: &mut FsModel| {
                m.truncate(&path, new);
                Ok(())
            };
            let what = format!("truncate {path} from {size} to {new}");
            return self.fs_change(dataset, &what, FsOp::Modify, change, |fs| {
                let ino = resolve(fs, &path)?;
                let changes = SetAttr {
                    size: Some(new),
                    ..SetAttr::default()
                };
                fs.setattr(ino, &changes).map(drop)
            });
        }
        let offset = self.rng.below(size + 4096);
        let len = 1 + self.rng.below(max);
        let change = |m: &mut FsModel| {
            m.punch(&path, offset, len);
            Ok(())
        };
        let what = format!("punch {path} at {offset} len {len} (size {size})");
        self.fs_change(dataset, &what, FsOp::Modify, change, |fs| {
            let ino = resolve(fs, &path)?;
            let mode = Fallocate {
                keep_size: true,
                punch_hole: true,
                zero_range: false,
            };
            fs.fallocate(ino, offset, len, mode)
        })
    }

    fn fs_rename_or_link(&mut self, dataset: &str, model: &FsModel, kind: FsKind) -> Step {
        let Some(source) = self.pick_of(&model.entries()) else {
            return self.fs_create(dataset, model, FsKind::Create);
        };
        let target = match self.rng.chance(1, 2) {
            true => self.pick_of(&model.entries()).unwrap_or_default(),
            false => {
                let dir = self.pick_of(&model.dirs()).unwrap_or_default();
                join(&dir, &self.fresh_name())
            }
        };
        let ((sdir, sname), (tdir, tname)) = (split(&source), split(&target));
        if kind == FsKind::Link {
            let change = |m: &mut FsModel| m.link(&source, &target);
            let what = format!("link {source} as {target}");
            return self.fs_change(dataset, &what, FsOp::Modify, change, |fs| {
                let ino = resolve(fs, &source)?;
                let parent = resolve(fs, tdir)?;
                fs.link(ino, parent, tname.as_bytes()).map(drop)
            });
        }
        let flags = match self.rng.below(8) {
            0 => RenameFlags {
                noreplace: true,
                exchange: false,
            },
            1 | 2 => RenameFlags {
                noreplace: false,
                exchange: true,
            },
            _ => RenameFlags::default(),
        };
        let change = |m: &mut FsModel| match flags {
            RenameFlags { exchange: true, .. } => m.exchange(&source, &target),
            RenameFlags {
                noreplace: true, ..
            } => m.rename_noreplace(&source, &target),
            _ => m.rename(&source, &target),
        };
        let what = format!("rename {source} to {target} {flags:?}");
        self.fs_change(dataset, &what, FsOp::Modify, change, |fs| {
            let parent = resolve(fs, sdir)?;
            let newparent = resolve(fs, tdir)?;
            let names = (sname.as_bytes(), tname.as_bytes());
            if let Some(ino) = fs.rename(parent, names.0, newparent, names.1, flags)? {
                fs.reclaim(ino)?;
            }
            Ok(())
        })
    }

    fn fs_remove(&mut self, dataset: &str, model: &FsModel, kind: FsKind) -> Step {
        let dirs: Vec<String> = model.dirs().into_iter().filter(|d| !d.is_empty()).collect();
        let candidates = match kind == FsKind::Rmdir && self.rng.chance(3, 4) {
            true => dirs,
            false => model.entries(),
        };
        let Some(path) = self.pick_of(&candidates) else {
            return self.fs_create(dataset, model, FsKind::Mkdir);
        };
        let (dir, name) = split(&path);
        if kind == FsKind::Rmdir {
            let change = |m: &mut FsModel| m.rmdir(&path);
            let what = format!("rmdir {path}");
            return self.fs_change(dataset, &what, FsOp::Free, change, |fs| {
                let parent = resolve(fs, dir)?;
                let ino = fs.rmdir(parent, name.as_bytes())?;
                fs.reclaim(ino)
            });
        }
        let change = |m: &mut FsModel| m.unlink(&path);
        let what = format!("unlink {path}");
        self.fs_change(dataset, &what, FsOp::Free, change, |fs| {
            let parent = resolve(fs, dir)?;
            // Nothing holds the file open: reclaim at once, as the FUSE front end does.
            if let Some(ino) = fs.unlink(parent, name.as_bytes())? {
                fs.reclaim(ino)?;
            }
            Ok(())
        })
    }

    fn fs_xattr(&mut self, dataset: &str, model: &FsModel) -> Step {
        let mut paths = model.dirs();
        paths.extend(model.files());
        let path = self.pick_of(&paths).unwrap_or_default();
        let name = format!("user.x{}", self.rng.below(XATTR_NAMES)).into_bytes();
        let shown = if path.is_empty() { "/" } else { path.as_str() };
        if self.rng.chance(1, 4) {
            let change = |m: &mut FsModel| m.setxattr(&path, &name, None);
            let what = format!("removexattr {shown} {}", String::from_utf8_lossy(&name));
            return self.fs_change(dataset, &what, FsOp::Free, change, |fs| {
                let ino = resolve(fs, &path)?;
                fs.removexattr(ino, &name)
            });
        }
        let len = match self.rng.chance(1, 5) {
            true => 1000 + self.rng.below(3000),
            false => self.rng.below(100),
        };
        let mut value = vec![0u8; usize::try_from(len).expect("values fit in memory")];
        self.rng.fill(&mut value);
        let change = |m: &mut FsModel| m.setxattr(&path, &name, Some(&value));
        let what = format!(
            "setxattr {path} {} len {len}",
            String::from_utf8_lossy(&name)
        );
        self.fs_change(dataset, &what, FsOp::Modify, change, |fs| {
            let ino = resolve(fs, &path)?;
            fs.setxattr(ino, &name, &value, XattrSet::Either)
        })
    }

    /// Reads a random range of a file and compares it with the open model. Wrong bytes are
    /// always a broken invariant; an error only within budget.
    fn fs_read(&mut self, dataset: &str, model: &FsModel) -> Step {
        let Some(path) = self.pick_of(&model.files()) else {
            return Ok(Flow::Continue);
        };
        let size = model.size(&path);
        let offset = self.rng.below(size + 1024);
        let len = 1 + self.rng.below(LARGE_WRITE_MAX);
        let what = format!(
            "fs {} read {path} at {offset} len {len}",
            full_name(dataset)
        );
        self.trace.line(what.clone());
        let result = self
            .engine
            .find_dataset(&full_name(dataset))
            .and_then(|(_, id)| {
                self.engine.fs_op(POOL, id, FsOp::Read, |fs| {
                    let ino = resolve(fs, &path)?;
                    fs.read(ino, offset, u32::try_from(len).unwrap_or(u32::MAX))
                })
            });
        let Some(Content::File(bytes)) = model.node(&path).map(|n| &n.content) else {
            return Err(format!(
                "{what}: the model picked a path that is not a file"
            ));
        };
        let start = offset.min(size) as usize;
        let end = (offset + len).min(size) as usize;
        match result {
            Ok(read) => match first_difference(&bytes[start..end], &read) {
                None => Ok(Flow::Continue),
                Some(at) => Err(format!(
                    "{what}: wrong bytes at offset {} (read {} bytes, expected {})",
                    offset + at as u64,
                    read.len(),
                    end - start
                )),
            },
            Err(e) if self.within() => Err(format!("{what}: failed within budget: {e}")),
            Err(e) => {
                self.check_loss(&what, &e)?;
                self.counts.errors_reported += 1;
                self.trace.line(format!("{what}: loss reported: {e}"));
                Ok(Flow::Continue)
            }
        }
    }

    /// The checker: every dataset's tree, walked through the engine, equals its model.
    /// Within budget an error is a broken invariant; beyond, a reported loss (counted).
    pub(super) fn check_fs(&mut self, when: &str) -> Step {
        let models: Vec<(String, FsModel)> = self
            .open
            .fs
            .iter()
            .map(|(n, m)| (n.clone(), m.clone()))
            .collect();
        let tolerant = !self.within();
        for (name, model) in models {
            let result = self
                .engine
                .find_dataset(&full_name(&name))
                .and_then(|(_, id)| {
                    self.engine
                        .fs_op(POOL, id, FsOp::Read, |fs| walk(fs, &model, tolerant))
                });
            match result {
                Ok(walked) => {
                    if let Some(wrong) = walked.mismatch {
                        return Err(format!("after {when}: {}: {wrong}", full_name(&name)));
                    }
                    let (what, count) =
                        (format!("check {}", full_name(&name)), walked.errors.len());
                    for error in walked.errors {
                        self.check_loss(&what, &EngineError::Posix(error))?;
                    }
                    if count > 0 {
                        self.counts.errors_reported += count as u64;
                        self.trace.line(format!("{what}: {count} losses reported"));
                    }
                }
                Err(e) if self.within() => {
                    return Err(format!(
                        "after {when}: walking {} failed within budget: {e}",
                        full_name(&name)
                    ));
                }
                Err(e) => {
                    self.check_loss(&format!("check {}", full_name(&name)), &e)?;
                    self.counts.errors_reported += 1;
                    self.trace
                        .line(format!("check {}: loss reported: {e}", full_name(&name)));
                }
            }
        }
        Ok(Flow::Continue)
    }
}

/// Lengths differ, or the first byte that does.
fn first_difference(expected: &[u8], actual: &[u8]) -> Option<usize> {
    if expected == actual {
        return None;
    }
    Some(
        expected
            .iter()
            .zip(actual)
            .position(|(e, a)| e != a)
            .unwrap_or(expected.len().min(actual.len())),
    )
}

/// What a walk found: the first disagreement with the model, and the errors it tolerated.
#[derive(Debug, Default)]
struct Walked {
    mismatch: Option<String>,
    errors: Vec<PosixError>,
}

/// A walk of one filesystem: which inode each model node turned out to be (hard links share
/// one, distinct nodes never do).
struct Walker<'m> {
    model: &'m FsModel,
    inos: BTreeMap<NodeId, Ino>,
    nodes: BTreeMap<Ino, NodeId>,
    tolerant: bool,
    errors: Vec<PosixError>,
}

type Found = Result<Option<String>, PosixError>;

fn walk(fs: &mut Fs<'_>, model: &FsModel, tolerant: bool) -> Result<Walked, PosixError> {
    let mut walker = Walker {
        model,
        inos: BTreeMap::new(),
        nodes: BTreeMap::new(),
        tolerant,
        errors: Vec::new(),
    };
    let root = fs.root()?;
    let mut stack = vec![(String::new(), root, root)];
    let found = walker.node(fs, "", root, 0);
    let mut mismatch = walker.soft(found)?;
    while let Some((dir, ino, parent)) = stack.pop() {
        if mismatch.is_some() {
            break;
        }
        let found = walker.dir(fs, &dir, ino, parent, &mut stack);
        mismatch = walker.soft(found)?;
    }
    if mismatch.is_none() {
        let count = fs.inode_count()?;
        if count != model.nodes.len() as u64 {
            mismatch = Some(format!(
                "inode count {count}, the model has {} live inodes",
                model.nodes.len()
            ));
        }
    }
    Ok(Walked {
        mismatch,
        errors: walker.errors,
    })
}

impl Walker<'_> {
    /// Beyond budget an error is counted and the walk goes on.
    fn soft(&mut self, found: Found) -> Found {
        match found {
            Err(e) if self.tolerant => {
                self.errors.push(e);
                Ok(None)
            }
            other => other,
        }
    }

    /// Every entry of directory `dir` (inode `ino`), page by page: `.` and `..` first, then
    /// each name once, exactly the model's names.
    fn dir(
        &mut self,
        fs: &mut Fs<'_>,
        dir: &str,
        ino: Ino,
        parent: Ino,
        stack: &mut Vec<(String, Ino, Ino)>,
    ) -> Found {
        let mut listed = Vec::new();
        let mut cookie = 0;
        loop {
            let page = fs.readdir(ino, cookie, READDIR_PAGE)?;
            let Some(last) = page.last() else { break };
            cookie = last.cookie;
            listed.extend(page);
            if listed.len() > self.model.paths.len() + 2 {
                return Ok(Some(format!(
                    "readdir of '{dir}' lists more entries than exist"
                )));
            }
        }
        let dots = listed.iter().take(2).map(|e| (e.name.as_slice(), e.ino));
        if !dots.eq([(b".".as_slice(), ino), (b"..".as_slice(), parent)]) {
            return Ok(Some(format!(
                "readdir of '{dir}' does not start with . and .."
            )));
        }
        let mut names = BTreeMap::new();
        for entry in listed.into_iter().skip(2) {
            let name = String::from_utf8_lossy(&entry.name).into_owned();
            if names
                .insert(name.clone(), (entry.ino, entry.kind))
                .is_some()
            {
                return Ok(Some(format!("readdir of '{dir}' lists '{name}' twice")));
            }
        }
        let expected = self.model.children(dir);
        let expected_names: Vec<&String> = expected.iter().map(|(n, _)| n).collect();
        if !names.keys().eq(expected_names.iter().copied()) {
            let listed: Vec<&String> = names.keys().collect();
            return Ok(Some(format!(
                "directory '{dir}' lists {listed:?}, the model has {expected_names:?}"
            )));
        }
        for (name, id) in expected {
            let (child, kind) = names[&name];
            let path = join(dir, &name);
            if let Some(wrong) = self.identity(&path, child, id) {
                return Ok(Some(wrong));
            }
            let is_dir = self.model.nodes[&id].content == Content::Dir;
            if (kind == FileKind::Directory) != is_dir {
                return Ok(Some(format!("'{path}' is listed as {kind:?}")));
            }
            let found = self.node(fs, &path, child, id);
            if let Some(wrong) = self.soft(found)? {
                return Ok(Some(wrong));
            }
            if is_dir {
                stack.push((path, child, ino));
            }
        }
        Ok(None)
    }

    /// Hard links share an inode; distinct nodes never do.
    fn identity(&mut self, path: &str, ino: Ino, id: NodeId) -> Option<String> {
        let known = *self.inos.entry(id).or_insert(ino);
        let owner = *self.nodes.entry(ino).or_insert(id);
        (known != ino || owner != id).then(|| {
            format!("'{path}' is inode {ino}: its links disagree (inode {known}, node {owner})")
        })
    }

    /// The attributes, contents and xattrs of the node `path` names.
    fn node(&mut self, fs: &mut Fs<'_>, path: &str, ino: Ino, id: NodeId) -> Found {
        let node = &self.model.nodes[&id];
        let attr = fs.getattr(ino)?;
        let nlink = self.model.nlink(id);
        if attr.nlink != nlink {
            return Ok(Some(format!(
                "'{path}' has nlink {}, not {nlink}",
                attr.nlink
            )));
        }
        let wrong = match &node.content {
            Content::File(bytes) => {
                let len = u32::try_from(bytes.len()).unwrap_or(u32::MAX);
                let read = fs.read(ino, 0, len.saturating_add(1))?;
                match first_difference(bytes, &read) {
                    _ if attr.size != bytes.len() as u64 => Some(format!("size {}", attr.size)),
                    Some(at) => Some(format!("wrong bytes at offset {at}")),
                    None => None,
                }
            }
            Content::Dir => {
                let entries = self.model.children(path).len() as u64;
                (attr.size != entries).then(|| format!("size {}, not {entries}", attr.size))
            }
            Content::Symlink(target) => {
                let read = fs.readlink(ino)?;
                (read != *target).then(|| format!("target of {} bytes differs", read.len()))
            }
        };
        if let Some(wrong) = wrong {
            return Ok(Some(format!("'{path}' (inode {ino}): {wrong}")));
        }
        if matches!(node.content, Content::Symlink(_)) {
            return Ok(None);
        }
        let mut names = fs.listxattr(ino)?;
        names.sort();
        if !names.iter().eq(node.xattrs.keys()) {
            return Ok(Some(format!("'{path}' has xattrs {} names", names.len())));
        }
        for (name, value) in &node.xattrs {
            if fs.getxattr(ino, name)? != *value {
                let name = String::from_utf8_lossy(name);
                return Ok(Some(format!("'{path}': xattr {name} differs")));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::Budget;
    use crate::config::Config;

    /// A change made to the model behind the engine's back.
    type Tamper = Box<dyn Fn(&mut FsModel)>;

    /// A within-budget run with a few files, directories, links and xattrs, synced.
    fn populated(seed: u64) -> Sim {
        let mut sim = Sim::new(Config::from_seed(seed, Some(Budget::Within)), false);
        assert!(matches!(sim.create().unwrap(), Flow::Continue));
        for kind in [
            FsKind::Mkdir,
            FsKind::Create,
            FsKind::Create,
            FsKind::Symlink,
        ] {
            sim.op_fs(kind).unwrap();
        }
        for _ in 0..30 {
            for kind in [FsKind::Write, FsKind::Link, FsKind::Xattr, FsKind::Rename] {
                sim.op_fs(kind).unwrap();
            }
        }
        sim.op_sync().unwrap();
        sim
    }

    #[test]
    fn the_walk_catches_a_wrong_byte_a_missing_entry_and_a_wrong_xattr() {
        // Goal: the filesystem checker can fail. Method: change the model behind the
        // engine's back in three ways; each must be reported.
        let sim = populated(6);
        let model = &sim.open.fs[""];
        let file = model
            .files()
            .into_iter()
            .find(|f| model.size(f) > 0)
            .unwrap();
        let mut cases: Vec<(&str, Tamper)> = Vec::new();
        let path = file.clone();
        cases.push(("wrong bytes", Box::new(move |m| m.write(&path, 0, &[0xEE]))));
        // The root's entry count disagrees before its listing is read.
        let ghost = |m: &mut FsModel| m.create("ghost", Content::File(Arc::default())).unwrap();
        cases.push(("size", Box::new(ghost)));
        let path = file.clone();
        let xattr = move |m: &mut FsModel| m.setxattr(&path, b"user.zz", Some(b"v")).unwrap();
        cases.push(("xattrs", Box::new(xattr)));
        for (expected, tamper) in cases {
            let mut sim = populated(6);
            tamper(sim.open.fs.get_mut("").unwrap());
            let broken = sim.check_all("tamper").unwrap_err();
            assert!(broken.contains(expected), "{expected}: {broken}");
        }
    }

    #[test]
    fn a_crash_rolls_the_filesystems_back_to_the_committed_txg() {
        // Goal: POSIX changes after the last commit vanish at a crash, and the model follows.
        let mut sim = populated(7);
        let committed = sim.committed.fs.clone();
        for _ in 0..10 {
            sim.op_fs(FsKind::Create).unwrap();
            sim.op_fs(FsKind::Unlink).unwrap();
        }
        sim.op_crash().unwrap();
        assert_eq!(sim.counts.crashes, 1);
        assert_eq!(
            sim.open.fs[""].entries().is_empty(),
            committed[""].entries().is_empty()
        );
        sim.check_all("after crash").unwrap();
    }
}
