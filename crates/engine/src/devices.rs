//! Leaf administration: `offline`, `online` and `clear`. Each is a check phase without side
//! effects, then an apply phase that records the command in the pool history and commits.
//!
//! A leaf is named as in ZFS: by its path, by the last component of its path, or by its GUID
//! in decimal. Offline is refused when the leaf's top-level vdev would then have more unusable
//! leaves than its layout tolerates. A persistent offline is recorded in the labels' vdev tree
//! (the `offline` flag) by marking the config dirty; a temporary one (`-t`) is not, so an
//! import brings the leaf back. Online resilvers what the leaf missed while it was away: a
//! leaf out of service takes no uberblock, so the newest txg in its labels
//! (`Leaf::synced_txg`) bounds what it holds, and copy-on-write means every block born after
//! that txg, and none before, may be missing from it. The leaf is marked resilvering (not
//! read) until that resilver ends, which keeps its vdev as readable as it was while offline.

use std::sync::Arc;

use tarn_base::Txg;
use tarn_vdev::{Leaf, LeafState, TopVdev};

use crate::{Engine, EngineError, Imported, PoolError, scrub};

/// What `online` did beyond bringing the leaf back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OnlineOutcome {
    /// A resilver was started of the blocks born in this txg or later (what the leaf
    /// missed while it was away; txg 0: all of them).
    pub resilver_from: Option<Txg>,
}

pub(crate) fn find_leaf(
    inner: &Imported,
    device: &str,
) -> Result<(Arc<TopVdev>, Arc<Leaf>), EngineError> {
    for top in inner.pool.tops() {
        for leaf in top.leaves() {
            let path = leaf.path();
            let base = path.rsplit('/').next().unwrap_or(&path);
            if path == device
                || (!device.contains('/') && base == device)
                || leaf.guid().0.to_string() == device
            {
                return Ok((Arc::clone(top), leaf));
            }
        }
    }
    Err(EngineError::NoSuchDevice)
}

pub(crate) fn writable(inner: &Imported) -> Result<(), EngineError> {
    if inner.pool.readonly() {
        return Err(PoolError::ReadOnly.into());
    }
    if let Some(why) = inner.pool.suspended() {
        return Err(PoolError::Suspended(why.to_string()).into());
    }
    Ok(())
}

/// Starts the resilver of what `leaves`, back in service, missed while they were away
/// (module doc), for `online` and for `clear` (module `suspend`): a leaf that left during
/// its own resilver is resilvered whole; any other, every block born after the newest txg
/// its labels hold (`Leaf::synced_txg`) when that is older than the last committed txg.
/// Each leaf resilvered is marked resilvering (not read until the resilver ends). Returns
/// the txg the resilver starts from (txg 0: every block), if one started.
pub(crate) fn resilver_missed(inner: &mut Imported, leaves: &[Arc<Leaf>], now: u64) -> Option<Txg> {
    let committed = inner.pool.last_uberblock().map_or(Txg(0), |ub| ub.txg);
    let mut from: Option<Txg> = None;
    for leaf in leaves {
        // Copy-on-write: every block born while it was away, and nothing older.
        let missed = if leaf.is_resilvering() {
            Txg(0)
        } else {
            leaf.synced_txg().next()
        };
        if missed == Txg(0) || missed <= committed {
            leaf.set_resilvering(true);
            from = Some(from.map_or(missed, |f| f.min(missed)));
        }
    }
    match from? {
        Txg(0) => scrub::restart(inner, scrub::ScanFunction::Resilver, now),
        missed => scrub::restart_resilver_from(inner, now, missed),
    }
    assert!(
        leaves.iter().any(|l| l.is_resilvering()),
        "a resilver starts only for a leaf marked resilvering"
    );
    from
}

impl Engine {
    /// `tarn pool offline [-t] POOL DEVICE`: takes a leaf out of service. Refused (nothing
    /// changes) when its top-level vdev would lose more leaves than it tolerates.
    pub fn offline(
        &self,
        name: &str,
        device: &str,
        temporary: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        writable(&inner)?;
        let (top, leaf) = find_leaf(&inner, device)?;
        if leaf.state() == LeafState::Offline {
            return Ok(());
        }
        let children = top.children();
        let lost = children
            .iter()
            .filter(|c| {
                !c.members()
                    .iter()
                    .any(|l| !Arc::ptr_eq(l, &leaf) && l.is_readable())
            })
            .count();
        if lost > top.layout().tolerated(children.len()) {
            return Err(EngineError::NoValidReplicas);
        }
        leaf.set_state(LeafState::Offline);
        if !temporary {
            inner.pool.set_config_dirty();
        }
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        Ok(())
    }

    /// `tarn pool online POOL DEVICE`: returns an offline leaf to service and starts a scrub
    /// (restarting one that runs) to repair the blocks written while it was away.
    pub fn online(
        &self,
        name: &str,
        device: &str,
        command: &str,
    ) -> Result<OnlineOutcome, EngineError> {
        let _admin = self.admin();
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        writable(&inner)?;
        let (_, leaf) = find_leaf(&inner, device)?;
        if leaf.state() == LeafState::Online && leaf.device().is_some() {
            return Ok(OnlineOutcome {
                resilver_from: None,
            });
        }
        if leaf.device().is_none() {
            // Back at its path (a disk reconnected, a file grown again): its label must name
            // this pool and this leaf. It resilvers what it missed since its label's txg.
            let back = self
                .reopen(&inner, &leaf)
                .ok_or(EngineError::DeviceNotPresent)?;
            if let Some(device) = back.device {
                leaf.set_device(Some(device)).map_err(|_| {
                    EngineError::InvalidArgument(format!(
                        "device '{}' is smaller than the pool records it",
                        leaf.path()
                    ))
                })?;
            }
            let committed = inner.pool.last_uberblock().map_or(Txg(0), |ub| ub.txg);
            leaf.set_synced_txg(back.label_txg.min(committed));
        }
        leaf.set_state(LeafState::Online);
        inner.pool.set_config_dirty();
        let now = self.clock.now_unix_secs();
        let outcome = OnlineOutcome {
            resilver_from: resilver_missed(&mut inner, &[leaf], now),
        };
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        if outcome.resilver_from.is_some() {
            let event = crate::events::pool_event(name, now, "resilver_start");
            self.post(event);
        }
        Ok(outcome)
    }

    /// `tarn pool clear POOL [DEVICE]`: resets the error counters of every leaf (and spare),
    /// or of one leaf. A suspended pool is resumed first (devices that answer again are
    /// reopened, the txg that failed is written again and committed: module `suspend`); if
    /// it cannot be, nothing changes and the error names the devices still missing.
    pub fn clear(
        &self,
        name: &str,
        device: Option<&str>,
        command: &str,
    ) -> Result<(), EngineError> {
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        if inner.pool.suspended().is_some() {
            if let Some(device) = device {
                find_leaf(&inner, device)?;
            }
            self.resume(&handle, &mut inner)?;
        }
        let leaves: Vec<Arc<Leaf>> = match device {
            Some(device) => vec![find_leaf(&inner, device)?.1],
            None => {
                let tops = inner.pool.tops().iter().flat_map(|t| t.leaves());
                tops.chain(inner.pool.spares().iter().cloned()).collect()
            }
        };
        for leaf in &leaves {
            leaf.clear();
        }
        self.slow_forget(&leaves);
        if !inner.pool.readonly() {
            inner.history.push(self.history_record(command, false));
        }
        Ok(())
    }
}
