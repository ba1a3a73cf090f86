//! Intent-log records: what every modifying operation did, in a form [`Fs::replay`] can
//! apply again (ZFS's itxs and `zfs_replay`).
//!
//! An [`Fs`] built with [`Fs::with_log`] appends one [`LogRecord`] per successful modifying
//! call (write, setattr/truncate, fallocate/punch, mknod, mkdir, symlink, link, unlink,
//! rmdir, rename with its flags, setxattr, removexattr, reclaim, drain of the unlinked set,
//! set_project)
//! with the time the call ran at. The engine writes the records to the dataset's intent
//! log on `fsync`; after a crash, replaying them in order on
//! the last committed state redoes exactly those operations, because every operation here
//! is a pure function of the object set, its arguments and `now`: inode numbers come out
//! the same (the lowest free object), and a create's record names the inode it made so a
//! replay that would make another one stops instead of going wrong.
//!
//! Until its commit a record is kept in memory as a [`Logged`]: a write keeps only where it
//! went, and its bytes are read from the file when the record is written out
//! ([`Fs::log_record`]; ZFS's `WR_NEED_COPY`), so a write nobody fsyncs costs no copy and
//! no memory. The bytes read then are the file's bytes at commit time, which may include
//! later writes to the same range; those writes' own records come after, so replaying every
//! record still ends in the committed state. [`LogQueue`] keeps the one case
//! where the file's bytes are not the write's any more out of a commit: once an inode is
//! freed its number can be reused, so a reclaim drops the queued writes of that inode (a
//! later unlink or reclaim record makes them moot), and a drain of the unlinked set (which
//! frees inodes without a record each) after a queued write makes the queue unreadable:
//! the next commit syncs a txg instead.
//!
//! The encoding (docs/FORMAT.md "Intent log") is little-endian: a type byte, the time
//! (i64 seconds, u32 nanoseconds), then the fields; byte strings are a u32 length and the
//! bytes. Decoding is of bytes from disk: garbage is an error, never a panic.

use std::collections::HashMap;

use tarn_format::wire::{Reader, Writer};

use crate::fs::{Fs, Result, oid};
use crate::inode::{kind_byte, kind_from};
use crate::{
    Creds, Fallocate, FileKind, Ino, PosixError, RenameFlags, SetAttr, TimeOrNow, Timespec,
    XattrSet,
};

/// One modifying operation as it happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogRecord {
    /// The time the operation ran at (its `now`).
    pub now: Timespec,
    /// What it did.
    pub op: LogOp,
}

/// The operations the intent log records, with their arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum LogOp {
    /// [`Fs::write`].
    Write {
        ino: Ino,
        offset: u64,
        data: Vec<u8>,
    },
    /// [`Fs::setattr`] (chmod, chown, truncate, utimens).
    SetAttr { ino: Ino, changes: SetAttr },
    /// [`Fs::fallocate`].
    Fallocate {
        ino: Ino,
        offset: u64,
        len: u64,
        mode: Fallocate,
    },
    /// [`Fs::mknod`]; `ino` is the inode it made.
    Mknod {
        parent: Ino,
        name: Vec<u8>,
        kind: FileKind,
        perm: u32,
        rdev: u64,
        creds: Creds,
        ino: Ino,
    },
    /// [`Fs::mkdir`].
    Mkdir {
        parent: Ino,
        name: Vec<u8>,
        perm: u32,
        creds: Creds,
        ino: Ino,
    },
    /// [`Fs::symlink`].
    Symlink {
        parent: Ino,
        name: Vec<u8>,
        target: Vec<u8>,
        creds: Creds,
        ino: Ino,
    },
    /// [`Fs::link`].
    Link {
        ino: Ino,
        parent: Ino,
        name: Vec<u8>,
    },
    /// [`Fs::unlink`].
    Unlink { parent: Ino, name: Vec<u8> },
    /// [`Fs::rmdir`].
    Rmdir { parent: Ino, name: Vec<u8> },
    /// [`Fs::rename`].
    Rename {
        parent: Ino,
        name: Vec<u8>,
        newparent: Ino,
        newname: Vec<u8>,
        flags: RenameFlags,
    },
    /// [`Fs::setxattr`].
    SetXattr {
        ino: Ino,
        name: Vec<u8>,
        value: Vec<u8>,
        how: XattrSet,
    },
    /// [`Fs::removexattr`].
    RemoveXattr { ino: Ino, name: Vec<u8> },
    /// [`Fs::reclaim`].
    Reclaim { ino: Ino },
    /// [`Fs::drain_unlinked`].
    DrainUnlinked,
    /// [`Fs::set_project`].
    SetProject {
        ino: Ino,
        project: u32,
        inherit: bool,
    },
    /// [`Fs::write`] of `len` bytes at `offset` whose bytes are in `block`, a data block of
    /// the file written in place ahead of its txg (`logbias=throughput`, module
    /// `intent_indirect`), from byte `offset % block.lsize` on. Replayed with the block's
    /// verified bytes ([`Fs::replay_indirect`]).
    WriteIndirect {
        ino: Ino,
        offset: u64,
        len: u32,
        block: tarn_format::BlockPtr,
    },
}

/// A record that does not decode (named as object 0: it belongs to no object).
fn bad(why: &'static str) -> PosixError {
    crate::inode::corrupt(0, why)
}

fn put_bytes(w: &mut Writer, bytes: &[u8]) {
    w.u32(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
    w.bytes(bytes);
}

fn get_bytes(r: &mut Reader<'_>) -> Result<Vec<u8>> {
    let len = r.u32().map_err(|_| bad("truncated"))? as usize;
    if len > r.remaining() {
        return Err(bad("byte string longer than the record"));
    }
    Ok(r.take(len).map_err(|_| bad("truncated"))?.to_vec())
}

fn put_time(w: &mut Writer, t: Option<TimeOrNow>) {
    match t {
        None => w.u8(0),
        Some(TimeOrNow::Now) => w.u8(1),
        Some(TimeOrNow::At(at)) => {
            w.u8(2);
            w.u64(at.secs as u64);
            w.u32(at.nsecs);
        }
    }
}

fn put_opt(w: &mut Writer, value: Option<u64>) {
    w.u8(u8::from(value.is_some()));
    w.u64(value.unwrap_or(0));
}

/// A little reader over one record, mapping every error to a corrupt record.
struct Fields<'a, 'b>(&'b mut Reader<'a>);

impl Fields<'_, '_> {
    fn u8(&mut self) -> Result<u8> {
        self.0.u8().map_err(|_| bad("truncated"))
    }
    fn u32(&mut self) -> Result<u32> {
        self.0.u32().map_err(|_| bad("truncated"))
    }
    fn u64(&mut self) -> Result<u64> {
        self.0.u64().map_err(|_| bad("truncated"))
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        get_bytes(self.0)
    }
    fn opt(&mut self) -> Result<Option<u64>> {
        let present = self.u8()?;
        let value = self.u64()?;
        Ok((present != 0).then_some(value))
    }
    fn opt_u32(&mut self) -> Result<Option<u32>> {
        self.opt()?
            .map(|v| u32::try_from(v).map_err(|_| bad("id out of range")))
            .transpose()
    }
    fn time(&mut self) -> Result<Option<TimeOrNow>> {
        Ok(match self.u8()? {
            0 => None,
            1 => Some(TimeOrNow::Now),
            2 => Some(TimeOrNow::At(self.timespec()?)),
            _ => return Err(bad("unknown time kind")),
        })
    }
    fn timespec(&mut self) -> Result<Timespec> {
        let secs = self.u64()? as i64;
        let nsecs = self.u32()?;
        if nsecs >= 1_000_000_000 {
            return Err(bad("nanoseconds out of range"));
        }
        Ok(Timespec { secs, nsecs })
    }
    fn creds(&mut self) -> Result<Creds> {
        Ok(Creds {
            uid: self.u32()?,
            gid: self.u32()?,
        })
    }
    fn kind(&mut self) -> Result<FileKind> {
        kind_from(self.u8()?).ok_or_else(|| bad("unknown file type"))
    }
    fn flags(&mut self) -> Result<u8> {
        self.u8()
    }
}

fn put_creds(w: &mut Writer, creds: Creds) {
    w.u32(creds.uid);
    w.u32(creds.gid);
}

impl LogRecord {
    /// Encodes the record (its length is not included).
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new();
        w.u8(self.op.code());
        w.u64(self.now.secs as u64);
        w.u32(self.now.nsecs);
        self.op.encode_fields(&mut w);
        w.finish()
    }

    /// Decodes one record (all of `bytes`).
    pub fn decode(bytes: &[u8]) -> Result<LogRecord> {
        let mut reader = Reader::new(bytes, "intent-log record");
        let mut f = Fields(&mut reader);
        let code = f.u8()?;
        let now = f.timespec()?;
        let op = LogOp::decode_fields(code, &mut f)?;
        if reader.remaining() != 0 {
            return Err(bad("trailing bytes"));
        }
        Ok(LogRecord { now, op })
    }
}

impl LogOp {
    fn code(&self) -> u8 {
        match self {
            LogOp::Write { .. } => 1,
            LogOp::SetAttr { .. } => 2,
            LogOp::Fallocate { .. } => 3,
            LogOp::Mknod { .. } => 4,
            LogOp::Mkdir { .. } => 5,
            LogOp::Symlink { .. } => 6,
            LogOp::Link { .. } => 7,
            LogOp::Unlink { .. } => 8,
            LogOp::Rmdir { .. } => 9,
            LogOp::Rename { .. } => 10,
            LogOp::SetXattr { .. } => 11,
            LogOp::RemoveXattr { .. } => 12,
            LogOp::Reclaim { .. } => 13,
            LogOp::DrainUnlinked => 14,
            LogOp::SetProject { .. } => 15,
            LogOp::WriteIndirect { .. } => 16,
        }
    }

    fn encode_fields(&self, w: &mut Writer) {
        match self {
            LogOp::Write { ino, offset, data } => {
                w.u64(*ino);
                w.u64(*offset);
                put_bytes(w, data);
            }
            LogOp::SetAttr { ino, changes } => {
                w.u64(*ino);
                put_opt(w, changes.mode.map(u64::from));
                put_opt(w, changes.uid.map(u64::from));
                put_opt(w, changes.gid.map(u64::from));
                put_opt(w, changes.size);
                put_time(w, changes.atime);
                put_time(w, changes.mtime);
            }
            LogOp::Fallocate {
                ino,
                offset,
                len,
                mode,
            } => {
                w.u64(*ino);
                w.u64(*offset);
                w.u64(*len);
                w.u8(u8::from(mode.keep_size)
                    | u8::from(mode.punch_hole) << 1
                    | u8::from(mode.zero_range) << 2);
            }
            LogOp::SetXattr {
                ino,
                name,
                value,
                how,
            } => {
                w.u64(*ino);
                put_bytes(w, name);
                put_bytes(w, value);
                w.u8(match how {
                    XattrSet::Either => 0,
                    XattrSet::Create => 1,
                    XattrSet::Replace => 2,
                });
            }
            LogOp::RemoveXattr { ino, name } => {
                w.u64(*ino);
                put_bytes(w, name);
            }
            LogOp::Reclaim { ino } => w.u64(*ino),
            LogOp::DrainUnlinked => {}
            LogOp::SetProject {
                ino,
                project,
                inherit,
            } => {
                w.u64(*ino);
                w.u32(*project);
                w.u8(u8::from(*inherit));
            }
            LogOp::WriteIndirect { .. } => self.encode_indirect_fields(w),
            _ => self.encode_name_fields(w),
        }
    }

    fn encode_name_fields(&self, w: &mut Writer) {
        match self {
            LogOp::Mknod {
                parent,
                name,
                kind,
                perm,
                rdev,
                creds,
                ino,
            } => {
                w.u64(*parent);
                put_bytes(w, name);
                w.u8(kind_byte(*kind));
                w.u32(*perm);
                w.u64(*rdev);
                put_creds(w, *creds);
                w.u64(*ino);
            }
            LogOp::Mkdir {
                parent,
                name,
                perm,
                creds,
                ino,
            } => {
                w.u64(*parent);
                put_bytes(w, name);
                w.u32(*perm);
                put_creds(w, *creds);
                w.u64(*ino);
            }
            LogOp::Symlink {
                parent,
                name,
                target,
                creds,
                ino,
            } => {
                w.u64(*parent);
                put_bytes(w, name);
                put_bytes(w, target);
                put_creds(w, *creds);
                w.u64(*ino);
            }
            LogOp::Link { ino, parent, name } => {
                w.u64(*ino);
                w.u64(*parent);
                put_bytes(w, name);
            }
            LogOp::Unlink { parent, name } | LogOp::Rmdir { parent, name } => {
                w.u64(*parent);
                put_bytes(w, name);
            }
            LogOp::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => {
                w.u64(*parent);
                put_bytes(w, name);
                w.u64(*newparent);
                put_bytes(w, newname);
                w.u8(u8::from(flags.noreplace) | u8::from(flags.exchange) << 1);
            }
            _ => {}
        }
    }

    fn decode_fields(code: u8, f: &mut Fields<'_, '_>) -> Result<LogOp> {
        Ok(match code {
            1 => LogOp::Write {
                ino: f.u64()?,
                offset: f.u64()?,
                data: f.bytes()?,
            },
            2 => LogOp::SetAttr {
                ino: f.u64()?,
                changes: SetAttr {
                    mode: f.opt_u32()?,
                    uid: f.opt_u32()?,
                    gid: f.opt_u32()?,
                    size: f.opt()?,
                    atime: f.time()?,
                    mtime: f.time()?,
                },
            },
            3 => {
                let (ino, offset, len, bits) = (f.u64()?, f.u64()?, f.u64()?, f.flags()?);
                let mode = Fallocate {
                    keep_size: bits & 1 != 0,
                    punch_hole: bits & 2 != 0,
                    zero_range: bits & 4 != 0,
                };
                LogOp::Fallocate {
                    ino,
                    offset,
                    len,
                    mode,
                }
            }
            11 => LogOp::SetXattr {
                ino: f.u64()?,
                name: f.bytes()?,
                value: f.bytes()?,
                how: match f.u8()? {
                    0 => XattrSet::Either,
                    1 => XattrSet::Create,
                    2 => XattrSet::Replace,
                    _ => return Err(bad("unknown xattr mode")),
                },
            },
            12 => LogOp::RemoveXattr {
                ino: f.u64()?,
                name: f.bytes()?,
            },
            13 => LogOp::Reclaim { ino: f.u64()? },
            14 => LogOp::DrainUnlinked,
            15 => LogOp::SetProject {
                ino: f.u64()?,
                project: f.u32()?,
                inherit: match f.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(bad("project inherit flag not 0 or 1")),
                },
            },
            16 => LogOp::decode_indirect_fields(f)?,
            4..=10 => LogOp::decode_name_fields(code, f)?,
            _ => return Err(bad("unknown record type")),
        })
    }

    fn encode_indirect_fields(&self, w: &mut Writer) {
        if let LogOp::WriteIndirect {
            ino,
            offset,
            len,
            block,
        } = self
        {
            w.u64(*ino);
            w.u64(*offset);
            w.u32(*len);
            block.encode_into(w);
        }
    }

    /// An indirect write's fields: its range must lie inside the block it names.
    fn decode_indirect_fields(f: &mut Fields<'_, '_>) -> Result<LogOp> {
        let (ino, offset, len) = (f.u64()?, f.u64()?, f.u32()?);
        let block = tarn_format::BlockPtr::decode(f.0)
            .map_err(|_| bad("bad block pointer in an indirect write"))?;
        if !tarn_format::intent_log::indirect_inside(offset, len, &block) {
            return Err(bad("indirect write range outside its block"));
        }
        Ok(LogOp::WriteIndirect {
            ino,
            offset,
            len,
            block,
        })
    }

    fn decode_name_fields(code: u8, f: &mut Fields<'_, '_>) -> Result<LogOp> {
        Ok(match code {
            4 => LogOp::Mknod {
                parent: f.u64()?,
                name: f.bytes()?,
                kind: f.kind()?,
                perm: f.u32()?,
                rdev: f.u64()?,
                creds: f.creds()?,
                ino: f.u64()?,
            },
            5 => LogOp::Mkdir {
                parent: f.u64()?,
                name: f.bytes()?,
                perm: f.u32()?,
                creds: f.creds()?,
                ino: f.u64()?,
            },
            6 => LogOp::Symlink {
                parent: f.u64()?,
                name: f.bytes()?,
                target: f.bytes()?,
                creds: f.creds()?,
                ino: f.u64()?,
            },
            7 => LogOp::Link {
                ino: f.u64()?,
                parent: f.u64()?,
                name: f.bytes()?,
            },
            8 => LogOp::Unlink {
                parent: f.u64()?,
                name: f.bytes()?,
            },
            9 => LogOp::Rmdir {
                parent: f.u64()?,
                name: f.bytes()?,
            },
            10 => {
                let (parent, name) = (f.u64()?, f.bytes()?);
                let (newparent, newname, bits) = (f.u64()?, f.bytes()?, f.flags()?);
                LogOp::Rename {
                    parent,
                    name,
                    newparent,
                    newname,
                    flags: RenameFlags {
                        noreplace: bits & 1 != 0,
                        exchange: bits & 2 != 0,
                    },
                }
            }
            _ => return Err(bad("unknown record type")),
        })
    }
}

/// A modifying operation as kept in memory until its log commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Logged {
    /// Any operation but a write, with everything it needs.
    Op(LogRecord),
    /// A write of `len` bytes at `offset` of `ino`; the bytes are read from the file at
    /// commit ([`Fs::log_record`]).
    Write {
        now: Timespec,
        ino: Ino,
        offset: u64,
        len: u32,
    },
    /// A clone into `ino` (`Fs::clone_into`): no record exists for it, so a queue holding
    /// one is not [`LogQueue::readable`] and its commit syncs a txg instead.
    Clone {
        /// The destination file.
        ino: Ino,
    },
}

impl Logged {
    /// Bytes the record will take in the log, about (a write's data plus a small record).
    #[must_use]
    pub fn log_bytes(&self) -> u64 {
        const SMALL: u64 = 64;
        match self {
            Logged::Write { len, .. } => SMALL + u64::from(*len),
            Logged::Op(_) | Logged::Clone { .. } => SMALL,
        }
    }
}

/// Records waiting for their log commit, each tagged (the engine tags them with the txg
/// they went into), in the order they were made.
///
/// A reclaim drops the queued writes of the inode it frees: its number may be reused, and
/// the file those writes went to is gone in every state a full replay reaches. The queue
/// counts its writes per inode so that a reclaim (one per unlink of a file's last name)
/// walks the queue only when it holds a write of that inode: a queue of tens of thousands
/// of creates and unlinks waiting for their txg costs no walk per unlink.
#[derive(Clone, Debug)]
pub struct LogQueue<T> {
    entries: Vec<(T, Logged)>,
    /// Queued writes per inode (inodes with none are absent).
    writes: HashMap<Ino, usize>,
}

impl<T> Default for LogQueue<T> {
    fn default() -> LogQueue<T> {
        LogQueue {
            entries: Vec::new(),
            writes: HashMap::new(),
        }
    }
}

impl<T> LogQueue<T> {
    /// Appends `entry`, tagged with `tag`.
    pub fn push(&mut self, tag: T, entry: Logged) {
        match &entry {
            Logged::Write { ino, .. } => *self.writes.entry(*ino).or_default() += 1,
            Logged::Op(LogRecord {
                op: LogOp::Reclaim { ino: freed },
                ..
            }) => {
                if self.writes.remove(freed).is_some() {
                    self.entries
                        .retain(|(_, e)| !matches!(e, Logged::Write { ino, .. } if ino == freed));
                }
            }
            Logged::Op(_) | Logged::Clone { .. } => {}
        }
        self.entries.push((tag, entry));
    }

    /// Memory the queue holds, as its entries' sizes (a record's names and xattr values
    /// live on the heap beside it and are not counted; writes carry no bytes).
    #[must_use]
    pub fn memory_bytes(&self) -> u64 {
        (self.entries.capacity() * size_of::<(T, Logged)>()
            + self.writes.capacity() * size_of::<(Ino, usize)>() * 9 / 8) as u64
    }

    /// Keeps only the entries whose tag `keep` accepts (the engine drops those of a txg
    /// that committed).
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        let writes = &mut self.writes;
        self.entries.retain(|(tag, entry)| {
            let kept = keep(tag);
            if let (false, Logged::Write { ino, .. }) = (kept, entry)
                && let Some(count) = writes.get_mut(ino)
            {
                *count -= 1;
                if *count == 0 {
                    writes.remove(ino);
                }
            }
            kept
        });
    }

    /// Drops every entry (after a commit wrote them all).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.writes.clear();
    }

    /// Whether nothing is queued.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, oldest first.
    #[must_use]
    pub fn entries(&self) -> &[(T, Logged)] {
        &self.entries
    }

    /// Whether the queue can be turned into records ([`Fs::log_record`]): not when a drain
    /// of the unlinked set follows a queued write, since the drain freed inodes without
    /// naming them and the write's inode may have been one of them (its number reused
    /// since), and not when a clone is queued ([`Logged::Clone`]). The caller then commits
    /// a txg instead.
    #[must_use]
    pub fn readable(&self) -> bool {
        let mut wrote = false;
        for (_, entry) in &self.entries {
            match entry {
                Logged::Write { .. } => wrote = true,
                Logged::Clone { .. } => return false,
                Logged::Op(LogRecord {
                    op: LogOp::DrainUnlinked,
                    ..
                }) if wrote => return false,
                Logged::Op(_) => {}
            }
        }
        true
    }
}

impl<'a> Fs<'a> {
    /// This view appends a [`Logged`] to `log` for every modifying call that succeeds.
    #[must_use]
    pub fn with_log(mut self, log: &'a mut Vec<Logged>) -> Self {
        self.log = Some(log);
        self
    }

    /// Appends the record `op()` when this view logs.
    pub(crate) fn record(&mut self, op: impl FnOnce() -> LogOp) {
        let now = self.now;
        if let Some(log) = self.log.as_deref_mut() {
            log.push(Logged::Op(LogRecord { now, op: op() }));
        }
    }

    /// Appends a clone into `ino` when this view logs ([`Logged::Clone`]).
    pub(crate) fn record_clone(&mut self, ino: Ino) {
        if let Some(log) = self.log.as_deref_mut() {
            log.push(Logged::Clone { ino });
        }
    }

    /// Appends the write of `len` bytes at `offset` of `ino` when this view logs.
    pub(crate) fn record_write(&mut self, ino: Ino, offset: u64, len: u32) {
        let now = self.now;
        if let Some(log) = self.log.as_deref_mut() {
            log.push(Logged::Write {
                now,
                ino,
                offset,
                len,
            });
        }
    }

    /// The record `entry` stands for, a write's bytes read from the file now. Bytes past
    /// the file's end now are left out: a later truncate cut them, and its record, which
    /// comes after, sets the size and zeroes the tail as it did the first time. `None`
    /// when `ino` is not a regular file (cannot happen in a [`readable`] queue; the
    /// caller then commits a txg instead of writing the log).
    pub fn log_record(&mut self, entry: &Logged) -> Result<Option<LogRecord>> {
        let (now, ino, offset, len) = match entry {
            Logged::Op(record) => return Ok(Some(record.clone())),
            Logged::Clone { .. } => return Ok(None),
            Logged::Write {
                now,
                ino,
                offset,
                len,
            } => (*now, *ino, *offset, *len),
        };
        let inode = match self.regular(ino) {
            Ok(inode) => inode,
            Err(PosixError::NotFound | PosixError::IsDir | PosixError::Invalid(_)) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let readable = inode.size.saturating_sub(offset).min(u64::from(len));
        let mut data = tarn_base::buf::zeroed(readable as usize);
        if !data.is_empty() {
            self.os.read(self.store, oid(ino), offset, &mut data)?;
        }
        let op = LogOp::Write { ino, offset, data };
        Ok(Some(LogRecord { now, op }))
    }

    /// Applies a logged operation again, at the time it first ran (intent-log replay). A
    /// create that makes another inode than the one recorded is an error: the records after
    /// it would name the wrong files.
    pub fn replay(&mut self, record: &LogRecord) -> Result<()> {
        let saved_log = self.log.take();
        let saved_now = self.now;
        self.now = record.now;
        let result = self.replay_op(&record.op);
        self.now = saved_now;
        self.log = saved_log;
        result
    }

    fn replay_op(&mut self, op: &LogOp) -> Result<()> {
        // A new inode takes the number the log recorded: the live call may have passed over
        // lower free numbers a client still held (`Fs::avoid_inos`).
        let live = match op {
            LogOp::Mknod { ino, .. } | LogOp::Mkdir { ino, .. } | LogOp::Symlink { ino, .. } => {
                std::mem::replace(&mut self.new_ino, crate::fs::NewIno::AtLeast(*ino))
            }
            _ => self.new_ino.clone(),
        };
        let replayed = self.replay_made(op);
        self.new_ino = live;
        replayed
    }

    fn replay_made(&mut self, op: &LogOp) -> Result<()> {
        let made = match op {
            LogOp::WriteIndirect { .. } => {
                return Err(PosixError::Invalid(
                    "an indirect write replayed without its block",
                ));
            }
            LogOp::Write { ino, offset, data } => {
                self.write(*ino, *offset, data)?;
                None
            }
            LogOp::SetAttr { ino, changes } => {
                self.setattr(*ino, changes)?;
                None
            }
            LogOp::Fallocate {
                ino,
                offset,
                len,
                mode,
            } => {
                self.fallocate(*ino, *offset, *len, *mode)?;
                None
            }
            LogOp::Mknod {
                parent,
                name,
                kind,
                perm,
                rdev,
                creds,
                ino,
            } => {
                let attr = self.mknod(*parent, name, *kind, *perm, *rdev, *creds)?;
                Some((attr.ino, *ino))
            }
            LogOp::Mkdir {
                parent,
                name,
                perm,
                creds,
                ino,
            } => Some((self.mkdir(*parent, name, *perm, *creds)?.ino, *ino)),
            LogOp::Symlink {
                parent,
                name,
                target,
                creds,
                ino,
            } => Some((self.symlink(*parent, name, target, *creds)?.ino, *ino)),
            _ => {
                self.replay_name_op(op)?;
                None
            }
        };
        match made {
            Some((got, wanted)) if got != wanted => Err(PosixError::Invalid(
                "intent-log replay created another inode than the log recorded",
            )),
            _ => Ok(()),
        }
    }

    fn replay_name_op(&mut self, op: &LogOp) -> Result<()> {
        match op {
            LogOp::Link { ino, parent, name } => self.link(*ino, *parent, name).map(drop),
            LogOp::Unlink { parent, name } => self.unlink(*parent, name).map(drop),
            LogOp::Rmdir { parent, name } => self.rmdir(*parent, name).map(drop),
            LogOp::Rename {
                parent,
                name,
                newparent,
                newname,
                flags,
            } => self
                .rename(*parent, name, *newparent, newname, *flags)
                .map(drop),
            LogOp::SetXattr {
                ino,
                name,
                value,
                how,
            } => self.setxattr(*ino, name, value, *how),
            LogOp::RemoveXattr { ino, name } => self.removexattr(*ino, name),
            LogOp::Reclaim { ino } => self.reclaim(*ino),
            LogOp::DrainUnlinked => self.drain_unlinked().map(drop),
            LogOp::SetProject {
                ino,
                project,
                inherit,
            } => self.set_project(*ino, *project, *inherit).map(drop),
            _ => Err(PosixError::Invalid("not a namespace record")),
        }
    }
}
