//! tarn-fuse: the FUSE front end. Serves one dataset of an imported pool to the kernel's FUSE
//! driver, so that ordinary programs read and write it as a mounted filesystem.
//!
//! # Purpose
//! Translate FUSE requests (lookup, read, write, rename, xattrs, ...) into
//! [`tarn_engine::Engine::fs_op`] calls over the POSIX layer (reads through
//! [`tarn_engine::Engine::fs_read`], which may run the request again after a `clear`), and
//! the answers or errors back.
//! The daemon calls [`mount`] for every `MountSpec` of a pool and [`Mount::unmount`] before
//! the pool goes away; tests call the same functions on an in-process engine.
//!
//! # Model
//! ```text
//!   program --syscall--> kernel FUSE driver (page cache, attribute and entry caches)
//!        (default: default_permissions, the kernel checks mode bits and ACLs;
//!         Permissions::Server: the server checks mode bits, see "Permission checks")
//!                 |  /dev/fuse, cloned once per session thread (FUSE_DEV_IOC_CLONE)
//!       fuser-0   fuser-1   fuser-2   fuser-3      SESSION_THREADS, each: read, serve, reply;
//!                 |                                one reads at a time (pacer.rs)
//!                 |
//!       TarnFs (ops.rs): one request, one Engine::fs_op   <- Mount::invalidate_* (notify)
//!                 |  (pool lock, admission, throttle)       a READ that must wait for the
//!                 |                                         devices: finished and answered
//!                 |                                         on a fuse-fetch thread (fetchers.rs)
//!       tarn_posix::Fs over the dataset's object set
//! ```
//! Inode numbers: the kernel's root is always 1, the dataset's root is whatever
//! `Fs::root()` says. `ino::InoMap` swaps the two and passes every other number through,
//! so the map is its own inverse and holds no table. Snapshots are read at
//! `.tarn/snapshot/<snap>` (module `snapdir` for their numbers, `ops/snap.rs` for their
//! requests, through `Engine::fs_snapshot_read`); `snapdir=visible` lists `.tarn` in the
//! root after `..` (with `..`'s cookie, so a listing resumed there goes on with the real
//! entries), `hidden` (the default) does not, and it is reachable by path either way.
//!
//! A mount is named `POOL/DATASET` (the fsname, shown as the source by `mount` and `df`) and
//! has filesystem type `fuse.tarn` (subtype `tarn`); that type is how a stale mount of ours
//! is recognised in `/proc/self/mountinfo` ([`clean_stale`]).
//!
//! Requests are up to [`MAX_WRITE`] (1 MiB): `max_write` and `max_pages` in the INIT reply,
//! and readahead raised to [`KERNEL_READAHEAD`] (4 MiB) on the mount's backing device in
//! sysfs (the INIT reply cannot go past the 128 KiB the kernel offers), so that a sequential
//! reader has several 1 MiB requests in flight at once. Listings are readdirplus (names with
//! attributes, one request per batch). [`Mount::stats`] counts what arrives;
//! [`Mount::op_stats`] counts and times it per opcode (`opstats.rs`; with
//! [`OPSTATS_ENV`] set, each mount appends its table to that file when it is unmounted).
//!
//! # Kernel caches
//! - Attributes are cached for [`TTL`] (1 s: `st_blocks` changes when a txg syncs, which the
//!   kernel cannot see), names for [`ENTRY_TTL`] (10 s). Every change made through the mount
//!   is the kernel's own and it updates or drops what it cached; the access time the server
//!   writes on a read or listing is dropped by the kernel after each one. One exception to
//!   the 1 s: fuser's create reply has a single TTL, and a created file gets [`ENTRY_TTL`]
//!   for its name and its attributes (with 1 s, unlinking a file created over a second ago
//!   would cost a LOOKUP first). A new file's attributes change only through the mount until
//!   it holds data (it has no blocks for a sync to re-estimate), and the kernel drops them at
//!   each such change (a write invalidates size and blocks).
//! - Missing names: a lookup that finds nothing is answered with a negative entry (inode 0,
//!   [`ENTRY_TTL`]), so the same missing name asked again (a `$PATH` search, a build probing
//!   for headers) costs no request. The kernel replaces it when the name is made through
//!   the mount; each one is recorded, bounded, for `invalidate_all` (`cache.rs`).
//! - What still costs a round trip per operation, by the kernel's design: a create asks
//!   LOOKUP of the new name and CREATE (RELEASE at close does not block the program); an
//!   unlink is UNLINK, which removes the name and reclaims the inode in one
//!   `Engine::fs_op`. With `default_permissions` (the default) every create or unlink in
//!   a directory makes the kernel drop that directory's attributes, so the next one first
//!   asks GETATTR of the directory for its permission check: one round trip more per
//!   create and per unlink, which only [`Permissions::Server`] avoids.
//! - With the server checking, names under a directory not everyone may search (see
//!   "Permission checks") get entry TTL 0 and no negative entries: the kernel asks LOOKUP
//!   at every walk through them.
//! - File pages: an open answers `FOPEN_KEEP_CACHE` when the file's mtime, ctime and size are
//!   what they were at its previous open (`cache.rs`), so a file read again is served from
//!   the page cache without a request; any change in between drops the pages.
//! - Changes behind the kernel's back (through the engine rather than this mount: what a
//!   rollback or a receive into a mounted dataset does) are the caller's to announce:
//!   [`Mount::invalidate_inode`], [`Mount::invalidate_entry`], or [`Mount::invalidate_all`],
//!   which drops every name, negative entry and inode the kernel holds (the table in
//!   `cache.rs` mirrors the kernel's lookup counts). What changes a mounted dataset behind
//!   the kernel's back today: `tarn project` (the ctime of what it changes; the daemon calls
//!   `invalidate_all` after it). A dataset rename or a change of a mount property unmounts
//!   and mounts again (fresh caches); ZIL replay and the unlinked-set drain happen before
//!   the mount.
//!
//! # Access times
//! The kernel never updates atime of a FUSE file itself: the server does, through
//! `Fs::accessed` after each read and listing, under the dataset's *current* `atime` and
//! `relatime` (relatime by default; nothing on a read-only dataset or pool). The mount
//! flags say the same to programs: `noatime` for `atime=off`, `strictatime` (a bind
//! remount right after mounting) for `relatime=off`, the kernel's default `relatime`
//! otherwise; they are set at mount time, so after `tarn set atime=...` they show the old
//! setting until [`Mount::set_access_time_flags`] (the daemon calls it when either property
//! changes) while the behaviour follows the property at once. A read
//! served from the page cache (`FOPEN_KEEP_CACHE`) records no access: under relatime that
//! loses nothing (the pages were read from the server, updating atime, after the last
//! change), under strictatime such reads are not counted.
//!
//! # Permission checks
//! By default ([`Permissions::Kernel`]) the mount has `default_permissions` and the kernel
//! checks everything: mode bits, POSIX ACLs (`acltype=posix`, `FUSE_POSIX_ACL`), every kind
//! of file. [`Permissions::Server`] ([`mount_with`], or [`PERMISSIONS_ENV`]`=server` for
//! [`mount`]; ignored with `acltype=posix`, whose ACLs the kernel evaluates) drops
//! `default_permissions` and the server checks every request against mode bits, owner and
//! group (`tarn_posix::access`, which knows nothing of FUSE): LOOKUP search on the
//! directory; CREATE, MKNOD, MKDIR, SYMLINK, LINK write and search on it (LINK also
//! `protected_hardlinks`); UNLINK, RMDIR, RENAME the same plus the sticky-bit rule, and a
//! directory moved to another parent needs write on itself; OPEN read/write by the
//! access mode (only execute for an `execve`, whose open carries `__FMODE_EXEC`); OPENDIR
//! read; SETATTR the chmod, chown, utimes and
//! truncate rules (a truncate through an open handle is not checked again; O_TRUNC is a
//! SETATTR without one, so it is); ACCESS the asked bits; `user.` xattrs read or write on
//! the file. Root passes everything but execute bits. The caller is the request's uid and
//! gid; its supplementary groups are read from `/proc/PID/status` only when a decision
//! depends on them (group and other bits differ in what is asked). The kernel still
//! checks what it knows alone: execute bits of regular files (any of the three), mount
//! flags, capabilities (CAP_MKNOD, `trusted.` xattrs), `fuse_allow_current_process`.
//!
//! Why offer it: with `default_permissions` the kernel must know a directory's attributes
//! before each change in it, and it drops them at each change, so every create and unlink
//! costs a GETATTR round trip more (docs/PERFORMANCE.md, "Creates and unlinks without the
//! directory's GETATTR"). Why it is not the default: opens of FIFOs, sockets and device
//! nodes are served by the kernel and never reach the server, and without
//! `default_permissions` the kernel checks nothing for them: anyone may open any FIFO or
//! device node of the mount (pjdfstest `open/06.t` fails 15 of 144). zfs-fuse has the same
//! hole.
//!
//! What the kernel does not ask the server: a search check when it walks a name it has
//! cached. So a name may be cached only where every caller may search: a reply gives a
//! name entry TTL [`ENTRY_TTL`] only when its directory has all three execute bits, else
//! 0 (the kernel then asks LOOKUP, with the walker's credentials, at every walk), and a
//! missing name there is a plain ENOENT. When a chmod through the mount takes an execute
//! bit away from a directory, the names the kernel-cache table knows in it (positive, up
//! to `NAMES_PER_INODE` per inode, and negative) are invalidated right after the reply.
//!
//! With `acltype=posix` the kernel checks in either mode (`FUSE_POSIX_ACL` makes the kernel
//! turn `default_permissions` on anyway): ACL evaluation stays the kernel's.
//!
//! # Set-id bits
//! The mount asks for `FUSE_HANDLE_KILLPRIV_V2`: the server, not the kernel, drops the setuid
//! bit (and setgid when group-executable, `access::perm_without_set_id`) on a write whose
//! request carries `FUSE_WRITE_KILL_SUIDGID` (the kernel sets it when the writer lacks
//! `CAP_FSETID`); on a truncate or a fallocate by a caller without `CAP_FSETID` (read from
//! `/proc/PID/status`: fuser does not pass the kernel's `FATTR_KILL_SUIDGID`, and a
//! fallocate carries no flag); and on every chown of a non-directory. Each in the same
//! `fs_op` as the change, so the intent log replays both. Why: with it the kernel sets
//! `SB_NOSEC`, so after one check per inode (and again after each attribute refresh) it
//! stops asking GETXATTR of `security.capability` before every write: one round trip of two
//! per small write (docs/PERFORMANCE.md, "Small random writes"). Removing
//! `security.capability` itself stays the kernel's: it still asks for it, and removes it, on
//! an inode not yet marked `S_NOSEC`, and a setxattr of a `security.` name through the mount
//! clears the mark.
//!
//! # Writeback cache
//! `FUSE_WRITEBACK_CACHE` is left off (measured and decided: docs/PERFORMANCE.md, "Small
//! random writes"). With it `write(2)` returns once the data sit in the kernel's page cache
//! and the server sees them later: EDQUOT and ENOSPC (decided per write by the engine's
//! admission) would reach the program only at `fsync` or `close`, after it was told the
//! bytes were written; the failed pages stay in the page cache, so the program and everyone
//! else read bytes that were never stored until the pages are evicted, and the kernel's file
//! size and mtime (which it then owns) disagree with the dataset. That breaks "never return
//! wrong data" and exact quotas. Restricting it to datasets without quotas does not make it
//! safe: it is decided once per mount at INIT, while a quota can be set and the pool's free
//! space (shared by every dataset) can run out at any time after. The cases it would speed
//! up (small writes, mmap) are served correctly without it: O_APPEND offsets come from the
//! kernel's file size, which every write through the mount keeps current, and shared
//! writable mmap pages are written back through ordinary write requests.
//!
//! # copy_file_range
//! `COPY_FILE_RANGE` (what `cp` uses) is served by block cloning, `Engine::fs_clone_range`:
//! the range's block pointers are cloned and no data moves. A range the engine refuses (a
//! block only partly covered, a source in the snapshot directory) is answered EXDEV, on
//! which the kernel copies through read and write requests; a reply counts at most 2 GiB
//! (32 bits), and the caller asks again for the rest. Both files are in this mount: the
//! kernel sends no copy between two mounts, so clones between datasets are the engine's
//! (and its tests') alone. The kernel drops the target's cached pages after the reply.
//!
//! # State
//! In memory, per mount: the open-handle count of each inode, the set of inodes that lost
//! their last link while open and those being reclaimed (`handles.rs`); the inodes the
//! kernel holds, a few of their names and their stamps at the last open, the negative
//! entries it may hold (at most `cache::NEGATIVES_MAX`), and the request counters
//! (`cache.rs`). No attributes, names or data are cached here, so nothing here can disagree
//! with the engine.
//! On disk: nothing of our own; the POSIX layer's unlinked set is what survives a crash.
//!
//! # Invariants
//! - I1: the kernel's inode 1 is the dataset's root and the root's number is never shown to
//!   the kernel (`InoMap` is an involution).
//! - I1c: kernel numbers with bit 63 set are the snapshot directory's (`snapdir.rs`):
//!   `.tarn`, `.tarn/snapshot`, and each snapshot's inodes under a slot given to its GUID
//!   for the life of the mount; the head's numbers (dataset inodes below 2^40) never have it.
//!   Nothing there can be changed: every modifying request on such a number, or on the
//!   name `.tarn` in the root, is EROFS before it reaches the engine.
//! - I1b: a new inode (create, mknod, mkdir, symlink) never takes a number the kernel still
//!   holds (a lookup not yet forgotten, `KernelCache::holds`): the kernel keeps a removed
//!   inode until its FORGET, and a new one under its number made it find the old inode's
//!   dentries and fail the `mkdir` with EEXIST or ESTALE. The POSIX layer passes over such
//!   numbers (`Fs::avoid_inos`); replay takes the number the intent log recorded.
//! - I2: an inode whose last link goes (unlink, rmdir, rename over it) is reclaimed at once
//!   if no handle holds it open, else when its last handle is released; its space is freed
//!   then and not before. A handle count never goes below zero, and no open gets a handle to
//!   an inode whose reclaim has been decided.
//! - I3: `fsync` replies only after `Engine::fs_sync` returned, so what was written before
//!   is in a committed txg. `flush` (close) does nothing: it answers ENOSYS once and the
//!   kernel stops sending it; close is not fsync.
//! - I4: every request gets exactly one reply, and no request panics: every error is an
//!   errno (`EngineError::errno`), every conversion that could overflow is checked.
//! - I5: with ACLs on (`acltype=posix`), a mode and its access ACL change in the same
//!   `fs_op`: setting the ACL sets the mode it implies, a chmod rewrites the ACL's owner,
//!   mask and other entries, and a new inode under a directory with a default ACL inherits
//!   it instead of the umask (`acl.rs`, what the kernel does for in-kernel filesystems).
//! - I6: `FOPEN_KEEP_CACHE` only when the file's stamp (mtime, ctime, size) equals the one
//!   recorded at its previous open and no `invalidate_all` came in between.
//! - I7: the kernel-cache table holds an inode exactly while the kernel's lookup count of
//!   it is above zero (one per entry reply, less each `forget`).
//! - I8: every negative entry the kernel may still hold (answered less than [`ENTRY_TTL`]
//!   ago and not replaced since) is in the negative-entry record; when the record is full
//!   of such entries, a missing name is answered with a plain ENOENT, which the kernel does
//!   not keep.
//! - I9: with the server checking permissions, a reply lets the kernel keep a name (entry
//!   TTL above 0, or a negative entry) only if the name's directory had all three execute
//!   bits when the reply was made; every request that needs a permission is checked
//!   against the attributes read in the same `fs_op` as the change it guards.
//!
//! # Concurrency and context
//! [`SESSION_THREADS`] fuser threads per mount, each on its own clone of the /dev/fuse
//! descriptor, serve requests as they come, paced (module `pacer`): one thread reads at a
//! time and looks for the next request for a moment after its reply, the others wait
//! after theirs until a serving thread is about to block (`tarn_base::wait`) and one of
//! them has to read in its place; `FUSE_PARALLEL_DIROPS` lets the kernel send
//! lookups and listings of one directory at once. Each request takes the pool's lock inside
//! `Engine::fs_op`, so requests that need the engine still run one at a time: what runs in
//! parallel is everything around it (reading and parsing requests, copying replies), and
//! whatever the kernel serves from its caches never waits for the engine. Lock order: the
//! pool lock, then the handle table's mutex (an unlink decides and does the reclaim inside
//! its `fs_op`); the kernel-cache table's two mutexes (inodes, negative entries) are never
//! held with the pool lock or with each other, and no mutex of ours is held while the
//! engine is called. Invalidations are sent from the caller's thread, never from a session
//! thread, so a notification that waits for a kernel lock never waits for a request that
//! waits for it; the one a chmod causes (a directory that stopped being searchable by
//! everyone) is sent from a thread of its own after the reply. A read plans under the pool
//! lock and reads the devices without it (`Engine::fs_read_begin`); when it must wait for
//! them, its session thread hands the rest, reply included, to a fetcher thread (module
//! `fetchers`, up to `FETCHERS_MAX` for the process, else it finishes the read itself) and
//! takes the next request: cold reads of many readers are in flight together, not four.
//!
//! # Failure model
//! An engine error becomes the errno the kernel returns to the program (EIO for unreadable
//! data, ENOSPC/EDQUOT on admission, EROFS on read-only pools). A daemon that dies leaves a
//! dead mount ("Transport endpoint is not connected", or ECONNABORTED for requests caught
//! while the kernel closes the cloned descriptors) and possibly inodes on the unlinked
//! set: the next daemon calls [`clean_stale`] at the mountpoint (lazy unmount) and
//! [`mount`] drains the unlinked set. A pool exported under a force-detached mount answers
//! ENODEV until the last program lets go. A failed invalidation is returned to the caller
//! ([`FuseError::Notify`]); an inode or name the kernel no longer holds is no failure.
//!
//! # Not here
//! - ACL evaluation in the server: with `acltype=posix` the kernel checks permissions
//!   (`default_permissions`, `FUSE_POSIX_ACL`); ACLs are stored as `system.posix_acl_*`
//!   xattrs by the POSIX layer. With `acltype=off` (the default, as in ZFS) those xattrs
//!   are refused with EOPNOTSUPP.
//! - With [`Permissions::Server`]: checks on opening FIFOs, sockets and device nodes (the
//!   kernel serves those opens); and a race: after a chmod that takes search permission
//!   away from a directory, the invalidation of the names cached in it reaches the kernel
//!   a moment after the chmod returned; a walk by another user in that moment still goes
//!   through. Names beyond `NAMES_PER_INODE` of a hard-linked inode are not known and live
//!   out their TTL.
//! - `copy_file_range`, `ioctl`, file locks and `poll`: the kernel's fallbacks serve them.
//! - The writeback cache (above) and a cache of our own: the engine is the only cache of
//!   data.

mod acl;
mod cache;
mod error;
mod fetchers;
mod handles;
mod ino;
mod mounts;
mod ops;
mod opstats;
mod pacer;
mod snapdir;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tarn_engine::posix::Ino;
use tarn_engine::{Engine, FsOp, MountSpec};

pub use error::FuseError;
pub use mounts::{MountEntry, clean_stale, fuse_available, mounts_at};
pub use opstats::{OPSTATS_ENV, OpStat, Opcode, render as render_op_stats};
pub use snapdir::SNAPSHOT_DIR;

/// How long the kernel may cache attributes. Short: `st_blocks` changes when a txg syncs
/// (the compressed size replaces the estimate) without any request the kernel could see.
pub const TTL: Duration = Duration::from_secs(1);
/// How long the kernel may cache a name. Names change only through the kernel or through
/// the daemon, which invalidates them ([`Mount::invalidate_all`]).
pub const ENTRY_TTL: Duration = Duration::from_secs(10);
/// Largest read and write request (needs FUSE_MAX_PAGES; 256 pages of 4 KiB).
pub const MAX_WRITE: u32 = 1 << 20;

/// How far ahead the kernel reads a file read sequentially through a mount, in requests of
/// up to [`MAX_WRITE`]: four of them in flight, so that the engine is reading the next
/// megabytes (its own read-ahead, tarn-objects `readahead`) while it answers one, and the
/// session threads serve several of them at once. With one request's worth (1 MiB), a cold
/// `dd` read 13-15% slower (docs/PERFORMANCE.md, "Read-ahead without waiting for the batch").
pub const KERNEL_READAHEAD: u32 = 4 << 20;
/// Session threads per mount, each reading requests from its own clone of the /dev/fuse
/// descriptor (FUSE_DEV_IOC_CLONE).
pub const SESSION_THREADS: usize = 4;
/// The FUSE subtype: mounts show as `fuse.tarn`.
pub const SUBTYPE: &str = "tarn";
/// The filesystem type of our mounts in `/proc/self/mountinfo`.
pub const FSTYPE: &str = "fuse.tarn";
/// Where the kernel's FUSE device lives.
pub const FUSE_DEVICE: &str = "/dev/fuse";

/// A mounted dataset, served on a background thread until [`Mount::unmount`] or
/// [`Mount::detach`]. Dropping a mount that is still mounted detaches it lazily.
#[derive(Debug)]
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    notifier: Option<fuser::Notifier>,
    shared: Arc<Shared>,
    inos: ino::InoMap,
    mountpoint: PathBuf,
    name: String,
}

/// What the session threads and the [`Mount`] handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    kernel: cache::KernelCache,
    counters: cache::Counters,
    ops: opstats::OpCounters,
    pacer: Arc<pacer::Pacer>,
    /// Set once the session runs: for the invalidations a request sends after its reply.
    notifier: std::sync::OnceLock<fuser::Notifier>,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            kernel: cache::KernelCache::default(),
            counters: cache::Counters::default(),
            ops: opstats::OpCounters::default(),
            pacer: Arc::new(pacer::Pacer::new(SESSION_THREADS)),
            notifier: std::sync::OnceLock::new(),
        }
    }

    /// A request of `opcode` starts being served: timed, and paced (module `pacer`) when
    /// the returned guard drops, after the reply.
    pub(crate) fn request(&self, opcode: Opcode) -> Serving<'_> {
        self.pacer.enter();
        Serving {
            timed: Some(self.ops.timed(opcode)),
            pacer: &self.pacer,
            park: opcode != Opcode::Forget,
        }
    }
}

/// A request being served ([`Shared::request`]); a FORGET never parks after it (fuser
/// calls its handler once per inode of a batch: module `pacer`).
pub(crate) struct Serving<'a> {
    timed: Option<opstats::Timed<'a>>,
    pacer: &'a pacer::Pacer,
    park: bool,
}

impl Serving<'_> {
    /// The request's reply will be sent by another thread, which records its statistics
    /// ([`opstats::OpCounters::resume`]); this thread is done with it when this drops.
    pub(crate) fn hand_on(&mut self) -> Option<opstats::Suspended> {
        self.timed.take().map(opstats::Timed::suspend)
    }
}

impl Drop for Serving<'_> {
    fn drop(&mut self) {
        // The statistics end with the reply; parking and spinning are not the request's.
        drop(self.timed.take());
        self.pacer.leave(self.park);
    }
}

/// Request statistics of a mount since it was mounted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MountStats {
    /// Requests that reached the engine.
    pub requests: u64,
    /// Most requests inside the engine (running or waiting for its lock) at one instant.
    pub in_flight_max: u64,
    /// Largest read request, in bytes.
    pub read_bytes_max: u64,
    /// Largest write request, in bytes.
    pub write_bytes_max: u64,
    /// Opens that let the kernel keep the file's cached pages (`FOPEN_KEEP_CACHE`).
    pub keep_cache_opens: u64,
    /// Lookups of missing names answered with a negative entry the kernel keeps.
    pub negative_entries: u64,
    /// Inodes the kernel holds now (its lookup count above zero).
    pub cached_inodes: u64,
}

/// Names the environment variable that chooses who checks permissions on the mounts a
/// process makes with [`mount`]: `server` for [`Permissions::Server`]; unset or anything
/// else is [`Permissions::Kernel`].
pub const PERMISSIONS_ENV: &str = "TARN_FUSE_PERMISSIONS";

/// Who checks permissions on a mount ("Permission checks" above).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Permissions {
    /// The kernel, with `default_permissions`: every permission Linux knows is enforced,
    /// for every kind of file. The default.
    #[default]
    Kernel,
    /// The server, without `default_permissions` (only with `acltype=off`; with ACLs the
    /// kernel checks): one round trip less per create and per unlink, but opens of FIFOs,
    /// sockets and device nodes are not checked at all (they never reach the server).
    Server,
}

impl Permissions {
    /// What [`PERMISSIONS_ENV`] asks for.
    #[must_use]
    pub fn from_env() -> Permissions {
        match std::env::var(PERMISSIONS_ENV) {
            Ok(value) if value == "server" => Permissions::Server,
            _ => Permissions::Kernel,
        }
    }
}

/// Mounts the dataset of `spec` at `spec.mountpoint` (created if missing; refused if it is
/// not empty or something is mounted there) and starts serving it, with permissions
/// checked as [`PERMISSIONS_ENV`] says.
pub fn mount(engine: Arc<Engine>, spec: &MountSpec) -> Result<Mount, FuseError> {
    mount_with(engine, spec, Permissions::from_env())
}

/// [`mount`] with permissions checked by `permissions`.
pub fn mount_with(
    engine: Arc<Engine>,
    spec: &MountSpec,
    permissions: Permissions,
) -> Result<Mount, FuseError> {
    if !fuse_available() {
        return Err(FuseError::NoDevice);
    }
    let path = spec.mountpoint.clone();
    prepare_mountpoint(&path)?;
    let engine_error = |source| FuseError::Engine {
        name: spec.name.clone(),
        source,
    };
    let root = engine
        .fs_op(&spec.pool, spec.dataset, FsOp::Read, |fs| fs.root())
        .map_err(engine_error)?;
    if !spec.readonly {
        engine
            .fs_op(&spec.pool, spec.dataset, FsOp::Modify, |fs| {
                fs.drain_unlinked()
            })
            .map_err(engine_error)?;
    }
    let shared = Arc::new(Shared::new());
    let server_checks = permissions == Permissions::Server && !spec.acl;
    let fs = ops::TarnFs::new(engine, spec, root, Arc::clone(&shared), server_checks);
    let config = session_config(spec, server_checks);
    let mount_error = |source| FuseError::Mount {
        path: path.clone(),
        source,
    };
    let session = fuser::Session::new(fs, &path, &config).map_err(mount_error)?;
    shared.pacer.watch(&session);
    let session = session.spawn().map_err(mount_error)?;
    let _ = shared.notifier.set(session.notifier());
    let mount = Mount {
        notifier: Some(session.notifier()),
        session: Some(session),
        shared,
        inos: ino::InoMap::new(root),
        mountpoint: path,
        name: spec.name.clone(),
    };
    raise_readahead(&mount.mountpoint);
    if spec.atime && !spec.relatime {
        // Best effort, like the readahead: the flag only informs programs (the server applies
        // the property itself), and a server without CAP_SYS_ADMIN cannot bind-remount.
        let _ = remount_flags(&mount.mountpoint, spec);
    }
    Ok(mount)
}

/// The `major:minor` name of a device number (Linux's encoding of `dev_t`).
fn device_name(dev: u64) -> String {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    format!("{major}:{minor}")
}

/// Lets the kernel read ahead [`KERNEL_READAHEAD`] bytes on the mount. The FUSE INIT reply
/// cannot raise readahead past what the kernel offered (128 KiB), so buffered reads would
/// stay at 128 KiB requests; the mount's backing device info in sysfs can, as root. Best
/// effort: without it reads are smaller, not wrong.
fn raise_readahead(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    let knob = Path::new("/sys/class/bdi")
        .join(device_name(metadata.dev()))
        .join("read_ahead_kb");
    let _ = std::fs::write(knob, format!("{}", KERNEL_READAHEAD >> 10));
}

/// Sets the flags of the mount at `path` to what `spec` says (a bind remount: only the
/// mount's own flags change, the FUSE connection and its caches stay): `noatime`,
/// `strictatime` or `relatime` from `atime`/`relatime`, and `nodev`, `nosuid`, `noexec`, `ro`
/// as [`session_config`] gave them (a bind remount replaces them all). Used right after
/// mounting for `strictatime` (mount(2) without flags gives `relatime`, and the FUSE mount
/// options have no word for it) and when the properties change on a live mount. The flags
/// only tell programs what to expect; the server applies the dataset's `atime`/`relatime`
/// itself ([`Fs::accessed`]).
///
/// [`Fs::accessed`]: tarn_engine::posix::Fs::accessed
fn remount_flags(path: &Path, spec: &MountSpec) -> std::io::Result<()> {
    use nix::mount::MsFlags;
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND;
    for (on, flag) in [
        (!spec.atime, MsFlags::MS_NOATIME),
        (spec.atime && !spec.relatime, MsFlags::MS_STRICTATIME),
        (spec.atime && spec.relatime, MsFlags::MS_RELATIME),
        (!spec.devices, MsFlags::MS_NODEV),
        (!spec.setuid, MsFlags::MS_NOSUID),
        (!spec.exec, MsFlags::MS_NOEXEC),
        (spec.readonly, MsFlags::MS_RDONLY),
    ] {
        if on {
            flags |= flag;
        }
    }
    nix::mount::mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
        .map_err(std::io::Error::from)
}

fn session_config(spec: &MountSpec, server_checks: bool) -> fuser::Config {
    use fuser::MountOption;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(spec.name.clone()),
        MountOption::CUSTOM(format!("subtype={SUBTYPE}")),
        if spec.devices {
            MountOption::Dev
        } else {
            MountOption::NoDev
        },
        if spec.setuid {
            MountOption::Suid
        } else {
            MountOption::NoSuid
        },
        if spec.exec {
            MountOption::Exec
        } else {
            MountOption::NoExec
        },
        if spec.readonly {
            MountOption::RO
        } else {
            MountOption::RW
        },
    ];
    if !spec.atime {
        config.mount_options.push(MountOption::NoAtime);
    }
    if !server_checks {
        // The kernel checks mode bits and ACLs itself (FUSE_POSIX_ACL implies it anyway).
        config.mount_options.push(MountOption::DefaultPermissions);
    }
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(SESSION_THREADS);
    config.clone_fd = true;
    config
}

/// Creates `path` if missing and refuses one that is mounted on or not empty (ZFS refuses
/// to mount over a non-empty directory, so files are never hidden under a mount).
fn prepare_mountpoint(path: &Path) -> Result<(), FuseError> {
    check_mountpoint(path)?;
    std::fs::create_dir_all(path).map_err(|source| FuseError::Mountpoint {
        path: path.to_path_buf(),
        source,
    })
}

/// Whether a mount at `path` would succeed without hiding anything: `path` is missing (a
/// mount creates it) or an empty directory that nothing is mounted on. Creates nothing, so a
/// property change can be refused before anything changed.
pub fn check_mountpoint(path: &Path) -> Result<(), FuseError> {
    if let Some(entry) = mounts_at(path)?.into_iter().next() {
        return Err(FuseError::AlreadyMounted {
            path: path.to_path_buf(),
            fstype: entry.fstype,
        });
    }
    match std::fs::read_dir(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(FuseError::Mountpoint {
            path: path.to_path_buf(),
            source,
        }),
        Ok(mut entries) => match entries.next() {
            Some(_) => Err(FuseError::NotEmpty {
                path: path.to_path_buf(),
            }),
            None => Ok(()),
        },
    }
}

impl Mount {
    /// Where the dataset is mounted.
    #[must_use]
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// The dataset's full name (the mount's source).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this handle still serves a mount.
    #[must_use]
    pub fn is_mounted(&self) -> bool {
        self.session.is_some()
    }

    /// Sets the mount's access-time flags (`noatime`, `relatime`, `strictatime`) to what
    /// `spec` says now, without unmounting: for `tarn set atime=...` or `relatime=...` on a
    /// mounted dataset. `spec` is the dataset's current mount spec; only its flags are used.
    pub fn set_access_time_flags(&self, spec: &MountSpec) -> Result<(), FuseError> {
        if self.session.is_none() {
            return Err(FuseError::NotMounted {
                path: self.mountpoint.clone(),
            });
        }
        remount_flags(&self.mountpoint, spec).map_err(|source| FuseError::Mount {
            path: self.mountpoint.clone(),
            source,
        })
    }

    /// Request statistics since the mount was made.
    #[must_use]
    pub fn stats(&self) -> MountStats {
        self.shared.counters.snapshot(self.shared.kernel.len())
    }

    /// Per-opcode request statistics since the mount was made, in [`Opcode::ALL`] order:
    /// counts, and the time the server spent on them (`opstats.rs`).
    #[must_use]
    pub fn op_stats(&self) -> Vec<OpStat> {
        self.shared.ops.snapshot()
    }

    /// Appends the per-opcode table to the file [`OPSTATS_ENV`] names, if it is set: for
    /// measuring a whole benchmark through a daemon. Best effort: a file that cannot be
    /// written loses the table, never the unmount.
    fn write_op_stats(&self) {
        let Some(path) = std::env::var_os(OPSTATS_ENV) else {
            return;
        };
        let table = opstats::render(&self.op_stats());
        let text = format!("mount {} {}\n{table}", self.name, self.mountpoint.display());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut file) = file {
            use std::io::Write;
            let _ = file.write_all(text.as_bytes());
        }
    }

    /// Tells the kernel to drop what it cached of inode `ino` of the dataset: attributes,
    /// cached pages and ACLs. For a change made behind the kernel's back (through the engine,
    /// not through this mount). An inode the kernel does not hold is no error.
    pub fn invalidate_inode(&self, ino: Ino) -> Result<(), FuseError> {
        let kernel = fuser::INodeNo(self.inos.to_kernel(ino));
        self.notify(|notifier| notifier.inval_inode(kernel, 0, 0))
    }

    /// Tells the kernel to drop its entry `name` in directory `parent` of the dataset (and
    /// the directory's attributes), so that the next path walk asks again.
    pub fn invalidate_entry(&self, parent: Ino, name: &std::ffi::OsStr) -> Result<(), FuseError> {
        let kernel = fuser::INodeNo(self.inos.to_kernel(parent));
        self.notify(|notifier| notifier.inval_entry(kernel, name))
    }

    /// Tells the kernel to drop everything it cached of this mount: every name it looked
    /// up (as far as the kernel-cache table remembers them), then the attributes and pages
    /// of every inode it holds, the root too; no file keeps its pages at its next open. For
    /// changes to the dataset made behind the kernel's back whose extent is not known.
    /// Returns how many notifications were sent.
    pub fn invalidate_all(&self) -> Result<usize, FuseError> {
        let everything = self.shared.kernel.everything();
        let mut sent = 0;
        for (parent, name) in &everything.names {
            let name = std::ffi::OsStr::from_bytes(name);
            let parent = fuser::INodeNo(*parent);
            self.notify(|notifier| notifier.inval_entry(parent, name))?;
            sent += 1;
        }
        let root = std::iter::once(ino::KERNEL_ROOT);
        for kernel in everything.inodes.into_iter().chain(root) {
            let kernel = fuser::INodeNo(kernel);
            self.notify(|notifier| notifier.inval_inode(kernel, 0, 0))?;
            sent += 1;
        }
        Ok(sent)
    }

    fn notify(
        &self,
        send: impl FnOnce(&fuser::Notifier) -> std::io::Result<()>,
    ) -> Result<(), FuseError> {
        let Some(notifier) = self.notifier.as_ref().filter(|_| self.session.is_some()) else {
            return Err(FuseError::NotMounted {
                path: self.mountpoint.clone(),
            });
        };
        send(notifier).map_err(|source| FuseError::Notify {
            path: self.mountpoint.clone(),
            source,
        })
    }

    /// Unmounts and waits for the session thread to end. A busy mount (a program has a file
    /// open or its cwd inside) is refused with [`FuseError::Busy`] and stays mounted.
    /// Unmounting an unmounted handle does nothing.
    pub fn unmount(&mut self) -> Result<(), FuseError> {
        let Some(session) = self.session.take() else {
            return Ok(());
        };
        match umount_settled(&self.mountpoint) {
            Ok(()) => {}
            Err(nix::errno::Errno::EBUSY) => {
                self.session = Some(session);
                return Err(FuseError::Busy {
                    path: self.mountpoint.clone(),
                });
            }
            Err(nix::errno::Errno::EINVAL) => {
                // Not a mount point any more: someone unmounted it behind our back; the
                // session has ended or ends now, joining is all that is left.
            }
            Err(errno) => {
                self.session = Some(session);
                return Err(FuseError::Unmount {
                    path: self.mountpoint.clone(),
                    source: std::io::Error::from(errno),
                });
            }
        }
        self.shared.pacer.close();
        join_session(session);
        self.write_op_stats();
        Ok(())
    }

    /// Detaches the mount lazily (`umount2(MNT_DETACH)`): it leaves the namespace now and the
    /// session keeps serving open files until the last one closes, on its own thread.
    pub fn detach(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        self.write_op_stats();
        let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
        // The session thread ends when the kernel drops the connection; joining it on a
        // thread of its own keeps fuser from unmounting the path again when it is dropped.
        let _ = std::thread::Builder::new()
            .name("fuse-detached".into())
            .spawn(move || join_session(session));
    }
}

/// `umount(2)`, retried for up to [`UNMOUNT_SETTLE_MS`] while it says EBUSY: a file closed
/// an instant ago may still hold the mount until the kernel has finished releasing it (the
/// last reference of a file goes away after `close` returns, in task work or a worker).
/// A mount still busy after that really is in use.
fn umount_settled(path: &std::path::Path) -> Result<(), nix::errno::Errno> {
    let mut waited = 0;
    loop {
        match nix::mount::umount(path) {
            Err(nix::errno::Errno::EBUSY) if waited < UNMOUNT_SETTLE_MS => {
                std::thread::sleep(std::time::Duration::from_millis(UNMOUNT_RETRY_MS));
                waited += UNMOUNT_RETRY_MS;
            }
            result => return result,
        }
    }
}

/// How long an unmount keeps retrying EBUSY, and how often.
const UNMOUNT_SETTLE_MS: u64 = 500;
const UNMOUNT_RETRY_MS: u64 = 25;

/// Waits for a session whose mount is gone. fuser's own unmount on drop sees the connection
/// closed and leaves the path alone.
fn join_session(session: fuser::BackgroundSession) {
    let _ = session.join();
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.detach();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_are_named_as_sysfs_names_them() {
        assert_eq!(device_name(0x2d), "0:45");
        assert_eq!(device_name((259 << 8) | 3), "259:3");
        assert_eq!(device_name(0x0001_2000_6783_4590), "74565:424080");
    }
}
