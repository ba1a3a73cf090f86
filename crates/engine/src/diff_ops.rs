//! `tarn diff SNAP [SNAP|DS]`: a thin verb over `tarn_posix::diff`, which visits only the
//! dnode blocks born after the older snapshot's txg. The engine picks the two object sets
//! (a later snapshot of the same dataset, or the head as its last txg committed it: a head
//! with uncommitted changes is committed first, so the diff shows them) and renders each
//! change with the dataset's mountpoint, as ZFS prints paths.

use tarn_dataset::snapshot;
use tarn_objects::{ObjectSet, ObjsetKind};
use tarn_posix::FileKind;
use tarn_posix::diff::{self, ChangeKind};

use crate::dataset_ops::{invalid, pool_of};
use crate::{Engine, EngineError};

/// One line of `tarn diff`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffLine {
    /// `M`, `+`, `-` or `R`.
    pub change: char,
    /// The file type as `-F` shows it: `F` file, `/` directory, `@` symlink, `|` FIFO,
    /// `=` socket, `C` character device, `B` block device.
    pub file: char,
    /// The full path (non-printable bytes and `\` escaped as `\0ooo`); a rename's old one.
    pub path: String,
    /// A rename's new path.
    pub new_path: Option<String>,
    /// Change time: seconds and nanoseconds.
    pub ctime: (i64, u32),
    /// How a file's link count moved (`(+1)` in ZFS's output); 0 otherwise.
    pub links: i64,
}

impl Engine {
    /// `tarn diff SNAP [SNAP|DS]`: what changed from snapshot `from` to the later snapshot
    /// or the dataset `to` (the dataset itself without it).
    pub fn diff(&self, from: &str, to: Option<&str>) -> Result<Vec<DiffLine>, EngineError> {
        let (dataset, from_snap) = snapshot::split_name(from)?;
        let handle = self.pool(pool_of(dataset))?;
        let mut inner = handle.lock();
        let id = inner.datasets.lookup(dataset)?;
        let to_snap = match to {
            None => None,
            Some(name) if name == dataset => None,
            Some(name) => match name.split_once('@') {
                Some((ds, snap)) if ds.is_empty() || ds == dataset => Some(snap.to_string()),
                _ => return Err(invalid("not an earlier snapshot from the same fs")),
            },
        };
        let node = inner.datasets.node(id);
        if node.objset.kind() == ObjsetKind::Volume {
            return Err(invalid("diff is for filesystems (this is a volume)"));
        }
        let (_, older) = node
            .snapshot(from_snap)
            .ok_or_else(|| invalid(format!("snapshot '{from}' does not exist")))?;
        let older = older.header;
        let newer = match &to_snap {
            Some(name) => {
                let (_, snap) = node.snapshot(name).ok_or_else(|| {
                    invalid(format!("snapshot '{dataset}@{name}' does not exist"))
                })?;
                if snap.header.txg <= older.txg {
                    return Err(invalid("not an earlier snapshot from the same fs"));
                }
                snap.header.objset
            }
            None => {
                if node.objset.dirty_bytes() > 0 {
                    inner.sync()?;
                }
                inner.datasets.node(id).objset.root()
            }
        };
        let (mountpoint, _) = inner.datasets.effective(id, "mountpoint");
        let base = match mountpoint.as_str() {
            "none" | "legacy" => format!("/{dataset}"),
            path => path.trim_end_matches('/').to_string(),
        };
        let reader = inner.pool.reader();
        let mut then = ObjectSet::open(&reader, &older.objset)?;
        let mut now = ObjectSet::open(&reader, &newer)?;
        let changes = diff::diff(&mut then, &mut now, &reader, older.txg)?;
        let full = |path: &[u8]| format!("{base}/{}", escape(path));
        Ok(changes
            .into_iter()
            .map(|c| DiffLine {
                change: match c.kind {
                    ChangeKind::Modified => 'M',
                    ChangeKind::Added => '+',
                    ChangeKind::Removed => '-',
                    ChangeKind::Renamed => 'R',
                },
                file: type_char(c.file),
                path: full(&c.path),
                new_path: c.new_path.as_deref().map(full),
                ctime: (c.ctime.secs, c.ctime.nsecs),
                links: c.links,
            })
            .collect())
    }
}

fn type_char(kind: FileKind) -> char {
    match kind {
        FileKind::Regular => 'F',
        FileKind::Directory => '/',
        FileKind::Symlink => '@',
        FileKind::Fifo => '|',
        FileKind::Socket => '=',
        FileKind::CharDevice => 'C',
        FileKind::BlockDevice => 'B',
    }
}

/// ZFS's escaping of a path: printable ASCII but space as is, every other byte and `\` as
/// `\0ooo`.
pub(crate) fn escape(path: &[u8]) -> String {
    let mut out = String::with_capacity(path.len());
    for &byte in path {
        if byte.is_ascii_graphic() && byte != b'\\' {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("\\0{byte:03o}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn paths_are_escaped_as_zfs_does() {
        assert_eq!(escape(b"a b/c"), "a\\0040b/c");
        assert_eq!(escape(b"tab\there"), "tab\\0011here");
        assert_eq!(escape(b"back\\slash"), "back\\0134slash");
        assert_eq!(escape(&[0xc3, 0xa9]), "\\0303\\0251");
    }
}
