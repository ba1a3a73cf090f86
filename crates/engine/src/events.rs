//! The event log behind `tarn pool events`: a bounded in-memory ring of what happened to the
//! engine's pools, with ZFS's class names.
//!
//! Classes posted: `sysevent.fs.zfs.scrub_start` / `scrub_finish`, `resilver_start` /
//! `resilver_finish`, `vdev_spare` (a hot spare activated), `statechange` (every change of a
//! leaf's state the background check sees: REMOVED, FAULTED, back ONLINE, ...; with
//! `vdev_state` and `vdev_laststate`, whether or not a spare steps in; and every change of a
//! hot spare between AVAIL, INUSE and out of service, with `vdev_spare` = `true`: the fault
//! check, replace, detach and each scan step look), `resume` (`tarn pool clear` resumed a
//! suspended pool; with the txg it committed), `multihost_suspend` (with the reason),
//! `l2arc_rebuild` (one per cache device at import: entries and bytes restored, log blocks
//! read, time, why the walk ended), `ereport.fs.zfs.io_failure` (a pool found suspended by
//! the fault check, once per suspension, with the reason and the failmode),
//! `ereport.fs.zfs.probe_failure` (the fault check found a device gone
//! without an access: `Leaf::probe`), `ereport.fs.zfs.delay` (the slow-device detector),
//! `ereport.fs.zfs.log_replay`, `sysevent.fs.zfs.space_rebuild` (an import found the space
//! log unreadable and rebuilt it from the block tree: why, copies and bytes found in use),
//! `ereport.fs.zfs.io` and `ereport.fs.zfs.checksum`. The last
//! two are derived from the per-leaf counters each time the background thread looks
//! (`Engine::fault_check`): one event per leaf and kind whose counter grew, with the count
//! in the payload, rather than one per failed I/O as ZFS posts them. The ring keeps the
//! newest [`EVENTS_MAX`] events; nothing is persistent (ZFS's ring is not either).

use std::collections::{BTreeMap, VecDeque};

use tarn_base::Guid;
use tarn_base::limits::EVENTS_MAX;
use tarn_vdev::{Leaf, LeafState, LeafStatsSnapshot};

/// One event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Sequence number, increasing from 1 for the life of the engine.
    pub eid: u64,
    /// Unix seconds.
    pub time: u64,
    /// ZFS class name (`ereport.fs.zfs.checksum`, `sysevent.fs.zfs.resilver_start`, ...).
    pub class: String,
    /// Pool name.
    pub pool: String,
    /// GUID of the vdev concerned (0 for pool-wide events).
    pub vdev_guid: u64,
    /// Path of the leaf concerned (empty for pool-wide events).
    pub vdev_path: String,
    /// Further facts, name and value.
    pub payload: Vec<(String, String)>,
}

/// The ring and what the counters were when they were last looked at.
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    ring: VecDeque<Event>,
    next: u64,
    seen: BTreeMap<Guid, LeafStatsSnapshot>,
    states: BTreeMap<Guid, LeafState>,
    /// What each hot spare was last seen as (`spare_state`).
    spare_states: BTreeMap<Guid, &'static str>,
    /// Why each pool was suspended when last looked at (`suspension`).
    suspensions: BTreeMap<String, String>,
}

impl EventLog {
    /// Appends an event, dropping the oldest beyond [`EVENTS_MAX`].
    pub(crate) fn post(&mut self, mut event: Event) {
        self.next += 1;
        event.eid = self.next;
        if self.ring.len() == EVENTS_MAX {
            self.ring.pop_front();
        }
        self.ring.push_back(event);
        assert!(self.ring.len() <= EVENTS_MAX, "the event ring is bounded");
    }

    /// Events with `eid > after`, oldest first.
    pub(crate) fn since(&self, after: u64) -> Vec<Event> {
        self.ring
            .iter()
            .filter(|e| e.eid > after)
            .cloned()
            .collect()
    }

    /// Drops every event (`-c`); sequence numbers keep increasing.
    pub(crate) fn clear(&mut self) {
        self.ring.clear();
    }

    /// Posts `io` and `checksum` ereports for the counters of `leaf` that grew since the
    /// last look.
    pub(crate) fn counters(&mut self, pool: &str, leaf: &Leaf, time: u64) {
        let now = leaf.stats().snapshot();
        let before = self.seen.insert(leaf.guid(), now).unwrap_or_default();
        let io = (now.read_errors + now.write_errors)
            .saturating_sub(before.read_errors + before.write_errors);
        let checksum = now.checksum_errors.saturating_sub(before.checksum_errors);
        for (class, count) in [("io", io), ("checksum", checksum)] {
            if count > 0 {
                let payload = vec![("count".to_string(), count.to_string())];
                self.post(leaf_event(
                    pool,
                    leaf,
                    time,
                    &format!("ereport.fs.zfs.{class}"),
                    payload,
                ));
            }
        }
    }
}

impl EventLog {
    /// Posts a `statechange` for `leaf` when its state differs from the one last seen,
    /// with `vdev_state`, `vdev_laststate` and the `extra` facts (why). At the first look a
    /// leaf ONLINE or OFFLINE (the admin's persisted choice) is only recorded; one found
    /// out of service is posted, as having been ONLINE if it has a device (it was opened
    /// at import, so something happened to it since).
    pub(crate) fn state(
        &mut self,
        pool: &str,
        leaf: &Leaf,
        time: u64,
        extra: Vec<(String, String)>,
    ) {
        let now = leaf.state();
        let before = self.states.insert(leaf.guid(), now);
        let last = match before {
            Some(last) if last == now => return,
            Some(last) => Some(last),
            None if matches!(now, LeafState::Online | LeafState::Offline) => return,
            None => leaf.device().map(|_| LeafState::Online),
        };
        let mut payload = vec![("vdev_state".to_string(), now.name().to_string())];
        if let Some(last) = last {
            payload.push(("vdev_laststate".to_string(), last.name().to_string()));
        }
        payload.extend(extra);
        let class = "sysevent.fs.zfs.statechange";
        self.post(leaf_event(pool, leaf, time, class, payload));
    }
}

impl EventLog {
    /// Posts a `statechange` for hot spare `leaf` when what `status` shows for it changed:
    /// INUSE while it stands in for a leaf (`in_use`), AVAIL when it could, else its leaf
    /// state (REMOVED, UNAVAIL...). The first look only records it; a spare is posted with
    /// `vdev_spare` = `true` beside `vdev_state` and `vdev_laststate`.
    pub(crate) fn spare_state(&mut self, pool: &str, leaf: &Leaf, in_use: bool, time: u64) {
        let now = if in_use {
            "INUSE"
        } else if leaf.is_usable() {
            "AVAIL"
        } else {
            leaf.state().name()
        };
        let Some(last) = self.spare_states.insert(leaf.guid(), now) else {
            return;
        };
        if last == now {
            return;
        }
        let payload = vec![
            ("vdev_state".to_string(), now.to_string()),
            ("vdev_laststate".to_string(), last.to_string()),
            ("vdev_spare".to_string(), "true".to_string()),
        ];
        let class = "sysevent.fs.zfs.statechange";
        self.post(leaf_event(pool, leaf, time, class, payload));
    }
}

impl EventLog {
    /// Posts `ereport.fs.zfs.io_failure` (ZFS's event for a pool it suspends) once per
    /// suspension of `pool`, with the reason and the failmode; `why` is `None` while the
    /// pool is not suspended.
    pub(crate) fn suspension(&mut self, pool: &str, why: Option<&str>, failmode: &str, time: u64) {
        let Some(why) = why else {
            self.suspensions.remove(pool);
            return;
        };
        if self.suspensions.get(pool).is_some_and(|seen| seen == why) {
            return;
        }
        self.suspensions.insert(pool.to_string(), why.to_string());
        let mut event = pool_event(pool, time, "io_failure");
        event.class = "ereport.fs.zfs.io_failure".to_string();
        event.payload = vec![
            ("reason".to_string(), why.to_string()),
            ("failmode".to_string(), failmode.to_string()),
        ];
        self.post(event);
    }
}

/// An event about one leaf.
pub(crate) fn leaf_event(
    pool: &str,
    leaf: &Leaf,
    time: u64,
    class: &str,
    payload: Vec<(String, String)>,
) -> Event {
    Event {
        eid: 0,
        time,
        class: class.to_string(),
        pool: pool.to_string(),
        vdev_guid: leaf.guid().0,
        vdev_path: leaf.path(),
        payload,
    }
}

/// A pool-wide event (`sysevent.fs.zfs.<what>`).
pub(crate) fn pool_event(pool: &str, time: u64, what: &str) -> Event {
    Event {
        eid: 0,
        time,
        class: format!("sysevent.fs.zfs.{what}"),
        pool: pool.to_string(),
        vdev_guid: 0,
        vdev_path: String::new(),
        payload: Vec::new(),
    }
}

/// `sysevent.fs.zfs.l2arc_rebuild`: what the import's rebuild of one cache device's
/// persistent index restored (entries, bytes, log blocks read), how long it took, and why
/// the walk of its log blocks ended.
pub(crate) fn l2_rebuild_event(pool: &str, time: u64, report: &tarn_vdev::L2Rebuild) -> Event {
    Event {
        vdev_guid: report.device.0,
        vdev_path: report.path.clone(),
        payload: vec![
            ("l2_rebuild_entries".into(), report.entries.to_string()),
            ("l2_rebuild_bytes".into(), report.bytes.to_string()),
            (
                "l2_rebuild_log_blocks".into(),
                report.log_blocks.to_string(),
            ),
            (
                "l2_rebuild_time_ms".into(),
                (report.time_ns / 1_000_000).to_string(),
            ),
            ("l2_rebuild_stopped".into(), report.stopped.clone()),
        ],
        ..pool_event(pool, time, "l2arc_rebuild")
    }
}

/// What an import's rebuild of an unreadable space log found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SpaceRebuild {
    /// Why the space log could not be read.
    pub(crate) why: String,
    /// Copies (DVAs) of blocks found in use.
    pub(crate) blocks: u64,
    /// Their allocated bytes.
    pub(crate) bytes: u64,
}

/// `sysevent.fs.zfs.space_rebuild`: the import rebuilt the allocation state from the block
/// tree.
pub(crate) fn space_rebuild_event(pool: &str, time: u64, rebuilt: &SpaceRebuild) -> Event {
    Event {
        payload: vec![
            ("space_log_error".into(), rebuilt.why.clone()),
            ("space_rebuild_blocks".into(), rebuilt.blocks.to_string()),
            ("space_rebuild_bytes".into(), rebuilt.bytes.to_string()),
        ],
        ..pool_event(pool, time, "space_rebuild")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Goal: the ring keeps the newest EVENTS_MAX events with increasing ids, and clear keeps
    /// the numbering.
    #[test]
    fn ring_is_bounded_and_numbered() {
        let mut log = EventLog::default();
        for i in 0..EVENTS_MAX + 5 {
            log.post(pool_event("tank", i as u64, "scrub_start"));
        }
        let all = log.since(0);
        assert_eq!(all.len(), EVENTS_MAX);
        assert_eq!(all[0].eid, 6);
        assert_eq!(all.last().unwrap().eid, (EVENTS_MAX + 5) as u64);
        assert_eq!(log.since((EVENTS_MAX + 3) as u64).len(), 2);
        log.clear();
        log.post(pool_event("tank", 0, "scrub_finish"));
        assert_eq!(log.since(0)[0].eid, (EVENTS_MAX + 6) as u64);
    }
}
