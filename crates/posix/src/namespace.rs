//! Names: directory entries (a directory is a ZAP of name -> inode and type), lookups,
//! creation, links, removal, rename and listing.

use tarn_objects::{ObjectError, ZapCursor, zap::zap_hash};

use crate::fs::{Fs, Result, oid};
use crate::inode::{self, FLAG_PROJECT_INHERIT, Inode, SYMLINK_INLINE_MAX, kind_byte, kind_from};
use crate::intent::LogOp;
use crate::{
    Attr, Creds, DirEntry, FileKind, Ino, Owner, OwnerKind, PosixError, RenameFlags, SetAttr,
    TimeOrNow,
};

/// Longest name of a directory entry.
pub const NAME_MAX: usize = 255;
const S_ISUID: u16 = 0o4000;
const S_ISGID: u16 = 0o2000;
const S_IXGRP: u16 = 0o0010;
/// Cookies 1 and 2 are `.` and `..`; entries' cookies start above them.
const COOKIE_FIRST: u64 = 3;

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(PosixError::Invalid("file name"));
    }
    if name.len() > NAME_MAX {
        return Err(PosixError::NameTooLong);
    }
    Ok(())
}

/// A new name must not be `.` or `..`.
fn check_new_name(name: &[u8]) -> Result<()> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(PosixError::Exists);
    }
    Ok(())
}

fn entry_value(ino: Ino, kind: FileKind) -> [u8; 9] {
    let mut value = [0u8; 9];
    value[..8].copy_from_slice(&ino.to_le_bytes());
    value[8] = kind_byte(kind);
    value
}

fn decode_entry(dir: Ino, value: &[u8]) -> Result<(Ino, FileKind)> {
    let bad = || inode::corrupt(dir, "directory entry does not decode");
    let word = <[u8; 8]>::try_from(value.get(..8).ok_or_else(bad)?).map_err(|_| bad())?;
    let kind = value.get(8).copied().and_then(kind_from).ok_or_else(bad)?;
    if value.len() != 9 {
        return Err(bad());
    }
    Ok((u64::from_le_bytes(word), kind))
}

/// The readdir cookie of an entry: its ZAP hash order, kept positive for FUSE's `i64`
/// offsets and clear of the cookies of `.` and `..`.
fn cookie_of(name: &[u8]) -> u64 {
    (zap_hash(name) >> 2) + COOKIE_FIRST
}

impl Fs<'_> {
    /// Inode `ino`, which must be a directory.
    fn directory(&mut self, ino: Ino) -> Result<Inode> {
        let inode = self.inode(ino)?;
        if inode.kind != FileKind::Directory {
            return Err(PosixError::NotDir);
        }
        Ok(inode)
    }

    /// The entry `name` of directory `dir`, if any.
    fn entry(&mut self, dir: Ino, name: &[u8]) -> Result<Option<(Ino, FileKind)>> {
        match self.os.zap_lookup(self.store, oid(dir), name)? {
            Some(value) => decode_entry(dir, &value).map(Some),
            None => Ok(None),
        }
    }

    /// Changes a directory's entry count and times (an entry came or went).
    fn touch_dir(&mut self, dir: Ino, entries: i64, links: i64) -> Result<()> {
        let mut inode = self.inode(dir)?;
        inode.size = inode.size.saturating_add_signed(entries);
        inode.nlink = inode.nlink.saturating_add_signed(links as i32);
        inode.mtime = self.now;
        inode.ctime = self.now;
        self.put(dir, &inode)
    }

    /// Looks up `name` in directory `parent`.
    pub fn lookup(&mut self, parent: Ino, name: &[u8]) -> Result<Attr> {
        let dir = self.directory(parent)?;
        check_name(name)?;
        let ino = match name {
            b"." => parent,
            b".." => dir.parent,
            _ => self.entry(parent, name)?.ok_or(PosixError::NotFound)?.0,
        };
        self.getattr(ino)
    }

    /// Links a new inode of `kind` as `name` in `parent`.
    fn create(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        rdev: u64,
        mut creds: Creds,
    ) -> Result<(Ino, Inode)> {
        check_new_name(name)?;
        let dir = self.directory(parent)?;
        if dir.nlink == 0 {
            return Err(PosixError::NotFound);
        }
        if self.entry(parent, name)?.is_some() {
            return Err(PosixError::Exists);
        }
        let mut perm = perm & 0o7777;
        if dir.perm & S_ISGID != 0 {
            creds.gid = dir.gid;
            if kind == FileKind::Directory {
                perm |= u32::from(S_ISGID);
            }
        }
        let inherit = dir.flags & FLAG_PROJECT_INHERIT != 0;
        let project = if inherit { dir.project } else { 0 };
        let owners = [
            (OwnerKind::User, creds.uid),
            (OwnerKind::Group, creds.gid),
            (OwnerKind::Project, project),
        ]
        .map(|(kind, id)| Owner { kind, id });
        self.admit(owners, 1, true)?;
        let (ino, inode) = self.new_inode(kind, perm, creds, rdev, |_, inode| {
            inode.parent = parent;
            inode.project = project;
            if inherit && kind == FileKind::Directory {
                inode.flags |= FLAG_PROJECT_INHERIT;
            }
        })?;
        self.os
            .zap_insert(self.store, oid(parent), name, &entry_value(ino, kind))?;
        let links = i64::from(kind == FileKind::Directory);
        self.touch_dir(parent, 1, links)?;
        Ok((ino, inode))
    }

    /// Creates a regular file, FIFO, socket or device node `name` in `parent`.
    pub fn mknod(
        &mut self,
        parent: Ino,
        name: &[u8],
        kind: FileKind,
        perm: u32,
        rdev: u64,
        creds: Creds,
    ) -> Result<Attr> {
        if matches!(kind, FileKind::Directory | FileKind::Symlink) {
            return Err(PosixError::Invalid("mknod of a directory or symlink"));
        }
        let rdev = if matches!(kind, FileKind::CharDevice | FileKind::BlockDevice) {
            rdev
        } else {
            0
        };
        let (ino, inode) = self.create(parent, name, kind, perm, rdev, creds)?;
        self.record(|| LogOp::Mknod {
            parent,
            name: name.to_vec(),
            kind,
            perm,
            rdev,
            creds,
            ino,
        });
        self.attr_of(ino, &inode)
    }

    /// Creates directory `name` in `parent`.
    pub fn mkdir(&mut self, parent: Ino, name: &[u8], perm: u32, creds: Creds) -> Result<Attr> {
        let (ino, inode) = self.create(parent, name, FileKind::Directory, perm, 0, creds)?;
        self.record(|| LogOp::Mkdir {
            parent,
            name: name.to_vec(),
            perm,
            creds,
            ino,
        });
        self.attr_of(ino, &inode)
    }

    /// Creates symlink `name` in `parent` pointing at `target`.
    pub fn symlink(
        &mut self,
        parent: Ino,
        name: &[u8],
        target: &[u8],
        creds: Creds,
    ) -> Result<Attr> {
        if target.is_empty() || target.contains(&0) {
            return Err(PosixError::Invalid("symlink target"));
        }
        if target.len() > 4096 {
            return Err(PosixError::NameTooLong);
        }
        let (ino, mut inode) = self.create(parent, name, FileKind::Symlink, 0o777, 0, creds)?;
        inode.size = target.len() as u64;
        if target.len() <= SYMLINK_INLINE_MAX {
            inode.inline = target.to_vec();
        } else {
            self.os.set_block_size(self.store, oid(ino), 4096)?;
            self.os.write(self.store, oid(ino), 0, target)?;
        }
        self.put(ino, &inode)?;
        self.record(|| LogOp::Symlink {
            parent,
            name: name.to_vec(),
            target: target.to_vec(),
            creds,
            ino,
        });
        self.attr_of(ino, &inode)
    }

    /// The target of symlink `ino`.
    pub fn readlink(&mut self, ino: Ino) -> Result<Vec<u8>> {
        let inode = self.inode(ino)?;
        if inode.kind != FileKind::Symlink {
            return Err(PosixError::Invalid(
                "readlink of a file that is not a symlink",
            ));
        }
        if !inode.inline.is_empty() {
            return Ok(inode.inline);
        }
        let len = usize::try_from(inode.size.min(4096)).unwrap_or(4096);
        let mut target = vec![0u8; len];
        self.os.read(self.store, oid(ino), 0, &mut target)?;
        Ok(target)
    }

    /// Adds hard link `newname` in `newparent` to `ino` (not a directory).
    pub fn link(&mut self, ino: Ino, newparent: Ino, newname: &[u8]) -> Result<Attr> {
        check_new_name(newname)?;
        let mut inode = self.inode(ino)?;
        if inode.kind == FileKind::Directory {
            return Err(PosixError::NotPermitted);
        }
        let dir = self.directory(newparent)?;
        if dir.nlink == 0 {
            return Err(PosixError::NotFound);
        }
        if self.entry(newparent, newname)?.is_some() {
            return Err(PosixError::Exists);
        }
        self.check_project_move(ino, newparent)?;
        inode.nlink = inode.nlink.checked_add(1).ok_or(PosixError::TooManyLinks)?;
        inode.ctime = self.now;
        self.put(ino, &inode)?;
        let value = entry_value(ino, inode.kind);
        self.os
            .zap_insert(self.store, oid(newparent), newname, &value)?;
        self.touch_dir(newparent, 1, 0)?;
        self.record(|| LogOp::Link {
            ino,
            parent: newparent,
            name: newname.to_vec(),
        });
        self.attr_of(ino, &inode)
    }

    /// Drops one link of `ino` (its entry is already gone); on the unlinked set at zero.
    fn drop_link(&mut self, ino: Ino) -> Result<Option<Ino>> {
        let mut inode = self.inode(ino)?;
        inode.nlink = if inode.kind == FileKind::Directory {
            0
        } else {
            inode.nlink.saturating_sub(1)
        };
        inode.ctime = self.now;
        self.put(ino, &inode)?;
        if inode.nlink > 0 {
            return Ok(None);
        }
        self.mark_unlinked(ino)?;
        Ok(Some(ino))
    }

    /// Removes `name` (not a directory) from `parent`. Returns the inode if its link count
    /// reached zero: it is then on the unlinked set until [`Fs::reclaim`].
    pub fn unlink(&mut self, parent: Ino, name: &[u8]) -> Result<Option<Ino>> {
        self.directory(parent)?;
        check_name(name)?;
        let (ino, kind) = self.entry(parent, name)?.ok_or(PosixError::NotFound)?;
        if kind == FileKind::Directory {
            return Err(PosixError::IsDir);
        }
        self.os.zap_remove(self.store, oid(parent), name)?;
        self.touch_dir(parent, -1, 0)?;
        let dropped = self.drop_link(ino)?;
        self.record(|| LogOp::Unlink {
            parent,
            name: name.to_vec(),
        });
        Ok(dropped)
    }

    /// Checks that directory `ino` has no entries.
    fn check_empty(&mut self, ino: Ino) -> Result<()> {
        if self.os.zap_count(self.store, oid(ino))? > 0 {
            return Err(PosixError::NotEmpty);
        }
        Ok(())
    }

    /// Removes the empty directory `name` from `parent`. Returns its inode, which is on the
    /// unlinked set until [`Fs::reclaim`].
    pub fn rmdir(&mut self, parent: Ino, name: &[u8]) -> Result<Ino> {
        self.directory(parent)?;
        check_name(name)?;
        if name == b"." || name == b".." {
            return Err(PosixError::Invalid("rmdir of . or .."));
        }
        let (ino, kind) = self.entry(parent, name)?.ok_or(PosixError::NotFound)?;
        if kind != FileKind::Directory {
            return Err(PosixError::NotDir);
        }
        self.check_empty(ino)?;
        self.os.zap_remove(self.store, oid(parent), name)?;
        self.touch_dir(parent, -1, -1)?;
        self.drop_link(ino)?;
        self.record(|| LogOp::Rmdir {
            parent,
            name: name.to_vec(),
        });
        Ok(ino)
    }

    /// True when `dir` is `ancestor` or lies below it.
    fn is_within(&mut self, mut dir: Ino, ancestor: Ino) -> Result<bool> {
        let root = self.root()?;
        for _ in 0..4096 {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == root {
                return Ok(false);
            }
            dir = self.inode(dir)?.parent;
        }
        Err(inode::corrupt(dir, "directory parents form a loop"))
    }

    /// renameat2. Returns the inode that lost its last link when the target was replaced.
    pub fn rename(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<Option<Ino>> {
        let replaced = self.rename_entries(parent, name, newparent, newname, flags)?;
        self.record(|| LogOp::Rename {
            parent,
            name: name.to_vec(),
            newparent,
            newname: newname.to_vec(),
            flags,
        });
        Ok(replaced)
    }

    fn rename_entries(
        &mut self,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: RenameFlags,
    ) -> Result<Option<Ino>> {
        if flags.noreplace && flags.exchange {
            return Err(PosixError::Invalid("RENAME_NOREPLACE with RENAME_EXCHANGE"));
        }
        self.directory(parent)?;
        self.directory(newparent)?;
        check_new_name(name).map_err(|_| PosixError::Invalid("rename of . or .."))?;
        check_new_name(newname)?;
        let (ino, kind) = self.entry(parent, name)?.ok_or(PosixError::NotFound)?;
        let target = self.entry(newparent, newname)?;
        let swapped = target.filter(|_| flags.exchange).map(|(other, _)| other);
        self.check_rename_projects(ino, parent, newparent, swapped)?;
        if kind == FileKind::Directory && self.is_within(newparent, ino)? {
            return Err(PosixError::Invalid("a directory cannot move below itself"));
        }
        if flags.exchange {
            let (other, other_kind) = target.ok_or(PosixError::NotFound)?;
            if other_kind == FileKind::Directory && self.is_within(parent, other)? {
                return Err(PosixError::Invalid("a directory cannot move below itself"));
            }
            return self.exchange(
                parent,
                name,
                (ino, kind),
                newparent,
                newname,
                (other, other_kind),
            );
        }
        if let Some((other, other_kind)) = target {
            if flags.noreplace {
                return Err(PosixError::Exists);
            }
            if other == ino {
                return Ok(None);
            }
            match (
                kind == FileKind::Directory,
                other_kind == FileKind::Directory,
            ) {
                (true, false) => return Err(PosixError::NotDir),
                (false, true) => return Err(PosixError::IsDir),
                (true, true) => self.check_empty(other)?,
                (false, false) => {}
            }
        }
        self.os.zap_remove(self.store, oid(parent), name)?;
        let dir_links = i64::from(kind == FileKind::Directory);
        self.touch_dir(parent, -1, -dir_links)?;
        let mut replaced = None;
        if let Some((other, other_kind)) = target {
            self.os.zap_remove(self.store, oid(newparent), newname)?;
            let other_links = i64::from(other_kind == FileKind::Directory);
            self.touch_dir(newparent, -1, -other_links)?;
            replaced = self.drop_link(other)?;
        }
        let value = entry_value(ino, kind);
        self.os
            .zap_insert(self.store, oid(newparent), newname, &value)?;
        self.touch_dir(newparent, 1, dir_links)?;
        self.moved(ino, newparent)?;
        Ok(replaced)
    }

    /// Records that `ino` now lives in `parent` (its `..`) and changed (ctime).
    fn moved(&mut self, ino: Ino, parent: Ino) -> Result<()> {
        let mut inode = self.inode(ino)?;
        inode.parent = parent;
        inode.ctime = self.now;
        self.put(ino, &inode)
    }

    /// RENAME_EXCHANGE: both entries swap their inodes.
    fn exchange(
        &mut self,
        parent: Ino,
        name: &[u8],
        (ino, kind): (Ino, FileKind),
        newparent: Ino,
        newname: &[u8],
        (other, other_kind): (Ino, FileKind),
    ) -> Result<Option<Ino>> {
        self.os.zap_update(
            self.store,
            oid(parent),
            name,
            &entry_value(other, other_kind),
        )?;
        self.os
            .zap_update(self.store, oid(newparent), newname, &entry_value(ino, kind))?;
        let dirs = |k: FileKind| i64::from(k == FileKind::Directory);
        let shift = dirs(kind) - dirs(other_kind);
        if parent == newparent {
            self.touch_dir(parent, 0, 0)?;
        } else {
            self.touch_dir(parent, 0, -shift)?;
            self.touch_dir(newparent, 0, shift)?;
        }
        self.moved(ino, newparent)?;
        self.moved(other, parent)?;
        Ok(None)
    }

    /// Up to `max` entries of directory `ino` after `cookie` (0 starts with `.` and `..`).
    pub fn readdir(&mut self, ino: Ino, cookie: u64, max: usize) -> Result<Vec<DirEntry>> {
        let dir = self.directory(ino)?;
        let mut out = Vec::new();
        if cookie == 0 && max > out.len() {
            out.push(DirEntry {
                ino,
                kind: FileKind::Directory,
                name: b".".to_vec(),
                cookie: 1,
            });
        }
        if cookie <= 1 && max > out.len() {
            out.push(DirEntry {
                ino: dir.parent,
                kind: FileKind::Directory,
                name: b"..".to_vec(),
                cookie: 2,
            });
        }
        if max <= out.len() {
            return Ok(out);
        }
        // Entries come in hash order; a cookie is the hash (less two bits) of the last entry
        // returned, so entries added or removed meanwhile never shift the others.
        let cursor = (cookie >= COOKIE_FIRST)
            .then(|| ZapCursor::after_hash(((cookie - COOKIE_FIRST) << 2) | 3));
        let room = max - out.len();
        let (entries, _) = self
            .os
            .zap_list_bytes(self.store, oid(ino), cursor.as_ref(), room)?;
        for (name, value) in entries {
            let (child, kind) = decode_entry(ino, &value)?;
            out.push(DirEntry {
                ino: child,
                kind,
                cookie: cookie_of(&name),
                name,
            });
        }
        Ok(out)
    }

    /// Changes attributes (chmod, chown, truncate, utimens); ctime becomes now.
    pub fn setattr(&mut self, ino: Ino, changes: &SetAttr) -> Result<Attr> {
        let mut inode = self.inode(ino)?;
        if let Some(size) = changes.size {
            match inode.kind {
                FileKind::Regular => {
                    self.truncate(ino, &mut inode, size)?;
                }
                FileKind::Directory => return Err(PosixError::IsDir),
                _ => return Err(PosixError::Invalid("truncate of a special file")),
            }
        }
        if let Some(mode) = changes.mode {
            inode.perm = (mode & 0o7777) as u16;
        }
        let owner_changed = changes.uid.is_some_and(|u| u != inode.uid)
            || changes.gid.is_some_and(|g| g != inode.gid);
        if owner_changed && inode.kind == FileKind::Regular && changes.mode.is_none() {
            // As Linux does on chown: the setuid bit goes, and setgid if group-executable.
            inode.perm &= !S_ISUID;
            if inode.perm & S_IXGRP != 0 {
                inode.perm &= !S_ISGID;
            }
        }
        inode.uid = changes.uid.unwrap_or(inode.uid);
        inode.gid = changes.gid.unwrap_or(inode.gid);
        let at = |t: TimeOrNow, now| match t {
            TimeOrNow::Now => now,
            TimeOrNow::At(t) => t,
        };
        if let Some(t) = changes.atime {
            inode.atime = at(t, self.now);
        }
        if let Some(t) = changes.mtime {
            inode.mtime = at(t, self.now);
        }
        inode.ctime = self.now;
        self.put(ino, &inode)?;
        self.record(|| LogOp::SetAttr {
            ino,
            changes: *changes,
        });
        self.attr_of(ino, &inode)
    }

    /// A path for inode `ino` relative to the root (`a/b/file`), following the parent it was
    /// created in or last moved to: how damaged files are named. `None` when some link is
    /// gone (the file was deleted).
    pub fn path_of(&mut self, ino: Ino) -> Result<Option<Vec<u8>>> {
        let root = self.root()?;
        let mut parts: Vec<Vec<u8>> = Vec::new();
        let mut at = ino;
        while at != root {
            let inode = match self.inode(at) {
                Ok(inode) => inode,
                Err(PosixError::NotFound) => return Ok(None),
                Err(e) => return Err(e),
            };
            let Some(name) = self.name_in(inode.parent, at)? else {
                return Ok(None);
            };
            parts.push(name);
            at = inode.parent;
            if parts.len() > 4096 {
                return Err(inode::corrupt(at, "directory parents form a loop"));
            }
        }
        parts.reverse();
        Ok(Some(parts.join(&b'/')))
    }

    /// Every path (relative to the root) whose last entry names an inode `wanted` accepts,
    /// found by walking the directory tree from the root: how the files of a lost dnode
    /// block are named, since their own dnodes (and parent links) cannot be read. Reads only
    /// directories: an entry carries its file's kind. A directory that cannot be listed is
    /// skipped (the walk names what it can reach).
    pub fn paths_naming(&mut self, wanted: &dyn Fn(Ino) -> bool) -> Result<Vec<(Ino, Vec<u8>)>> {
        let root = self.root()?;
        let mut found = Vec::new();
        let mut queue = std::collections::VecDeque::from([(root, Vec::new())]);
        let mut seen = std::collections::HashSet::from([root]);
        while let Some((dir, path)) = queue.pop_front() {
            let Ok(entries) = self.entries_of(dir) else {
                continue;
            };
            for (name, ino, kind) in entries {
                let mut child: Vec<u8> = path.clone();
                if !child.is_empty() {
                    child.push(b'/');
                }
                child.extend_from_slice(&name);
                if wanted(ino) {
                    found.push((ino, child.clone()));
                }
                if kind == FileKind::Directory && seen.insert(ino) {
                    queue.push_back((ino, child));
                }
            }
        }
        Ok(found)
    }

    /// Every entry of directory `dir`: name, inode, kind.
    fn entries_of(&mut self, dir: Ino) -> Result<Vec<(Vec<u8>, Ino, FileKind)>> {
        let mut out = Vec::new();
        let mut cursor = None;
        loop {
            let (entries, next) =
                self.os
                    .zap_list_bytes(self.store, oid(dir), cursor.as_ref(), 1024)?;
            for (name, value) in entries {
                let (ino, kind) = decode_entry(dir, &value)?;
                out.push((name, ino, kind));
            }
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(out),
            }
        }
    }

    /// The name under which directory `dir` lists `ino` (a scan of the directory).
    fn name_in(&mut self, dir: Ino, ino: Ino) -> Result<Option<Vec<u8>>> {
        let mut cursor = None;
        loop {
            let (entries, next) =
                match self
                    .os
                    .zap_list_bytes(self.store, oid(dir), cursor.as_ref(), 1024)
                {
                    Ok(listed) => listed,
                    Err(ObjectError::NoSuchObject { .. }) => return Ok(None),
                    Err(e) => return Err(e.into()),
                };
            for (name, value) in entries {
                if decode_entry(dir, &value)?.0 == ino {
                    return Ok(Some(name));
                }
            }
            match next {
                Some(next) => cursor = Some(next),
                None => return Ok(None),
            }
        }
    }
}
