//! The txg pipeline: a txg's write phase under the pool lock, its commit phase without it
//! while the next txg is open, and the write throttle that starts syncs and makes writers
//! wait instead of syncing on their own thread.
//!
//! ```text
//!  open txg T+1 ─ writes, reads, fsync (after T's commit) ─────────────────────────────►
//!  txg T:  write phase ───► commit phase ─────────────────► finish
//!          (pool lock:      (no pool lock; the lane lock:    (pool lock: frees deferred,
//!           upper layers,    flush, uberblock, flush)         txg advances, logs trimmed,
//!           space log)                                        or the pool suspends)
//! ```
//!
//! # The lane
//! Each pool has one [`Lane`]: a slot holding the [`PendingCommit`] between the write phase
//! and the commit phase, then the commit's outcome until someone holding the pool lock
//! finishes it. Whoever finds a written txg in the slot runs its commit phase, holding the
//! slot's lock throughout; anyone who needs the commit finished locks the slot (which waits
//! for a commit in progress) and then finishes it. So the commit phase runs on the daemon's
//! sync thread in production, and on the calling thread in the simulator, the tests and the
//! demo, which have no sync thread (no [`TxgSyncer`] is set). The lane also times what
//! passes through it (`SyncStats`: each write phase, each commit phase, each intent-log
//! commit, by the engine's clock) for the daemon's metrics ([`Engine::sync_times`]); the
//! counters are atomics, read without the pool lock.
//!
//! # Lock order
//! `PoolHandle::inner` (the pool lock), then `Lane::slot`, then `Lane::log_writes` (the intent-log
//! commits writing without the pool lock, module `zil`: a commit phase waits for them while holding
//! the slot, since its txg may free the blocks they write). The commit phase holds only the slot;
//! it takes the pool lock for the finish after releasing the slot, never while holding it. A thread
//! that holds the pool lock may wait for the slot (it then blocks the pool for the rest of the
//! commit, as every sync did before the pipeline); a writer throttled at [`DIRTY_MAX`] releases the
//! pool lock first, waits for the slot, then takes the pool lock again to finish. A writer that
//! finds the pool suspended (module `suspend`) waits on the handle's `resumed` condvar, which
//! releases the pool lock and holds no slot; `clear` and `export -f` notify it while holding the
//! pool lock, after the state changed, so no wake-up is lost.
//!
//! The pre-write (module [`crate::prewrite`]) adds one lock of its own, its gate's mutex, taken
//! after the pool lock or alone and never held across I/O: the pre-write takes the pool lock
//! briefly to choose the records and to allocate, and compresses and writes them holding no
//! lock; a write phase, holding the pool lock, waits on the gate's condvar for a pre-write
//! still writing (which takes no lock before it ends), then adopts or frees its blocks. The
//! syncer runs up to [`PREWRITE_ROUNDS`] pre-writes before it takes the pool lock for a write
//! phase, each after the pending commit finished (it allocates only between txgs).
//!
//! # The throttle
//! After a write, dirty data at [`DIRTY_SYNC`] wake the syncer (when no commit is pending: it
//! starts the next txg itself once the pending one finished). At [`DIRTY_MAX`] the writer
//! waits for a pending commit without the pool lock, then writes the txg's phase itself and
//! hands the commit to the syncer: at most one txg of up to [`DIRTY_MAX`] is being committed
//! while the open txg collects up to [`DIRTY_MAX`] more, so about twice that is in memory.
//! Without a syncer the writer syncs the whole txg on its own thread at [`DIRTY_MAX`], the
//! commit phase without the pool lock (other threads go on; this one waits for the flush).
//! A throttled writer (or an `fsync` waiting for the syncing txg) whose wait ends in a
//! failed commit gets the suspension as its error and then waits as any writer of a
//! suspended pool does: under `failmode=wait` until `clear` or `export -f`.
//!
//! # Dirty data lent by the ARC
//! With a sync thread and [`Engine::set_dirty_loan_max`] (the daemon), a pool's open txg
//! whose sync would rewrite at least [`LOAN_AMPLIFICATION`] times its dirty bytes borrows
//! room for dirty data from the clean-block cache (`CacheStore::reserve`, in steps of
//! [`LOAN_STEP`], never more than half the cache's limit in all) once its dirty data reach
//! half its limit, so the limit and the sync point grow together up to [`DIRTY_MAX`]
//! plus the loan maximum; ZFS counts dirty data in its ARC the same way. The write phase
//! hands the loan to the syncing txg, whose commit gives it back. Why: a 4K write dirties a
//! few KiB of a record (tarn-objects `pieces`), but the sync rewrites the whole record, so a
//! txg costs about the records it touched, not the bytes written; over a file of 8,192
//! records, a txg of 128 MiB of random 4K writes rewrote nearly all of them, and a larger
//! txg absorbs proportionally more writes for the same sync (docs/PERFORMANCE.md, "Dirty
//! data lent by the ARC"). The memory stays in the bound: what the loan adds, the cache
//! cannot hold.
//!
//! # States of a txg, and when a phase fails
//! ```text
//!  open T ──write phase──► syncing T ──commit ok──► committed T (T+1 open meanwhile)
//!     │                        │
//!     │ block not written      │ commit failed (flush, uberblock): finish_done
//!     ▼                        ▼
//!  commit-failed-suspended: T kept whole (tarn_pool `resume`), T+1 open in memory
//!     │            │
//!     │ clear      │ export -f
//!     ▼            ▼
//!  resumed: T committed by `clear` at     ended: waiters fail (EIO); an import opens
//!  the same places, then T+1's write      T-1 and replays T's and T+1's intent-log
//!  phase is the next sync                 records
//! ```
//! A failed write phase ends in [`tarn_pool::Pool::sync_write`] and a failed commit phase
//! in `Pool::commit_failed` (reached through `Imported::finish_done`). Either suspends the
//! pool; if T's blocks were all written (the commit failed, or a write missed devices), T
//! is kept for `clear` with its roots, space state and every block: `txg()` and the
//! uberblock stay T-1's, no txg is syncing, the space manager still records T (its
//! allocations allocated, its frees neither deferred nor released), the upper layers keep
//! the state T's write phase left (history records and destroyed datasets' blocks are in
//! T), and T's intent-log records stay pending (an import replays them from the chain T-1's
//! header names). Changes made meanwhile belong to T+1 (`Pool::open_txg` counts after the
//! kept T): they stay in memory, and T+1's write phase cannot start while the pool is
//! suspended (`check_can_commit`). `clear` (module `suspend`) rewrites and commits T, trims
//! T's intent-log records, and wakes every waiter; `sync=always` writers and `fsync` then
//! commit their records into the intent log again (their change is T+1's, not T's). A write
//! phase that failed in the upper layers or the space log cannot be retried (`clear`
//! refuses; export -f and import).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tarn_base::{Clock, Txg};
use tarn_device::timing::{Histogram, Latencies};
use tarn_format::uberblock::Uberblock;
use tarn_pool::PendingCommit;

use crate::{DIRTY_MAX, Engine, EngineError, Imported, PoolHandle};

/// What an open txg borrows from the cache at a time (module docs, "Dirty data lent").
pub const LOAN_STEP: u64 = 64 << 20;
/// A txg borrows only when its sync would rewrite this many times its dirty bytes (records
/// dirtied in part): a larger txg of whole records saves no sync work, and would only take
/// memory from the ARC and hold more data back from the devices until its sync.
pub const LOAN_AMPLIFICATION: u64 = 2;

/// The dirty-data room a pool borrowed from the clean-block cache (module docs): the open
/// txg's, and the syncing txg's until its commit. Given back when dropped (export).
#[derive(Debug, Default)]
pub(crate) struct DirtyLoan {
    open: u64,
    syncing: u64,
    /// The open txg was found to rewrite too little to be worth a loan: not asked again
    /// before its write phase.
    declined: bool,
    store: Option<tarn_objects::CacheStore>,
}

impl DirtyLoan {
    /// Dirty bytes at which a writer waits (the throttle's [`DIRTY_MAX`] plus the loan).
    pub(crate) fn limit(&self) -> u64 {
        DIRTY_MAX + self.open
    }

    /// Dirty bytes at which the syncer starts a txg: [`DIRTY_SYNC`] moved by half the loan,
    /// so that it stays half the limit.
    pub(crate) fn sync_at(&self) -> u64 {
        DIRTY_SYNC + self.open / 2
    }

    /// Borrows from `store` while `dirty` reach the sync point and the loan is under `max`,
    /// when the sync would rewrite at least [`LOAN_AMPLIFICATION`] times the dirty bytes
    /// (`rewrite`: its level-0 records' bytes, asked only then).
    fn borrow(
        &mut self,
        dirty: u64,
        rewrite: impl FnOnce() -> u64,
        store: &tarn_objects::CacheStore,
        max: u64,
    ) {
        if dirty < self.sync_at() || self.open >= max || self.declined {
            return;
        }
        if rewrite() < dirty.saturating_mul(LOAN_AMPLIFICATION) {
            self.declined = true;
            return;
        }
        while dirty >= self.sync_at() && self.open < max {
            let granted = store.reserve(LOAN_STEP.min(max - self.open));
            if granted == 0 {
                return;
            }
            self.store.get_or_insert_with(|| store.clone());
            self.open += granted;
        }
    }

    /// The write phase took the open txg's data: its loan goes with it.
    fn written(&mut self) {
        self.syncing += std::mem::take(&mut self.open);
        self.declined = false;
    }

    /// The syncing txg committed: its loan goes back.
    fn committed(&mut self) {
        let bytes = std::mem::take(&mut self.syncing);
        if let Some(store) = &self.store {
            store.release(bytes);
        }
    }
}

impl Drop for DirtyLoan {
    fn drop(&mut self) {
        if let Some(store) = &self.store {
            store.release(self.open + self.syncing);
        }
    }
}

/// Dirty bytes at which the syncer is asked to start a txg: half of [`DIRTY_MAX`], so that a
/// steady writer finds the previous txg committed (or nearly) when it reaches the limit, as
/// ZFS starts a sync at `zfs_dirty_data_sync_percent` of its maximum.
pub const DIRTY_SYNC: u64 = DIRTY_MAX / 2;

const _: () = assert!(DIRTY_SYNC > 0 && DIRTY_SYNC < DIRTY_MAX);

/// The front end's sync thread, told when a pool wants a txg synced. The engine spawns no
/// threads: the daemon implements this and calls [`Engine::sync_wanted_pools`]; without it
/// the engine syncs inline on the writer's thread.
pub trait TxgSyncer: Send + Sync {
    /// A pool's dirty data passed [`DIRTY_SYNC`], or a written txg waits for its commit.
    fn sync_wanted(&self);
}

/// Where a txg waits between its phases (module docs).
#[derive(Debug, Default)]
enum Slot {
    #[default]
    Idle,
    /// The write phase ran; the commit phase has not started.
    Written(PendingCommit),
    /// The commit phase ran; the finish has not.
    Done(Result<Uberblock, String>),
}

/// One pool's commit lane (module docs), and the times of what passes through it.
#[derive(Debug)]
pub(crate) struct Lane {
    slot: Mutex<Slot>,
    /// Intent-log commits writing without the pool lock (module [`crate::zil`]): a txg that
    /// frees their blocks commits only once none is in flight.
    log_writes: Mutex<u32>,
    log_drained: Condvar,
    /// The pre-write of the open txg (module [`crate::prewrite`]).
    pub(crate) prewrite: crate::prewrite::Gate,
    pub(crate) stats: SyncStats,
}

/// How long txg phases and intent-log commits took, timed by the engine's clock (the
/// daemon's metrics; read without the pool lock).
#[derive(Debug)]
pub(crate) struct SyncStats {
    clock: Arc<dyn Clock>,
    write: Histogram,
    commit: Histogram,
    log: Histogram,
    log_by_txg: AtomicU64,
}

impl SyncStats {
    /// The clock's now, to time something with [`SyncStats::since`].
    pub(crate) fn start(&self) -> u64 {
        self.clock.monotonic_ns()
    }

    fn since(&self, start: u64) -> u64 {
        self.clock.monotonic_ns().saturating_sub(start)
    }

    /// An intent-log commit that began at `start` ended; `by_txg` when it synced a txg
    /// instead of writing the log.
    pub(crate) fn log_committed(&self, start: u64, by_txg: bool) {
        self.log.add(self.since(start));
        if by_txg {
            self.log_by_txg.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The times of a pool's txgs and intent-log commits since import (`Engine::sync_times`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SyncTimes {
    /// Write phases (under the pool lock: every layer's dirty state and the space log).
    pub write: Latencies,
    /// Commit phases (flushes, uberblocks, flushes; off the pool lock).
    pub commit: Latencies,
    /// Intent-log commits (`fsync`, `sync=always`, NBD flush and FUA), each from its start
    /// until its records were durable.
    pub log_commits: Latencies,
    /// Of those, the ones that synced a txg instead of writing the log (no chain yet, or
    /// too much pending).
    pub log_commits_by_txg: u64,
}

impl Lane {
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Lane {
        Lane {
            slot: Mutex::default(),
            log_writes: Mutex::default(),
            log_drained: Condvar::new(),
            prewrite: crate::prewrite::Gate::default(),
            stats: SyncStats {
                clock,
                write: Histogram::default(),
                commit: Histogram::default(),
                log: Histogram::default(),
                log_by_txg: AtomicU64::new(0),
            },
        }
    }

    /// What [`SyncTimes`] reports.
    pub(crate) fn times(&self) -> SyncTimes {
        SyncTimes {
            write: self.stats.write.snapshot(),
            commit: self.stats.commit.snapshot(),
            log_commits: self.stats.log.snapshot(),
            log_commits_by_txg: self.stats.log_by_txg.load(Ordering::Relaxed),
        }
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot
            .lock()
            .expect("commit lane poisoned by a failed invariant")
    }

    fn log_writes(&self) -> MutexGuard<'_, u32> {
        self.log_writes
            .lock()
            .expect("log write count poisoned by a failed invariant")
    }

    /// An intent-log commit starts writing its blocks without the pool lock (called under
    /// the pool lock, when its blocks were allocated).
    pub(crate) fn log_write_started(&self) {
        *self.log_writes() += 1;
    }

    /// That commit's blocks are written and flushed, or failed: it touches them no more.
    pub(crate) fn log_write_ended(&self) {
        let mut writes = self.log_writes();
        assert!(*writes > 0, "I3: a log write ends only after it started");
        *writes -= 1;
        if *writes == 0 {
            self.log_drained.notify_all();
        }
    }

    /// Waits until no intent-log commit is writing. A log writer takes no lock before it
    /// ends, so this may be called holding the pool lock or the slot.
    pub(crate) fn wait_log_writes(&self) {
        let mut writes = self.log_writes();
        if *writes > 0 {
            tarn_base::wait::before_wait();
        }
        while *writes > 0 {
            writes = self
                .log_drained
                .wait(writes)
                .expect("log write count poisoned by a failed invariant");
        }
    }

    fn put(&self, pending: PendingCommit) {
        let mut slot = self.slot();
        assert!(
            matches!(*slot, Slot::Idle),
            "I3: a txg is written only when no other txg is syncing"
        );
        *slot = Slot::Written(pending);
    }

    /// Runs the commit phase of a written txg, if there is one, holding the slot (a commit
    /// in progress elsewhere is waited for). Takes no pool lock. Either is a wait of device
    /// writes and flushes: a thread serving requests hands its duty on first
    /// (tarn_base::wait).
    pub(crate) fn commit(&self) {
        tarn_base::wait::before_wait();
        let mut slot = self.slot();
        if let Slot::Written(pending) = &*slot {
            // The txg frees the blocks of chains a log write in flight may still be writing
            // (`Imported::logs_before_sync`); they are reused once it commits, so it commits
            // after those writes ended.
            self.wait_log_writes();
            let start = self.stats.start();
            let outcome = pending.commit();
            self.stats.commit.add(self.stats.since(start));
            *slot = Slot::Done(outcome);
        }
    }

    fn take_done(&self) -> Option<Result<Uberblock, String>> {
        let mut slot = self.slot();
        match std::mem::take(&mut *slot) {
            Slot::Done(outcome) => Some(outcome),
            other => {
                *slot = other;
                None
            }
        }
    }
}

impl Imported {
    /// Commits everything in memory now: a pending commit first, then a whole txg on this
    /// thread, holding the pool lock throughout (admin verbs, inline syncs). Returns the
    /// committed txg.
    pub(crate) fn sync(&mut self) -> Result<Txg, EngineError> {
        self.settle()?;
        let txg = self.write_phase()?;
        let finished = self.settle()?;
        assert_eq!(
            finished,
            Some(txg),
            "I3: the txg just written is the one committed"
        );
        Ok(txg)
    }

    /// Finishes the syncing txg, if there is one: runs its commit phase here unless another
    /// thread runs it (then waits for it), and finishes it. Returns its txg when it
    /// committed; a failed commit suspends the pool and is the error.
    pub(crate) fn settle(&mut self) -> Result<Option<Txg>, EngineError> {
        if self.pool.syncing_txg().is_none() {
            return Ok(None);
        }
        self.lane.commit();
        self.finish_done()
    }

    /// Finishes a commit whose phase ran (`None` when there is none).
    pub(crate) fn finish_done(&mut self) -> Result<Option<Txg>, EngineError> {
        let Some(outcome) = self.lane.take_done() else {
            return Ok(None);
        };
        let txg = self.pool.sync_finish(outcome)?;
        self.loan.committed();
        self.logs_after_sync(txg);
        Ok(Some(txg))
    }

    /// The write phase of the next txg: the dirty state of every layer and the space log are
    /// written; the commit waits in the lane. Returns the txg.
    pub(crate) fn write_phase(&mut self) -> Result<Txg, EngineError> {
        assert!(
            self.pool.syncing_txg().is_none(),
            "I3: one txg syncs at a time"
        );
        let start = self.lane.stats.start();
        // Checked before the intent logs hand their blocks to this txg: a pool that cannot
        // commit is suspended with its dirty state untouched (tarn_pool `resume`).
        let committable = self.pool.check_can_commit().is_ok();
        let log_frees = if self.pool.readonly() || !committable {
            Vec::new()
        } else {
            // Blocks written ahead (module `prewrite`): adopted, or freed in this txg.
            let mut frees = self.prewrites_before_sync();
            frees.extend(self.logs_before_sync());
            frees
        };
        let Imported {
            pool,
            mos,
            datasets,
            destroyed,
            history,
            ..
        } = self;
        let pending = std::mem::take(history);
        let deflate = crate::datasets::deflate_table(pool);
        let result = pool.sync_write(|ctx| {
            let txg = tarn_zio::BlockStore::txg(ctx);
            for dva in &log_frees {
                ctx.free_log_block(dva);
            }
            datasets.sync(mos.objset(), ctx, &deflate)?;
            for bp in destroyed.iter() {
                tarn_zio::BlockStore::free_block(ctx, bp);
            }
            for mut record in pending.iter().cloned() {
                record.txg = txg;
                mos.append_history(ctx, &record)?;
            }
            mos.sync(ctx)
        });
        match result {
            Ok(commit) => {
                // Their frees are in the txg; the pool suspends if it does not commit.
                destroyed.clear();
                let txg = commit.txg();
                self.lane.put(commit);
                self.loan.written();
                let stats = &self.lane.stats;
                stats.write.add(stats.since(start));
                Ok(txg)
            }
            Err(e) if self.pool.txg_in_flight().is_some() => {
                // The txg is complete in memory and waits for `clear` to write it again:
                // its history records and frees are in it (tarn_pool `resume`).
                destroyed.clear();
                Err(e.into())
            }
            Err(e) => {
                // Keep the records: they describe changes that are still in memory.
                history.extend(pending);
                Err(e.into())
            }
        }
    }

    /// Whether the open txg has anything to commit: changes, or more than [`FREEING_SYNC`]
    /// of frees of earlier txgs still deferred, which only later txgs make allocatable
    /// again (an idle pool would otherwise keep a destroy's space as `freeing` until
    /// something else is written; ZFS's sync thread, too, keeps syncing while freed space
    /// is on its way back).
    pub(crate) fn has_changes(&self) -> bool {
        self.dirty_bytes() > 0
            || !self.history.is_empty()
            || self.pool.freeing_bytes() > FREEING_SYNC
    }
}

/// Deferred frees that keep an otherwise idle pool syncing: far above what a txg frees of
/// its own rewritten metadata (tens of KiB), so that the txgs stop once the space a delete
/// gave back is allocatable, instead of each freeing what the next must wait out.
pub(crate) const FREEING_SYNC: u64 = 1 << 20;

impl PoolHandle {
    /// The pool lock, for open-context work that may overlap a txg's commit phase.
    pub(crate) fn lock_open(&self) -> MutexGuard<'_, Imported> {
        // A poisoned lock means a thread panicked on an invariant while holding the pool: the
        // in-memory state cannot be trusted, and the process must restart (STYLE.md §5).
        // A holder may keep the lock for a whole txg's write phase: a thread serving
        // requests hands its duty on before it queues (tarn_base::wait).
        let inner = match self.inner.try_lock() {
            Ok(inner) => Ok(inner),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Err(poisoned),
            Err(std::sync::TryLockError::WouldBlock) => {
                tarn_base::wait::before_wait();
                self.inner.lock()
            }
        };
        inner.expect("pool lock poisoned by a failed invariant")
    }

    /// The pool lock with no txg syncing: a pending commit is finished first (its failure
    /// suspends the pool, which the caller then sees). Admin verbs and everything that
    /// changes the vdev tree use this, so no commit phase runs beside them.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Imported> {
        let mut inner = self.lock_open();
        let _ = inner.settle();
        // Nor an intent-log write: no new one starts while the lock is held.
        self.lane.wait_log_writes();
        inner
    }

    /// Waits, without the pool lock, until no txg is syncing (running a written txg's commit
    /// phase on this thread if nobody else does), and returns the lock again.
    pub(crate) fn wait_commit<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Imported>,
    ) -> Result<MutexGuard<'a, Imported>, EngineError> {
        while inner.pool.syncing_txg().is_some() {
            drop(inner);
            self.lane.commit();
            inner = self.lock_open();
            inner.finish_done()?;
        }
        Ok(inner)
    }

    /// One pipelined txg: waits for a pending commit, writes the open txg (when `force` or
    /// its dirty data reached [`DIRTY_SYNC`]) under the pool lock, runs its commit phase
    /// without it, and finishes. Returns the txg committed, if any.
    pub(crate) fn sync_pipelined(&self, force: bool) -> Result<Option<Txg>, EngineError> {
        if !force {
            self.prewrite_rounds()?;
        }
        let inner = self.lock_open();
        let mut inner = self.wait_commit(inner)?;
        let wanted = if force {
            inner.has_changes()
        } else {
            inner.dirty_bytes() >= inner.loan.sync_at()
        };
        if !wanted || inner.pool.readonly() || inner.pool.suspended().is_some() {
            return Ok(None);
        }
        inner.write_phase()?;
        drop(inner);
        self.lane.commit();
        self.lock_open().finish_done()
    }
}

impl PoolHandle {
    /// The syncer's pre-writes before a write phase (module [`crate::prewrite`]): once the
    /// pending commit is finished and the open txg wants a sync, up to
    /// [`PREWRITE_ROUNDS`] pre-writes, each of what the writers dirtied meanwhile, while
    /// each finds enough to write. Writers go on between and during them.
    fn prewrite_rounds(&self) -> Result<(), EngineError> {
        for _ in 0..PREWRITE_ROUNDS {
            let inner = self.lock_open();
            let inner = self.wait_commit(inner)?;
            if inner.dirty_bytes() < inner.loan.sync_at() {
                return Ok(());
            }
            drop(inner);
            if self.prewrite(crate::prewrite::PREWRITE_MIN).is_none() {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// Most pre-writes the syncer runs before one write phase: the first writes what the
/// throttle woke it for, the next ones what the writers added meanwhile.
pub const PREWRITE_ROUNDS: usize = 3;

impl Engine {
    /// How long `pool`'s txg phases and intent-log commits took since import.
    pub fn sync_times(&self, pool: &str) -> Result<SyncTimes, EngineError> {
        Ok(self.pool(pool)?.lane.times())
    }

    /// Lets each pool's open txg borrow up to `max` bytes of dirty-data room from the
    /// clean-block cache (module docs, "Dirty data lent by the ARC"); 0 turns it off.
    pub fn set_dirty_loan_max(&self, max: u64) {
        self.loan_max.store(max, Ordering::Relaxed);
    }

    /// Sets the sync thread that commits txgs off the writers' threads (the daemon's).
    pub fn set_txg_syncer(&self, syncer: Arc<dyn TxgSyncer>) {
        *self.syncer.lock().expect("syncer lock poisoned") = Some(syncer);
    }

    fn syncer(&self) -> Option<Arc<dyn TxgSyncer>> {
        self.syncer.lock().expect("syncer lock poisoned").clone()
    }

    /// The syncer's work when woken: one txg of every pool whose dirty data reached
    /// [`DIRTY_SYNC`] (a written txg waiting for its commit is committed first). Returns
    /// whether any txg committed: the caller calls again while writers keep a pool there.
    /// Failures suspend the pool; status reports them.
    pub fn sync_wanted_pools(&self) -> bool {
        let mut synced = false;
        for handle in self.handles() {
            synced |= matches!(handle.sync_pipelined(false), Ok(Some(_)));
        }
        synced
    }

    /// Commits the open txg of `name` with the commit phase off the pool lock: writers,
    /// readers and `fsync` go on meanwhile (those that need the txg committed wait). Returns
    /// the txg committed (`None` with nothing to commit).
    pub fn sync_pool_pipelined(&self, name: &str) -> Result<Option<Txg>, EngineError> {
        self.pool(name)?.sync_pipelined(true)
    }

    /// The write phase of the open txg of `name` alone (the simulator and tests drive the
    /// phases themselves): a txg already syncing is finished first. The commit waits for
    /// [`Engine::sync_commit_phase`] or whoever next needs it. Returns the txg written.
    pub fn sync_write_phase(&self, name: &str) -> Result<Txg, EngineError> {
        let handle = self.pool(name)?;
        let inner = handle.lock_open();
        let mut inner = handle.wait_commit(inner)?;
        inner.write_phase()
    }

    /// The commit phase of the txg of `name` that is syncing, without the pool lock, then its
    /// finish. Returns the txg committed (`None` when no txg was syncing).
    pub fn sync_commit_phase(&self, name: &str) -> Result<Option<Txg>, EngineError> {
        let handle = self.pool(name)?;
        handle.lane.commit();
        handle.lock_open().finish_done()
    }

    /// The throttle after a write (module docs). `inner` is the pool lock of `handle`.
    pub(crate) fn throttle(
        &self,
        handle: &PoolHandle,
        inner: MutexGuard<'_, Imported>,
    ) -> Result<(), EngineError> {
        let dirty = inner.dirty_bytes();
        let Some(syncer) = self.syncer() else {
            if dirty >= DIRTY_MAX {
                // No sync thread: this thread syncs, but other threads of the pool go on
                // while it waits for the flushes, and while it writes the txg's data ahead
                // (module `prewrite`).
                drop(inner);
                handle.prewrite(crate::prewrite::PREWRITE_MIN);
                let inner = handle.lock_open();
                let mut inner = handle.wait_commit(inner)?;
                inner.write_phase()?;
                drop(inner);
                handle.lane.commit();
                handle.lock_open().finish_done()?;
            }
            return Ok(());
        };
        let mut inner = inner;
        let loan_max = self.loan_max.load(Ordering::Relaxed);
        let Imported { loan, datasets, .. } = &mut *inner;
        let rewrite = || {
            let objsets = datasets
                .all()
                .into_iter()
                .map(|id| &datasets.node(id).objset);
            objsets
                .map(|objset| objset.sync_estimate().data_bytes)
                .sum()
        };
        loan.borrow(dirty, rewrite, &self.cache, loan_max);
        if dirty < inner.loan.sync_at() {
            return Ok(());
        }
        if dirty < inner.loan.limit() {
            if inner.pool.syncing_txg().is_none() {
                syncer.sync_wanted();
            }
            return Ok(());
        }
        let mut inner = handle.wait_commit(inner)?;
        if inner.dirty_bytes() >= inner.loan.sync_at() {
            inner.write_phase()?;
        }
        drop(inner);
        syncer.sync_wanted();
        Ok(())
    }
}
