//! `copy_file_range` by block cloning (OpenZFS 2.2): the thin verb front ends call. The
//! rules of a clonable range are tarn-posix `clone` (`Fs::clone_source`, `Fs::clone_into`),
//! the references tarn-space `brt`; this module only runs the two halves under one hold of
//! the pool lock.
//!
//! Why one hold: the source's pointers are read from its committed tree, and only a sync
//! frees them. Were the lock released between reading them and installing the clones, a
//! txg could free a block (the source overwritten) and the clone name a free block. Under
//! one hold, any free of those blocks happens in the sync that also takes the clone's
//! reference, which tarn-space orders (`SpaceManager::clone_ref` takes a free of the same
//! txg back). The target's admission may still commit a txg under that hold (a full pool
//! or a quota waiting for dirty data); `Fs::clone_into` then installs nothing and the
//! source is read again.
//!
//! A source range written since the last sync has no committed pointers yet: the verb
//! syncs a txg and reads again (OpenZFS waits for a txg the same way). Compatibility:
//! both datasets are filesystems of the pool (tarn has no encryption, so no key can differ,
//! and every checksum and compression setting reads the same block the same way); a
//! `CannotClone` refusal is EXDEV, and the kernel then copies the bytes.
//!
//! Durability: a clone has no intent-log record (module `zil`, tarn-posix `clone`); the
//! next `fsync` of the destination's dataset syncs a txg.

use tarn_posix::PosixError;

use crate::fs::{DatasetId, FsOp, fs_run};
use crate::{Engine, EngineError};

/// Times the verb syncs a txg for a source that was dirty before it gives up (each try
/// after a sync finds the range clean unless a writer keeps changing it).
const CLONE_TRIES: usize = 3;

/// One side of a clone: a regular file and an offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileRange {
    /// Its dataset.
    pub dataset: DatasetId,
    /// The file (the dataset's inode number).
    pub ino: u64,
    /// Byte offset.
    pub offset: u64,
}

impl Engine {
    /// Clones `len` bytes (clamped to the source's end) of `source` into `target`, both
    /// files of `pool`, and returns the bytes cloned: the target's blocks become new
    /// references to the source's (module docs). EXDEV (`PosixError::CannotClone`) when
    /// the range cannot be cloned (alignment, block sizes, overlap within one file): the
    /// caller copies instead.
    pub fn fs_clone_range(
        &self,
        pool: &str,
        source: FileRange,
        target: FileRange,
        len: u64,
    ) -> Result<u64, EngineError> {
        let same_file = (source.dataset, source.ino) == (target.dataset, target.ino);
        let end = |range: FileRange| range.offset.saturating_add(len);
        if same_file && source.offset < end(target) && target.offset < end(source) {
            return Err(PosixError::CannotClone("overlapping ranges of one file").into());
        }
        let handle = self.pool(pool)?;
        for _ in 0..CLONE_TRIES {
            let mut inner = handle.lock_for_write()?;
            let (found, _) = fs_run(self, &mut inner, source.dataset, FsOp::Read, &mut |fs| {
                fs.clone_source(source.ino, source.offset, len)
            })?;
            let Some(found) = found else {
                drop(inner);
                self.sync_pool(pool)?;
                continue;
            };
            // Quotas count a clone in full, as OpenZFS's; the pool's space only the pointers
            // (a nearly full pool still clones what it cannot copy).
            let op = FsOp::Clone {
                len: found.len,
                blocks: found.bps.len() as u64,
            };
            let (cloned, always) = fs_run(self, &mut inner, target.dataset, op, &mut |fs| {
                fs.clone_into(target.ino, target.offset, &found)
            })?;
            let Some(cloned) = cloned else {
                // The admission committed a txg after the source was read: read it again.
                continue;
            };
            self.after_change(&handle, inner, target.dataset, always)?;
            return Ok(cloned);
        }
        Err(PosixError::CannotClone("the source range keeps changing").into())
    }
}
