//! Requests in the snapshot directory (`.tarn`, `.tarn/snapshot`, and the snapshots under
//! it; numbers in `crate::snapdir`): answered from the snapshots' committed object sets
//! through `Engine::fs_snapshot_read`, read-only (every change is EROFS, refused in `ops.rs`
//! before it reaches here). No handles are kept: a snapshot's inodes are never reclaimed.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, ReplyAttr,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEntry, ReplyOpen, Request,
};
use tarn_base::Guid;
use tarn_engine::posix::access::{self, MAY_EXEC, MAY_READ};
use tarn_engine::posix::{Attr, DirEntry, FileKind, Fs, Ino, PosixError};
use tarn_engine::{FsOp, SnapshotDir};

use super::{ProcGroups, Result, TarnFs, caller, entry_ttl, file_type, found};
use crate::opstats::{engine_timed, posix_timed};
use crate::snapdir::{self, CONTROL, CONTROL_NAME, Place, SNAPSHOTS, SNAPSHOTS_NAME};
use crate::{TTL, ino::KERNEL_ROOT};

/// One entry of a listing: its name, kernel number and attributes.
type Listed = (Vec<u8>, u64, FileAttr);

impl TarnFs {
    /// Runs `f` on the snapshot in `slot`; ENOENT when the slot or its snapshot is gone.
    pub(super) fn run_snapshot<R>(
        &self,
        slot: u64,
        f: impl FnOnce(&mut Fs<'_>) -> std::result::Result<R, PosixError>,
    ) -> Result<R> {
        let guid = self.snaps.guid_of(slot).ok_or(Errno::ENOENT)?;
        self.run_guid(guid, f)
    }

    fn run_guid<R>(
        &self,
        guid: Guid,
        f: impl FnOnce(&mut Fs<'_>) -> std::result::Result<R, PosixError>,
    ) -> Result<R> {
        let _in_flight = self.shared.counters.enter();
        engine_timed(|| {
            self.engine
                .fs_snapshot_read(&self.pool, self.dataset, guid, |fs| posix_timed(|| f(fs)))
        })
        .map_err(|e| Errno::from_i32(e.errno()))
    }

    fn snapshot_dir(&self) -> Result<SnapshotDir> {
        self.engine
            .fs_snapshot_dir(&self.pool, self.dataset)
            .map_err(|e| Errno::from_i32(e.errno()))
    }

    /// The attributes of `.tarn` or `.tarn/snapshot`: a directory nobody may change, with
    /// the times and owner of the head's root.
    pub(super) fn control_attr(&self, kernel: u64) -> Result<FileAttr> {
        let root = self.ino(INodeNo(KERNEL_ROOT));
        let attr = self.run(FsOp::Read, |fs| fs.getattr(root))?;
        let mut file = self.file_attr(&attr);
        file.ino = INodeNo(kernel);
        file.perm = 0o555;
        file.nlink = 2;
        file.size = 0;
        file.blocks = 0;
        Ok(file)
    }

    /// The attributes of `attr` (an inode of the snapshot in `slot`) as the kernel sees them.
    fn snapshot_attr(&self, slot: u64, attr: &Attr) -> Result<FileAttr> {
        let mut file = self.file_attr(attr);
        file.ino = INodeNo(snapdir::kernel_of(slot, attr.ino).ok_or(Errno::EOVERFLOW)?);
        Ok(file)
    }

    /// The root of snapshot `name`, as an entry of `.tarn/snapshot`.
    fn snapshot_root(&self, name: &[u8]) -> Result<FileAttr> {
        let dir = self.snapshot_dir()?;
        let guid = dir
            .snapshots
            .iter()
            .find(|(n, _)| n.as_bytes() == name)
            .map(|(_, guid)| *guid)
            .ok_or(Errno::ENOENT)?;
        let slot = self.snaps.slot_of(guid).ok_or(Errno::ENOSPC)?;
        let attr = self.run_guid(guid, |fs| {
            let root = fs.root()?;
            fs.getattr(root)
        })?;
        self.snapshot_attr(slot, &attr)
    }

    /// Replies to a LOOKUP in the snapshot namespace (`parent` is in it, or is the root and
    /// `name` is `.tarn`). Names of `.tarn` and `.tarn/snapshot` get entry TTL 0, so a
    /// destroyed snapshot's directory is gone at the next walk.
    pub(super) fn lookup_snapshot_dir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        reply: ReplyEntry,
    ) {
        let bytes = name.as_bytes();
        let result = match snapdir::place(parent.0) {
            Place::Head => self.control_attr(CONTROL).map(|f| (f, Duration::ZERO)),
            Place::Control(CONTROL) if bytes == SNAPSHOTS_NAME => {
                self.control_attr(SNAPSHOTS).map(|f| (f, Duration::ZERO))
            }
            Place::Control(SNAPSHOTS) => self.snapshot_root(bytes).map(|f| (f, Duration::ZERO)),
            Place::Control(_) => Err(Errno::ENOENT),
            Place::Snapshot { slot, ino } => {
                let groups = ProcGroups::of(req);
                let who = self.restricted(req, &groups);
                self.run_snapshot(slot, |fs| {
                    let mut cacheable = true;
                    if self.checks() {
                        let dir = fs.getattr(ino)?;
                        if let Some(who) = &who
                            && dir.kind == FileKind::Directory
                        {
                            access::check(&dir, who, MAY_EXEC)?;
                        }
                        cacheable = self.cacheable(&dir);
                    }
                    Ok((found(fs.lookup(ino, bytes))?, cacheable))
                })
                .and_then(|(attr, cacheable)| {
                    let attr = attr.ok_or(Errno::ENOENT)?;
                    Ok((self.snapshot_attr(slot, &attr)?, entry_ttl(cacheable)))
                })
            }
        };
        match result {
            Ok((file, ttl)) => {
                self.shared.kernel.looked_up(parent.0, bytes, file.ino.0);
                reply.entry_with_ttls(&TTL, &ttl, &file, Generation(0));
            }
            Err(errno) => reply.error(errno),
        }
    }

    /// GETATTR of a number in the snapshot namespace.
    pub(super) fn getattr_snapshot_dir(&self, kernel: INodeNo, reply: ReplyAttr) {
        let result = match snapdir::place(kernel.0) {
            Place::Control(number @ (CONTROL | SNAPSHOTS)) => self.control_attr(number),
            Place::Snapshot { slot, ino } => self
                .run_snapshot(slot, |fs| fs.getattr(ino))
                .and_then(|attr| self.snapshot_attr(slot, &attr)),
            Place::Head | Place::Control(_) => Err(Errno::ENOENT),
        };
        match result {
            Ok(file) => reply.attr(&TTL, &file),
            Err(errno) => reply.error(errno),
        }
    }

    /// OPEN and OPENDIR in the snapshot namespace: only for reading.
    pub(super) fn open_snapshot_dir(
        &self,
        req: &Request,
        kernel: INodeNo,
        flags: i32,
        dir: bool,
        reply: ReplyOpen,
    ) {
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return reply.error(Errno::EROFS);
        }
        let result = match snapdir::place(kernel.0) {
            Place::Control(CONTROL | SNAPSHOTS) if dir => Ok(()),
            Place::Control(CONTROL | SNAPSHOTS) => Err(Errno::EISDIR),
            Place::Snapshot { slot, ino } => {
                let groups = ProcGroups::of(req);
                let who = Some(caller(req, &groups)).filter(|_| self.checks());
                self.run_snapshot(slot, |fs| {
                    let attr = fs.getattr(ino)?;
                    if let Some(who) = &who {
                        if dir {
                            access::check(&attr, who, MAY_READ)?;
                        } else {
                            Self::may_open(&attr, who, flags)?;
                        }
                    }
                    Ok(attr.kind)
                })
                .and_then(|kind| match (dir, kind == FileKind::Directory) {
                    (true, false) => Err(Errno::ENOTDIR),
                    _ => Ok(()),
                })
            }
            Place::Head | Place::Control(_) => Err(Errno::ENOENT),
        };
        match result {
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Err(errno) => reply.error(errno),
        }
    }

    /// The entries of a directory of the snapshot namespace from `cookie` on, with their
    /// attributes.
    fn list_snapshot_dir(&self, kernel: INodeNo, cookie: u64) -> Result<Vec<(u64, Listed)>> {
        let dot = |name: &[u8], number: u64, cookie: u64| -> Result<(u64, Listed)> {
            Ok((cookie, (name.to_vec(), number, self.control_attr(number)?)))
        };
        let mut out = Vec::new();
        match snapdir::place(kernel.0) {
            Place::Control(CONTROL) => {
                let all = [
                    (b".".as_slice(), CONTROL),
                    (b"..".as_slice(), KERNEL_ROOT),
                    (SNAPSHOTS_NAME, SNAPSHOTS),
                ];
                for (index, (name, number)) in (1u64..).zip(all) {
                    if index > cookie {
                        out.push(dot(name, number, index)?);
                    }
                }
            }
            Place::Control(SNAPSHOTS) => {
                for (index, (name, number)) in (1u64..).zip([(".", SNAPSHOTS), ("..", CONTROL)]) {
                    if index > cookie {
                        out.push(dot(name.as_bytes(), number, index)?);
                    }
                }
                let dir = self.snapshot_dir()?;
                for (index, (name, _)) in (3u64..).zip(dir.snapshots) {
                    if index <= cookie {
                        continue;
                    }
                    // A snapshot destroyed since the list was read is left out.
                    match self.snapshot_root(name.as_bytes()) {
                        Ok(file) => out.push((index, (name.into_bytes(), file.ino.0, file))),
                        Err(Errno::ENOENT) => {}
                        Err(errno) => return Err(errno),
                    }
                }
            }
            Place::Snapshot { slot, ino } => {
                let listed = self.run_snapshot(slot, |fs| {
                    let entries: Vec<DirEntry> = fs.readdir(ino, cookie, super::READDIR_BATCH)?;
                    entries
                        .into_iter()
                        .map(|entry| fs.getattr(entry.ino).map(|attr| (entry, attr)))
                        .collect::<std::result::Result<Vec<_>, _>>()
                })?;
                for (entry, attr) in listed {
                    let file = self.snapshot_attr(slot, &attr)?;
                    out.push((entry.cookie, (entry.name, file.ino.0, file)));
                }
            }
            Place::Head | Place::Control(_) => return Err(Errno::ENOENT),
        }
        Ok(out)
    }

    /// READDIR in the snapshot namespace.
    pub(super) fn readdir_snapshot_dir(
        &self,
        kernel: INodeNo,
        cookie: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.list_snapshot_dir(kernel, cookie) {
            Ok(listed) => {
                for (next, (name, number, file)) in listed {
                    if reply.add(INodeNo(number), next, file.kind, OsStr::from_bytes(&name)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(errno) => reply.error(errno),
        }
    }

    /// READDIRPLUS in the snapshot namespace: names of `.tarn/snapshot` get TTL 0 (as in
    /// a lookup), names inside a snapshot the head's rule.
    pub(super) fn readdirplus_snapshot_dir(
        &self,
        kernel: INodeNo,
        cookie: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ttl = match snapdir::place(kernel.0) {
            Place::Snapshot { .. } if !self.checks() => TTL,
            _ => Duration::ZERO,
        };
        match self.list_snapshot_dir(kernel, cookie) {
            Ok(listed) => {
                for (next, (name, number, file)) in listed {
                    let os = OsStr::from_bytes(&name);
                    if reply.add(INodeNo(number), next, os, &ttl, &file, Generation(0)) {
                        break;
                    }
                    if name != b"." && name != b".." {
                        self.shared.kernel.looked_up(kernel.0, &name, number);
                    }
                }
                reply.ok();
            }
            Err(errno) => reply.error(errno),
        }
    }

    /// The `.tarn` entry of the root's listing after `..` (cookie 2, the cookie of `..`,
    /// so a listing resumed from it goes on with the real entries), when `snapdir=visible`.
    pub(super) fn control_entry(&self, dir: Ino, cookie: u64) -> Option<FileAttr> {
        if dir != self.ino(INodeNo(KERNEL_ROOT)) || cookie > 1 {
            return None;
        }
        match self.snapshot_dir() {
            Ok(found) if found.visible => self.control_attr(CONTROL).ok(),
            _ => None,
        }
    }

    /// The name of the control directory, for the root's listings.
    pub(super) fn control_name() -> &'static OsStr {
        OsStr::from_bytes(CONTROL_NAME)
    }

    /// The kind of a control directory in a listing.
    pub(super) fn control_kind() -> FileType {
        file_type(FileKind::Directory)
    }
}
