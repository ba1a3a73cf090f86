//! The engine's side of multihost protection: the `multihost` pool property turns the
//! heartbeat on, [`Engine::multihost_heartbeat`] writes one heartbeat per pool (the daemon
//! calls it every interval), and a pool whose heartbeat missed its quorum for
//! `MULTIHOST_FAIL_INTERVALS` intervals is suspended. The heartbeat record, the quorum rule
//! and the import-time activity check are `tarn_pool::multihost`.
//!
//! Two callers, two threads in the daemon: [`Engine::multihost_heartbeat`] writes (and
//! flushes) one heartbeat per pool and may block as long as a device makes it, and
//! [`Engine::multihost_watch`] only looks at the clock. A write that hangs (a flush stuck
//! behind minutes of queued writes) would otherwise keep this host from noticing that an
//! importer watching the silence may conclude it is gone; the watch suspends the pool once
//! no heartbeat has counted for `MULTIHOST_FAIL_INTERVALS` intervals, while the write still
//! hangs, as ZFS's MMP thread suspends a pool whose writes stopped completing.
//!
//! A heartbeat counts from the moment its write *started*, not when it completed: an
//! importer may have seen it land at any instant in between, so the owner's deadline runs
//! from the earliest of them. A slow write that completes within the limit keeps the pool
//! alive; one that completes after the pool was suspended counts for nothing (the
//! suspension stands). Only one heartbeat is in flight per pool: a writer finding one still
//! being written skips its turn, as ZFS skips a leaf whose MMP write is pending. The import
//! side does not scale its wait by the owner's write delay as ZFS's does; M1 (tarn-pool)
//! holds without it because the owner counts from the start.
//!
//! `failmode` applies as in ZFS: `panic` makes both calls return the reason, and the daemon
//! aborts the process (nothing it has queued may reach the devices afterwards); `wait` and
//! `continue` suspend, which refuses writes until the pool is re-imported.
//!
//! Lock order: the heartbeat takes the pool lock only with `try_lock`, to refresh its targets
//! (a txg sync in progress keeps the previous ones), then the handle's heartbeat state, which
//! it never holds across a device access; the pool lock is taken for real only to suspend,
//! after dropping the heartbeat state.

use std::sync::{MutexGuard, TryLockError};

use tarn_base::limits::MULTIHOST_FAIL_INTERVALS;
use tarn_pool::multihost::{HeartbeatTargets, write_heartbeat};

use crate::{Engine, EngineError, Imported, PoolHandle, events};

/// Heartbeat state of one imported pool.
#[derive(Debug, Default)]
pub(crate) struct Beat {
    /// Where the next heartbeat goes (`None`: multihost off, read-only or suspended).
    targets: Option<HeartbeatTargets>,
    /// Sequence of the last heartbeat written.
    sequence: u64,
    /// Monotonic time of the last heartbeat that reached its quorum (or of arming).
    last_ok_ns: Option<u64>,
    /// Monotonic time the last heartbeat attempt ended, counted or not.
    last_try_ns: Option<u64>,
    /// Monotonic time the heartbeat being written now started (`None`: none in flight).
    in_flight_ns: Option<u64>,
}

impl Beat {
    /// Stops heartbeats (the pool is being suspended).
    fn disarm(&mut self) {
        self.targets = None;
        self.last_ok_ns = None;
        self.last_try_ns = None;
    }
}

/// Applies the pool's `multihost` property to the pool: on, heartbeats every
/// `interval_ms` and uberblocks that say so; off, neither. Called before the sync that
/// follows create, import and `set multihost=...`.
pub(crate) fn apply_prop(inner: &mut Imported, interval_ms: u64) -> Result<(), EngineError> {
    let Imported { pool, mos, .. } = inner;
    let on = mos
        .props(&pool.reader())?
        .iter()
        .any(|(name, value)| name == "multihost" && value == "on");
    pool.set_multihost_interval(if on { interval_ms } else { 0 });
    Ok(())
}

impl Engine {
    /// Writes one multihost heartbeat for every imported pool with `multihost=on` (the
    /// daemon calls this every [`Engine::multihost_interval_ms`]). A pool whose heartbeats
    /// missed their quorum for `MULTIHOST_FAIL_INTERVALS` intervals is suspended: another
    /// host may have concluded that this one is gone. Returns why, for each pool suspended
    /// now whose `failmode` is `panic`: the caller must stop this process at once (ZFS
    /// panics the host), so that nothing it has queued reaches the devices.
    pub fn multihost_heartbeat(&self) -> Vec<String> {
        let handles: Vec<_> = self.pools().values().cloned().collect();
        handles
            .iter()
            .filter_map(|handle| self.heartbeat_one(handle))
            .collect()
    }

    /// The heartbeat interval this engine uses for pools with `multihost=on`.
    #[must_use]
    pub fn multihost_interval_ms(&self) -> u64 {
        self.multihost_interval_ms
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sets the heartbeat interval (ZFS's `zfs_multihost_interval`) for pools imported or
    /// switched on from now on. Values outside the limits are clamped.
    pub fn set_multihost_interval_ms(&self, interval_ms: u64) {
        use tarn_base::limits::{MULTIHOST_INTERVAL_MS_MAX, MULTIHOST_INTERVAL_MS_MIN};
        let value = interval_ms.clamp(MULTIHOST_INTERVAL_MS_MIN, MULTIHOST_INTERVAL_MS_MAX);
        self.multihost_interval_ms
            .store(value, std::sync::atomic::Ordering::Relaxed);
    }

    /// The heartbeat state of `handle`, locked, with targets refreshed from the pool when
    /// its lock is free (a sync in progress keeps the previous ones).
    fn beat_refreshed<'a>(&self, handle: &'a PoolHandle, now: u64) -> MutexGuard<'a, Beat> {
        let fresh = match handle.inner.try_lock() {
            Ok(inner) => Some(inner.pool.heartbeat_targets()),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(_)) => {
                panic!("pool lock poisoned by a failed invariant")
            }
        };
        let mut beat = handle.beat.lock().expect("heartbeat lock poisoned");
        if let Some(targets) = fresh {
            if targets.is_none() {
                beat.last_ok_ns = None;
                beat.last_try_ns = None;
            } else if beat.last_ok_ns.is_none() {
                beat.last_ok_ns = Some(now);
            }
            beat.targets = targets;
        }
        beat
    }

    fn heartbeat_one(&self, handle: &PoolHandle) -> Option<String> {
        let now = self.clock.monotonic_ns();
        let mut beat = self.beat_refreshed(handle, now);
        let targets = beat.targets.clone()?;
        if beat.in_flight_ns.is_some() {
            return None;
        }
        let limit_ns = targets.interval_ms() * MULTIHOST_FAIL_INTERVALS * 1_000_000;
        let since = beat.last_ok_ns.unwrap_or(now);
        let gap_ms = now.saturating_sub(since) / 1_000_000;
        let stalled = beat
            .last_try_ns
            .is_some_and(|tried| now.saturating_sub(tried) >= limit_ns);
        // A host that stalled (paused VM, stopped process) past the limit writes nothing more:
        // another host may have watched the silence and imported the pool meanwhile.
        if stalled {
            let why =
                format!("no multihost heartbeat was written for {gap_ms} ms (this host stalled)");
            beat.disarm();
            drop(beat);
            return self.multihost_suspend(handle, why);
        }
        beat.sequence += 1;
        let sequence = beat.sequence;
        beat.in_flight_ns = Some(now);
        drop(beat);
        let time_ms = u64::try_from(self.clock.now_unix_nanos() / 1_000_000).unwrap_or(0);
        // The gap since the last counted heartbeat started is recorded for importers: an
        // owner whose heartbeats land late is watched for longer (tarn_pool::multihost).
        let written = write_heartbeat(&targets, sequence, time_ms, gap_ms);
        let ended = self.clock.monotonic_ns();
        let mut beat = handle.beat.lock().expect("heartbeat lock poisoned");
        assert_eq!(
            beat.in_flight_ns,
            Some(now),
            "one heartbeat in flight per pool"
        );
        beat.in_flight_ns = None;
        // Suspended (by the watch) while this one was written: it counts for nothing.
        beat.targets.as_ref()?;
        // Measured from the end of the attempt: a slow flush is not a stall.
        beat.last_try_ns = Some(ended);
        let why = match written {
            Ok(()) => {
                // Counted from its start (module docs), never moving the deadline back.
                beat.last_ok_ns = Some(beat.last_ok_ns.map_or(now, |ok| ok.max(now)));
                return None;
            }
            Err(_) if now.saturating_sub(since) < limit_ns => return None,
            Err(miss) => {
                format!("the multihost heartbeat could not be written for {gap_ms} ms ({miss})")
            }
        };
        beat.disarm();
        drop(beat);
        self.multihost_suspend(handle, why)
    }

    /// The watch over every pool with `multihost=on` (the daemon calls it every interval
    /// from its own thread, so a heartbeat write that hangs cannot keep it from running):
    /// a pool whose last counted heartbeat started `MULTIHOST_FAIL_INTERVALS` intervals ago
    /// or more is suspended, whether a write is still hanging or no attempt was made.
    /// Returns why for each such pool whose `failmode` is `panic`, as
    /// [`Engine::multihost_heartbeat`] does.
    pub fn multihost_watch(&self) -> Vec<String> {
        let handles: Vec<_> = self.pools().values().cloned().collect();
        let mut panics = Vec::new();
        for handle in handles {
            let now = self.clock.monotonic_ns();
            let mut beat = handle.beat.lock().expect("heartbeat lock poisoned");
            let (Some(targets), Some(since)) = (&beat.targets, beat.last_ok_ns) else {
                continue;
            };
            let limit_ns = targets.interval_ms() * MULTIHOST_FAIL_INTERVALS * 1_000_000;
            let gap_ns = now.saturating_sub(since);
            if gap_ns < limit_ns {
                continue;
            }
            let gap_ms = gap_ns / 1_000_000;
            let why = match beat.in_flight_ns {
                Some(started) => format!(
                    "no multihost heartbeat completed for {gap_ms} ms (one has been written for \
                     {} ms)",
                    now.saturating_sub(started) / 1_000_000
                ),
                None => format!("no multihost heartbeat counted in the last {gap_ms} ms"),
            };
            beat.disarm();
            drop(beat);
            panics.extend(self.multihost_suspend(&handle, why));
        }
        panics
    }

    /// Suspends `handle`'s pool for a heartbeat reason and posts `multihost_suspend`;
    /// returns the reason to stop the process for when the pool's `failmode` is `panic`.
    fn multihost_suspend(&self, handle: &PoolHandle, why: String) -> Option<String> {
        let failmode = {
            let mut inner = handle.lock();
            inner.pool.suspend_for(why.clone());
            crate::slow::pool_prop(&mut inner, "failmode")
        };
        let when = self.clock.now_unix_secs();
        let mut event = events::pool_event(&handle.name, when, "multihost_suspend");
        event.payload.push(("reason".to_string(), why.clone()));
        event
            .payload
            .push(("failmode".to_string(), failmode.clone()));
        self.post(event);
        (failmode == "panic").then(|| format!("pool '{}': {why} (failmode=panic)", handle.name))
    }
}
