//! The engine's side of multihost protection: the `multihost` pool property turns the
//! heartbeat on, [`Engine::multihost_heartbeat`] writes one heartbeat per pool (the daemon
//! calls it every interval), and a pool whose heartbeat missed its quorum for
//! `MULTIHOST_FAIL_INTERVALS` intervals is suspended. The heartbeat record, the quorum rule
//! and the import-time activity check are `tarn_pool::multihost`.
//!
//! Known weakness: a heartbeat is written and flushed synchronously, leaf by leaf, and a host
//! that finds its last attempt `MULTIHOST_FAIL_INTERVALS` intervals ago suspends instead of
//! writing; but while one attempt hangs (a flush stuck behind minutes of queued writes) this
//! host cannot suspend, and an importer watching for 20 intervals could conclude it is gone.
//! ZFS issues its heartbeat writes asynchronously and scales the importer's wait by the
//! observed write delay; both are left to do.
//!
//! Lock order: the heartbeat takes the pool lock only with `try_lock`, to refresh its targets
//! (a txg sync in progress keeps the previous ones), then the handle's heartbeat state; it
//! takes the pool lock for real only to suspend, after dropping the heartbeat state.

use std::sync::TryLockError;

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
    /// Monotonic time of the last heartbeat tried, counted or not.
    last_try_ns: Option<u64>,
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
    /// host may have concluded that this one is gone.
    pub fn multihost_heartbeat(&self) {
        let handles: Vec<_> = self.pools().values().cloned().collect();
        for handle in handles {
            self.heartbeat_one(&handle);
        }
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

    fn heartbeat_one(&self, handle: &PoolHandle) {
        let fresh = match handle.inner.try_lock() {
            Ok(inner) => Some(inner.pool.heartbeat_targets()),
            Err(TryLockError::WouldBlock) => None,
            Err(TryLockError::Poisoned(_)) => {
                panic!("pool lock poisoned by a failed invariant")
            }
        };
        let now = self.clock.monotonic_ns();
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
        let Some(targets) = beat.targets.clone() else {
            return;
        };
        let limit_ns = targets.interval_ms() * MULTIHOST_FAIL_INTERVALS * 1_000_000;
        let since = beat.last_ok_ns.unwrap_or(now);
        let gap_ms = now.saturating_sub(since) / 1_000_000;
        let stalled = beat
            .last_try_ns
            .is_some_and(|tried| now.saturating_sub(tried) >= limit_ns);
        // A host that stalled (paused VM, stopped process) past the limit writes nothing more:
        // another host may have watched the silence and imported the pool meanwhile.
        let why = if stalled {
            format!("no multihost heartbeat was written for {gap_ms} ms (this host stalled)")
        } else {
            beat.sequence += 1;
            let time_ms = u64::try_from(self.clock.now_unix_nanos() / 1_000_000).unwrap_or(0);
            let written = write_heartbeat(&targets, beat.sequence, time_ms);
            // Measured from the end of the attempt: a slow flush is not a stall.
            beat.last_try_ns = Some(self.clock.monotonic_ns());
            match written {
                Ok(()) => {
                    beat.last_ok_ns = Some(now);
                    return;
                }
                Err(_) if now.saturating_sub(since) < limit_ns => return,
                Err(miss) => {
                    format!("the multihost heartbeat could not be written for {gap_ms} ms ({miss})")
                }
            }
        };
        beat.targets = None;
        beat.last_ok_ns = None;
        beat.last_try_ns = None;
        drop(beat);
        handle.lock().pool.suspend_for(why);
        let when = self.clock.now_unix_secs();
        self.post(events::pool_event(&handle.name, when, "multihost_suspend"));
    }
}
