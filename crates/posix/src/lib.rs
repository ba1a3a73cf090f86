//! tarn-posix: a POSIX filesystem (ZFS's ZPL) over one object set: inodes, hashed
//! directories, regular files with holes, symlinks, hard links, special files, xattrs.
//!
//! # Purpose
//! Turn the numbered objects of a dataset's [`tarn_objects::ObjectSet`] into files and
//! directories. It knows nothing of FUSE, the kernel or the CLI: a front end calls [`Fs`]
//! methods with inode numbers, names as bytes and caller credentials, and maps
//! [`PosixError::errno`] to its protocol.
//!
//! # Model
//! ```text
//!  object 1: master node (ZAP)  "version" -> 1, "root" -> R, "unlinked" -> U, "inodes" -> n
//!  object R: root directory     ZAP: name -> (inode, type); bonus: inode (parent = R)
//!  object U: unlinked set       ZAP: inode -> inode (link count 0, still open somewhere)
//!  object N: an inode           bonus: inode (type, mode, owner, size, times, parent,
//!                               xattr ZAP); data: file contents (records of recordsize,
//!                               the first block growing from 512 bytes), a long symlink
//!                               target; directories are ZAPs
//!  object X: xattr ZAP of N     name -> value inline, or -> (value object, length)
//!  userused/groupused/projectused (named by the master node): ZAPs id -> (bytes, inodes)
//! ```
//! Each inode also carries a project id and ZFS's project-inherit flag. The used-by counts
//! (`usedby.rs`) change only at sync: [`UsedByHook`] gets every changed dnode from the
//! object layer and charges its used bytes and one inode to its uid, gid and project.
//! Inode numbers are object numbers. A directory's `size` is its entry count; its link
//! count is 2 plus its subdirectories. `readdir` cookies are the entries' ZAP hashes, so a
//! listing never repeats or skips an entry that stays while others come and go.
//!
//! # Invariants
//! - I1: every live inode except the root is named by at least one directory entry, or
//!   has link count 0 and is on the unlinked set; nothing on the set has links.
//! - I2: a directory entry's type equals its inode's type; a directory's `..` (its inode's
//!   parent) lists it.
//! - I3: bytes past a file's size read as zeros whenever the size grows again (truncation
//!   frees or zeroes them).
//! - I4: the master node's inode count equals the live inodes.
//! - I5: after every sync, the used-by counts equal a recount of the committed inodes
//!   (checked after every sync of the POSIX tests).
//!
//! # Intent log
//! A view built with [`Fs::with_log`] appends a [`LogRecord`] for every modifying call that
//! succeeds; [`Fs::replay`] applies one again. The engine writes them to the dataset's
//! intent log on `fsync` and replays them at import (module [`intent`]).
//!
//! # Failure model
//! Bytes from disk (inodes, entries, attribute values) are input: a bad one is
//! [`PosixError::Object`] with `ObjectError::Corrupt` (EIO), never a panic. Unreadable
//! blocks surface as EIO from the object layer. A crash leaves the last committed txg,
//! where I1-I4 held; inodes unlinked while open are freed by [`Fs::drain_unlinked`] at the
//! next mount.
//!
//! # Permission checks
//! [`access`] holds Linux's permission rules by mode bits, owner and group (classes,
//! supplementary groups asked for lazily, root, sticky directories, chmod/chown/utimes,
//! truncate, `protected_hardlinks`) as pure functions of the attributes and the caller.
//! [`Fs`] methods do not call them: a front end that checks permissions itself (the FUSE
//! server when told to: `tarn_fuse::Permissions::Server`) calls them inside the same
//! `fs_op` as the change they guard, and other callers (the engine's own work, replay,
//! tools) are not subject to them.
//!
//! # Not here
//! POSIX ACL evaluation (with `acltype=posix` the kernel checks mode bits and ACLs with
//! FUSE's `default_permissions`; ACL xattrs are stored here verbatim), dataset quotas and space
//! (the engine admits writes; per-owner quotas come in through [`Fs::with_quotas`]), txg
//! timing (the engine syncs), open-file tracking (the front end decides when an unlinked
//! inode is reclaimed). Reads and listings do not touch the access time by themselves: the
//! front end calls [`Fs::accessed`] after serving one, so other callers (the simulator,
//! tools) read without side effects.
//!
//! # Access times
//! [`Fs::accessed`] applies [`FsConfig::atime`]: `Off` never writes, `Strict` sets atime to
//! now on every access, `Relative` (relatime, the default) only when atime is not after mtime
//! or ctime, or is [`RELATIME_MAX_AGE_SECS`] old. Under relatime a file read again and again
//! dirties its inode once after each change and once a day, not on every read, so reading
//! does not keep the pool's txgs dirty. The update is an inode (bonus) write only: no data
//! block, no admission, and it never fails the read that caused it.

pub mod access;
mod clone;
mod data;
pub mod diff;
pub mod filesum;
mod fs;
mod inode;
pub mod intent;
pub mod intent_indirect;
mod namespace;
mod usedby;
mod xattr;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod usedby_tests;

pub use clone::CloneSource;
pub use data::{FILE_SIZE_MAX, HOLE_READ_MAX, ReadData, ZEROS};
pub use fs::{Fs, InoFilter};

/// Object types whose contents each side of a send keeps itself (the per-owner counts,
/// which depend on the pool's allocation sizes): an incremental stream leaves them out and a
/// receiver recounts them after a full one ([`Fs::recount_usedby`]).
pub const RECOMPUTED_TYPES: &[u8] = &[inode::TYPE_USEDBY];

/// Whether two bonus buffers are the same inode but for its access time (what a read or a
/// listing changes) and the checksum cache's flag (what `tarn checksum` changes): `tarn
/// receive` does not count such a change as a modification.
#[must_use]
pub fn same_but_access_time(now: &[u8], before: &[u8]) -> bool {
    match (
        inode::Inode::decode(0, now),
        inode::Inode::decode(0, before),
    ) {
        (Ok(now), Ok(before)) => now.same_but_access(&before),
        _ => now == before,
    }
}
pub use intent::{LogOp, LogQueue, LogRecord, Logged};
pub use namespace::NAME_MAX;
pub use usedby::{Owner, OwnerKind, Pending, Quotas, Usage, UsedByHook, UsedScale};
pub use xattr::{XATTR_NAME_MAX, XATTR_SIZE_MAX};

use tarn_objects::ObjectError;

/// An inode number: the object id of the inode in the dataset's object set.
pub type Ino = u64;

/// What kind of file an inode is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file.
    Regular,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character device node.
    CharDevice,
    /// A block device node.
    BlockDevice,
}

/// A point in time: seconds and nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timespec {
    /// Seconds since the epoch (negative before it).
    pub secs: i64,
    /// Nanoseconds, below 1e9.
    pub nsecs: u32,
}

/// The attributes of an inode (what `stat` shows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// File type.
    pub kind: FileKind,
    /// Permission bits (mode & 0o7777).
    pub perm: u16,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number of a device node.
    pub rdev: u64,
    /// Size in bytes (a symlink's target length; a directory's entry count).
    pub size: u64,
    /// Space used, in 512-byte units.
    pub blocks: u64,
    /// Preferred I/O size.
    pub blksize: u32,
    /// Last access.
    pub atime: Timespec,
    /// Last data change.
    pub mtime: Timespec,
    /// Last inode change.
    pub ctime: Timespec,
    /// Creation.
    pub crtime: Timespec,
    /// Generation number (distinguishes reuses of an inode number).
    pub generation: u64,
}

/// A time to set: now (as the filesystem sees it) or a given instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeOrNow {
    /// The filesystem's current time.
    Now,
    /// A given instant.
    At(Timespec),
}

/// Attribute changes for [`Fs::setattr`]; `None` leaves a field alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (file type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend with a hole).
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<TimeOrNow>,
    /// New modification time.
    pub mtime: Option<TimeOrNow>,
}

/// Who creates a file: its owner and group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Creds {
    /// Owner of new inodes.
    pub uid: u32,
    /// Group of new inodes (a setgid directory's group wins).
    pub gid: u32,
}

/// One directory entry from [`Fs::readdir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode of the entry.
    pub ino: Ino,
    /// Its type.
    pub kind: FileKind,
    /// Its name.
    pub name: Vec<u8>,
    /// The cookie to pass to `readdir` to continue after this entry.
    pub cookie: u64,
}

/// `renameat2` flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RenameFlags {
    /// RENAME_NOREPLACE: fail with EEXIST if the target exists.
    pub noreplace: bool,
    /// RENAME_EXCHANGE: swap source and target atomically (both must exist).
    pub exchange: bool,
}

/// How `setxattr` treats an existing attribute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XattrSet {
    /// Create or replace.
    #[default]
    Either,
    /// XATTR_CREATE: fail with EEXIST if it exists.
    Create,
    /// XATTR_REPLACE: fail with ENODATA if it does not.
    Replace,
}

/// `lseek` whence for sparse files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    /// SEEK_DATA: the next offset at or after the given one that holds data.
    Data,
    /// SEEK_HOLE: the next hole (the end of file counts as one).
    Hole,
}

/// `fallocate` mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fallocate {
    /// FALLOC_FL_KEEP_SIZE.
    pub keep_size: bool,
    /// FALLOC_FL_PUNCH_HOLE (requires `keep_size`).
    pub punch_hole: bool,
    /// FALLOC_FL_ZERO_RANGE.
    pub zero_range: bool,
}

/// When reading a file or listing a directory updates its access time ([`Fs::accessed`]),
/// from the `atime` and `relatime` properties.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AtimeMode {
    /// `atime=off` (and every read-only dataset or pool): never.
    Off,
    /// `atime=on relatime=on` (the default, as on ZFS and Linux): only when the access time
    /// is not after the modification or change time, or is a day old or more.
    #[default]
    Relative,
    /// `atime=on relatime=off` (strictatime): on every access.
    Strict,
}

/// A relatime access time is refreshed at least this often, in seconds (as Linux does).
pub const RELATIME_MAX_AGE_SECS: i64 = 24 * 60 * 60;

impl AtimeMode {
    /// Whether an access at `now` updates an inode whose times are `atime`, `mtime` and
    /// `ctime` (relatime: not after the last change, or a day old or more).
    #[must_use]
    pub fn due(self, now: Timespec, atime: Timespec, mtime: Timespec, ctime: Timespec) -> bool {
        match self {
            AtimeMode::Off => false,
            AtimeMode::Strict => atime != now,
            AtimeMode::Relative => {
                atime <= mtime
                    || atime <= ctime
                    || now.secs.saturating_sub(atime.secs) >= RELATIME_MAX_AGE_SECS
            }
        }
    }
}

/// Per-dataset settings the filesystem needs (from dataset properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsConfig {
    /// Largest data block of a file (`recordsize`), a power of two from 512 to 16 MiB.
    pub recordsize: u32,
    /// Extended attributes allowed (`xattr=on`).
    pub xattr: bool,
    /// POSIX ACLs stored (`acltype=posix`); without, the `system.posix_acl_*` attributes
    /// are refused (EOPNOTSUPP), as on ZFS with `acltype=off`.
    pub acl: bool,
    /// When an access updates the access time (`atime`, `relatime`; `Off` on anything
    /// read-only, where nothing may be written).
    pub atime: AtimeMode,
}

impl Default for FsConfig {
    fn default() -> Self {
        FsConfig {
            recordsize: 128 << 10,
            xattr: true,
            acl: false,
            atime: AtimeMode::Relative,
        }
    }
}

/// Why a filesystem operation failed. [`PosixError::errno`] gives the errno a front end
/// returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PosixError {
    /// ENOENT.
    #[error("no such file or directory")]
    NotFound,
    /// EEXIST.
    #[error("file exists")]
    Exists,
    /// ENOTDIR.
    #[error("not a directory")]
    NotDir,
    /// EISDIR.
    #[error("is a directory")]
    IsDir,
    /// ENOTEMPTY.
    #[error("directory not empty")]
    NotEmpty,
    /// ENAMETOOLONG.
    #[error("file name too long")]
    NameTooLong,
    /// EINVAL, with what was invalid.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// ENODATA: no such extended attribute.
    #[error("no such attribute")]
    NoAttr,
    /// ERANGE: a value is too large.
    #[error("value out of range")]
    Range,
    /// EMLINK.
    #[error("too many links")]
    TooManyLinks,
    /// ENXIO: `lseek` past the last data or the end of file.
    #[error("no such offset")]
    NoSuchOffset,
    /// EOPNOTSUPP.
    #[error("operation not supported")]
    NotSupported,
    /// EFBIG: beyond the largest file size (E2BIG for an attribute value).
    #[error("file too large")]
    TooBig,
    /// EACCES: the caller lacks a permission the operation needs (`access.rs`).
    #[error("permission denied")]
    AccessDenied,
    /// EPERM: not allowed on this kind of file (a hard link to a directory).
    #[error("operation not permitted")]
    NotPermitted,
    /// EXDEV: a rename or link into a project-inherit directory of another project.
    #[error("invalid cross-device link")]
    CrossProject,
    /// EXDEV: a range that cannot be cloned (block cloning); the caller copies it instead.
    #[error("cannot clone: {0}")]
    CannotClone(&'static str),
    /// EDQUOT: a user, group or project quota would be exceeded.
    #[error("disk quota exceeded")]
    QuotaExceeded,
    /// The object set holds no filesystem (no master node).
    #[error("not a filesystem")]
    NotFilesystem,
    /// EIO and its kin from the object layer (EIO for unreadable blocks; corrupt metadata).
    #[error(transparent)]
    Object(#[from] ObjectError),
}

impl PosixError {
    /// The errno a front end returns for this error.
    #[must_use]
    pub fn errno(&self) -> i32 {
        match self {
            PosixError::NotFound => libc::ENOENT,
            PosixError::Exists => libc::EEXIST,
            PosixError::NotDir => libc::ENOTDIR,
            PosixError::IsDir => libc::EISDIR,
            PosixError::NotEmpty => libc::ENOTEMPTY,
            PosixError::NameTooLong => libc::ENAMETOOLONG,
            PosixError::Invalid(_) => libc::EINVAL,
            PosixError::NoAttr => libc::ENODATA,
            PosixError::Range => libc::ERANGE,
            PosixError::TooManyLinks => libc::EMLINK,
            PosixError::NoSuchOffset => libc::ENXIO,
            PosixError::NotSupported => libc::EOPNOTSUPP,
            PosixError::TooBig => libc::EFBIG,
            PosixError::AccessDenied => libc::EACCES,
            PosixError::NotPermitted => libc::EPERM,
            PosixError::QuotaExceeded => libc::EDQUOT,
            PosixError::CrossProject => libc::EXDEV,
            PosixError::CannotClone(_) => libc::EXDEV,
            PosixError::NotFilesystem => libc::EINVAL,
            PosixError::Object(_) => libc::EIO,
        }
    }
}
