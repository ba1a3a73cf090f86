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
mod error;
mod handles;
mod ino;
mod mounts;
mod ops;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tarn_engine::{Engine, FsOp, MountSpec};

pub use error::FuseError;
pub use mounts::{MountEntry, clean_stale, fuse_available, mounts_at};

/// How long the kernel may cache attributes and directory entries.
pub const TTL: Duration = Duration::from_secs(1);
/// Largest write request the kernel sends (needs FUSE_MAX_PAGES).
pub const MAX_WRITE: u32 = 1 << 20;
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
    mountpoint: PathBuf,
    name: String,
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
    let fs = ops::TarnFs::new(engine, spec, root);
    let session = fuser::spawn_mount(fs, &path, &session_config(spec)).map_err(|source| {
        FuseError::Mount {
            path: path.clone(),
            source,
        }
    })?;
    Ok(Mount {
        session: Some(session),
        mountpoint: path,
        name: spec.name.clone(),
    })
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
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(1);
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
