//! Suspension and resumption: what a pool that cannot commit keeps, and how `clear` retries.
//!
//! A pool that cannot commit a txg (or, under `failmode=wait`, serve a read) is suspended
//! (I5) in one of these shapes, recorded in [`Retry`]:
//!
//! ```text
//!  before the txg starts    a data vdev cannot take writes        Retry::Nothing
//!  (check_can_commit)       (leaves gone beyond its redundancy)   nothing in flight
//!  a read, failmode=wait    the read could not reach enough       Retry::Nothing
//!  (suspend_for_read)       devices (tarn-engine waits for clear) nothing in flight
//!  blocks written, not      a write missed too many devices, a    Retry::Txg(Unfinished)
//!  committed (finish_txg)   flush or the uberblock failed         the txg, its roots and
//!                                                                 every block it wrote
//!  upper layers failed      a read or an allocation failed        Retry::Never(why)
//!  mid-txg, or multihost    mid-sync; the heartbeat stopped
//! ```
//!
//! The middle case is the one devices vanishing produce. Its txg completed in memory: the
//! upper layers hold the new roots, the space manager the txg's allocations, frees and
//! space-log delta, and the pipeline's journal (tarn-zio) every physical block written, with
//! its DVAs. Nothing advanced past the txg: `Pool::txg` is still the last committed one and
//! `SpaceManager::txg_committed` has not run, so frees of the txg are not reusable yet.
//! [`Pool::resume`] checks, without writing, that every data vdev can take writes again;
//! then writes every kept block again at its DVAs (the same bytes: a block half written
//! before is whole after), and runs the commit (flush, labels, uberblock, flush) for the
//! same txg. The uberblock therefore names only blocks written and flushed by the retry
//! (invariant I1 holds for the retried txg exactly as for a first attempt). A retry that
//! fails again stays suspended with the txg still kept.
//!
//! # With the commit phase split off (the txg pipeline)
//! ```text
//!             sync_write (&mut Pool)          PendingCommit::commit   sync_finish (&mut Pool)
//!  open T ──► journal armed, blocks of T ──► (no Pool: flush,     ──► Ok: T committed, kept
//!             written and kept; end_write     uberblock, flush)        blocks dropped
//!             disarms it: syncing = T + kept                        Err: commit_failed:
//!             (journal failure: suspended,                          suspended, Retry::Txg(T)
//!              Retry::Txg(T), no commit)                                     │
//!                                                                            ▼
//!  resumed ◄── Pool::resume (&mut Pool): rewrite kept blocks, syncing = T again, the same
//!              commit and sync_finish (Err: suspended again, T kept)
//! ```
//! States of a pool, by `(syncing, suspended, retry)`: *open* `(None, None, Nothing)`;
//! *syncing* `(Some(T), None, Nothing)`: T+1 is open; *commit failed, suspended*
//! `(None, Some, Txg(T))`: `txg()` is T-1, T+1 is open in memory ([`Pool::open_txg`] is
//! T+1: open-context records never count as T's), and no write phase starts
//! ([`Pool::check_can_commit`] refuses while suspended), so T+1 waits for T; *resumed*:
//! back to open with `txg()` = T, and T+1's write phase is the next sync. The journal is
//! armed only inside the write phase, which holds `&mut Pool`; open-context writes while T
//! commits (intent-log blocks, allocated in T+1's space delta) are therefore never among
//! T's kept blocks, and a retry rewrites exactly what T's write phase wrote. A suspension
//! that cannot be resumed ([`Retry::Never`], the multihost heartbeat) set while a commit
//! phase runs is not replaced by the failed txg (`keep_for_retry`).
//!
//! What the journal keeps costs memory only while a txg syncs or waits for `clear` (at most
//! its dirty data, compressed); the upper layers' state is not copied. The first case needs
//! nothing: the txg never started, so the next sync after `clear` writes the dirty state as
//! usual.
//! The last case cannot be retried here: the upper layers' in-memory state was consumed by
//! the failed attempt (or, for multihost, another host may own the pool now), so `clear`
//! refuses and the admin exports with `-f` and imports (the intent log brings back what
//! `fsync` made durable).

use tarn_base::Txg;
use tarn_format::BlockPtr;
use tarn_zio::KeptWrite;

use crate::{Pool, PoolError};

/// A txg whose blocks were all handed to the devices but which did not commit.
#[derive(Debug)]
pub(crate) struct Unfinished {
    txg: Txg,
    root: BlockPtr,
    space_log: BlockPtr,
    writes: Vec<KeptWrite>,
}

/// What a suspended pool needs before it can write again (module doc).
#[derive(Debug, Default)]
pub(crate) enum Retry {
    /// Nothing was in flight.
    #[default]
    Nothing,
    /// A txg complete in memory, to write again and commit.
    Txg(Box<Unfinished>),
    /// Cannot be resumed; why, with what to do instead.
    Never(String),
}

impl Unfinished {
    /// The txg.
    pub(crate) fn txg(&self) -> Txg {
        self.txg
    }

    /// Memory its kept blocks hold.
    fn bytes(&self) -> u64 {
        self.writes
            .iter()
            .map(|w| {
                (w.buffer.capacity() + w.dvas.capacity() * size_of::<tarn_format::Dva>()) as u64
            })
            .sum()
    }
}

impl Pool {
    /// Paths of the unusable leaves of every data or special top-level vdev that has lost
    /// more children than its layout tolerates for writes: while any is listed, no txg can
    /// commit. Log devices do not count (log blocks fall back to the normal class).
    #[must_use]
    pub fn commit_blockers(&self) -> Vec<String> {
        let mut blocked = Vec::new();
        for (index, top) in self.tops.iter().enumerate() {
            if self.is_log_vdev(index) {
                continue;
            }
            let children = top.children();
            let lost = children
                .iter()
                .filter(|c| !c.members().iter().any(|l| l.is_usable()))
                .count();
            if lost <= top.layout().tolerated(children.len()) {
                continue;
            }
            let leaves = top.leaves();
            blocked.extend(leaves.iter().filter(|l| !l.is_usable()).map(|l| l.path()));
        }
        blocked
    }

    /// Checks that a txg can commit before one starts: a pool whose data vdev lost more
    /// leaves than it tolerates is suspended now, with nothing in flight (the upper layers'
    /// dirty state stays untouched, and `clear` resumes once the devices are back).
    pub fn check_can_commit(&mut self) -> Result<(), PoolError> {
        if let Some(why) = &self.suspended {
            return Err(PoolError::Suspended(why.clone()));
        }
        if let Some(why) = &self.space_lost {
            // Allocating now would hand out space live blocks hold.
            return Err(PoolError::Suspended(format!(
                "the space log could not be read ({why}) and is not rebuilt"
            )));
        }
        if self.readonly {
            return Ok(());
        }
        let blocked = self.commit_blockers();
        if blocked.is_empty() {
            return Ok(());
        }
        self.retry = Retry::Nothing;
        Err(self.suspend(format!(
            "{} cannot be written, more than the redundancy of their vdev",
            blocked.join(", ")
        )))
    }

    /// Suspends the pool because a read could not reach enough devices (`failmode=wait`:
    /// the reader waits for `clear`). Nothing is kept for a retry: no txg failed, so `clear`
    /// resumes as soon as [`Pool::commit_blockers`] is empty, and the next sync writes the
    /// dirty state as usual. A pool already suspended keeps its reason and what it kept.
    pub fn suspend_for_read(&mut self, why: String) {
        if self.suspended.is_none() {
            self.suspended = Some(why);
        }
    }

    /// The txg that waits in memory for `clear` (its blocks written, not committed).
    #[must_use]
    pub fn txg_in_flight(&self) -> Option<Txg> {
        match &self.retry {
            Retry::Txg(unfinished) if self.suspended.is_some() => Some(unfinished.txg),
            _ => None,
        }
    }

    /// Suspends for a failure inside the upper layers' or the space log's part of a sync:
    /// nothing kept can be retried (module doc).
    pub(crate) fn abandon(&mut self, why: String) -> PoolError {
        let _ = self.pipeline.journal_end();
        self.space.set_place_on_unwritable(false);
        self.retry = Retry::Never(format!(
            "{why}; the changes of that txg are no longer in memory: export the pool with \
             'tarn pool export -f' and import it (it returns to its last committed txg and \
             replays the intent log)"
        ));
        self.suspend(why)
    }

    /// The end of a write phase whose upper layers and space log are written: disarms the
    /// journal (what the pipeline writes from now on, intent-log blocks of the open txg
    /// above all, is not this txg's) and returns the txg with every block it wrote, kept
    /// until its uberblock commits. A block that could not be written suspends the pool
    /// keeping the txg for `clear` ([`Retry::Txg`]), with no commit phase tried.
    pub(crate) fn end_write(
        &mut self,
        txg: Txg,
        root: BlockPtr,
        space_log: BlockPtr,
    ) -> Result<Box<Unfinished>, PoolError> {
        let journal = self.pipeline.journal_end();
        self.space.set_place_on_unwritable(false);
        let unfinished = Box::new(Unfinished {
            txg,
            root,
            space_log,
            writes: journal.writes,
        });
        if let Some(why) = journal.failed {
            self.keep_for_retry(unfinished);
            let causes = self.write_causes();
            return Err(self.suspend(format!(
                "txg {txg}: a block could not be written: {why}{causes}"
            )));
        }
        Ok(unfinished)
    }

    /// The one place a txg whose commit phase failed ends (`why` names the txg): the pool
    /// suspends (I5), the txg does not count and is kept whole for `clear` (module doc).
    /// What stays behind: `txg()` and the last uberblock are still the previous txg's, no
    /// txg is syncing ([`Pool::txg_in_flight`] names the kept one), the labels still count
    /// as dirty if they were or the config changed since the write phase; the space manager
    /// still records the failed txg (its delta blocks in the in-memory chain, its frees
    /// neither deferred nor released, its allocations allocated), so nothing it wrote is
    /// handed out again before it commits or a reimport reloads the last committed state.
    pub(crate) fn commit_failed(&mut self, why: String, unfinished: Box<Unfinished>) -> PoolError {
        self.config_dirty |= std::mem::take(&mut self.config_changed_since_write);
        let causes = self.write_causes();
        let error = self.suspend(format!("{why}{causes}"));
        self.keep_for_retry(unfinished);
        error
    }

    /// What the devices said when their writes failed, for the reason of a suspension:
    /// `"; PATH: ERROR"` of the first leaf with a failed write or flush since its last
    /// `clear`, with how many more there are; empty when none has one. The admin reads
    /// "No space left on device" or "device is gone" there instead of a count.
    fn write_causes(&self) -> String {
        let mut failed = self.tops.iter().flat_map(|t| t.leaves()).filter_map(|l| {
            let error = l.last_write_error()?;
            Some(format!("{}: {error}", l.path()))
        });
        let Some(first) = failed.next() else {
            return String::new();
        };
        match failed.count() {
            0 => format!("; {first}"),
            1 => format!("; {first} (and 1 more device)"),
            more => format!("; {first} (and {more} more devices)"),
        }
    }

    /// Keeps a txg for `clear`, unless the suspension is one that cannot be resumed (the
    /// multihost heartbeat stopped while the commit phase ran): that refusal stays.
    fn keep_for_retry(&mut self, unfinished: Box<Unfinished>) {
        if !matches!(self.retry, Retry::Never(_)) {
            self.retry = Retry::Txg(unfinished);
        }
    }

    /// Memory held by the blocks of txgs written but not committed: the one in its commit
    /// phase and the one a suspension keeps for `clear` (at most one txg's dirty data,
    /// compressed, each; module doc).
    #[must_use]
    pub fn kept_bytes(&self) -> u64 {
        let syncing = self.syncing.as_ref().map_or(0, |u| u.bytes());
        let retry = match &self.retry {
            Retry::Txg(unfinished) => unfinished.bytes(),
            _ => 0,
        };
        syncing + retry
    }

    /// The txg kept for `clear`, whatever the suspension (open context counts after it).
    pub(crate) fn txg_kept(&self) -> Option<Txg> {
        match &self.retry {
            Retry::Txg(unfinished) => Some(unfinished.txg),
            _ => None,
        }
    }

    /// Flushes every usable leaf and drops what the flush reports: the errors of writes of
    /// the failed attempt, which a write-behind queue keeps until the next flush (tarn-device
    /// `queued`, I2) and would otherwise hand to the retry's first writes to each device. The
    /// retry writes every block of the txg again and its commit flushes again, so nothing the
    /// errors stood for is lost; an intent-log write reports its own errors to its own flush
    /// before this runs (the engine waits for log writes in flight before `clear`).
    fn forget_failed_writes(&self) {
        for top in &self.tops {
            for leaf in top.leaves() {
                if let Some(device) = leaf.usable_device() {
                    let _ = device.flush();
                }
            }
        }
    }

    /// `clear` of a suspended pool (ZFS's `zio_resume`): refuses, changing nothing, while
    /// [`Pool::commit_blockers`] lists devices or the suspension cannot be retried; otherwise
    /// writes the kept txg again and commits it (module doc). Returns the txg committed, if
    /// one was in flight. A pool that is not suspended is left alone.
    pub fn resume(&mut self) -> Result<Option<Txg>, PoolError> {
        if self.suspended.is_none() {
            return Ok(None);
        }
        if let Retry::Never(why) = &self.retry {
            return Err(PoolError::CannotResume(why.clone()));
        }
        let devices = self.commit_blockers();
        if !devices.is_empty() {
            return Err(PoolError::StillFailing { devices });
        }
        let unfinished = match std::mem::take(&mut self.retry) {
            Retry::Txg(unfinished) => unfinished,
            Retry::Nothing | Retry::Never(_) => {
                self.suspended = None;
                return Ok(None);
            }
        };
        assert!(
            unfinished.txg == self.txg.next(),
            "I2: the kept txg {} follows the committed txg {}",
            unfinished.txg,
            self.txg
        );
        let txg = unfinished.txg;
        self.forget_failed_writes();
        for kept in &unfinished.writes {
            if let Err(e) = self.pipeline.rewrite(kept) {
                self.retry = Retry::Txg(unfinished);
                return Err(self.suspend(format!(
                    "txg {txg}: a block could not be written again: {e}"
                )));
            }
        }
        self.suspended = None;
        // The same commit phase and finish as a first attempt (one path for both): a
        // failure suspends again with the txg kept.
        let pending = self.pending_commit(txg, unfinished.root, unfinished.space_log);
        assert!(self.syncing.is_none(), "I6: no txg syncs beside a kept one");
        self.syncing = Some(unfinished);
        let outcome = pending.commit();
        self.sync_finish(outcome).map(Some)
    }
}
