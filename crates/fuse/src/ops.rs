//! [`TarnFs`]: the `fuser::Filesystem` of one dataset. Each request is one
//! `Engine::fs_op` (or `fs_sync`/`fs_statfs`) and exactly one reply (I4). Requests arrive on
//! several session threads at once, so every method takes `&self` and the only state here
//! (handles, the kernel-cache table, counters) sits behind its own short lock or atomics.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, KernelConfig,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
};
use tarn_engine::posix::access::{self, Caller, MAY_EXEC, MAY_READ, MAY_WRITE};
use tarn_engine::posix::{
    Attr, Creds, Fallocate, FileKind, Fs, Ino, PosixError, ReadData, RenameFlags, Seek, SetAttr,
    TimeOrNow, Timespec, XattrSet,
};
use tarn_engine::{DatasetId, Engine, FsOp, MountSpec, PendingRead, ReadStep};

use crate::acl;
use crate::cache::Stamp;
use crate::fetchers::Fetchers;
use crate::handles::Handles;
use crate::ino::InoMap;
use crate::ino::KERNEL_ROOT;
use crate::opstats::{self, Opcode, engine_timed, posix_timed};
use crate::snapdir::{self, Place};
use crate::{ENTRY_TTL, MAX_WRITE, Shared, TTL};

/// Most bytes one `copy_file_range` reply counts (module `copy_file_range` docs).
const COPY_REPLY_MAX: u64 = 1 << 31;

mod snap;

/// Directory entries fetched from the POSIX layer per readdir request (the kernel's buffer
/// usually holds fewer; the rest are fetched again from the last cookie).
pub(crate) const READDIR_BATCH: usize = 128;

/// Asynchronous requests (readahead, writes of mmap'd pages) the kernel may queue at once:
/// enough to keep every session thread busy with readahead of a few files.
const MAX_BACKGROUND: u16 = 64;

/// One mounted dataset.
pub(crate) struct TarnFs {
    engine: Arc<Engine>,
    pool: String,
    dataset: DatasetId,
    readonly: bool,
    acl: bool,
    /// The server checks permissions (`Permissions::Server` and no ACLs).
    server_checks: bool,
    inos: InoMap,
    handles: Handles,
    shared: Arc<Shared>,
    /// The dataset inodes whose kernel numbers the kernel still holds: a new inode never
    /// takes one (`Fs::avoid_inos`).
    held: tarn_engine::posix::InoFilter,
    /// The snapshots the kernel was shown under `.tarn/snapshot`, by slot (`snapdir.rs`).
    snaps: snapdir::Slots,
}

type Result<T> = std::result::Result<T, Errno>;

fn file_type(kind: FileKind) -> FileType {
    match kind {
        FileKind::Regular => FileType::RegularFile,
        FileKind::Directory => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// The kind of node a `mknod` mode asks for.
fn node_kind(mode: u32) -> Result<FileKind> {
    match mode & libc::S_IFMT {
        libc::S_IFREG | 0 => Ok(FileKind::Regular),
        libc::S_IFIFO => Ok(FileKind::Fifo),
        libc::S_IFSOCK => Ok(FileKind::Socket),
        libc::S_IFCHR => Ok(FileKind::CharDevice),
        libc::S_IFBLK => Ok(FileKind::BlockDevice),
        _ => Err(Errno::EINVAL),
    }
}

fn system_time(time: Timespec) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(time.nsecs));
    if time.secs >= 0 {
        let secs = Duration::from_secs(time.secs.unsigned_abs());
        UNIX_EPOCH.checked_add(secs + nanos).unwrap_or(UNIX_EPOCH)
    } else {
        let secs = Duration::from_secs(time.secs.unsigned_abs());
        UNIX_EPOCH
            .checked_sub(secs)
            .and_then(|t| t.checked_add(nanos))
            .unwrap_or(UNIX_EPOCH)
    }
}

fn timespec(time: SystemTime) -> Timespec {
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => Timespec {
            secs: i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
            nsecs: after.subsec_nanos(),
        },
        Err(before) => {
            let before = before.duration();
            let secs = i64::try_from(before.as_secs()).unwrap_or(i64::MAX);
            match before.subsec_nanos() {
                0 => Timespec {
                    secs: -secs,
                    nsecs: 0,
                },
                nanos => Timespec {
                    secs: -secs - 1,
                    nsecs: 1_000_000_000 - nanos,
                },
            }
        }
    }
}

fn time_or_now(time: fuser::TimeOrNow) -> TimeOrNow {
    match time {
        fuser::TimeOrNow::Now => TimeOrNow::Now,
        fuser::TimeOrNow::SpecificTime(at) => TimeOrNow::At(timespec(at)),
    }
}

fn creds(req: &Request) -> Creds {
    Creds {
        uid: req.uid(),
        gid: req.gid(),
    }
}

/// How long the kernel may keep a name: [`ENTRY_TTL`] when every caller may search its
/// directory, else not at all (the kernel would walk it without a search check).
fn entry_ttl(cacheable: bool) -> Duration {
    if cacheable { ENTRY_TTL } else { Duration::ZERO }
}

/// `__FMODE_EXEC`: the kernel's own open flag for an `execve`, passed on in the open flags.
const FMODE_EXEC: i32 = 0x20;

/// The supplementary groups of the process that sent a request, read from
/// `/proc/PID/status` the first time a permission check needs them (most never do:
/// `access::permits` asks only when group and other bits differ). A process that is gone
/// or unreadable has none, which can only deny.
struct ProcGroups {
    pid: u32,
    groups: std::cell::OnceCell<Vec<u32>>,
}

impl ProcGroups {
    fn of(req: &Request) -> ProcGroups {
        ProcGroups {
            pid: req.pid(),
            groups: std::cell::OnceCell::new(),
        }
    }
}

impl access::Groups for ProcGroups {
    fn contains(&self, gid: u32) -> bool {
        self.groups
            .get_or_init(|| proc_groups(self.pid))
            .as_slice()
            .contains(&gid)
    }
}

/// The `Groups:` line of `/proc/PID/status` (the request's pid is the calling thread's).
fn proc_groups(pid: u32) -> Vec<u32> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Vec::new();
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("Groups:"))
        .map(|groups| {
            groups
                .split_whitespace()
                .filter_map(|gid| gid.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether process `pid` holds `CAP_FSETID` (bit 4 of `CapEff:` in `/proc/PID/status`): with
/// it a truncate keeps the setuid and setgid bits ("Set-id bits" in the crate docs). A
/// process that is gone or unreadable holds nothing, so the bits go: the safe side.
fn holds_cap_fsetid(pid: u32) -> bool {
    const CAP_FSETID: u32 = 4;
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|caps| u64::from_str_radix(caps.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_FSETID) != 0)
}

/// Drops the setuid bit of `ino`, and setgid when group-executable (`access::
/// perm_without_set_id`), as a chmod in the same `fs_op` as the change that asks for it,
/// so the intent log records it with that change; with ACLs on the access ACL follows.
fn drop_set_id(fs: &mut Fs<'_>, ino: Ino, acl: bool) -> std::result::Result<(), PosixError> {
    let Some(perm) = access::perm_without_set_id(&fs.getattr(ino)?) else {
        return Ok(());
    };
    let changes = SetAttr {
        mode: Some(perm),
        ..SetAttr::default()
    };
    let attr = fs.setattr(ino, &changes)?;
    TarnFs::after_setattr(fs, ino, attr, &changes, acl)?;
    Ok(())
}

fn caller<'a>(req: &Request, groups: &'a ProcGroups) -> Caller<'a> {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        groups,
    }
}

/// A name that was just found or looked up does not exist: `None` instead of an error.
fn found(
    result: std::result::Result<Attr, PosixError>,
) -> std::result::Result<Option<Attr>, PosixError> {
    match result {
        Ok(attr) => Ok(Some(attr)),
        Err(PosixError::NotFound) => Ok(None),
        Err(error) => Err(error),
    }
}

/// The xattr reply for `value` under the size-probe protocol: size 0 asks for the length,
/// a buffer too small is ERANGE.
fn reply_xattr(reply: ReplyXattr, size: u32, value: &[u8]) {
    let Ok(len) = u32::try_from(value.len()) else {
        return reply.error(Errno::E2BIG);
    };
    if size == 0 {
        reply.size(len);
    } else if len > size {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(value);
    }
}

impl TarnFs {
    pub(crate) fn new(
        engine: Arc<Engine>,
        spec: &MountSpec,
        root: Ino,
        shared: Arc<Shared>,
        server_checks: bool,
    ) -> TarnFs {
        TarnFs {
            engine,
            pool: spec.pool.clone(),
            dataset: spec.dataset,
            readonly: spec.readonly,
            acl: spec.acl,
            server_checks,
            inos: InoMap::new(root),
            handles: Handles::default(),
            held: {
                let (inos, shared) = (InoMap::new(root), Arc::clone(&shared));
                Arc::new(move |ino| shared.kernel.holds(inos.to_kernel(ino)))
            },
            shared,
            snaps: snapdir::Slots::default(),
        }
    }

    /// EROFS for a change in the snapshot directory (`kernel` is in it, or `name` in the
    /// root is `.tarn`).
    fn refused(&self, kernel: INodeNo, name: Option<&OsStr>) -> Option<Errno> {
        let control = kernel.0 == KERNEL_ROOT && name.is_some_and(|n| n.as_bytes() == b".tarn");
        (snapdir::is_snapshot_dir(kernel.0) || control).then_some(Errno::EROFS)
    }

    /// Runs `f` on inode `kernel` of a snapshot (read-only); `control` is the answer for
    /// `.tarn` and `.tarn/snapshot`, which hold no data.
    fn in_snapshot<R>(
        &self,
        kernel: INodeNo,
        control: Errno,
        f: impl FnOnce(&mut Fs<'_>, Ino) -> std::result::Result<R, PosixError>,
    ) -> Result<R> {
        match snapdir::place(kernel.0) {
            Place::Snapshot { slot, ino } => self.run_snapshot(slot, |fs| f(fs, ino)),
            Place::Control(_) => Err(control),
            Place::Head => Err(Errno::EINVAL),
        }
    }

    /// Runs one POSIX operation through the engine; errors become errnos. `f` may run again
    /// (a read that waited for `clear` under `failmode=wait`: [`Engine::fs_op`]).
    fn run<R>(
        &self,
        op: FsOp,
        mut f: impl FnMut(&mut Fs<'_>) -> std::result::Result<R, PosixError>,
    ) -> Result<R> {
        if self.readonly && op != FsOp::Read {
            return Err(Errno::EROFS);
        }
        let _in_flight = self.shared.counters.enter();
        engine_timed(|| {
            let timed = |fs: &mut Fs<'_>| posix_timed(|| f(fs));
            if op == FsOp::Read {
                self.engine.fs_read(&self.pool, self.dataset, timed)
            } else {
                self.engine.fs_op(&self.pool, self.dataset, op, timed)
            }
        })
        .map_err(|e| Errno::from_i32(e.errno()))
    }

    /// The rest of a READ whose blocks must come from the devices, on a fetcher thread
    /// when one is free (module `fetchers`), so that this session thread takes the next
    /// request meanwhile.
    fn finish_read<F>(
        &self,
        pending: PendingRead,
        mut read: F,
        reply: ReplyData,
        suspended: Option<opstats::Suspended>,
    ) where
        F: FnMut(&mut Fs<'_>) -> std::result::Result<ReadData, PosixError> + Send + 'static,
    {
        let engine = Arc::clone(&self.engine);
        let shared = Arc::clone(&self.shared);
        let job = move || {
            let _timed = suspended.map(|suspended| shared.ops.resume(suspended));
            let result = {
                let _in_flight = shared.counters.resume();
                engine_timed(|| engine.fs_read_finish(pending, |fs| posix_timed(|| read(fs))))
            };
            match result {
                Ok(data) => data.reply_with(|bytes| reply.data(bytes)),
                Err(error) => reply.error(Errno::from_i32(error.errno())),
            }
        };
        if let Err(job) = Fetchers::global().offer(Box::new(job)) {
            job();
        }
    }

    fn ino(&self, kernel: INodeNo) -> Ino {
        self.inos.to_dataset(kernel.0)
    }

    fn file_attr(&self, attr: &Attr) -> FileAttr {
        FileAttr {
            ino: INodeNo(self.inos.to_kernel(attr.ino)),
            size: attr.size,
            blocks: attr.blocks,
            atime: system_time(attr.atime),
            mtime: system_time(attr.mtime),
            ctime: system_time(attr.ctime),
            crtime: system_time(attr.crtime),
            kind: file_type(attr.kind),
            perm: attr.perm,
            nlink: attr.nlink,
            uid: attr.uid,
            gid: attr.gid,
            rdev: u32::try_from(attr.rdev).unwrap_or(0),
            blksize: attr.blksize,
            flags: 0,
        }
    }

    /// Replies with the entry `name` in `parent` (a kernel inode number), which the kernel
    /// then holds: one more lookup in the kernel-cache table.
    /// `cacheable`: every caller may search `parent` ([`TarnFs::entry_ttl`]).
    fn reply_entry(
        &self,
        reply: ReplyEntry,
        parent: INodeNo,
        name: &OsStr,
        result: Result<(Attr, bool)>,
    ) {
        match result {
            Ok((attr, cacheable)) => {
                let file = self.file_attr(&attr);
                self.shared
                    .kernel
                    .looked_up(parent.0, name.as_bytes(), file.ino.0);
                let generation = Generation(attr.generation);
                reply.entry_with_ttls(&TTL, &entry_ttl(cacheable), &file, generation);
            }
            Err(errno) => reply.error(errno),
        }
    }

    /// Replies to a lookup of a missing `name` in `parent`: a negative entry (inode 0) the
    /// kernel keeps for [`ENTRY_TTL`], recorded for `invalidate_all` (`cache.rs`), or a plain
    /// ENOENT when the record is full.
    fn reply_missing(&self, reply: ReplyEntry, parent: INodeNo, name: &OsStr) {
        // The instant only dates the record for pruning; nothing waits on it.
        #[allow(clippy::disallowed_methods)]
        let now = Instant::now();
        if !self
            .shared
            .kernel
            .missing(parent.0, name.as_bytes(), now, ENTRY_TTL)
        {
            return reply.error(Errno::ENOENT);
        }
        self.shared.counters.negative();
        let none = FileAttr {
            ino: INodeNo(0),
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::RegularFile,
            perm: 0,
            nlink: 0,
            uid: 0,
            gid: 0,
            rdev: 0,
            blksize: 0,
            flags: 0,
        };
        reply.entry_with_ttls(&Duration::ZERO, &ENTRY_TTL, &none, Generation(0));
    }

    /// Whether the server checks permissions (`Permissions::Server` with `acltype=off`);
    /// otherwise the kernel does (`default_permissions`).
    fn checks(&self) -> bool {
        self.server_checks
    }

    /// The caller whose permissions the server must check: `None` when the kernel checks
    /// them or the caller is root (root passes every check but execute bits, which
    /// `open` and `access` check themselves).
    fn restricted<'a>(&self, req: &Request, groups: &'a ProcGroups) -> Option<Caller<'a>> {
        Some(caller(req, groups)).filter(|who| self.checks() && !who.is_root())
    }

    /// Whether names in directory `dir` may stay in the kernel's cache: always when the
    /// kernel checks permissions itself; otherwise only when every caller may search
    /// `dir`, since the kernel walks a cached name without asking the server and so
    /// without a search check (lib.rs, "Permission checks").
    fn cacheable(&self, dir: &Attr) -> bool {
        !self.checks() || access::searchable_by_all(dir)
    }

    /// The directory `parent` for a new name in it, checked for write and search
    /// permission; whether names in it are cacheable.
    fn creating(
        &self,
        fs: &mut Fs<'_>,
        parent: Ino,
        who: Option<&Caller<'_>>,
    ) -> std::result::Result<bool, PosixError> {
        if !self.checks() {
            return Ok(true);
        }
        let dir = fs.getattr(parent)?;
        if let Some(who) = who {
            access::may_create(&dir, who)?;
        }
        Ok(self.cacheable(&dir))
    }

    /// Checks that `who` may remove the name `name` from `parent`.
    fn deleting(
        fs: &mut Fs<'_>,
        parent: Ino,
        name: &[u8],
        who: &Caller<'_>,
    ) -> std::result::Result<(), PosixError> {
        let dir = fs.getattr(parent)?;
        access::check(&dir, who, MAY_WRITE | MAY_EXEC)?;
        if access::sticky_applies(&dir, who) {
            let victim = fs.lookup(parent, name)?;
            access::may_delete(&dir, &victim, who)?;
        }
        Ok(())
    }

    /// Checks an open of `attr`'s inode with `flags` by `who`: read and/or write as the
    /// access mode says, or only execute for an `execve` (which needs no read permission).
    fn may_open(attr: &Attr, who: &Caller<'_>, flags: i32) -> std::result::Result<(), PosixError> {
        let exec = flags & FMODE_EXEC != 0;
        let mode = flags & libc::O_ACCMODE;
        let read = !exec && (mode == libc::O_RDONLY || mode == libc::O_RDWR);
        let write = mode == libc::O_WRONLY || mode == libc::O_RDWR;
        access::may_open(attr, who, read, write, exec)
    }

    /// A `user.` attribute needs read permission on the file to be read and write
    /// permission to be set or removed (the kernel checks the other namespaces itself:
    /// `trusted.` needs CAP_SYS_ADMIN, `security.` is the security module's).
    fn user_xattr(
        fs: &mut Fs<'_>,
        ino: Ino,
        name: &OsStr,
        who: Option<&Caller<'_>>,
        want: u32,
    ) -> std::result::Result<(), PosixError> {
        match who {
            Some(who) if name.as_bytes().starts_with(b"user.") => {
                access::check(&fs.getattr(ino)?, who, want)
            }
            _ => Ok(()),
        }
    }

    /// Tells the kernel to drop the names it holds in directory `dir` (a kernel inode
    /// number), positive and negative: `dir` stopped being searchable by everyone, so the
    /// next walk through each name must ask the server. Sent from a thread of its own after
    /// the reply to the change: the kernel holds `dir`'s lock until it has the reply, and
    /// the notification waits for that lock, which a session thread must never do (a
    /// request holding the lock could be waiting for that very thread). Best effort.
    fn drop_names_in(&self, dir: u64) {
        let Some(notifier) = self.shared.notifier.get().cloned() else {
            return;
        };
        let names = self.shared.kernel.names_in(dir);
        if names.is_empty() {
            return;
        }
        let _ = std::thread::Builder::new()
            .name("fuse-inval".into())
            .spawn(move || {
                for name in names {
                    let _ = notifier.inval_entry(INodeNo(dir), OsStr::from_bytes(&name));
                }
            });
    }

    fn reply_attr(&self, reply: ReplyAttr, result: Result<Attr>) {
        match result {
            Ok(attr) => reply.attr(&TTL, &self.file_attr(&attr)),
            Err(errno) => reply.error(errno),
        }
    }

    /// Runs `change` (an unlink, rmdir or rename) and, in the same `fs_op`, reclaims the
    /// inode it took the last link of unless a handle holds it (I2): one engine call, not
    /// two. The handle table's lock is taken inside the pool lock here (lib.rs, lock
    /// order). A failed reclaim leaves the inode on the unlinked set, which the next mount
    /// drains; the change itself stands.
    fn unlink_with(
        &self,
        mut change: impl FnMut(&mut Fs<'_>) -> std::result::Result<Option<Ino>, PosixError>,
    ) -> Result<()> {
        self.run(FsOp::Free, |fs| {
            let gone = change(fs)?;
            if let Some(ino) = gone
                && self.handles.unlinked(ino)
            {
                let _ = fs.reclaim(ino);
                self.handles.reclaimed(ino);
            }
            Ok(())
        })
    }

    fn release_handle(&self, ino: Ino) {
        if self.handles.release(ino) {
            let _ = self.run(FsOp::Free, |fs| fs.reclaim(ino));
            self.handles.reclaimed(ino);
        }
    }

    /// A batch of `dir`'s entries from `cookie` on; the listing is an access of `dir`.
    fn readdir_batch(&self, dir: Ino, cookie: u64) -> Result<Vec<tarn_engine::posix::DirEntry>> {
        self.run(FsOp::Read, |fs| {
            let entries = fs.readdir(dir, cookie, READDIR_BATCH)?;
            // The access time is best effort: a failure to record it never fails the listing.
            let _ = fs.accessed(dir);
            Ok(entries)
        })
    }

    /// Opens a handle of `ino` and tells the kernel whether the pages it cached at the last
    /// open are still good (`FOPEN_KEEP_CACHE`: mtime, ctime and size unchanged since).
    fn open_handle(&self, ino: Ino, attr: &Attr) -> Result<(FileHandle, FopenFlags)> {
        let handle = self.handles.open(ino).ok_or(Errno::ENOENT)?;
        let kernel = self.inos.to_kernel(ino);
        let keep = self.shared.kernel.opened(kernel, Stamp::of(attr));
        if keep {
            self.shared.counters.kept_cache();
            return Ok((FileHandle(handle), FopenFlags::FOPEN_KEEP_CACHE));
        }
        Ok((FileHandle(handle), FopenFlags::empty()))
    }

    /// Applies `changes` to `ino` as `who` may (`handle`: through an open file); also
    /// says whether a directory stopped being searchable by everyone.
    fn setattr_changes(
        &self,
        ino: Ino,
        changes: &SetAttr,
        who: Option<&Caller<'_>>,
        handle: bool,
        drops_set_id: bool,
    ) -> Result<(Attr, bool)> {
        let op = if changes.size.is_some() {
            FsOp::Write(0)
        } else {
            FsOp::Modify
        };
        let acl = self.acl;
        let watch = self.checks() && changes.mode.is_some();
        self.run(op, |fs| {
            let before = if who.is_some() || watch {
                Some(fs.getattr(ino)?)
            } else {
                None
            };
            let mut changes = match (who, before.as_ref()) {
                (Some(who), Some(before)) => access::may_setattr(before, changes, who, handle)?,
                _ => *changes,
            };
            if drops_set_id && changes.mode.is_none() {
                // Implied by the permitted truncate or chown, not a chmod of its own.
                let current = match before {
                    Some(before) => before,
                    None => fs.getattr(ino)?,
                };
                changes.mode = access::perm_without_set_id(&current);
            }
            let attr = fs.setattr(ino, &changes)?;
            let closed = before.is_some_and(|before| {
                access::searchable_by_all(&before) && !access::searchable_by_all(&attr)
            });
            let attr = Self::after_setattr(fs, ino, attr, &changes, acl)?;
            Ok((attr, closed))
        })
    }

    /// What a chmod changes besides the mode: with ACLs on, the access ACL (I5).
    fn after_setattr(
        fs: &mut Fs<'_>,
        ino: Ino,
        attr: Attr,
        changes: &SetAttr,
        acl: bool,
    ) -> std::result::Result<Attr, PosixError> {
        match changes.mode {
            Some(mode) if acl => {
                acl::after_chmod(fs, ino, mode)?;
                fs.getattr(ino)
            }
            _ => Ok(attr),
        }
    }

    /// Creates a node with `make(fs, perm)`; the umask applies unless the parent has a
    /// default ACL, which the new node then inherits (I5). One `fs_op` for all of it.
    /// `who` must be allowed to create in `parent`; the result says whether the new name
    /// may be cached ([`TarnFs::cacheable`]).
    fn create_node(
        &self,
        parent: Ino,
        mode: u32,
        umask: u32,
        who: Option<&Caller<'_>>,
        mut make: impl FnMut(&mut Fs<'_>, u32) -> std::result::Result<Attr, PosixError>,
    ) -> Result<(Attr, bool)> {
        let acl = self.acl;
        self.run(FsOp::Modify, |fs| {
            fs.avoid_inos(Arc::clone(&self.held));
            let cacheable = self.creating(fs, parent, who)?;
            let default = if acl {
                acl::parent_default(fs, parent)?
            } else {
                None
            };
            let attr = match default {
                Some(default) => {
                    let perm = mode & 0o7777;
                    let attr = make(fs, perm)?;
                    acl::inherit(fs, &attr, &default, perm)?
                }
                None => make(fs, mode & !umask & 0o7777)?,
            };
            Ok((attr, cacheable))
        })
    }
}

/// `setattr`'s arguments, gathered so the trait method stays a one-liner.
struct SetAttrArgs {
    mode: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    size: Option<u64>,
    atime: Option<fuser::TimeOrNow>,
    mtime: Option<fuser::TimeOrNow>,
}

impl SetAttrArgs {
    fn changes(&self) -> SetAttr {
        SetAttr {
            mode: self.mode.map(|mode| mode & 0o7777),
            uid: self.uid,
            gid: self.gid,
            size: self.size,
            atime: self.atime.map(time_or_now),
            mtime: self.mtime.map(time_or_now),
        }
    }
}

fn fallocate_mode(mode: i32) -> Result<Fallocate> {
    const KNOWN: i32 =
        libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
    if mode & !KNOWN != 0 {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(Fallocate {
        keep_size: mode & libc::FALLOC_FL_KEEP_SIZE != 0,
        punch_hole: mode & libc::FALLOC_FL_PUNCH_HOLE != 0,
        zero_range: mode & libc::FALLOC_FL_ZERO_RANGE != 0,
    })
}

fn xattr_set(flags: i32) -> Result<XattrSet> {
    match flags {
        0 => Ok(XattrSet::Either),
        libc::XATTR_CREATE => Ok(XattrSet::Create),
        libc::XATTR_REPLACE => Ok(XattrSet::Replace),
        _ => Err(Errno::EINVAL),
    }
}

/// The POSIX layer's rename flags, and whether a whiteout takes the source's place
/// (RENAME_WHITEOUT, which overlayfs uses on its upper directory; not with EXCHANGE).
fn rename_flags(flags: fuser::RenameFlags) -> Result<(RenameFlags, bool)> {
    use fuser::RenameFlags as F;
    let known = F::RENAME_NOREPLACE | F::RENAME_EXCHANGE | F::RENAME_WHITEOUT;
    let whiteout = flags.contains(F::RENAME_WHITEOUT);
    if !known.contains(flags) || (whiteout && flags.contains(F::RENAME_EXCHANGE)) {
        return Err(Errno::EINVAL);
    }
    let flags = RenameFlags {
        noreplace: flags.contains(F::RENAME_NOREPLACE),
        exchange: flags.contains(F::RENAME_EXCHANGE),
    };
    Ok((flags, whiteout))
}

fn init_kernel(config: &mut KernelConfig, acl: bool) {
    use fuser::InitFlags;
    // Each setting is best effort: an older kernel keeps its default and still works.
    let _ = config.set_max_write(MAX_WRITE);
    // The kernel offers its own readahead limit; take as much of MAX_WRITE as it allows.
    if let Err(nearest) = config.set_max_readahead(MAX_WRITE) {
        let _ = config.set_max_readahead(nearest);
    }
    let _ = config.set_max_background(MAX_BACKGROUND);
    if acl {
        let _ = config.add_capabilities(InitFlags::FUSE_POSIX_ACL);
    }
    // The umask is ours to apply: not when the parent has a default ACL (I5).
    let _ = config.add_capabilities(InitFlags::FUSE_DONT_MASK);
    let wanted = [
        InitFlags::FUSE_DO_READDIRPLUS,
        InitFlags::FUSE_READDIRPLUS_AUTO,
        InitFlags::FUSE_BIG_WRITES,
        InitFlags::FUSE_MAX_PAGES,
        // Lookups and listings of one directory may run at once (several session threads).
        InitFlags::FUSE_PARALLEL_DIROPS,
        // Symlink targets stay in the page cache (dropped by `inval_inode`).
        InitFlags::FUSE_CACHE_SYMLINKS,
        // Set-id bits are dropped here, and the kernel stops asking GETXATTR of
        // security.capability before every write (crate docs, "Set-id bits").
        InitFlags::FUSE_HANDLE_KILLPRIV_V2,
    ];
    // FUSE_WRITEBACK_CACHE is deliberately not asked for: see "Writeback cache" in lib.rs.
    // FUSE_ATOMIC_O_TRUNC is deliberately not asked for: without it the kernel truncates
    // with a setattr before open, so `open` never has to.
    for flag in wanted {
        let _ = config.add_capabilities(flag);
    }
}

impl fuser::Filesystem for TarnFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        init_kernel(config, self.acl);
        Ok(())
    }

    fn destroy(&mut self) {
        // Best effort: the daemon syncs at export anyway; a pool already gone is fine.
        let _ = self.engine.fs_sync(&self.pool, self.dataset);
    }

    fn lookup(&self, req: &Request, kernel_parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let _request = self.shared.request(Opcode::Lookup);
        if snapdir::is_snapshot_dir(kernel_parent.0)
            || (kernel_parent.0 == KERNEL_ROOT && name.as_bytes() == snapdir::CONTROL_NAME)
        {
            return self.lookup_snapshot_dir(req, kernel_parent, name, reply);
        }
        let parent = self.ino(kernel_parent);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = self.run(FsOp::Read, |fs| {
            let mut cacheable = true;
            if self.checks() {
                let dir = fs.getattr(parent)?;
                if let Some(who) = &who
                    && dir.kind == FileKind::Directory
                {
                    access::check(&dir, who, MAY_EXEC)?;
                }
                cacheable = self.cacheable(&dir);
            }
            Ok((found(fs.lookup(parent, name.as_bytes()))?, cacheable))
        });
        match result {
            Ok((Some(attr), cacheable)) => {
                self.reply_entry(reply, kernel_parent, name, Ok((attr, cacheable)));
            }
            Ok((None, true)) => self.reply_missing(reply, kernel_parent, name),
            // A negative entry would answer later callers without a search check.
            Ok((None, false)) => reply.error(Errno::ENOENT),
            Err(errno) => reply.error(errno),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // fuser's `batch_forget` calls this once per inode of a batch: the guard of a
        // FORGET never parks (module `pacer`).
        let _request = self.shared.request(Opcode::Forget);
        self.shared.kernel.forgot(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let _request = self.shared.request(Opcode::Getattr);
        if snapdir::is_snapshot_dir(ino.0) {
            return self.getattr_snapshot_dir(ino, reply);
        }
        let ino = self.ino(ino);
        let result = self.run(FsOp::Read, |fs| fs.getattr(ino));
        self.reply_attr(reply, result);
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let _request = self.shared.request(Opcode::Setattr);
        if let Some(errno) = self.refused(ino, None) {
            return reply.error(errno);
        }
        let args = SetAttrArgs {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let changes = args.changes();
        // FUSE_HANDLE_KILLPRIV_V2: set-id bits are ours to drop (crate docs, "Set-id bits"):
        // on every chown, and on a truncate by a caller without CAP_FSETID.
        let chown = changes.uid.is_some() || changes.gid.is_some();
        let drops_set_id = changes.mode.is_none()
            && (chown || (changes.size.is_some() && !holds_cap_fsetid(req.pid())));
        let result = self.setattr_changes(
            self.ino(ino),
            &changes,
            who.as_ref(),
            fh.is_some(),
            drops_set_id,
        );
        let closed = matches!(result, Ok((_, true)));
        self.reply_attr(reply, result.map(|(attr, _)| attr));
        if closed {
            self.drop_names_in(ino.0);
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let _request = self.shared.request(Opcode::Readlink);
        if snapdir::is_snapshot_dir(ino.0) {
            return match self.in_snapshot(ino, Errno::EINVAL, |fs, ino| fs.readlink(ino)) {
                Ok(target) => reply.data(&target),
                Err(errno) => reply.error(errno),
            };
        }
        let ino = self.ino(ino);
        match self.run(FsOp::Read, |fs| fs.readlink(ino)) {
            Ok(target) => reply.data(&target),
            Err(errno) => reply.error(errno),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        kernel_parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let _request = self.shared.request(Opcode::Mknod);
        if let Some(errno) = self.refused(kernel_parent, Some(name)) {
            return reply.error(errno);
        }
        let parent = self.ino(kernel_parent);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = node_kind(mode).and_then(|kind| {
            self.create_node(parent, mode, umask, who.as_ref(), |fs, perm| {
                fs.mknod(
                    parent,
                    name.as_bytes(),
                    kind,
                    perm,
                    u64::from(rdev),
                    creds(req),
                )
            })
        });
        self.reply_entry(reply, kernel_parent, name, result);
    }

    fn mkdir(
        &self,
        req: &Request,
        kernel_parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let _request = self.shared.request(Opcode::Mkdir);
        if let Some(errno) = self.refused(kernel_parent, Some(name)) {
            return reply.error(errno);
        }
        let parent = self.ino(kernel_parent);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = self.create_node(parent, mode, umask, who.as_ref(), |fs, perm| {
            fs.mkdir(parent, name.as_bytes(), perm, creds(req))
        });
        self.reply_entry(reply, kernel_parent, name, result);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _request = self.shared.request(Opcode::Unlink);
        if let Some(errno) = self.refused(parent, Some(name)) {
            return reply.error(errno);
        }
        let parent = self.ino(parent);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let name = name.as_bytes();
        let result = self.unlink_with(|fs| {
            if let Some(who) = &who {
                Self::deleting(fs, parent, name, who)?;
            }
            fs.unlink(parent, name)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _request = self.shared.request(Opcode::Rmdir);
        if let Some(errno) = self.refused(parent, Some(name)) {
            return reply.error(errno);
        }
        let parent = self.ino(parent);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let name = name.as_bytes();
        let result = self.unlink_with(|fs| {
            if let Some(who) = &who {
                Self::deleting(fs, parent, name, who)?;
            }
            fs.rmdir(parent, name).map(Some)
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        kernel_parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let _request = self.shared.request(Opcode::Symlink);
        if let Some(errno) = self.refused(kernel_parent, Some(link_name)) {
            return reply.error(errno);
        }
        let parent = self.ino(kernel_parent);
        let target = target.as_os_str().as_bytes();
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = self.run(FsOp::Modify, |fs| {
            fs.avoid_inos(Arc::clone(&self.held));
            let cacheable = self.creating(fs, parent, who.as_ref())?;
            let attr = fs.symlink(parent, link_name.as_bytes(), target, creds(req))?;
            Ok((attr, cacheable))
        });
        self.reply_entry(reply, kernel_parent, link_name, result);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let _request = self.shared.request(Opcode::Rename);
        if let Some(errno) = self
            .refused(parent, Some(name))
            .or(self.refused(newparent, Some(newname)))
        {
            return reply.error(errno);
        }
        let (parent, newparent) = (self.ino(parent), self.ino(newparent));
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = rename_flags(flags).and_then(|(flags, whiteout)| {
            self.unlink_with(|fs| {
                if let Some(who) = &who {
                    let source_dir = fs.getattr(parent)?;
                    let target_dir = fs.getattr(newparent)?;
                    let source = fs.lookup(parent, name.as_bytes())?;
                    let target = found(fs.lookup(newparent, newname.as_bytes()))?;
                    access::may_rename(
                        &source_dir,
                        &source,
                        &target_dir,
                        target.as_ref(),
                        flags.exchange,
                        who,
                    )?;
                }
                let replaced = fs.rename(
                    parent,
                    name.as_bytes(),
                    newparent,
                    newname.as_bytes(),
                    flags,
                )?;
                if whiteout {
                    // Linux's whiteout: a character device 0/0 under the old name, made in
                    // the same operation (the same txg) as the rename.
                    let kind = FileKind::CharDevice;
                    fs.mknod(parent, name.as_bytes(), kind, 0, 0, creds(req))?;
                }
                Ok(replaced)
            })
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let _request = self.shared.request(Opcode::Link);
        if let Some(errno) = self
            .refused(ino, None)
            .or(self.refused(newparent, Some(newname)))
        {
            return reply.error(errno);
        }
        let (ino, parent) = (self.ino(ino), self.ino(newparent));
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = self.run(FsOp::Modify, |fs| {
            let cacheable = self.creating(fs, parent, who.as_ref())?;
            if let Some(who) = &who {
                access::may_link(&fs.getattr(ino)?, who)?;
            }
            Ok((fs.link(ino, parent, newname.as_bytes())?, cacheable))
        });
        self.reply_entry(reply, newparent, newname, result);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        let _request = self.shared.request(Opcode::Open);
        if snapdir::is_snapshot_dir(ino.0) {
            return self.open_snapshot_dir(req, ino, flags.0, false, reply);
        }
        let ino = self.ino(ino);
        let groups = ProcGroups::of(req);
        let who = Some(caller(req, &groups)).filter(|_| self.checks());
        let opened = self
            .run(FsOp::Read, |fs| {
                let attr = fs.getattr(ino)?;
                if let Some(who) = &who {
                    Self::may_open(&attr, who, flags.0)?;
                }
                Ok(attr)
            })
            .and_then(|attr| self.open_handle(ino, &attr));
        match opened {
            Ok((handle, flags)) => reply.opened(handle, flags),
            Err(errno) => reply.error(errno),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let mut request = self.shared.request(Opcode::Read);
        if snapdir::is_snapshot_dir(ino.0) {
            let read = |fs: &mut Fs<'_>, ino| fs.read_data(ino, offset, size);
            return match self.in_snapshot(ino, Errno::EISDIR, read) {
                Ok(data) => data.reply_with(|bytes| reply.data(bytes)),
                Err(errno) => reply.error(errno),
            };
        }
        let ino = self.ino(ino);
        self.shared.counters.read(size);
        // The device reads without the pool lock, so that other requests proceed meanwhile;
        // the read then copies from the cache.
        let plan = move |fs: &mut Fs<'_>| fs.plan_read(ino, offset, size);
        let read = move |fs: &mut Fs<'_>| {
            // A hole is answered from static zeros, without a buffer (tarn-posix `data`).
            let data = fs.read_data(ino, offset, size)?;
            // Best effort, as for listings: the read has its data either way.
            let _ = fs.accessed(ino);
            Ok(data)
        };
        let step = {
            let _in_flight = self.shared.counters.enter();
            engine_timed(|| {
                let timed = |fs: &mut Fs<'_>| posix_timed(|| read(fs));
                self.engine
                    .fs_read_begin(&self.pool, self.dataset, plan, timed)
            })
        };
        match step {
            // Joined here, without the pool lock (tarn-objects `readout`).
            Ok(ReadStep::Done(data)) => data.reply_with(|bytes| reply.data(bytes)),
            Ok(ReadStep::Pending(pending)) => {
                let suspended = request.hand_on();
                self.finish_read(pending, read, reply, suspended);
            }
            Err(error) => reply.error(Errno::from_i32(error.errno())),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: fuser::WriteFlags,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let _request = self.shared.request(Opcode::Write);
        if let Some(errno) = self.refused(ino, None) {
            return reply.error(errno);
        }
        let ino = self.ino(ino);
        self.shared.counters.write(data.len());
        let len = data.len() as u64;
        // The kernel asks for it when the writer lacks CAP_FSETID ("Set-id bits").
        let drops_set_id = write_flags.contains(fuser::WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let acl = self.acl;
        let result = self.run(FsOp::Write(len), |fs| {
            if drops_set_id {
                drop_set_id(fs, ino, acl)?;
            }
            fs.write(ino, offset, data)
        });
        match result {
            Ok(written) => reply.written(written),
            Err(errno) => reply.error(errno),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        let _request = self.shared.request(Opcode::Flush);
        // close is not fsync: nothing to do, and ENOSYS tells the kernel to stop sending
        // flushes at all (one request less per close).
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let _request = self.shared.request(Opcode::Release);
        if snapdir::is_snapshot_dir(ino.0) {
            return reply.ok();
        }
        self.release_handle(self.ino(ino));
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _request = self.shared.request(Opcode::Fsync);
        match self.engine.fs_sync(&self.pool, self.dataset) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: fuser::OpenFlags, reply: ReplyOpen) {
        let _request = self.shared.request(Opcode::Opendir);
        if snapdir::is_snapshot_dir(ino.0) {
            return self.open_snapshot_dir(req, ino, flags.0, true, reply);
        }
        let ino = self.ino(ino);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = self.run(FsOp::Read, |fs| {
            let attr = fs.getattr(ino)?;
            if let Some(who) = &who
                && attr.kind == FileKind::Directory
            {
                access::check(&attr, who, MAY_READ)?;
            }
            Ok(attr)
        });
        match result {
            Ok(attr) if attr.kind == FileKind::Directory => {
                reply.opened(FileHandle(0), FopenFlags::empty());
            }
            Ok(_) => reply.error(Errno::ENOTDIR),
            Err(errno) => reply.error(errno),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let _request = self.shared.request(Opcode::Readdir);
        if snapdir::is_snapshot_dir(ino.0) {
            return self.readdir_snapshot_dir(ino, offset, reply);
        }
        let control = self.control_entry(self.ino(ino), offset);
        match self.readdir_batch(self.ino(ino), offset) {
            Ok(entries) => {
                for entry in entries {
                    let kernel = INodeNo(self.inos.to_kernel(entry.ino));
                    let name = OsStr::from_bytes(&entry.name);
                    if reply.add(kernel, entry.cookie, file_type(entry.kind), name) {
                        break;
                    }
                    if entry.name == b".."
                        && control.is_some()
                        && reply.add(
                            INodeNo(snapdir::CONTROL),
                            entry.cookie,
                            Self::control_kind(),
                            Self::control_name(),
                        )
                    {
                        break;
                    }
                }
                reply.ok();
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let _request = self.shared.request(Opcode::Readdirplus);
        if snapdir::is_snapshot_dir(ino.0) {
            return self.readdirplus_snapshot_dir(ino, offset, reply);
        }
        let dir = self.ino(ino);
        let control = self.control_entry(dir, offset);
        let listed = self.run(FsOp::Read, |fs| {
            let cacheable = !self.checks() || self.cacheable(&fs.getattr(dir)?);
            let entries = fs.readdir(dir, offset, READDIR_BATCH)?;
            let _ = fs.accessed(dir);
            let entries = entries
                .into_iter()
                .map(|entry| fs.getattr(entry.ino).map(|attr| (entry, attr)))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            Ok((entries, cacheable))
        });
        match listed {
            Ok((listed, cacheable)) => {
                // Names in a directory not everyone may search are not cached (lookup).
                let ttl = if cacheable { TTL } else { Duration::ZERO };
                for (entry, attr) in listed {
                    let kernel = INodeNo(self.inos.to_kernel(entry.ino));
                    let name = OsStr::from_bytes(&entry.name);
                    let (file, generation) = (self.file_attr(&attr), Generation(attr.generation));
                    if reply.add(kernel, entry.cookie, name, &ttl, &file, generation) {
                        break;
                    }
                    // The kernel takes a lookup of every entry it was given but `.` and `..`.
                    if entry.name != b"." && entry.name != b".." {
                        self.shared.kernel.looked_up(ino.0, &entry.name, kernel.0);
                    }
                    if let Some(file) = control.filter(|_| entry.name == b"..") {
                        let name = Self::control_name();
                        let zero = Duration::ZERO;
                        if reply.add(file.ino, entry.cookie, name, &zero, &file, Generation(0)) {
                            break;
                        }
                        let name = name.as_bytes();
                        self.shared.kernel.looked_up(ino.0, name, file.ino.0);
                    }
                }
                reply.ok();
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::OpenFlags,
        reply: ReplyEmpty,
    ) {
        let _request = self.shared.request(Opcode::Releasedir);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let _request = self.shared.request(Opcode::Fsyncdir);
        match self.engine.fs_sync(&self.pool, self.dataset) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let _request = self.shared.request(Opcode::Statfs);
        match self.engine.fs_statfs(&self.pool, self.dataset) {
            Ok(st) => reply.statfs(
                st.blocks, st.bfree, st.bavail, st.files, st.ffree, st.bsize, st.namelen, st.bsize,
            ),
            Err(e) => reply.error(Errno::from_i32(e.errno())),
        }
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let _request = self.shared.request(Opcode::Setxattr);
        if let Some(errno) = self.refused(ino, None) {
            return reply.error(errno);
        }
        let ino = self.ino(ino);
        if !self.acl && name.as_bytes().starts_with(acl::PREFIX) {
            // acltype=off: ACLs are refused, as ZFS refuses them.
            return reply.error(Errno::EOPNOTSUPP);
        }
        let access_acl = self.acl && name.as_bytes() == acl::ACCESS;
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = xattr_set(flags).and_then(|how| {
            self.run(FsOp::Write(value.len() as u64), |fs| {
                Self::user_xattr(fs, ino, name, who.as_ref(), MAY_WRITE)?;
                if access_acl {
                    acl::set_access(fs, ino, value, how)
                } else {
                    fs.setxattr(ino, name.as_bytes(), value, how)
                }
            })
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let _request = self.shared.request(Opcode::Getxattr);
        if snapdir::is_snapshot_dir(ino.0) {
            let groups = ProcGroups::of(req);
            let who = self.restricted(req, &groups);
            let result = self.in_snapshot(ino, Errno::ENODATA, |fs, ino| {
                Self::user_xattr(fs, ino, name, who.as_ref(), MAY_READ)?;
                fs.getxattr(ino, name.as_bytes())
            });
            return match result {
                Ok(value) => reply_xattr(reply, size, &value),
                Err(errno) => reply.error(errno),
            };
        }
        let ino = self.ino(ino);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = self.run(FsOp::Read, |fs| {
            Self::user_xattr(fs, ino, name, who.as_ref(), MAY_READ)?;
            fs.getxattr(ino, name.as_bytes())
        });
        match result {
            Ok(value) => reply_xattr(reply, size, &value),
            Err(errno) => reply.error(errno),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let _request = self.shared.request(Opcode::Listxattr);
        let names = if snapdir::is_snapshot_dir(ino.0) {
            match self.in_snapshot(ino, Errno::ENODATA, |fs, ino| fs.listxattr(ino)) {
                Err(Errno::ENODATA) => Ok(Vec::new()),
                listed => listed,
            }
        } else {
            let ino = self.ino(ino);
            self.run(FsOp::Read, |fs| fs.listxattr(ino))
        };
        match names {
            Ok(names) => {
                let mut list = Vec::new();
                for name in names {
                    list.extend_from_slice(&name);
                    list.push(0);
                }
                reply_xattr(reply, size, &list);
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let _request = self.shared.request(Opcode::Removexattr);
        if let Some(errno) = self.refused(ino, None) {
            return reply.error(errno);
        }
        let ino = self.ino(ino);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = self.run(FsOp::Free, |fs| {
            Self::user_xattr(fs, ino, name, who.as_ref(), MAY_WRITE)?;
            fs.removexattr(ino, name.as_bytes())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        let _request = self.shared.request(Opcode::Access);
        if snapdir::is_snapshot_dir(ino.0) && mask.bits() & libc::W_OK != 0 {
            return reply.error(Errno::EROFS);
        }
        if !self.checks() {
            // default_permissions: the kernel checked already and does not normally ask.
            return reply.ok();
        }
        let groups = ProcGroups::of(req);
        let who = caller(req, &groups);
        let want = u32::try_from(mask.bits() & 7).unwrap_or(0);
        let result = match snapdir::place(ino.0) {
            // `.tarn` and `.tarn/snapshot` are r-x for everyone.
            Place::Control(_) => Ok(()),
            Place::Snapshot { .. } => self.in_snapshot(ino, Errno::ENOENT, |fs, ino| {
                access::check(&fs.getattr(ino)?, &who, want)
            }),
            Place::Head => {
                let ino = self.ino(ino);
                self.run(FsOp::Read, |fs| {
                    access::check(&fs.getattr(ino)?, &who, want)
                })
            }
        };
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn create(
        &self,
        req: &Request,
        kernel_parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let _request = self.shared.request(Opcode::Create);
        if let Some(errno) = self.refused(kernel_parent, Some(name)) {
            return reply.error(errno);
        }
        let parent = self.ino(kernel_parent);
        let groups = ProcGroups::of(req);
        let who = self.restricted(req, &groups);
        let result = node_kind(mode).and_then(|kind| {
            self.create_node(parent, mode, umask, who.as_ref(), |fs, perm| {
                fs.mknod(parent, name.as_bytes(), kind, perm, 0, creds(req))
            })
        });
        let opened = result.and_then(|(attr, cacheable)| {
            let file = self.file_attr(&attr);
            self.shared
                .kernel
                .looked_up(kernel_parent.0, name.as_bytes(), file.ino.0);
            let (handle, _) = self.open_handle(attr.ino, &attr)?;
            Ok((attr, file, handle, cacheable))
        });
        match opened {
            Ok((attr, file, handle, cacheable)) => {
                let generation = Generation(attr.generation);
                // fuser's create reply has one TTL for the name and the attributes. The name
                // gets ENTRY_TTL as every other entry does (with TTL, a name created over a
                // second ago is looked up again before its unlink: one more round trip per
                // unlink). The attributes of a new file change only through this mount
                // until it has data (an empty file has no blocks for a txg sync to
                // re-estimate), and the kernel drops them at every such change itself.
                // Under a directory not everyone may search, nothing is cached (lookup).
                let ttl = entry_ttl(cacheable);
                reply.created(&ttl, &file, generation, handle, FopenFlags::empty());
            }
            Err(errno) => reply.error(errno),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let _request = self.shared.request(Opcode::Fallocate);
        if let Some(errno) = self.refused(ino, None) {
            return reply.error(errno);
        }
        let ino = self.ino(ino);
        let acl = self.acl;
        let result = fallocate_mode(mode).and_then(|how| {
            let op = if how.punch_hole {
                FsOp::Free
            } else {
                FsOp::Write(length)
            };
            // The kernel's `file_modified` leaves set-id bits to us ("Set-id bits"), and the
            // request carries no flag: the caller's capabilities decide, as for a truncate.
            let drops_set_id = !holds_cap_fsetid(req.pid());
            self.run(op, |fs| {
                if drops_set_id {
                    drop_set_id(fs, ino, acl)?;
                }
                fs.fallocate(ino, offset, length, how)
            })
        });
        match result {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let _request = self.shared.request(Opcode::Lseek);
        let kernel = ino;
        let ino = self.ino(ino);
        let whence = match whence {
            libc::SEEK_DATA => Seek::Data,
            libc::SEEK_HOLE => Seek::Hole,
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(Errno::ENXIO);
        };
        let result = if snapdir::is_snapshot_dir(kernel.0) {
            self.in_snapshot(kernel, Errno::EINVAL, |fs, ino| {
                fs.seek(ino, offset, whence)
            })
        } else {
            self.run(FsOp::Read, |fs| fs.seek(ino, offset, whence))
        };
        match result.and_then(|found| i64::try_from(found).map_err(|_| Errno::EOVERFLOW)) {
            Ok(found) => reply.offset(found),
            Err(errno) => reply.error(errno),
        }
    }

    /// `copy_file_range` by block cloning (`Engine::fs_clone_range`): the range's block
    /// pointers are cloned, no data is copied. A range the engine cannot clone (inside a
    /// block, or from a snapshot) is EXDEV, on which the kernel copies the bytes itself.
    /// One reply carries at most 2 GiB (its count is 32 bits; a multiple of every block
    /// size), and the caller asks again for the rest, as after any short copy.
    fn copy_file_range(
        &self,
        _req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        _flags: fuser::CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        let _request = self.shared.request(Opcode::CopyFileRange);
        if snapdir::is_snapshot_dir(ino_in.0) {
            return reply.error(Errno::EXDEV);
        }
        if let Some(errno) = self.refused(ino_out, None) {
            return reply.error(errno);
        }
        if self.readonly {
            return reply.error(Errno::EROFS);
        }
        let range = |kernel, offset| tarn_engine::FileRange {
            dataset: self.dataset,
            ino: self.ino(kernel),
            offset,
        };
        let (source, target) = (range(ino_in, offset_in), range(ino_out, offset_out));
        let len = len.min(COPY_REPLY_MAX);
        let _in_flight = self.shared.counters.enter();
        let cloned = engine_timed(|| self.engine.fs_clone_range(&self.pool, source, target, len));
        match cloned.map(u32::try_from) {
            Ok(Ok(cloned)) => reply.written(cloned),
            Ok(Err(_)) => reply.error(Errno::EOVERFLOW),
            Err(error) => reply.error(Errno::from_i32(error.errno())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_on_both_sides_of_the_epoch() {
        for (secs, nsecs) in [
            (0, 0),
            (1_700_000_000, 123_456_789),
            (-1, 999_999_999),
            (-5, 0),
        ] {
            let time = Timespec { secs, nsecs };
            assert_eq!(timespec(system_time(time)), time, "{secs}.{nsecs}");
        }
    }

    #[test]
    fn unknown_flags_are_refused() {
        assert_eq!(
            fallocate_mode(libc::FALLOC_FL_COLLAPSE_RANGE),
            Err(Errno::EOPNOTSUPP)
        );
        assert_eq!(xattr_set(7), Err(Errno::EINVAL));
        assert_eq!(node_kind(libc::S_IFDIR), Err(Errno::EINVAL));
        // A whiteout replaces the source; an exchange keeps it: both at once make no sense.
        let both = fuser::RenameFlags::RENAME_WHITEOUT | fuser::RenameFlags::RENAME_EXCHANGE;
        assert_eq!(rename_flags(both), Err(Errno::EINVAL));
        let whiteout = rename_flags(fuser::RenameFlags::RENAME_WHITEOUT);
        assert_eq!(whiteout.map(|(_, whiteout)| whiteout), Ok(true));
    }
}
