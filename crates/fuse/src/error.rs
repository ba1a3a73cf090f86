//! [`FuseError`]: why a dataset could not be mounted or unmounted.

use std::path::PathBuf;

/// Why mounting, unmounting or cleaning up a mount failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FuseError {
    /// The kernel's FUSE device is absent (no fuse module, or a container without it).
    #[error("{} is not available (is the fuse module loaded?)", crate::FUSE_DEVICE)]
    NoDevice,
    /// The mountpoint could not be created or read.
    #[error("cannot use mountpoint {}: {source}", path.display())]
    Mountpoint {
        /// The mountpoint.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The mountpoint is a directory with entries in it (mounting would hide them).
    #[error("mountpoint {} is not empty", path.display())]
    NotEmpty {
        /// The mountpoint.
        path: PathBuf,
    },
    /// Something is already mounted at the mountpoint.
    #[error("{} is already a mountpoint ({fstype})", path.display())]
    AlreadyMounted {
        /// The mountpoint.
        path: PathBuf,
        /// Filesystem type of what is mounted there.
        fstype: String,
    },
    /// The engine refused to open the dataset.
    #[error("cannot open dataset '{name}': {source}")]
    Engine {
        /// The dataset's full name.
        name: String,
        /// The engine's error.
        source: tarn_engine::EngineError,
    },
    /// The kernel refused the mount.
    #[error("cannot mount at {}: {source}", path.display())]
    Mount {
        /// The mountpoint.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The mount is in use (open files or a working directory inside it).
    #[error("cannot unmount {}: mountpoint is busy", path.display())]
    Busy {
        /// The mountpoint.
        path: PathBuf,
    },
    /// Unmounting failed for another reason.
    #[error("cannot unmount {}: {source}", path.display())]
    Unmount {
        /// The mountpoint.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The handle no longer serves a mount (unmounted or detached).
    #[error("{} is not mounted by this handle", path.display())]
    NotMounted {
        /// The mountpoint.
        path: PathBuf,
    },
    /// The kernel refused a cache invalidation.
    #[error("cannot invalidate the kernel cache of {}: {source}", path.display())]
    Notify {
        /// The mountpoint.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The mount table could not be read.
    #[error("cannot read the mount table: {source}")]
    MountTable {
        /// The underlying error.
        source: std::io::Error,
    },
}
