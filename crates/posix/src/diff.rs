//! What changed in a filesystem between two snapshots, or a snapshot and the head (ZFS's
//! `zfs diff`): added, removed, modified and renamed files by path.
//!
//! Model: only dnode blocks born after the older snapshot's txg can hold a changed inode
//! (copy-on-write rewrites the dnode block of every object it touches), so the walk visits
//! exactly those blocks (`ObjectSet::visit_changes` on the meta-dnode) and compares each of
//! their slots in the two object sets:
//! ```text
//!  then      now       same generation   ->
//!  -         inode                          +  path now
//!  inode     -                              -  path then
//!  inode     inode     no                   -  path then, + path now (number reused)
//!  inode     inode     yes, other path      R  path then -> path now
//!  inode     inode     yes, same path       M  path (unless only the access time moved)
//! ```
//! A directory whose entries changed is itself modified (its size and times moved). Paths
//! come from each inode's parent and a scan of that directory ([`Fs::path_of`]); a file
//! with several links is named by the link in the directory it was created in or last
//! renamed into. Objects that are not inodes (master node, unlinked set, per-owner counts,
//! xattr objects) are never reported. Not here: the link-count annotations ZFS adds.

use tarn_base::{ObjectId, Txg};
use tarn_objects::{BlockChange, ObjectSet};
use tarn_zio::BlockStore;

use crate::fs::Result;
use crate::inode::{self, Inode};
use crate::{FileKind, Fs, FsConfig, Timespec};

/// How a file changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeKind {
    /// Removed (`-`).
    Removed,
    /// Added (`+`).
    Added,
    /// Modified (`M`).
    Modified,
    /// Renamed (`R`).
    Renamed,
}

/// One line of a diff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// How it changed.
    pub kind: ChangeKind,
    /// Its type.
    pub file: FileKind,
    /// Its path relative to the root (empty: the root itself), before a rename.
    pub path: Vec<u8>,
    /// Its path after a rename.
    pub new_path: Option<Vec<u8>>,
    /// Its change time (the older one for a removal).
    pub ctime: Timespec,
    /// How its link count moved (a file, not a directory, modified or renamed): ZFS's
    /// `(+1)` after the path.
    pub links: i64,
}

/// Most dnode-block changes gathered per walk.
const CHANGES_PER_PASS: usize = 256;

/// The changes from `then` (a snapshot committed in txg `since`) to `now` (a later
/// snapshot or the head's committed object set), sorted by path.
pub fn diff(
    then: &mut ObjectSet,
    now: &mut ObjectSet,
    store: &dyn BlockStore,
    since: Txg,
) -> Result<Vec<Change>> {
    let per_block = tarn_format::objset::DNODES_PER_BLOCK;
    let mut slots = Vec::new();
    let mut start = 0;
    loop {
        let mut found = Vec::new();
        now.visit_changes(store, ObjectId(0), Some(since), start, &mut |change| {
            found.push(change);
            Ok(found.len() < CHANGES_PER_PASS)
        })?;
        let Some(last) = found.last() else { break };
        start = match *last {
            BlockChange::Data { blkid, .. } => blkid + 1,
            BlockChange::Hole { blkid, count } => blkid + count,
        };
        for change in found {
            let (first, count) = match change {
                BlockChange::Data { blkid, .. } => (blkid, 1),
                // Dnode blocks that are holes now: only slots the old side had matter.
                BlockChange::Hole { blkid, count } => (blkid, count),
            };
            let end = first.saturating_add(count).saturating_mul(per_block);
            let mut id = first.saturating_mul(per_block).max(1);
            while id < end.min(tarn_objects::OBJECT_ID_LIMIT) {
                slots.push(id);
                id = match matches!(change, BlockChange::Hole { .. }) {
                    true => match then.next_object(store, ObjectId(id - 1))? {
                        Some(next) if next.0 < end => next.0,
                        _ => end,
                    },
                    false => id + 1,
                };
            }
        }
    }
    let mut out = Vec::new();
    for id in slots {
        compare(then, now, store, id, &mut out)?;
    }
    out.sort_by(|a, b| (&a.path, a.kind).cmp(&(&b.path, b.kind)));
    Ok(out)
}

/// The inode in slot `id` of `os`, if the slot holds one.
fn inode_at(os: &mut ObjectSet, store: &dyn BlockStore, id: u64) -> Result<Option<Inode>> {
    let Some(dnode) = os.dnode(store, ObjectId(id))? else {
        return Ok(None);
    };
    let kinds = [
        FileKind::Regular,
        FileKind::Directory,
        FileKind::Symlink,
        FileKind::Fifo,
    ];
    if !kinds
        .iter()
        .any(|k| inode::object_type(*k) == dnode.object_type)
    {
        return Ok(None);
    }
    Ok(Some(Inode::decode(id, &os.bonus(store, ObjectId(id))?)?))
}

fn path(os: &mut ObjectSet, store: &dyn BlockStore, id: u64) -> Result<Option<Vec<u8>>> {
    let config = FsConfig::default();
    Fs::new(os, store, Timespec::default(), config).path_of(id)
}

/// The type of changed object `id` and the path it is known by, relative to the root: its
/// path in `now`, or in `then` when it is gone from `now`. `None` for an object that is not
/// an inode, or that no directory names on either side. For a caller that names a few
/// changed objects it found itself (a receive refusing a modified destination) without
/// the whole diff.
pub fn changed_path(
    then: &mut ObjectSet,
    now: &mut ObjectSet,
    store: &dyn BlockStore,
    id: u64,
) -> Result<Option<(FileKind, Vec<u8>)>> {
    for os in [now, then] {
        if let Some(inode) = inode_at(os, store, id)?
            && let Some(p) = path(os, store, id)?
        {
            return Ok(Some((inode.kind, p)));
        }
    }
    Ok(None)
}

/// Appends what changed in slot `id`. An inode no directory names (unlinked, still open)
/// is not reported.
fn compare(
    then: &mut ObjectSet,
    now: &mut ObjectSet,
    store: &dyn BlockStore,
    id: u64,
    out: &mut Vec<Change>,
) -> Result<()> {
    let old = inode_at(then, store, id)?;
    let new = inode_at(now, store, id)?;
    let line = |kind, inode: &Inode, path: Vec<u8>, new_path| Change {
        kind,
        file: inode.kind,
        path,
        new_path,
        ctime: inode.ctime,
        links: 0,
    };
    let same = matches!((&old, &new), (Some(o), Some(n)) if o.generation == n.generation);
    if let Some(o) = old.as_ref().filter(|_| !same)
        && let Some(p) = path(then, store, id)?
    {
        out.push(line(ChangeKind::Removed, o, p, None));
    }
    if let Some(n) = new.as_ref().filter(|_| !same)
        && let Some(p) = path(now, store, id)?
    {
        out.push(line(ChangeKind::Added, n, p, None));
    }
    let (Some(o), Some(n)) = (old, new) else {
        return Ok(());
    };
    if !same {
        return Ok(());
    }
    // An inode unlinked but not yet reclaimed (still open, on the unlinked set) has no path:
    // it was removed (or, the other way round, linked again).
    let (before, after) = match (path(then, store, id)?, path(now, store, id)?) {
        (Some(before), Some(after)) => (before, after),
        (Some(before), None) => {
            out.push(line(ChangeKind::Removed, &o, before, None));
            return Ok(());
        }
        (None, Some(after)) => {
            out.push(line(ChangeKind::Added, &n, after, None));
            return Ok(());
        }
        (None, None) => return Ok(()),
    };
    // Every write through the POSIX layer moves mtime and ctime: an inode the same but for
    // its access time (and the checksum cache's flag, which `tarn checksum` sets) is
    // unchanged.
    let touched = !n.same_but_access(&o);
    let change = if before != after {
        line(ChangeKind::Renamed, &n, before, Some(after))
    } else if touched {
        line(ChangeKind::Modified, &n, after, None)
    } else {
        return Ok(());
    };
    out.push(Change {
        links: links_moved(&o, &n),
        ..change
    });
    Ok(())
}

/// How a file's link count moved (ZFS reports it for files, not directories, whose count
/// follows their subdirectories).
fn links_moved(old: &Inode, new: &Inode) -> i64 {
    match new.kind {
        FileKind::Directory => 0,
        _ => i64::from(new.nlink) - i64::from(old.nlink),
    }
}

#[cfg(test)]
mod tests {
    //! A filesystem changed between two syncs in every way `diff` names: the changes come
    //! out by path with the right kind and type, and an access-time-only change is none.

    use super::*;
    use crate::tests::{ME, NOW};
    use crate::{Creds, RenameFlags};
    use tarn_format::BlockPtr;
    use tarn_objects::ObjsetKind;
    use tarn_objects::testing::MemStore;
    use tarn_zio::{WriteProps, ZioError};

    /// A store that keeps freed blocks, as a snapshot does.
    struct Kept(MemStore);

    impl BlockStore for Kept {
        fn txg(&self) -> Txg {
            self.0.txg()
        }
        fn write_block(
            &mut self,
            data: &[u8],
            props: &WriteProps,
        ) -> std::result::Result<BlockPtr, ZioError> {
            self.0.write_block(data, props)
        }
        fn read_block(&self, bp: &BlockPtr) -> std::result::Result<Vec<u8>, ZioError> {
            self.0.read_block(bp)
        }
        fn free_block(&mut self, _bp: &BlockPtr) {}
    }

    fn fs<'a>(os: &'a mut ObjectSet, store: &'a Kept) -> Fs<'a> {
        Fs::new(os, store, NOW, FsConfig::default())
    }

    #[test]
    fn every_kind_of_change_by_path() {
        let mut store = Kept(MemStore::new());
        let mut os = ObjectSet::create(ObjsetKind::Filesystem);
        let file = FileKind::Regular;
        let (root, a) = {
            let mut fs = fs(&mut os, &store);
            fs.format(Creds::default()).unwrap();
            let root = fs.root().unwrap();
            let dir = fs.mkdir(root, b"d", 0o755, ME).unwrap().ino;
            let a = fs.mknod(dir, b"a", file, 0o644, 0, ME).unwrap().ino;
            fs.write(a, 0, b"first").unwrap();
            for name in [&b"b"[..], b"gone", b"same"] {
                fs.mknod(root, name, file, 0o644, 0, ME).unwrap();
            }
            (root, a)
        };
        let then_root = os.sync(&mut store).unwrap();
        let since = store.txg();
        store.0.next_txg();
        {
            let mut fs = Fs::new(
                &mut os,
                &store,
                Timespec {
                    secs: NOW.secs + 9,
                    nsecs: 0,
                },
                FsConfig::default(),
            );
            fs.write(a, 0, b"second").unwrap();
            fs.rename(root, b"b", root, b"c", RenameFlags::default())
                .unwrap();
            fs.unlink(root, b"gone").unwrap();
            fs.mknod(root, b"new", file, 0o600, 0, ME).unwrap();
            let same = fs.lookup(root, b"same").unwrap().ino;
            let dir = fs.lookup(root, b"d").unwrap().ino;
            fs.link(same, dir, b"hard").unwrap();
        }
        let now_root = os.sync(&mut store).unwrap();
        let mut then = ObjectSet::open(&store, &then_root).unwrap();
        let mut now = ObjectSet::open(&store, &now_root).unwrap();
        let changes = diff(&mut then, &mut now, &store, since).unwrap();
        let got: Vec<(ChangeKind, String, Option<String>)> = changes
            .iter()
            .map(|c| {
                let text = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
                (c.kind, text(&c.path), c.new_path.as_deref().map(text))
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (ChangeKind::Modified, String::new(), None),
                (ChangeKind::Renamed, "b".into(), Some("c".into())),
                (ChangeKind::Modified, "d".into(), None),
                (ChangeKind::Modified, "d/a".into(), None),
                (ChangeKind::Removed, "gone".into(), None),
                (ChangeKind::Added, "new".into(), None),
                (ChangeKind::Modified, "same".into(), None),
            ]
        );
        // ZFS's `(+1)`: only the file that gained a link says so.
        let links: Vec<i64> = changes.iter().map(|c| c.links).collect();
        assert_eq!(links, vec![0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(changes[3].file, FileKind::Regular);
        assert_eq!(changes[0].file, FileKind::Directory);
    }
}
