//! `tarn project` (ZFS's `zfs project`): list, set or clear the project id and the
//! project-inherit flag of files in a filesystem, by path within the dataset, optionally
//! down a whole tree. The kernel's FS_IOC_FSSETXATTR does not reach a FUSE server, so this
//! is the door to `projectquota@`; the change is one filesystem operation under the pool
//! lock (a very large tree holds the lock for its whole walk).

use tarn_posix::{Fs, Ino, PosixError};

use crate::{DatasetId, Engine, EngineError, FsOp};

/// What `tarn project` changes on every file it names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProjectChange {
    /// New project id (`-p ID`; `None` keeps each file's own).
    pub id: Option<u32>,
    /// Set the inherit flag on directories (`-s`).
    pub inherit: bool,
    /// Clear: the inherit flag goes and the id becomes 0 (`-C`), unless `keep_id` (`-k`).
    pub clear: bool,
    /// With `clear`, keep the id.
    pub keep_id: bool,
}

/// One file as `tarn project` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectRow {
    /// Path relative to the dataset's root (`.` for the root).
    pub path: String,
    /// Project id.
    pub id: u32,
    /// The directory's entries inherit the id.
    pub inherit: bool,
}

/// Most files one `tarn project -r` lists or changes.
const PROJECT_FILES_MAX: usize = 1 << 20;

/// The inode at `path` (components separated by `/`, relative to the root).
pub(crate) fn resolve(fs: &mut Fs<'_>, path: &str) -> Result<Ino, PosixError> {
    let mut ino = fs.root()?;
    for part in path.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." {
            return Err(PosixError::Invalid("'..' in a path"));
        }
        ino = fs.lookup(ino, part.as_bytes())?.ino;
    }
    Ok(ino)
}

/// `ino` and, when `recursive`, every file below it, with their paths.
fn walk(
    fs: &mut Fs<'_>,
    ino: Ino,
    path: String,
    recursive: bool,
) -> Result<Vec<(Ino, String)>, PosixError> {
    let mut out = vec![(ino, path)];
    let mut next = 0;
    while recursive && next < out.len() {
        let (dir, dir_path) = out[next].clone();
        next += 1;
        if fs.getattr(dir)?.kind != tarn_posix::FileKind::Directory {
            continue;
        }
        let mut cookie = 0;
        loop {
            let entries = fs.readdir(dir, cookie, 256)?;
            let Some(last) = entries.last() else { break };
            cookie = last.cookie;
            for entry in entries {
                if entry.name == b"." || entry.name == b".." {
                    continue;
                }
                let name = String::from_utf8_lossy(&entry.name);
                out.push((entry.ino, format!("{dir_path}/{name}")));
                if out.len() > PROJECT_FILES_MAX {
                    return Err(PosixError::Invalid("more than 2^20 files under the path"));
                }
            }
        }
    }
    Ok(out)
}

fn apply(fs: &mut Fs<'_>, ino: Ino, change: ProjectChange) -> Result<(), PosixError> {
    let (id, inherit) = fs.project(ino)?;
    let is_dir = fs.getattr(ino)?.kind == tarn_posix::FileKind::Directory;
    let (id, inherit) = if change.clear {
        (if change.keep_id { id } else { 0 }, false)
    } else {
        (
            change.id.unwrap_or(id),
            (inherit || change.inherit) && is_dir,
        )
    };
    fs.set_project(ino, id, inherit)?;
    Ok(())
}

impl Engine {
    /// `tarn project`: the project of `path` in `dataset` (and of everything below it when
    /// `recursive`), after applying `change` if there is one.
    pub fn fs_project(
        &self,
        pool: &str,
        dataset: DatasetId,
        path: &str,
        change: Option<ProjectChange>,
        recursive: bool,
    ) -> Result<Vec<ProjectRow>, EngineError> {
        let op = if change.is_some() {
            FsOp::Modify
        } else {
            FsOp::Read
        };
        self.fs_op(pool, dataset, op, |fs| {
            let ino = resolve(fs, path)?;
            let mut rows = Vec::new();
            let shown = if path.trim_matches('/').is_empty() {
                ".".to_string()
            } else {
                path.trim_end_matches('/').to_string()
            };
            for (ino, path) in walk(fs, ino, shown, recursive)? {
                if let Some(change) = change {
                    apply(fs, ino, change)?;
                }
                let (id, inherit) = fs.project(ino)?;
                rows.push(ProjectRow { path, id, inherit });
            }
            Ok(rows)
        })
    }
}
