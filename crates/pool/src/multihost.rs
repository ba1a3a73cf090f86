//! Multihost protection (ZFS's MMP, in tarn's own shape): the heartbeat an owner writes and
//! the activity check an importer runs.
//!
//! # Model
//! ```text
//!  owner (multihost=on)                         importer (another host id)
//!  every interval:                              labels say active, newest uberblock has
//!    heartbeat n+1 -> slot (n+1) % 2 of every     mmp_interval_ms > 0 and another hostid:
//!    usable leaf, flush                            observe every leaf's heartbeat slots
//!    counts when, in every top-level vdev,         sleep one period (Clock), observe again,
//!    at least half its usable leaves took it       ... for MULTIHOST_IMPORT_INTERVALS periods
//!  no counted heartbeat for                       any slot changed: refuse (in use by host X)
//!    MULTIHOST_FAIL_INTERVALS: suspend            nothing changed: the owner is gone; import
//! ```
//! The record is [`tarn_format::heartbeat::Heartbeat`] (docs/FORMAT.md section 17). Uberblocks
//! committed while multihost is on carry the interval (`mmp_interval_ms`), which is how an
//! importer knows to look. How long it looks scales with what the owner's heartbeats record
//! ([`activity_check_plan`]): a period is the longest recorded interval or gap between two
//! counted heartbeats (late heartbeats mean a longer watch), and the number of periods
//! exceeds the owner's recorded fail count by two at least.
//!
//! # Invariants
//! - M1: an owner that has gone `MULTIHOST_FAIL_INTERVALS` intervals without a counted
//!   heartbeat (counted from the start of its write; the engine watches the deadline from
//!   a thread that never writes, so a hanging write cannot hide it) writes nothing more
//!   (its pool is suspended), and an importer watches for
//!   `MULTIHOST_IMPORT_INTERVALS` > `MULTIHOST_FAIL_INTERVALS + 1` intervals: so when the
//!   importer sees no change, the owner has stopped writing for good.
//! - M2: the activity check writes nothing (it opens devices read-only).
//! - M3: one failed leaf never costs the quorum of a vdev with two or more usable leaves.
//!
//! # Failure model
//! A heartbeat write or flush that fails on a leaf only lowers that vdev's count. Torn
//! heartbeats fail their checksum and read as absent; the other slot still holds the one
//! before. Clocks of different hosts are never compared: only change is.
//!
//! # Not here
//! The timer that calls the heartbeat (the daemon), the `multihost` property (the engine).

use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_base::limits::{
    MULTIHOST_FAIL_INTERVALS, MULTIHOST_FAIL_INTERVALS_MAX, MULTIHOST_IMPORT_INTERVALS,
    MULTIHOST_INTERVAL_MS_MAX, MULTIHOST_INTERVAL_MS_MIN,
};
use tarn_base::{Clock, Guid, Txg};
use tarn_device::Device;
use tarn_format::heartbeat::{
    HEARTBEAT_SLOTS, Heartbeat, heartbeat_slot_offset, heartbeat_slot_size,
};
use tarn_format::label::PoolState;
use tarn_vdev::Leaf;

use crate::{DeviceProvider, Discovered, HostIdentity, Pool, PoolError};

/// What a heartbeat is written to, taken from the pool under its lock so that the writes
/// themselves need no lock (a long txg sync must not delay the heartbeat).
#[derive(Clone, Debug)]
pub struct HeartbeatTargets {
    pool_guid: Guid,
    hostid: u64,
    ashift: u8,
    interval_ms: u64,
    txg: Txg,
    /// Per top-level vdev: its leaves (their state is read when the heartbeat is written).
    tops: Vec<Vec<Arc<Leaf>>>,
}

impl HeartbeatTargets {
    /// The heartbeat interval these targets were taken with.
    #[must_use]
    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }
}

/// Why a heartbeat did not count.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("top-level vdev {top}: {written} of {usable} usable devices took the heartbeat")]
pub struct HeartbeatMiss {
    /// Index of the first top-level vdev that missed its quorum.
    pub top: usize,
    /// Leaves of it that took the heartbeat.
    pub written: usize,
    /// Leaves of it that were usable.
    pub usable: usize,
}

impl Pool {
    /// Turns multihost on with `interval_ms` between heartbeats, or off with 0. Uberblocks
    /// committed from now on carry the interval.
    pub fn set_multihost_interval(&mut self, interval_ms: u64) {
        assert!(
            interval_ms == 0
                || (MULTIHOST_INTERVAL_MS_MIN..=MULTIHOST_INTERVAL_MS_MAX).contains(&interval_ms),
            "multihost interval {interval_ms} ms out of bounds"
        );
        self.multihost_interval_ms = interval_ms;
    }

    /// The heartbeat interval, 0 when multihost is off.
    #[must_use]
    pub fn multihost_interval_ms(&self) -> u64 {
        self.multihost_interval_ms
    }

    /// Where the next heartbeat goes; `None` when multihost is off, the pool is read-only or
    /// suspended.
    #[must_use]
    pub fn heartbeat_targets(&self) -> Option<HeartbeatTargets> {
        if self.multihost_interval_ms == 0 || self.readonly || self.suspended.is_some() {
            return None;
        }
        Some(HeartbeatTargets {
            pool_guid: self.guid,
            hostid: self.identity.hostid,
            ashift: self.ashift,
            interval_ms: self.multihost_interval_ms,
            txg: self.txg,
            // A distributed spare has no label area to carry a heartbeat.
            tops: self
                .tops
                .iter()
                .map(|t| {
                    let leaves = t.leaves().into_iter();
                    leaves.filter(|l| !l.is_distributed_spare()).collect()
                })
                .collect(),
        })
    }

    /// Suspends the pool for a reason found outside a sync (a heartbeat that could not be
    /// written for too long). Nothing more is written until a re-import (I5); `clear`
    /// refuses to resume it.
    pub fn suspend_for(&mut self, why: String) {
        if self.suspended.is_none() {
            self.suspended = Some(why);
            // Another host may have imported the pool since: writing again from here could
            // corrupt it, so `clear` refuses (ZFS also wants an export and import here).
            self.retry = crate::resume::Retry::Never(
                "the multihost heartbeat stopped, so another host may have imported the pool; \
                 export it with 'tarn pool export -f' and import it again"
                    .into(),
            );
        }
    }
}

/// Writes heartbeat `sequence` to every usable leaf and flushes each. It counts when every
/// top-level vdev had at least half of its usable leaves (and at least one) take it.
/// `gap_ms` is the time since the start of the previous counted heartbeat, recorded for
/// importers ([`activity_check_plan`]).
pub fn write_heartbeat(
    targets: &HeartbeatTargets,
    sequence: u64,
    time_ms: u64,
    gap_ms: u64,
) -> Result<(), HeartbeatMiss> {
    let beat = Heartbeat {
        pool_guid: targets.pool_guid,
        hostid: targets.hostid,
        sequence,
        interval_ms: targets.interval_ms,
        txg: targets.txg,
        time_ms,
        fail_intervals: MULTIHOST_FAIL_INTERVALS,
        gap_ms,
    };
    let mut slot = beat.encode();
    slot.resize(heartbeat_slot_size(targets.ashift) as usize, 0);
    let offset = heartbeat_slot_offset(sequence);
    let mut miss = None;
    for (top, leaves) in targets.tops.iter().enumerate() {
        let devices: Vec<Arc<dyn Device>> =
            leaves.iter().filter_map(|l| l.usable_device()).collect();
        let written = devices
            .iter()
            .filter(|d| d.write_at(offset, &slot).is_ok() && d.flush().is_ok())
            .count();
        let usable = devices.len();
        if (written == 0 || written < usable.div_ceil(2)) && miss.is_none() {
            miss = Some(HeartbeatMiss {
                top,
                written,
                usable,
            });
        }
    }
    miss.map_or(Ok(()), Err)
}

/// The heartbeats on one device, by slot (`None`: blank, torn or another pool's).
#[must_use]
pub fn read_heartbeats(device: &dyn Device, pool_guid: Guid) -> Vec<Option<Heartbeat>> {
    (0..HEARTBEAT_SLOTS)
        .map(|slot| {
            let mut buf = vec![0u8; 4096];
            device.read_at(heartbeat_slot_offset(slot), &mut buf).ok()?;
            Heartbeat::decode(&buf)
                .ok()
                .filter(|beat| beat.pool_guid == pool_guid)
        })
        .collect()
}

/// Every heartbeat slot of every device of a discovered pool, by path.
type Observation = BTreeMap<String, Vec<Option<Heartbeat>>>;

fn observe(found: &Discovered, provider: &dyn DeviceProvider) -> Observation {
    found
        .found
        .values()
        .filter_map(|path| {
            let device = provider.open(path, true).ok()?;
            Some((
                path.clone(),
                read_heartbeats(device.as_ref(), found.config.pool_guid),
            ))
        })
        .collect()
}

/// The first heartbeat in `now` that is not in `before` (a write since).
fn changed(before: &Observation, now: &Observation) -> Option<Heartbeat> {
    now.iter().find_map(|(path, slots)| {
        let old = before.get(path);
        slots.iter().enumerate().find_map(|(i, beat)| {
            let was = old.and_then(|o| o.get(i)).copied().flatten();
            beat.filter(|b| Some(*b) != was)
        })
    })
}

/// Whether importing `found` needs the activity check, and the interval to watch with: the
/// labels say it is active, its newest uberblock was written with multihost on, and by
/// another host.
#[must_use]
pub fn activity_check_interval(found: &Discovered, identity: &HostIdentity) -> Option<u64> {
    if found.config.state != PoolState::Active {
        return None;
    }
    let ub = found.newest_uberblock(None)?;
    if ub.mmp_interval_ms == 0 || ub.hostid == identity.hostid {
        return None;
    }
    Some(
        ub.mmp_interval_ms
            .clamp(MULTIHOST_INTERVAL_MS_MIN, MULTIHOST_INTERVAL_MS_MAX),
    )
}

/// How long an importer watches, as (periods, period in ms), from what the owner's
/// heartbeats `beats` record (every valid one on every leaf at the first look) and the
/// uberblock's `interval_ms`. The period is the longest of the recorded intervals and gaps:
/// an owner whose heartbeats land late (slow devices, a loaded host) is watched for
/// proportionally longer, as ZFS's import waits `(mmp_interval + ub_mmp_delay)` per
/// interval. The count is [`MULTIHOST_IMPORT_INTERVALS`], or two more than the owner's
/// recorded fail intervals when that is larger, so the owner has stopped writing for good
/// when the watch ends (M1). Values out of bounds are clamped; unrecorded ones (0, older
/// writers) fall back to the uberblock's interval and this build's constants.
#[must_use]
pub fn activity_check_plan(interval_ms: u64, beats: &[Heartbeat]) -> (u64, u64) {
    let bounded = |ms: u64| ms.clamp(MULTIHOST_INTERVAL_MS_MIN, MULTIHOST_INTERVAL_MS_MAX);
    let recorded = beats
        .iter()
        .flat_map(|b| [b.interval_ms, b.gap_ms])
        .filter(|ms| *ms > 0)
        .map(bounded);
    let period_ms = recorded.fold(bounded(interval_ms), u64::max);
    let fail = beats
        .iter()
        .map(|b| b.fail_intervals.min(MULTIHOST_FAIL_INTERVALS_MAX))
        .fold(MULTIHOST_FAIL_INTERVALS, u64::max);
    let intervals = MULTIHOST_IMPORT_INTERVALS.max(fail + 2);
    assert!(
        intervals > fail + 1,
        "M1: the importer watches longer than the owner may go without a heartbeat"
    );
    (intervals, period_ms)
}

/// The importer's side: watches the heartbeats of `found` for the periods
/// [`activity_check_plan`] gives (sleeping through `clock`) and refuses when one changes.
/// Writes nothing (M2). Returns at once when no check is needed.
pub fn activity_check(
    found: &Discovered,
    provider: &dyn DeviceProvider,
    identity: &HostIdentity,
    clock: &dyn Clock,
) -> Result<(), PoolError> {
    let Some(interval_ms) = activity_check_interval(found, identity) else {
        return Ok(());
    };
    let first = observe(found, provider);
    let beats: Vec<Heartbeat> = first.values().flatten().flatten().copied().collect();
    let (intervals, period_ms) = activity_check_plan(interval_ms, &beats);
    for _ in 0..intervals {
        clock.sleep_ns(period_ms * 1_000_000);
        if let Some(beat) = changed(&first, &observe(found, provider)) {
            return Err(PoolError::InUseByHost {
                hostid: beat.hostid,
            });
        }
    }
    Ok(())
}
