//! Suspended pools: `failmode`, writers waiting for `clear`, and `clear` resuming a pool.
//!
//! A pool that cannot commit a txg is suspended by tarn-pool (module `resume` there says
//! what it keeps). This layer decides what writers see meanwhile, from the pool property
//! `failmode`, as ZFS does:
//!
//! ```text
//!  failmode=wait (default)   a write (fs_op Modify/Write, fsync, object_write) sleeps on the
//!                            handle's `resumed` condvar WITH THE POOL LOCK RELEASED, until
//!                            `clear` resumes the pool (it then goes ahead) or `export -f`
//!                            ends it (it then fails: EIO); so does a write or fsync whose own
//!                            commit, or whose wait for the syncing txg (throttle, fsync,
//!                            module `txg`), ended in a suspension (its change stays in
//!                            memory: in the kept txg or in the open one after it)
//!  failmode=continue         the write fails at once (EIO); reads of healthy data work
//!  failmode=panic            as continue here; the daemon stops the process for a
//!                            multihost suspension (module `multihost`)
//! ```
//!
//! A waiting writer (or reader) holds only its `Arc<PoolHandle>`: no pool lock, no admin
//! lock, no lock of a front end (the FUSE server calls the engine with none held), so
//! status, other pools, `clear` and `export -f` all go ahead. `export -f` sets `ended`,
//! wakes every waiter, and waits (bounded) for their handles to drop before it takes the
//! pool.
//!
//! Reads are served whatever the failmode when they can be: from healthy columns, by
//! reconstruction within parity, or from the block caches. A read whose block cannot be
//! read because every vdev holding a copy of it has more children missing (removed,
//! unavailable, faulted, or a device that reports itself gone: `missing_beyond`) than its
//! redundancy allows is ZFS's "blocks all I/O access" under `failmode=wait`: the pool is
//! suspended (unless it already is; the reason says a read could not reach enough devices,
//! and nothing is kept for a retry: tarn-pool `suspend_for_read`), and the reader waits as
//! a writer does ([`PoolHandle::read_failed`]), then reads again after `clear`, or fails
//! (EIO) after `export -f`. Only [`Engine::object_read`] and [`Engine::fs_read`] read again
//! (their closures may run twice); `fs_op` with a `Read` runs its closure once and fails. A
//! block that cannot be read while one of its copies' vdevs still has enough children
//! (every leaf present, or a degraded vdev within its redundancy) is damage `clear` cannot
//! repair: EIO at once, never a wait, and the pool goes on (a raidz2 with one disk gone and
//! a damaged block elsewhere is not suspended). Under `failmode=continue` every unreadable
//! block is EIO at once and the pool is not suspended. A device that answers reads with
//! errors but is not gone is not "missing" either: its reads fail at once (a weakness: ZFS
//! would wait for it too).
//!
//! `clear` of a suspended pool ([`Engine::clear`]) first finds, without changing anything,
//! which unusable leaves answer again: a leaf with no device, or whose device reports itself
//! gone, is reopened at its path and accepted only if its label names this pool and this
//! leaf; a leaf whose device is present and answering (FAULTED by errors) is taken as is.
//! With `multihost=on`, a heartbeat or uberblock another host wrote since the last commit
//! also refuses (the pool's heartbeats stopped with the suspension, so another host may have
//! waited them out and imported it). If the data vdevs could then commit, the leaves are
//! brought online (each one whose label
//! is older than the last committed txg is resilvered from there, and one that left during
//! its own resilver is resilvered whole: `devices::resilver_missed`, shared with `online`), the
//! kept txg is written again and committed (`Pool::resume`), a `resume` event is posted and
//! the waiters wake. Otherwise nothing changes and `clear` names the devices still missing.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use tarn_base::Txg;
use tarn_device::Device;
use tarn_format::Dva;
use tarn_objects::ObjectError;
use tarn_posix::PosixError;
use tarn_vdev::{Leaf, LeafState};
use tarn_zio::ZioError;

use crate::{Engine, EngineError, Imported, PoolError, PoolHandle, events};

/// Forced export: how many times to look for the pool's other handles to be dropped, and
/// how long each wait for a waking writer lasts.
const RELEASE_TRIES: u32 = 400;
const RELEASE_WAIT_MS: u64 = 5;

impl Engine {
    /// The first step of `export -f`: if pool `name` is suspended, every request waiting
    /// for `clear` fails now (EIO) and none waits again. A front end calls it before it
    /// unmounts the pool's datasets, since an unmount waits for the mount's requests, and
    /// the sync a mount makes as it ends would wait for `clear` forever. Nothing changes
    /// for a pool that is not suspended.
    pub fn end_suspended_waits(&self, name: &str) -> Result<(), EngineError> {
        let handle = self.pool(name)?;
        let inner = handle.lock_open();
        handle.end_waits_if_suspended(&inner);
        Ok(())
    }
}

impl PoolHandle {
    /// [`Engine::end_suspended_waits`] under the pool lock.
    pub(crate) fn end_waits_if_suspended(&self, inner: &Imported) {
        if inner.pool.suspended().is_some() {
            self.ended.store(true, Ordering::Release);
            self.resumed.notify_all();
        }
    }

    /// Locks the pool for a change by a writer: returns at once unless the pool is
    /// suspended; then fails (failmode `continue`, `panic`, or the pool was exported) or
    /// waits with the lock released until the pool resumes (failmode `wait`).
    pub(crate) fn lock_for_write(&self) -> Result<MutexGuard<'_, Imported>, EngineError> {
        // Not `lock`: a writer does not wait for the syncing txg's commit (module `txg`).
        let mut inner = self.lock_open();
        loop {
            let Some(why) = inner.pool.suspended().map(str::to_string) else {
                return Ok(inner);
            };
            if self.ended.load(Ordering::Acquire) {
                return Err(PoolError::Suspended(format!("{why} (the pool was exported)")).into());
            }
            if crate::slow::pool_prop(&mut inner, "failmode") != "wait" {
                return Err(PoolError::Suspended(why).into());
            }
            tarn_base::wait::before_wait();
            inner = self
                .resumed
                .wait(inner)
                .expect("pool lock poisoned by a failed invariant");
        }
    }
}

impl PoolHandle {
    /// After a commit inside a write failed (`error`): when it suspended the pool, waits as
    /// [`PoolHandle::lock_for_write`] does and returns once the pool resumed (the change
    /// is in the txg `clear` wrote again, or still dirty for the next one); any other error,
    /// or one under another failmode, is returned.
    pub(crate) fn wait_resumed(&self, error: EngineError) -> Result<(), EngineError> {
        if !matches!(error, EngineError::Pool(PoolError::Suspended(_))) {
            return Err(error);
        }
        let inner = self.lock_for_write()?;
        drop(inner);
        Ok(())
    }
}

impl PoolHandle {
    /// After a read failed with `error`, under the pool lock `inner`: when the block could
    /// not be read because every vdev of its copies is beyond its redundancy with missing
    /// leaves, and `failmode=wait`, suspends the pool (if it is not already), waits as
    /// [`PoolHandle::lock_for_write`] does, and returns the lock for the caller to read
    /// again; otherwise (damage, another failmode, another error) returns `error` at once
    /// (module doc).
    pub(crate) fn read_failed<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Imported>,
        error: EngineError,
    ) -> Result<MutexGuard<'a, Imported>, EngineError> {
        let Some(vdevs) = unreadable_block(&error) else {
            return Err(error);
        };
        if crate::slow::pool_prop(&mut inner, "failmode") != "wait" {
            return Err(error);
        }
        let missing = missing_beyond(&inner.pool, vdevs);
        if missing.is_empty() {
            return Err(error);
        }
        inner.pool.suspend_for_read(format!(
            "a read could not reach enough devices ({} missing)",
            missing.join(", ")
        ));
        assert!(
            inner.pool.suspended().is_some(),
            "a reader waits only on a suspended pool"
        );
        drop(inner);
        self.lock_for_write()
    }
}

/// The object layer's error inside `error`, directly or through the POSIX layer.
pub(crate) fn object_error(error: &EngineError) -> Option<&ObjectError> {
    match error {
        EngineError::Objects(e) | EngineError::Posix(PosixError::Object(e)) => Some(e),
        _ => None,
    }
}

/// The copies (DVAs) of the block when `error` is a block the I/O pipeline could
/// not read (no copy or reconstruction verified), as opposed to a refusal, a missing file or
/// metadata that decodes badly.
pub(crate) fn unreadable_block(error: &EngineError) -> Option<&[Dva]> {
    match object_error(error)? {
        ObjectError::Io {
            source: ZioError::Unrecoverable { copies, .. },
            ..
        } => Some(copies),
        _ => None,
    }
}

/// Paths of the missing data leaves (not taking I/O: removed, unavailable, faulted, or a
/// device that reports itself gone) when they put the vdev of every one of the block's
/// `copies` beyond its redundancy; empty when some copy's vdev still has enough children,
/// since then the block is damaged rather than cut off, and no `clear` would bring it back.
/// Offline leaves are the admin's choice: they count as out of service, not as missing.
pub(crate) fn missing_beyond(pool: &tarn_pool::Pool, copies: &[Dva]) -> Vec<String> {
    let gone = |l: &Arc<Leaf>| {
        l.state() != LeafState::Offline
            && (!l.is_usable() || l.device().is_some_and(|d| d.probe_gone()))
    };
    let down = |l: &Arc<Leaf>| l.state() == LeafState::Offline || gone(l);
    let mut missing = Vec::new();
    for copy in copies {
        let Some(top) = pool.tops().get(copy.vdev.0 as usize) else {
            return Vec::new();
        };
        let children = top.children();
        let lost = children
            .iter()
            .filter(|c| c.members().iter().all(down))
            .count();
        if lost <= top.layout().tolerated(children.len()) {
            return Vec::new();
        }
        missing.extend(top.leaves().iter().filter(|l| gone(l)).map(|l| l.path()));
    }
    missing.sort();
    missing.dedup();
    missing
}

/// A leaf `clear` can bring back: the leaf, the device to give it (`None`: keep its own),
/// and the newest txg its labels hold.
pub(crate) struct Returning {
    pub(crate) leaf: Arc<Leaf>,
    pub(crate) device: Option<Arc<dyn Device>>,
    pub(crate) label_txg: Txg,
}

impl Engine {
    /// Opens `leaf`'s device again at its path if it is this pool's leaf (by its label).
    pub(crate) fn reopen(&self, inner: &Imported, leaf: &Arc<Leaf>) -> Option<Returning> {
        let own = leaf.device().filter(|d| !d.probe_gone());
        let device = match &own {
            Some(device) => Arc::clone(device),
            None => self.provider.open(&leaf.path(), false).ok()?,
        };
        if device.probe_gone() {
            return None;
        }
        let scan = tarn_pool::read_labels(device.as_ref());
        let config = scan.config?;
        if config.pool_guid != inner.pool.guid() || config.this_guid != leaf.guid() {
            return None;
        }
        let label_txg = tarn_pool::labels::best_uberblock(&scan.uberblocks, config.pool_guid, None)
            .map_or(Txg(0), |u| u.txg);
        Some(Returning {
            leaf: Arc::clone(leaf),
            device: if own.is_some() { None } else { Some(device) },
            label_txg,
        })
    }

    /// The unusable leaves (not offline) that answer again (module doc).
    fn returning(&self, inner: &Imported) -> Vec<Returning> {
        let leaves = inner.pool.tops().iter().flat_map(|t| t.leaves());
        leaves
            .filter(|l| !l.is_usable() && l.state() != LeafState::Offline)
            .filter_map(|l| self.reopen(inner, &l))
            .collect()
    }

    /// Resumes a suspended pool for `clear` (module doc). A refusal changes nothing.
    pub(crate) fn resume(
        &self,
        handle: &PoolHandle,
        inner: &mut Imported,
    ) -> Result<(), EngineError> {
        let returning = self.returning(inner);
        let before: Vec<(Option<Arc<dyn Device>>, LeafState)> = returning
            .iter()
            .map(|r| (r.leaf.device(), r.leaf.state()))
            .collect();
        for back in &returning {
            if let Some(device) = &back.device
                && back.leaf.set_device(Some(Arc::clone(device))).is_err()
            {
                continue;
            }
            back.leaf.set_state(LeafState::Online);
        }
        let blockers = inner.pool.commit_blockers();
        let refusal = if blockers.is_empty() {
            self.foreign_writer(inner).map(|hostid| {
                PoolError::CannotResume(format!(
                    "host {hostid:#x} has written to the pool since it was suspended \
                     (multihost=on); export it with 'tarn pool export -f'"
                ))
            })
        } else {
            Some(PoolError::StillFailing { devices: blockers })
        };
        if let Some(refusal) = refusal {
            for (back, (device, state)) in returning.iter().zip(before) {
                let _ = back.leaf.set_device(device);
                back.leaf.set_state(state);
            }
            return Err(refusal.into());
        }
        let now = self.clock.now_unix_secs();
        self.resilver_returning(inner, &returning, now);
        let committed = inner.pool.resume();
        handle.resumed.notify_all();
        let txg = committed?;
        if let Some(txg) = txg {
            inner.logs_after_sync(txg);
        }
        self.post_resume(&handle.name, inner, &returning, now, txg);
        Ok(())
    }

    /// With multihost on, a pool suspended long enough may have been imported by another
    /// host meanwhile (its heartbeats stopped with the suspension): the host id of a
    /// heartbeat or uberblock another host wrote on a usable leaf at or after this pool's
    /// last committed txg, if any. Resuming over it would corrupt the pool.
    fn foreign_writer(&self, inner: &Imported) -> Option<u64> {
        let pool = &inner.pool;
        if pool.multihost_interval_ms() == 0 {
            return None;
        }
        let committed = pool.txg();
        let ours = self.identity.hostid;
        let leaves = pool.tops().iter().flat_map(|t| t.leaves());
        let devices: Vec<Arc<dyn Device>> = leaves.filter_map(|l| l.usable_device()).collect();
        devices.iter().find_map(|device| {
            let beats = tarn_pool::multihost::read_heartbeats(device.as_ref(), pool.guid());
            let beat = beats
                .into_iter()
                .flatten()
                .find(|b| b.hostid != ours && b.txg >= committed)
                .map(|b| b.hostid);
            let uberblocks = tarn_pool::read_labels(device.as_ref()).uberblocks;
            let foreign = |u: &&tarn_format::uberblock::Uberblock| {
                u.pool_guid == pool.guid() && u.hostid != ours && u.txg > committed
            };
            beat.or_else(|| uberblocks.iter().find(foreign).map(|u| u.hostid))
        })
    }

    /// Starts a resilver of what the returning leaves missed (`devices::resilver_missed`,
    /// as `online` does), their synced txg being the newest their labels hold.
    fn resilver_returning(&self, inner: &mut Imported, returning: &[Returning], now: u64) {
        let committed = inner.pool.last_uberblock().map_or(Txg(0), |ub| ub.txg);
        for back in returning {
            back.leaf.set_synced_txg(back.label_txg.min(committed));
        }
        let leaves: Vec<Arc<Leaf>> = returning.iter().map(|r| Arc::clone(&r.leaf)).collect();
        if crate::devices::resilver_missed(inner, &leaves, now).is_some() {
            let name = inner.pool.name().to_string();
            self.post(events::pool_event(&name, now, "resilver_start"));
        }
    }

    /// Posts `io_failure` when the fault check finds `name` newly suspended (once per
    /// suspension; the daemon's background thread looks every second).
    pub(crate) fn post_suspension(&self, name: &str, inner: &mut Imported) {
        let why = inner.pool.suspended().map(str::to_string);
        let failmode = match why {
            Some(_) => crate::slow::pool_prop(inner, "failmode"),
            None => String::new(),
        };
        let now = self.clock.now_unix_secs();
        let mut log = self.events.lock().expect("event lock poisoned");
        log.suspension(name, why.as_deref(), &failmode, now);
    }

    /// Posts the leaves' state changes and the pool's `resume` event.
    fn post_resume(
        &self,
        name: &str,
        inner: &Imported,
        returning: &[Returning],
        now: u64,
        txg: Option<Txg>,
    ) {
        {
            let mut log = self.events.lock().expect("event lock poisoned");
            for back in returning {
                log.state(name, &back.leaf, now, Vec::new());
            }
        }
        let mut event = events::pool_event(name, now, "resume");
        if let Some(txg) = txg {
            event.payload.push(("txg".to_string(), txg.0.to_string()));
        }
        let committed = inner.pool.txg();
        event
            .payload
            .push(("committed_txg".to_string(), committed.0.to_string()));
        self.post(event);
    }

    /// Takes the pool out of the table once every other handle is dropped (a verb or the
    /// sync thread that waited for the lock, waiting writers woken by a forced export need
    /// a moment to fail and let go, and so does a request of a mount `export -f`
    /// detached). Gives up, as `take` does, after about two seconds.
    pub(crate) fn take_when_released(&self, name: &str) -> Result<Imported, EngineError> {
        for _ in 0..RELEASE_TRIES {
            match self.take(name) {
                Err(EngineError::InvalidArgument(_)) => {
                    let handle = self.pool(name)?;
                    handle.resumed.notify_all();
                    let inner = handle.lock();
                    let wait = std::time::Duration::from_millis(RELEASE_WAIT_MS);
                    let _ = handle.resumed.wait_timeout(inner, wait);
                }
                taken => return taken,
            }
        }
        self.take(name)
    }
}
