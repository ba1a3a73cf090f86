//! tarn-fuse: the FUSE front end. Serves one dataset of an imported pool to the kernel's FUSE
//! driver, so that ordinary programs read and write it as a mounted filesystem.
//!
//! # Purpose
//! Translate FUSE requests (lookup, read, write, rename, xattrs, ...) into
//! [`tarn_engine::Engine::fs_op`] calls over the POSIX layer, and the answers or errors back.
//! The daemon calls [`mount`] for every `MountSpec` of a pool and [`Mount::unmount`] before
//! the pool goes away; tests call the same functions on an in-process engine.
//!
//! # Model
//! ```text
//!   program --syscall--> kernel FUSE driver --/dev/fuse--> fuser session thread
//!        (default_permissions: the kernel checks mode bits and POSIX ACLs itself)
//!                                                  |
//!                                   TarnFs (ops.rs): one request, one Engine::fs_op
//!                                                  |  (pool lock, admission, throttle)
//!                                   tarn_posix::Fs over the dataset's object set
//! ```
//! Inode numbers: the kernel's root is always 1, the dataset's root is whatever
//! `Fs::root()` says. [`ino::InoMap`] swaps the two and passes every other number through,
//! so the map is its own inverse and holds no table.
//!
//! A mount is named `POOL/DATASET` (the fsname, shown as the source by `mount` and `df`) and
//! has filesystem type `fuse.tarn` (subtype `tarn`); that type is how a stale mount of ours
//! is recognised in `/proc/self/mountinfo` ([`clean_stale`]).
//!
//! # State
//! In memory, per mount: the open-handle count of each inode and the set of inodes that lost
//! their last link while open (`handles.rs`). Nothing else: attributes, names and data are
//! asked from the engine on every request, so no cache here can disagree with it. The kernel
//! caches attributes and entries for [`TTL`]; every change goes through the kernel, which
//! invalidates what it cached for the inodes a request touched.
//! On disk: nothing of our own; the POSIX layer's unlinked set is what survives a crash.
//!
//! # Invariants
//! - I1: the kernel's inode 1 is the dataset's root and the root's number is never shown to
//!   the kernel (`InoMap` is an involution).
//! - I2: an inode whose last link goes (unlink, rmdir, rename over it) is reclaimed at once
//!   if no handle holds it open, else when its last handle is released; its space is freed
//!   then and not before. A handle count never goes below zero.
//! - I3: `fsync` replies only after `Engine::fs_sync` returned, so what was written before
//!   is in a committed txg.
//! - I4: every request gets exactly one reply, and no request panics: every error is an
//!   errno (`EngineError::errno`), every conversion that could overflow is checked.
//!
//! - I5: with ACLs on (`acltype=posix`), a mode and its access ACL change in the same
//!   `fs_op`: setting the ACL sets the mode it implies, a chmod rewrites the ACL's owner,
//!   mask and other entries, and a new inode under a directory with a default ACL inherits
//!   it instead of the umask (`acl.rs`, what the kernel does for in-kernel filesystems).
//!
//! # Concurrency and context
//! One fuser session thread per mount serves requests in order. Each request takes the
//! pool's lock inside `Engine::fs_op`; the handle table's mutex is taken only around count
//! changes and never while the engine is called.
//!
//! # Failure model
//! An engine error becomes the errno the kernel returns to the program (EIO for unreadable
//! data, ENOSPC/EDQUOT on admission, EROFS on read-only pools). A daemon that dies leaves a
//! dead mount ("Transport endpoint is not connected") and possibly inodes on the unlinked
//! set: the next daemon calls [`clean_stale`] at the mountpoint (lazy unmount) and
//! [`mount`] drains the unlinked set. A pool exported under a force-detached mount answers
//! ENODEV until the last program lets go.
//!
//! # Not here
//! - Permission checks: the kernel does them (`default_permissions`, `FUSE_POSIX_ACL`);
//!   ACLs are stored as `system.posix_acl_*` xattrs by the POSIX layer. With
//!   `acltype=off` (the default, as in ZFS) those xattrs are refused with EOPNOTSUPP.
//! - `copy_file_range`, `ioctl`, file locks and `poll`: the kernel's fallbacks serve them.
//! - Writeback caching and kernel-cache notifications: every write reaches the engine.

mod acl;
mod cache;
mod error;
mod handles;
mod ino;
mod mounts;
mod ops;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tarn_engine::posix::Ino;
use tarn_engine::{Engine, FsOp, MountSpec};

pub use error::FuseError;
pub use mounts::{MountEntry, clean_stale, fuse_available, mounts_at};

/// How long the kernel may cache attributes. Short: `st_blocks` changes when a txg syncs
/// (the compressed size replaces the estimate) without any request the kernel could see.
pub const TTL: Duration = Duration::from_secs(1);
/// How long the kernel may cache a name. Names change only through the kernel or through
/// the daemon, which invalidates them ([`Mount::invalidate_all`]).
pub const ENTRY_TTL: Duration = Duration::from_secs(10);
/// Largest read and write request (needs FUSE_MAX_PAGES; 256 pages of 4 KiB).
pub const MAX_WRITE: u32 = 1 << 20;
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
#[derive(Debug, Default)]
pub(crate) struct Shared {
    kernel: cache::KernelCache,
    counters: cache::Counters,
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
    /// Inodes the kernel holds now (its lookup count above zero).
    pub cached_inodes: u64,
}

/// Mounts the dataset of `spec` at `spec.mountpoint` (created if missing; refused if it is
/// not empty or something is mounted there) and starts serving it.
pub fn mount(engine: Arc<Engine>, spec: &MountSpec) -> Result<Mount, FuseError> {
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
    let shared = Arc::new(Shared::default());
    let fs = ops::TarnFs::new(engine, spec, root, Arc::clone(&shared));
    let session = fuser::spawn_mount(fs, &path, &session_config(spec)).map_err(|source| {
        FuseError::Mount {
            path: path.clone(),
            source,
        }
    })?;
    let mut mount = Mount {
        notifier: Some(session.notifier()),
        session: Some(session),
        shared,
        inos: ino::InoMap::new(root),
        mountpoint: path,
        name: spec.name.clone(),
    };
    raise_readahead(&mount.mountpoint);
    if spec.atime
        && !spec.relatime
        && let Err(source) = remount_strictatime(&mount.mountpoint, spec)
    {
        mount.detach();
        return Err(FuseError::Mount {
            path: mount.mountpoint.clone(),
            source,
        });
    }
    Ok(mount)
}

/// The `major:minor` name of a device number (Linux's encoding of `dev_t`).
fn device_name(dev: u64) -> String {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & 0xffff_f000);
    let minor = (dev & 0xff) | ((dev >> 12) & 0xffff_ff00);
    format!("{major}:{minor}")
}

/// Lets the kernel read ahead [`MAX_WRITE`] bytes at a time on the mount. The FUSE INIT
/// reply cannot raise readahead past what the kernel offered (128 KiB), so buffered reads
/// would stay at 128 KiB requests; the mount's backing device info in sysfs can, as root.
/// Best effort: without it reads are smaller, not wrong.
fn raise_readahead(path: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    let knob = Path::new("/sys/class/bdi")
        .join(device_name(metadata.dev()))
        .join("read_ahead_kb");
    let _ = std::fs::write(knob, format!("{}", MAX_WRITE >> 10));
}

/// Makes a fresh mount `strictatime` (mount(2) without flags gives `relatime`, and the FUSE
/// mount options have no word for it): a bind remount that sets the mount's flags again,
/// the ones `session_config` gave plus MS_STRICTATIME. The flag only tells programs what to
/// expect; the server applies the dataset's `atime`/`relatime` itself ([`Fs::accessed`]).
///
/// [`Fs::accessed`]: tarn_engine::posix::Fs::accessed
fn remount_strictatime(path: &Path, spec: &MountSpec) -> std::io::Result<()> {
    use nix::mount::MsFlags;
    let mut flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_STRICTATIME;
    for (off, flag) in [
        (!spec.devices, MsFlags::MS_NODEV),
        (!spec.setuid, MsFlags::MS_NOSUID),
        (!spec.exec, MsFlags::MS_NOEXEC),
        (spec.readonly, MsFlags::MS_RDONLY),
    ] {
        if off {
            flags |= flag;
        }
    }
    nix::mount::mount(None::<&str>, path, None::<&str>, flags, None::<&str>)
        .map_err(std::io::Error::from)
}

fn session_config(spec: &MountSpec) -> fuser::Config {
    use fuser::MountOption;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        MountOption::FSName(spec.name.clone()),
        MountOption::CUSTOM(format!("subtype={SUBTYPE}")),
        MountOption::DefaultPermissions,
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
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(SESSION_THREADS);
    config.clone_fd = true;
    config
}

/// Creates `path` if missing and refuses one that is mounted on or not empty (ZFS refuses
/// to mount over a non-empty directory, so files are never hidden under a mount).
fn prepare_mountpoint(path: &Path) -> Result<(), FuseError> {
    if let Some(entry) = mounts_at(path)?.into_iter().next() {
        return Err(FuseError::AlreadyMounted {
            path: path.to_path_buf(),
            fstype: entry.fstype,
        });
    }
    let io_error = |source| FuseError::Mountpoint {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(path).map_err(io_error)?;
    let mut entries = std::fs::read_dir(path).map_err(io_error)?;
    if entries.next().is_some() {
        return Err(FuseError::NotEmpty {
            path: path.to_path_buf(),
        });
    }
    Ok(())
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

    /// Request statistics since the mount was made.
    #[must_use]
    pub fn stats(&self) -> MountStats {
        self.shared.counters.snapshot(self.shared.kernel.len())
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
    /// up (as far as [`cache`] remembers them), then the attributes and pages of every
    /// inode it holds, the root too; no file keeps its pages at its next open. For changes
    /// to the dataset made behind the kernel's back whose extent is not known. Returns how
    /// many notifications were sent.
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
        match nix::mount::umount(&self.mountpoint) {
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
        join_session(session);
        Ok(())
    }

    /// Detaches the mount lazily (`umount2(MNT_DETACH)`): it leaves the namespace now and the
    /// session keeps serving open files until the last one closes, on its own thread.
    pub fn detach(&mut self) {
        let Some(session) = self.session.take() else {
            return;
        };
        let _ = nix::mount::umount2(&self.mountpoint, nix::mount::MntFlags::MNT_DETACH);
        // The session thread ends when the kernel drops the connection; joining it on a
        // thread of its own keeps fuser from unmounting the path again when it is dropped.
        let _ = std::thread::Builder::new()
            .name("fuse-detached".into())
            .spawn(move || join_session(session));
    }
}

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
