//! Write admission: a txg the engine admitted always finds the space it needs to commit.
//!
//! Running out of space inside a txg's write phase would suspend the whole pool, so every
//! operation that changes a dataset is checked before it runs, the way ZFS keeps slop space
//! and reserves each transaction's worst case:
//!
//! - What the open txg will allocate is bounded from the object sets themselves
//!   ([`tarn_objects::ObjectSet::sync_estimate`]: dirty blocks, the indirect and dnode blocks
//!   above them), inflated by the worst top-level vdev's parity and padding
//!   ([`bound_on`]) and by the copies each block gets (`redundant_metadata`).
//! - Writes and operations that add metadata must leave the whole slop free
//!   ([`Reserve::Keep`]); operations that give space back (unlink, rmdir, punch: ZFS's
//!   "netfree" transactions) may use half of it ([`Reserve::Half`]), so that a full pool can
//!   always be emptied; the last half is for the txg's own pool-wide metadata (MOS, space
//!   log) and for admin verbs (destroy, rollback, property changes), which are not admitted.
//! - A refused operation first commits what is dirty (estimates become real, compressed
//!   sizes) and waits out frees that are still deferred, as ZFS makes a writer wait for the
//!   txg that releases freed space instead of failing it with the space about to return.

use tarn_objects::{BlockRole, ObjsetWriteConfig, SyncEstimate};

use crate::fs::{DatasetId, FsOp};
use crate::mos::MOS_WRITE_CONFIG;
use crate::{EngineError, Imported, ROOT_DATASET_ID, SLOP_SHIFT};

/// The slop is never less than this (or a quarter of the pool, on pools smaller than
/// 64 MiB): a txg's pool-wide metadata has to fit in half of it on the smallest pool.
pub(crate) const SLOP_MIN: u64 = 16 << 20;

/// How many txgs a refused writer commits, at most, to get back space that deletes freed
/// (frees stay deferred for `tarn_space::TXG_DEFER` txgs).
const DEFERRED_WAIT_TXGS: usize = tarn_space::TXG_DEFER as usize + 2;

/// Metadata one operation may add before its object set counts it (a dnode block, directory
/// and attribute blocks, the indirect blocks above them).
const OP_METADATA: SyncEstimate = SyncEstimate {
    data_blocks: 0,
    data_bytes: 0,
    meta_blocks: 4,
    meta_bytes: 4 << 17,
};

/// Blocks of file data a write of `len` bytes adds at most (in records of the default size).
const RECORD: u64 = 128 << 10;

/// Size of an indirect block (a clone's pointers land in these).
const INDIRECT_BLOCK: u64 = 128 << 10;

/// How much of the pool's reserve an operation may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reserve {
    /// Grows the pool: the whole slop stays free.
    Keep,
    /// Gives space back: may use half the slop.
    Half,
}

/// The pool's slop: `1 / 2^SLOP_SHIFT` of its data vdevs, at least [`SLOP_MIN`] (at most a
/// quarter of the pool).
#[must_use]
pub(crate) fn slop(size: u64) -> u64 {
    (size >> SLOP_SHIFT).max(SLOP_MIN.min(size / 4))
}

/// Allocated bytes `blocks` blocks of `bytes` logical bytes in all take at most on `top`: each
/// byte inflated by the ratio of a full record's allocation (parity), and each block rounded
/// up by at most two one-sector allocations (its last partial sector and parity row, and
/// raidz's padding to a multiple of parity + 1 sectors).
fn bound_on(top: &tarn_vdev::TopVdev, bytes: u64, blocks: u64) -> u64 {
    let ratio = u128::from(top.allocation_size(RECORD));
    let linear = u128::from(bytes) * ratio / u128::from(RECORD);
    let padding = u128::from(blocks) * 2 * u128::from(top.allocation_size(1));
    u64::try_from(linear + padding).unwrap_or(u64::MAX)
}

impl Imported {
    /// Allocated bytes the next sync needs at most: every object set's estimate (with
    /// `extra` added to `dataset`'s) inflated on the worst top-level vdev and multiplied by
    /// the copies of data and of metadata.
    fn sync_need(&self, dataset: Option<DatasetId>, extra: SyncEstimate) -> u64 {
        let tops = self.pool.tops();
        let inflate = |bytes: u64, blocks: u64| {
            tops.iter()
                .map(|top| bound_on(top, bytes, blocks))
                .max()
                .unwrap_or(bytes)
        };
        let need = |estimate: SyncEstimate, config: &ObjsetWriteConfig| {
            let data = inflate(estimate.data_bytes, estimate.data_blocks)
                .saturating_mul(u64::from(config.copies_for(BlockRole::Data)));
            let meta = inflate(estimate.meta_bytes, estimate.meta_blocks)
                .saturating_mul(u64::from(config.copies_for(BlockRole::Critical)));
            data.saturating_add(meta)
        };
        let mut total = 0u64;
        for id in self.datasets.all() {
            let objset = &self.datasets.node(id).objset;
            let mut estimate = objset.sync_estimate();
            if Some(id) == dataset {
                estimate = estimate.plus(extra);
            }
            total = total.saturating_add(need(estimate, &objset.write_config()));
        }
        total.saturating_add(need(self.mos.sync_estimate(), &MOS_WRITE_CONFIG))
    }

    /// True when the open txg, with `extra` more in `dataset`, still commits and leaves the
    /// part of the slop `reserve` says free (counting `credit` allocated bytes as free).
    pub(crate) fn has_room(
        &self,
        dataset: Option<DatasetId>,
        extra: SyncEstimate,
        reserve: Reserve,
        credit: u64,
    ) -> bool {
        let (size, allocated) = self.pool.normal_space();
        let allocated = allocated.saturating_sub(credit);
        let keep = match reserve {
            Reserve::Keep => slop(size),
            Reserve::Half => slop(size) / 2,
        };
        let need = self.sync_need(dataset, extra);
        allocated.saturating_add(need) <= size.saturating_sub(keep)
    }

    /// [`Imported::has_room`] for `len` bytes written into the root dataset's `object`
    /// (the raw object interface), in that object's block size.
    pub(crate) fn has_room_for_object(
        &mut self,
        object: tarn_base::ObjectId,
        len: u64,
    ) -> Result<bool, EngineError> {
        let Imported { pool, datasets, .. } = self;
        let data = &mut datasets.node_mut(ROOT_DATASET_ID).objset;
        let block = u64::from(data.object_info(&pool.reader(), object)?.data_block_size).max(512);
        let extra = SyncEstimate {
            data_blocks: len.div_ceil(block) + 1,
            data_bytes: (len.div_ceil(block) + 1) * block,
            ..OP_METADATA
        };
        Ok(self.has_room(Some(ROOT_DATASET_ID), extra, Reserve::Keep, 0))
    }

    /// Admission of one filesystem operation `op` on `dataset`: writes are checked against
    /// the quotas (EDQUOT), the dataset's available space and the pool's (ENOSPC);
    /// metadata changes and frees against the pool's reserve. A refusal first commits what
    /// is dirty (estimates become real, compressed sizes) and waits for deferred frees, a few
    /// txgs at most, before it stands.
    pub(crate) fn admit(&mut self, dataset: DatasetId, op: FsOp) -> Result<(), EngineError> {
        let mut result = self.admission(dataset, op);
        for round in 0..DEFERRED_WAIT_TXGS {
            let again = match result {
                // A quota counts dirty data at its uncompressed size until it commits.
                Err(EngineError::QuotaExceeded) => round == 0 && self.dirty_bytes() > 0,
                // Worth a txg only when committing, or the frees on their way back, would
                // make the room (on a full pool, each txg frees a little rewritten metadata).
                Err(EngineError::NoSpace) => {
                    let (extra, reserve) = demand(op);
                    let freeing = self.pool.freeing_bytes();
                    self.dirty_bytes() > 0 || self.has_room(Some(dataset), extra, reserve, freeing)
                }
                _ => false,
            };
            if !again {
                break;
            }
            self.sync()?;
            result = self.admission(dataset, op);
        }
        result
    }

    fn admission(&mut self, dataset: DatasetId, op: FsOp) -> Result<(), EngineError> {
        if op == FsOp::Read {
            return Ok(());
        }
        if let FsOp::Clone { len, .. } = op {
            // The quotas count a clone in full; the pool's space only its metadata (below).
            self.datasets.check_quota(dataset, len)?;
        }
        if let FsOp::Write(len) = op {
            self.datasets.check_quota(dataset, len)?;
            let free = crate::dataset_ops::pool_free_deflated(self);
            let pending = self.datasets.node(dataset).objset.dirty_bytes() + len;
            if self.datasets.available(dataset, free) < pending {
                return Err(EngineError::NoSpace);
            }
        }
        let (extra, reserve) = demand(op);
        match self.has_room(Some(dataset), extra, reserve, 0) {
            true => Ok(()),
            false => Err(EngineError::NoSpace),
        }
    }
}

/// What operation `op` may add to the open txg before its object set counts it, and how
/// much of the slop it may use.
fn demand(op: FsOp) -> (SyncEstimate, Reserve) {
    match op {
        FsOp::Read => (SyncEstimate::default(), Reserve::Half),
        FsOp::Write(len) => {
            let data = SyncEstimate {
                data_blocks: len.div_ceil(RECORD) + 1,
                data_bytes: len,
                ..SyncEstimate::default()
            };
            (data.plus(OP_METADATA), Reserve::Keep)
        }
        FsOp::Clone { blocks, .. } => {
            // The pointers, once in their indirect blocks and once more a level above
            // (an upper bound for trees of 1,024 pointers per indirect block).
            let bytes = 2 * blocks.saturating_mul(tarn_format::blkptr::BLKPTR_SIZE as u64);
            let pointers = SyncEstimate {
                meta_blocks: bytes.div_ceil(INDIRECT_BLOCK) + 2,
                meta_bytes: bytes.div_ceil(INDIRECT_BLOCK).saturating_add(2) * INDIRECT_BLOCK,
                ..SyncEstimate::default()
            };
            (pointers.plus(OP_METADATA), Reserve::Keep)
        }
        FsOp::Modify => (OP_METADATA, Reserve::Keep),
        FsOp::Free => (OP_METADATA, Reserve::Half),
    }
}
