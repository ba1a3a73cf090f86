//! A filesystem as the tests compare it: every path with what `stat`, `read`/`readlink`,
//! the xattrs and the project id show (`walk`), the model the intent-log crash tests check
//! an import against.

use std::collections::BTreeMap;

use tarn_engine::{DatasetId, Engine, FsOp};
use tarn_posix::{FileKind, Fs, Ino};

/// Path -> what `stat`, `read`/`readlink` and the xattrs show (generation and block counts
/// left out: they depend on which txg wrote what).
pub(crate) type Snapshot = BTreeMap<Vec<u8>, String>;

/// [`Snapshot`] of dataset `dataset` of pool `tank`, walked from its root.
pub(crate) fn snapshot(engine: &Engine, dataset: DatasetId) -> Snapshot {
    engine
        .fs_op("tank", dataset, FsOp::Read, |fs| {
            let root = fs.root()?;
            let mut out = Snapshot::new();
            walk(fs, root, b"", &mut out)?;
            Ok(out)
        })
        .unwrap()
}

pub(crate) fn walk(
    fs: &mut Fs<'_>,
    dir: Ino,
    prefix: &[u8],
    out: &mut Snapshot,
) -> Result<(), tarn_posix::PosixError> {
    let mut cookie = 0;
    loop {
        let entries = fs.readdir(dir, cookie, 64)?;
        let Some(last) = entries.last() else {
            return Ok(());
        };
        cookie = last.cookie;
        for entry in entries {
            if entry.name == b"." || entry.name == b".." {
                continue;
            }
            let mut path = prefix.to_vec();
            path.push(b'/');
            path.extend_from_slice(&entry.name);
            let attr = fs.getattr(entry.ino)?;
            let body = match attr.kind {
                FileKind::Regular => {
                    let data = fs.read(entry.ino, 0, u32::try_from(attr.size).unwrap())?;
                    format!("{:x}", fnv(&data))
                }
                FileKind::Symlink => String::from_utf8_lossy(&fs.readlink(entry.ino)?).into(),
                _ => String::new(),
            };
            let mut xattrs = Vec::new();
            for name in fs.listxattr(entry.ino)? {
                let value = fs.getxattr(entry.ino, &name)?;
                xattrs.push(format!(
                    "{}={:x}",
                    String::from_utf8_lossy(&name),
                    fnv(&value)
                ));
            }
            let project = fs.project(entry.ino)?;
            let times = format!(
                "a{:?} m{:?} c{:?} b{:?}",
                attr.atime, attr.mtime, attr.ctime, attr.crtime
            );
            let line = format!(
                "ino {} {:?} {:o} n{} {}:{} rdev {} size {} {times} [{body}] {xattrs:?} {:?}",
                attr.ino,
                attr.kind,
                attr.perm,
                attr.nlink,
                attr.uid,
                attr.gid,
                attr.rdev,
                attr.size,
                project,
            );
            out.insert(path.clone(), line);
            if attr.kind == FileKind::Directory {
                walk(fs, entry.ino, &path, out)?;
            }
        }
    }
}

pub(crate) fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}
