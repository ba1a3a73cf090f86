//! The pre-write: the open txg's whole dirty data records written ahead of its sync, mostly
//! without the pool lock, so that writers keep dirtying the txg while its data is
//! compressed, checksummed, parity-encoded and queued to the devices (ZFS lets dirty data
//! start writing before its txg syncs; the mechanism is its override, `dmu_sync`).
//!
//! ```text
//!  1 pool lock:    Gate Idle ─► Planning; take every whole dirty `Dirty::Data` record of
//!                  the filesystems and volumes (`ObjectSet::prewrite_candidates`): a
//!                  reference to its bytes, no copy
//!  2 no lock:      compress and pad each (`Pipeline::encode_shared`)
//!  3 pool lock:    still the same open txg T, nothing syncing, not suspended? allocate
//!                  each in block order through the open-context allocator
//!                  (`Pool::allocate_ahead`: T's delta, so layouts are deterministic and a
//!                  crash before T commits leaves the space free); Planning ─► Writing
//!  4 no lock:      checksum, parity, device writes (`Pipeline::write_encoded`); the batch
//!                  goes to the gate; Writing ─► Idle
//!  5 write phase of T (pool lock): waits while a batch is Writing; each block whose
//!                  record still holds the very bytes written (pointer identity) and has
//!                  nothing else written ahead is recorded (`ObjectSet::adopt_prewritten`)
//!                  and adopted by T's sync; every other block is freed in T
//!                  (`free_log_block`: released when T commits)
//! ```
//!
//! # Invariants
//! - P1: a pre-written block is adopted only by the sync of the txg it was allocated and
//!   born in, only while its record's dirty entry is the `Arc` it was written from, only
//!   when its device writes succeeded, and only when the pool's top-level vdevs are the
//!   ones it was written to.
//! - P2: every block allocated by a pre-write is adopted or freed by the next write phase
//!   that runs the intent logs' `logs_before_sync` (one that finds the pool able to
//!   commit); a freed one is never reusable before that txg commits, when its device
//!   writes have long ended (the write phase waits for a batch still writing).
//! - P3: at most one pre-write plans or writes at a time (the gate); batches written wait
//!   in the gate, any number, until the write phase takes them.
//!
//! # Lock order
//! The gate's mutex is taken after the pool lock or alone, and never held across I/O or
//! while waiting for the pool lock. Steps 2 and 4 hold no lock at all; the write phase,
//! holding the pool lock, waits on the gate's condvar for step 4 (which takes no lock
//! before it ends), so it cannot deadlock.
//!
//! # Failure model
//! A pre-write is an optimisation: whatever goes wrong, the sync writes the record itself.
//! A failed compression, allocation (no space) or device write drops the block (a failed
//! write's space is freed by the write phase like any block not adopted); a txg that
//! synced, a pool suspended or a vdev tree changed between the steps drops the whole
//! pre-write (before step 3: nothing allocated; after: not adopted, freed). A pre-written
//! block is named by nothing committed until its txg commits, so after a crash its space
//! is free, as the intent log's `logbias=throughput` blocks are.
//!
//! # Who runs it
//! The daemon's sync thread ([`crate::txg::TxgSyncer`]) before it takes the pool lock for
//! a write phase; without a sync thread, a writer at `DIRTY_MAX` before the write phase it
//! runs inline; the simulator and the tests call [`Engine::prewrite`] themselves, so that
//! their seeds decide what lands between a pre-write and the write phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tarn_base::Txg;
use tarn_format::{BlockPtr, Dva};
use tarn_objects::PrewriteBlock;
use tarn_vdev::TopVdev;
use tarn_zio::{EncodedBlock, Pipeline};

use crate::{DatasetId, Engine, EngineError, Imported, PoolHandle};

/// What one pre-write wrote ([`Engine::prewrite`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrewriteReport {
    /// Blocks written to the devices.
    pub blocks: u64,
    /// Their logical bytes.
    pub bytes: u64,
}

/// Counts of a pool's pre-written blocks since import ([`Engine::prewrite_stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrewriteStats {
    /// Blocks written ahead.
    pub written: u64,
    /// Of those taken by a write phase, the ones its sync adopted.
    pub adopted: u64,
    /// And the ones it freed (changed, gone, or failed).
    pub dropped: u64,
}

/// One pre-written block on its way to the write phase.
#[derive(Debug)]
struct Written {
    dataset: DatasetId,
    block: PrewriteBlock,
    /// The block, or where it failed to be written (freed all the same).
    result: Result<BlockPtr, Vec<Dva>>,
}

/// The blocks of one pre-write, all allocated in `txg` on `tops`.
#[derive(Debug)]
struct Batch {
    txg: Txg,
    tops: Vec<Arc<TopVdev>>,
    blocks: Vec<Written>,
}

#[derive(Debug, Default)]
struct State {
    /// A pre-write between its steps 1 and 3 (nothing allocated yet).
    planning: bool,
    /// A pre-write between its steps 3 and 4: its blocks are allocated and being written.
    writing: bool,
    /// Batches written, waiting for the write phase.
    done: Vec<Batch>,
}

/// One pool's pre-write state (module docs), beside the pool lock in the commit lane.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    state: Mutex<State>,
    written: Condvar,
    blocks: AtomicU64,
    adopted: AtomicU64,
    dropped: AtomicU64,
}

impl Gate {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("pre-write gate poisoned by a failed invariant")
    }

    /// Step 1 may start: no other pre-write plans or writes (P3).
    fn begin(&self) -> bool {
        let mut state = self.state();
        if state.planning || state.writing {
            return false;
        }
        state.planning = true;
        true
    }

    /// A pre-write ends before it allocated anything.
    fn abandon(&self) {
        let mut state = self.state();
        assert!(state.planning, "P3: only a planning pre-write is abandoned");
        state.planning = false;
    }

    /// Step 3 allocated: the blocks are being written.
    fn writing(&self) {
        let mut state = self.state();
        assert!(
            state.planning && !state.writing,
            "P3: one pre-write at a time"
        );
        state.planning = false;
        state.writing = true;
    }

    /// Step 4 ended: `batch` waits for the write phase.
    fn finish(&self, batch: Batch) {
        let mut state = self.state();
        assert!(
            state.writing,
            "P3: a batch ends only after it started writing"
        );
        state.writing = false;
        let written = batch.blocks.iter().filter(|w| w.result.is_ok()).count();
        self.blocks.fetch_add(written as u64, Ordering::Relaxed);
        state.done.push(batch);
        self.written.notify_all();
    }

    /// The batches written, once none is still writing (the write phase, under the pool
    /// lock; step 4 takes no lock before it ends).
    fn take(&self) -> Vec<Batch> {
        let mut state = self.state();
        if state.writing {
            tarn_base::wait::before_wait();
        }
        while state.writing {
            state = self
                .written
                .wait(state)
                .expect("pre-write gate poisoned by a failed invariant");
        }
        std::mem::take(&mut state.done)
    }

    /// Bytes the batches waiting for the write phase hold allocated (in the open txg's
    /// delta, as the intent log's open blocks are), once none is still writing: for the
    /// checker's space balance.
    pub(crate) fn allocated_bytes(&self) -> u64 {
        let batches = self.take();
        let bytes = batches
            .iter()
            .flat_map(|batch| &batch.blocks)
            .flat_map(|written| match &written.result {
                Ok(bp) => bp.copies().copied().collect(),
                Err(dvas) => dvas.clone(),
            })
            .map(|dva| dva.asize)
            .sum();
        self.state().done = batches;
        bytes
    }

    /// The records the batches waiting for the write phase wrote (by the address of their
    /// bytes), so that a later pre-write of the same txg does not write them again.
    fn pending_records(&self) -> std::collections::HashSet<*const Vec<u8>> {
        let state = self.state();
        state
            .done
            .iter()
            .flat_map(|batch| &batch.blocks)
            .filter(|written| written.result.is_ok())
            .map(|written| Arc::as_ptr(&written.block.bytes))
            .collect()
    }

    pub(crate) fn stats(&self) -> PrewriteStats {
        PrewriteStats {
            written: self.blocks.load(Ordering::Relaxed),
            adopted: self.adopted.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
        }
    }
}

/// The sync thread's pre-write needs this much of the open txg's data at least to be worth
/// its two extra takings of the pool lock.
pub(crate) const PREWRITE_MIN: u64 = 1 << 20;

impl Imported {
    /// Step 1: the records worth writing ahead (at least `min` bytes of them), and the
    /// open txg they belong to.
    fn prewrite_plan(&self, min: u64) -> Option<(Txg, Vec<(DatasetId, PrewriteBlock)>)> {
        if self.pool.readonly()
            || self.pool.suspended().is_some()
            || self.pool.syncing_txg().is_some()
        {
            return None;
        }
        // Records an earlier pre-write of this txg wrote and that have not changed since
        // (their `Arc`s are alive in its batch, so the addresses are theirs alone).
        let pending = self.lane.prewrite.pending_records();
        let taken = |bytes: &Arc<Vec<u8>>| pending.contains(&Arc::as_ptr(bytes));
        let mut plan = Vec::new();
        let mut budget = self.loan.limit();
        for id in self.datasets.all() {
            let node = self.datasets.node(id);
            if node.receiving || node.objset.kind() == tarn_objects::ObjsetKind::Mos {
                continue;
            }
            for block in node.objset.prewrite_candidates(budget, &taken) {
                budget = budget.saturating_sub(block.bytes.len() as u64);
                plan.push((id, block));
            }
        }
        let bytes: u64 = plan.iter().map(|(_, b)| b.bytes.len() as u64).sum();
        (bytes >= min.max(1)).then(|| (self.pool.open_txg(), plan))
    }

    /// Step 5, at the start of a write phase that runs the intent logs' `logs_before_sync`
    /// (so the pool can commit): waits for a batch still writing, records the blocks the
    /// sync adopts, and returns the space of the others, which the write phase frees.
    pub(crate) fn prewrites_before_sync(&mut self) -> Vec<Dva> {
        let gate = &self.lane.prewrite;
        let batches = gate.take();
        let txg = self.pool.txg().next();
        let mut frees = Vec::new();
        let (mut adopted, mut dropped) = (0, 0);
        for batch in batches {
            let tops = self.pool.pipeline().vdevs();
            let same_tops = batch.tops.len() == tops.len()
                && batch.tops.iter().zip(tops).all(|(a, b)| Arc::ptr_eq(a, b));
            for written in batch.blocks {
                let taken = match &written.result {
                    Ok(bp) if same_tops && batch.txg == txg && bp.birth == txg => {
                        self.datasets.contains(written.dataset)
                            && self
                                .datasets
                                .node_mut(written.dataset)
                                .objset
                                .adopt_prewritten(&written.block, bp)
                    }
                    _ => false,
                };
                if taken {
                    adopted += 1;
                    continue;
                }
                dropped += 1;
                match written.result {
                    Ok(bp) => frees.extend(bp.copies().copied()),
                    Err(dvas) => frees.extend(dvas),
                }
            }
        }
        gate.adopted.fetch_add(adopted, Ordering::Relaxed);
        gate.dropped.fetch_add(dropped, Ordering::Relaxed);
        frees
    }
}

/// Step 2 of `blocks`: each block compressed and padded, or `None` (zeros, or an error:
/// the sync writes it then).
fn encode(
    pipeline: &Pipeline,
    txg: Txg,
    blocks: &[(DatasetId, PrewriteBlock)],
) -> Vec<Option<EncodedBlock>> {
    blocks
        .iter()
        .map(|(_, block)| {
            pipeline
                .encode_shared(txg, &block.bytes, &block.props)
                .ok()
                .flatten()
        })
        .collect()
}

/// Step 4: every allocated block written (checksum, parity, device writes), plugged: the
/// blocks are in block order, so each device's columns of consecutive blocks are adjacent,
/// and its I/O thread, woken per batch of writes instead of per column, finds them queued
/// together and writes them as one access (tarn-device `plug`). Unplugged, an idle I/O
/// thread was woken for each column and wrote most of them alone or a few together.
fn write(
    pipeline: &Pipeline,
    txg: Txg,
    placed: Vec<((DatasetId, PrewriteBlock), EncodedBlock, Vec<Dva>)>,
) -> Vec<Written> {
    let _plug = tarn_device::plug();
    placed
        .into_iter()
        .map(|((dataset, block), encoded, dvas)| {
            let result = pipeline
                .write_encoded(&dvas, txg, &encoded, &block.props)
                .map_err(|_| dvas);
            Written {
                dataset,
                block,
                result,
            }
        })
        .collect()
}

impl PoolHandle {
    /// One pre-write of the open txg (module docs), taking the pool lock twice, briefly;
    /// `None` when it did not run (another one is running, less than `min` bytes of whole
    /// records, or the pool cannot write now).
    pub(crate) fn prewrite(&self, min: u64) -> Option<PrewriteReport> {
        let gate = &self.lane.prewrite;
        let (txg, plan, pipeline) = {
            let inner = self.lock_open();
            if !gate.begin() {
                return None;
            }
            let Some((txg, plan)) = inner.prewrite_plan(min) else {
                gate.abandon();
                return None;
            };
            (txg, plan, inner.pool.pipeline().clone())
        };
        let encoded = encode(&pipeline, txg, &plan);
        let (placed, tops) = {
            let mut inner = self.lock_open();
            let wanted: Vec<_> = plan
                .iter()
                .zip(&encoded)
                .filter_map(|((_, block), e)| e.as_ref().map(|e| (e, &block.props)))
                .collect();
            let same_txg = inner.pool.open_txg() == txg;
            let Some((_, allocated)) = same_txg
                .then(|| inner.pool.allocate_ahead(&wanted))
                .flatten()
            else {
                gate.abandon();
                return None;
            };
            gate.writing();
            let tops = inner.pool.pipeline().vdevs().to_vec();
            let mut allocated = allocated.into_iter();
            let mut placed = Vec::new();
            for (planned, encoded) in plan.into_iter().zip(encoded) {
                let Some(encoded) = encoded else { continue };
                let dvas = allocated.next().expect("one allocation per encoded block");
                if let Ok(dvas) = dvas {
                    placed.push((planned, encoded, dvas));
                }
            }
            (placed, tops)
        };
        let blocks = write(&pipeline, txg, placed);
        let report = PrewriteReport {
            blocks: blocks.iter().filter(|w| w.result.is_ok()).count() as u64,
            bytes: blocks
                .iter()
                .filter(|w| w.result.is_ok())
                .map(|w| w.block.bytes.len() as u64)
                .sum(),
        };
        gate.finish(Batch { txg, tops, blocks });
        Some(report)
    }
}

impl Engine {
    /// Writes the open txg's whole dirty data records of `name` ahead of its sync (module
    /// docs); the next write phase adopts the ones still unchanged. The daemon's sync thread
    /// runs it by itself; the simulator and the tests call it. `None` when nothing was
    /// written ahead.
    pub fn prewrite(&self, name: &str) -> Result<Option<PrewriteReport>, EngineError> {
        Ok(self.pool(name)?.prewrite(1))
    }

    /// How many blocks `name` wrote ahead, and of those its syncs adopted and dropped.
    pub fn prewrite_stats(&self, name: &str) -> Result<PrewriteStats, EngineError> {
        Ok(self.pool(name)?.lane.prewrite.stats())
    }
}
