//! Replace, attach, detach, hot spares and the end of a resilver.
//!
//! ```text
//!  replace POOL OLD [NEW]   OLD ──► replacing-N { OLD, NEW (resilvering) } ─ resilver ─► NEW
//!  attach POOL DEV NEW      disk DEV ──► mirror { DEV, NEW (resilvering) }, or one more side
//!  detach POOL DEV          drop a mirror side or a member of a replacing / spare node
//!  fault + AVAIL spare      OLD ──► spare-N { OLD, SPARE (resilvering) } ─ resilver ─► stays
//!  replace of OLD in spare  spare-N ──► replacing-N { SPARE, NEW } ─► NEW; SPARE AVAIL again
//!  dRAID child fails        OLD ──► spare-N { OLD, draid2-0-0 } ─ sequential rebuild, scrub
//!  replace POOL OLD draid2-0-0   the same by hand
//! ```
//! A dRAID vdev's own distributed spares (`TopVdev::distributed_spares`) are taken before the
//! pool's traditional ones, and its spare activations rebuild sequentially when every vdev
//! being resilvered can.
//! Every verb checks everything first (the device opens, carries no pool's label, is large
//! enough, is not the device it replaces), and only then changes the tree, marks the config
//! dirty (the labels of the next txg carry the new tree, with the `resilvering` flag on the
//! new leaf) and restarts the scan as a resilver, committed in the same txg. Because the new
//! leaf is a member of the tree from that moment, every block written later reaches it; the
//! resilver covers the blocks committed before (`scrub`, function resilver). A pool imported
//! with a leaf still marked resilvering but no resilver recorded (a crash between the label
//! and MOS updates cannot do that, as both are in one txg, but an old scan record could) gets
//! a resilver started at import.
//!
//! Leaves are faulted here, not in the vdev layer: a leaf whose device reported itself gone
//! is already REMOVED (tarn-vdev), one with `io_n` (pool property, default
//! [`IO_ERRORS_FAULT`]) read or write errors within `io_t` seconds (default 600, as ZFS's
//! ZED) is FAULTED when its vdev can spare it, and so is
//! one slow for `slow_io_period` (slow.rs). [`fault_check`] then puts an AVAIL spare beside
//! every leaf out of service (not one the admin took offline) and starts a resilver; with
//! `autoreplace=on` a fresh device at the missing leaf's path replaces it in place first.

use std::sync::Arc;

use tarn_base::{Guid, Txg, format_size};
use tarn_format::label::{PoolState, data_area};
use tarn_pool::{PoolError, read_labels};
use tarn_vdev::{ChildKind, Leaf, LeafState, TopVdev, VdevError};

use crate::events::{leaf_event, pool_event};
use crate::scrub::{self, ScanFunction};
use crate::{Engine, EngineError, Imported, devices};

/// Default of the pool property `io_n`: read plus write errors after which an online leaf is
/// faulted (when its vdev tolerates it).
pub const IO_ERRORS_FAULT: u64 = 10;

/// Bound on draws for a fresh GUID (a collision is already a 1 in 2^64 event per draw
/// unless generators share seeds).
const GUID_DRAWS_MAX: usize = 64;

/// A device opened for use as a new leaf, checked but not yet part of the pool.
struct NewDevice {
    leaf: Arc<Leaf>,
}

/// How `replace` may take a device: `-s` (sequential rebuild) and `-f`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplaceOptions {
    /// Sequential resilver (mirrors only), then a verifying scrub.
    pub sequential: bool,
    /// Take a device carrying the label of a pool that is not imported here.
    pub force: bool,
}

/// Which labelled devices a new leaf may be made of (beside blank or destroyed ones).
#[derive(Clone, Copy, Debug, Default)]
struct Claim {
    /// The leaf being replaced: its own device, come back, may take its place.
    replacing: Option<Guid>,
    /// `-f`: the label of any pool not imported here.
    force: bool,
}

impl Engine {
    /// Whether a device labelled with `config` may become a new leaf of `inner` under
    /// `claim`: the replaced leaf itself, or with `-f` a device of a pool not imported here.
    fn may_claim(
        &self,
        inner: &Imported,
        config: &tarn_format::label::PoolConfig,
        claim: Claim,
    ) -> bool {
        let own = config.pool_guid == inner.pool.guid();
        if own && claim.replacing == Some(config.this_guid) {
            return true;
        }
        let imported = own || self.pools().values().any(|h| h.guid == config.pool_guid);
        claim.force && !imported
    }

    /// A GUID no node of the pool's tree has. Engines of one host may share a seed (tests
    /// do), so a draw can repeat one the pool got from another engine: draw again then.
    fn next_guid(&self, inner: &Imported) -> Guid {
        let tree = inner.pool.vdev_tree();
        let mut rng = self.rng.lock().expect("rng lock poisoned");
        for _ in 0..GUID_DRAWS_MAX {
            let guid = rng.guid();
            if tree.find(guid).is_none() && guid != inner.pool.guid() {
                return guid;
            }
        }
        panic!("{GUID_DRAWS_MAX} GUID draws all collided: the generator is broken");
    }

    /// Opens `path` for a new leaf of at least `needed` bytes: it must exist, carry no label
    /// of a live pool, not be a leaf of this pool already and be large enough.
    fn open_new_device(
        &self,
        inner: &Imported,
        path: &str,
        needed: u64,
        claim: Claim,
    ) -> Result<NewDevice, EngineError> {
        let in_pool = inner
            .pool
            .tops()
            .iter()
            .flat_map(|t| t.leaves())
            .chain(inner.pool.spares().iter().cloned())
            .any(|leaf| leaf.path() == path && leaf.device().is_some());
        if in_pool {
            return Err(EngineError::DeviceInUse(path.to_string()));
        }
        let device = self
            .provider
            .open(path, false)
            .map_err(|source| PoolError::DeviceOpen {
                path: path.to_string(),
                source,
            })?;
        if let Some(config) = read_labels(device.as_ref()).config
            && config.state != PoolState::Destroyed
            && !self.may_claim(inner, &config, claim)
        {
            return Err(PoolError::DeviceInUse {
                path: path.to_string(),
                pool: config.name,
                state: config.state.name().to_string(),
            }
            .into());
        }
        let size = device.size_bytes();
        let area = data_area(size).map_or(0, |(start, end)| end - start);
        if area < needed {
            return Err(EngineError::DeviceTooSmall {
                path: path.to_string(),
                size: format_size(size),
                needed: format_size(needed + (size - area)),
            });
        }
        let leaf = Leaf::new(self.next_guid(inner), device).map_err(vdev_error)?;
        leaf.set_clock(Arc::clone(&self.clock));
        Ok(NewDevice {
            leaf: Arc::new(leaf),
        })
    }

    /// `tarn pool replace POOL OLD [NEW]`: puts NEW (or a new device at OLD's path) beside
    /// OLD under a replacing node and starts a resilver; OLD leaves when it finishes.
    pub fn replace(
        &self,
        name: &str,
        old: &str,
        new: Option<&str>,
        command: &str,
    ) -> Result<(), EngineError> {
        self.replace_with(name, old, new, ReplaceOptions::default(), command)
    }

    /// `tarn pool replace -s POOL OLD [NEW]`: as [`Engine::replace`], but NEW is filled by a
    /// sequential resilver (the allocated ranges copied in address order, see `rebuild`)
    /// followed by a verifying scrub. Refused for raidz.
    pub fn replace_sequential(
        &self,
        name: &str,
        old: &str,
        new: Option<&str>,
        command: &str,
    ) -> Result<(), EngineError> {
        let options = ReplaceOptions {
            sequential: true,
            force: false,
        };
        self.replace_with(name, old, new, options, command)
    }

    /// `tarn pool replace [-s] [-f] POOL OLD [NEW]`. Without NEW the device at OLD's path
    /// takes its place: a new disk, or OLD itself back (its label names this pool and this
    /// very leaf, as after a device was truncated and grown again), rebuilt in full. `-f`
    /// takes a device that carries the label of a pool not imported here.
    pub fn replace_with(
        &self,
        name: &str,
        old: &str,
        new: Option<&str>,
        options: ReplaceOptions,
        command: &str,
    ) -> Result<(), EngineError> {
        let sequential = options.sequential;
        let _admin = self.admin();
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        devices::writable(&inner)?;
        let (top, leaf) = devices::find_leaf(&inner, old)?;
        if sequential {
            crate::rebuild::check_layout(&top)?;
        }
        if leaf.is_distributed_spare()
            || inner.pool.spares().iter().any(|s| s.guid() == leaf.guid())
        {
            return Err(EngineError::InvalidArgument(
                "a hot spare in use is replaced by replacing the device it stands in for".into(),
            ));
        }
        if let Some(spare) = new.and_then(|n| distributed_spare(&top, n)) {
            return self.replace_with_distributed(name, &mut inner, &top, &leaf, spare, command);
        }
        let path = new.map_or_else(|| leaf.path(), str::to_string);
        if new.is_some_and(|n| n == old || n == leaf.path()) {
            return Err(EngineError::SameDevice);
        }
        check_replaceable(&top, leaf.guid())?;
        let claim = Claim {
            replacing: Some(leaf.guid()),
            force: options.force,
        };
        let fresh = self.open_new_device(&inner, &path, leaf.asize(), claim)?;
        let node = self.next_guid(&inner);
        let name = name.to_string();
        let dropped = top
            .begin_replace(leaf.guid(), fresh.leaf, ChildKind::Replacing, node)
            .map_err(vdev_error)?;
        assert!(
            dropped.iter().all(|l| l.guid() == leaf.guid()),
            "only the replaced leaf leaves the tree"
        );
        self.start_resilver(&name, &mut inner, sequential, command)
    }

    /// `tarn pool attach POOL DEVICE NEW`: mirrors DEVICE onto NEW (a disk vdev becomes a
    /// mirror) and resilvers NEW.
    pub fn attach(
        &self,
        name: &str,
        device: &str,
        new: &str,
        command: &str,
    ) -> Result<(), EngineError> {
        let _admin = self.admin();
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        devices::writable(&inner)?;
        let (top, leaf) = devices::find_leaf(&inner, device)?;
        if matches!(top.layout(), tarn_vdev::Layout::Raidz { .. }) {
            return Err(EngineError::InvalidArgument(
                "can only attach to mirrors and top-level disks".into(),
            ));
        }
        if new == device || new == leaf.path() {
            return Err(EngineError::SameDevice);
        }
        let fresh =
            self.open_new_device(&inner, new, leaf.asize().min(top.asize()), Claim::default())?;
        let mirror = self.next_guid(&inner);
        top.attach(leaf.guid(), fresh.leaf, mirror)
            .map_err(vdev_error)?;
        self.start_resilver(name, &mut inner, false, command)
    }

    /// `tarn pool detach POOL DEVICE`: removes a mirror side or a member of a replacing or
    /// spare node. Refused when no readable copy would remain.
    pub fn detach(&self, name: &str, device: &str, command: &str) -> Result<(), EngineError> {
        let _admin = self.admin();
        let handle = self.pool(name)?;
        let mut inner = handle.lock();
        devices::writable(&inner)?;
        let (top, leaf) = devices::find_leaf(&inner, device)?;
        let removed = top.detach(leaf.guid()).map_err(vdev_error)?;
        assert_eq!(removed.guid(), leaf.guid(), "detach removed the named leaf");
        // A spare left alone in a position is now a permanent member of the vdev.
        let spares: Vec<Guid> = inner.pool.spares().iter().map(|s| s.guid()).collect();
        for spare in spares {
            let plain = top
                .children()
                .iter()
                .any(|c| c.kind() == ChildKind::Leaf && c.guid() == spare);
            if plain {
                inner.pool.remove_spare(spare);
            }
        }
        release(&inner, &[removed]);
        inner.pool.set_config_dirty();
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        self.spare_states(name, &inner);
        Ok(())
    }

    fn start_resilver(
        &self,
        name: &str,
        inner: &mut Imported,
        sequential: bool,
        command: &str,
    ) -> Result<(), EngineError> {
        inner.pool.set_config_dirty();
        let now = self.clock.now_unix_secs();
        scrub::restart(inner, ScanFunction::Resilver, now);
        if let Some(progress) = &mut inner.scan.progress {
            progress.sequential = sequential;
        }
        scrub::persist(inner)?;
        self.post(pool_event(name, now, "resilver_start"));
        inner.history.push(self.history_record(command, false));
        inner.sync()?;
        self.spare_states(name, inner);
        Ok(())
    }

    /// Looks for leaves out of service in every pool and puts spares beside them (module
    /// doc). Returns the pools where a resilver was started. The daemon calls this from its
    /// background thread; tests call it directly.
    pub fn fault_check(&self) -> Vec<String> {
        // The admin lock first (the lock order): holding pool handles while waiting for it
        // would make an export that holds it find its pool busy.
        let _admin = self.admin();
        let handles: Vec<_> = self.pools().values().cloned().collect();
        let mut started = Vec::new();
        for handle in handles {
            let mut inner = handle.lock();
            self.post_suspension(&handle.name, &mut inner);
            if inner.pool.readonly() || inner.pool.suspended().is_some() {
                continue;
            }
            if self.fault_check_pool(&handle.name, &mut inner) {
                started.push(handle.name.clone());
            }
        }
        started
    }

    /// Posts the state changes of the pool's hot spares (AVAIL, INUSE, ...) since the
    /// last look (`EventLog::spare_state`).
    pub(crate) fn spare_states(&self, name: &str, inner: &Imported) {
        let now = self.clock.now_unix_secs();
        let mut log = self.events.lock().expect("event lock poisoned");
        for spare in inner.pool.spares() {
            let in_use = inner.pool.spare_in_use(spare.guid());
            log.spare_state(name, spare, in_use, now);
        }
        for top in inner.pool.tops() {
            for spare in top.distributed_spares() {
                let in_use = top.distributed_spare_in_use(spare.guid());
                log.spare_state(name, spare, in_use, now);
            }
        }
    }

    fn fault_check_pool(&self, name: &str, inner: &mut Imported) -> bool {
        let now = self.clock.now_unix_secs();
        self.spare_states(name, inner);
        {
            let mut log = self.events.lock().expect("event lock poisoned");
            for leaf in inner.pool.tops().iter().flat_map(|t| t.leaves()) {
                log.counters(name, &leaf, now);
            }
        }
        self.probe_leaves(name, inner, now);
        self.slow_check(name, inner);
        let (io_n, io_t_ns) = crate::slow::io_errors_fault(inner);
        self.fault_erroring_leaves(inner, io_n, io_t_ns);
        {
            let mut log = self.events.lock().expect("event lock poisoned");
            for leaf in inner.pool.tops().iter().flat_map(|t| t.leaves()) {
                log.state(name, &leaf, now, Vec::new());
            }
        }
        let mut changed = self.autoreplace(inner);
        for top in inner.pool.tops().to_vec() {
            for child in top.children() {
                let failed = &child.members()[0];
                let out = matches!(
                    failed.state(),
                    LeafState::Faulted | LeafState::Removed | LeafState::Unavail
                );
                if child.kind() != ChildKind::Leaf || !out {
                    continue;
                }
                let spare = available_distributed_spare(&top)
                    .or_else(|| available_spare(inner, failed.asize()));
                let Some(spare) = spare else {
                    continue;
                };
                let node = self.next_guid(inner);
                let spare_path = spare.path();
                if top
                    .begin_replace(failed.guid(), spare, ChildKind::Spare, node)
                    .is_ok()
                {
                    let with = vec![("spare".to_string(), spare_path)];
                    self.post(leaf_event(
                        name,
                        failed,
                        now,
                        "sysevent.fs.zfs.vdev_spare",
                        with,
                    ));
                    changed = true;
                }
            }
        }
        if changed {
            let command = "spare activation".to_string();
            let record = self.history_record(&command, true);
            inner.history.push(record);
            inner.pool.set_config_dirty();
            scrub::restart(inner, ScanFunction::Resilver, now);
            let sequential = sequential_possible(inner);
            if let Some(progress) = &mut inner.scan.progress {
                progress.sequential = sequential;
            }
            self.post(pool_event(name, now, "resilver_start"));
            // A failed sync suspends the pool; status says why.
            let _ = inner.sync();
        }
        self.spare_states(name, inner);
        changed
    }

    /// Asks every online leaf and spare whether its device is gone (a deleted device file,
    /// a pulled disk) without waiting for an access to fail, so a disk that fails in an idle
    /// pool is spared at once; each one found gone is REMOVED, with an `io` ereport saying
    /// so (ZFS posts `probe_failure` for the same finding).
    fn probe_leaves(&self, name: &str, inner: &Imported, now: u64) {
        let pool = &inner.pool;
        let leaves = pool.tops().iter().flat_map(|t| t.leaves());
        for leaf in leaves.chain(pool.spares().iter().cloned()) {
            if leaf.probe() {
                let payload = vec![
                    ("vdev_state".to_string(), "REMOVED".to_string()),
                    ("error".to_string(), "device is gone".to_string()),
                ];
                let class = "ereport.fs.zfs.probe_failure";
                self.post(leaf_event(name, &leaf, now, class, payload));
            }
        }
    }

    /// `autoreplace=on`: a leaf out of service whose path now opens to a device without a
    /// pool label is replaced in place.
    fn autoreplace(&self, inner: &mut Imported) -> bool {
        let on = {
            let Imported { pool, mos, .. } = &mut *inner;
            mos.props(&pool.reader())
                .unwrap_or_default()
                .iter()
                .any(|(name, value)| name == "autoreplace" && value == "on")
        };
        if !on {
            return false;
        }
        let mut changed = false;
        for top in inner.pool.tops().to_vec() {
            for child in top.children() {
                let old = &child.members()[0];
                if child.kind() != ChildKind::Leaf || old.is_usable() {
                    continue;
                }
                let Ok(fresh) =
                    self.open_new_device(inner, &old.path(), old.asize(), Claim::default())
                else {
                    continue;
                };
                let node = self.next_guid(inner);
                changed |= top
                    .begin_replace(old.guid(), fresh.leaf, ChildKind::Replacing, node)
                    .is_ok();
            }
        }
        changed
    }
}

/// The distributed spare of `top` named `name` (`draid2-0-0`), if `name` is one.
fn distributed_spare(top: &TopVdev, name: &str) -> Option<Arc<Leaf>> {
    top.distributed_spares()
        .iter()
        .find(|s| s.path() == name)
        .cloned()
}

impl Engine {
    /// `replace POOL OLD draid2-0-0`: the distributed spare stands in for OLD under a spare
    /// node (OLD stays until a real device replaces it) and is filled by a sequential
    /// rebuild, then a verifying scrub.
    fn replace_with_distributed(
        &self,
        name: &str,
        inner: &mut Imported,
        top: &Arc<TopVdev>,
        leaf: &Arc<Leaf>,
        spare: Arc<Leaf>,
        command: &str,
    ) -> Result<(), EngineError> {
        if top.distributed_spare_in_use(spare.guid()) {
            return Err(EngineError::InvalidArgument(format!(
                "{} is already in use",
                spare.path()
            )));
        }
        if top.children().iter().any(|c| {
            c.kind() != ChildKind::Leaf && c.members().iter().any(|l| l.guid() == leaf.guid())
        }) {
            return Err(EngineError::AlreadyReplacing);
        }
        let node = self.next_guid(inner);
        top.begin_replace(leaf.guid(), spare, ChildKind::Spare, node)
            .map_err(vdev_error)?;
        let sequential = sequential_possible(inner);
        self.start_resilver(name, inner, sequential, command)
    }
}

/// Whether every top-level vdev with a leaf being resilvered can be rebuilt sequentially
/// (then a spare activation rebuilds instead of walking block pointers).
fn sequential_possible(inner: &Imported) -> bool {
    inner
        .pool
        .tops()
        .iter()
        .filter(|t| t.needs_resilver())
        .all(|t| crate::rebuild::check_layout(t).is_ok())
}

/// An AVAIL distributed spare of `top`.
fn available_distributed_spare(top: &TopVdev) -> Option<Arc<Leaf>> {
    top.distributed_spares()
        .iter()
        .find(|s| !top.distributed_spare_in_use(s.guid()))
        .cloned()
}

/// Refuses a replace of a leaf that is already being replaced (the spare node case, where
/// the original is replaced, is allowed).
fn check_replaceable(top: &TopVdev, guid: Guid) -> Result<(), EngineError> {
    let children = top.children();
    let child = children
        .iter()
        .find(|c| c.members().iter().any(|l| l.guid() == guid))
        .ok_or(EngineError::NoSuchDevice)?;
    match child.kind() {
        ChildKind::Leaf => Ok(()),
        ChildKind::Spare if child.members()[0].guid() == guid => Ok(()),
        _ => Err(EngineError::AlreadyReplacing),
    }
}

/// An AVAIL spare (usable, standing in for nothing) of at least `asize` bytes.
fn available_spare(inner: &Imported, asize: u64) -> Option<Arc<Leaf>> {
    inner
        .pool
        .spares()
        .iter()
        .find(|s| s.is_usable() && s.asize() >= asize && !inner.pool.spare_in_use(s.guid()))
        .cloned()
}

impl Engine {
    /// Faults online leaves with `io_n` I/O errors within `io_t`, when their vdev stays
    /// readable.
    fn fault_erroring_leaves(&self, inner: &Imported, io_n: u64, io_t_ns: u64) {
        let now_ns = self.clock.monotonic_ns();
        let mut watch = self.slow.lock().expect("slow watch lock poisoned");
        for top in inner.pool.tops() {
            for leaf in top.leaves() {
                if leaf.state() != LeafState::Online {
                    continue;
                }
                if watch.errors_within(&leaf, now_ns, io_t_ns) < io_n {
                    continue;
                }
                leaf.set_state(LeafState::Faulted);
                if !matches!(
                    top.health(),
                    tarn_vdev::Health::Online | tarn_vdev::Health::Degraded
                ) {
                    // The vdev needs it: keep it serving (DEGRADED beats UNAVAIL).
                    leaf.set_state(LeafState::Online);
                }
            }
        }
    }
}

/// Wipes the labels of leaves that left the pool (not spares: they go back to AVAIL and get
/// spare labels with the next txg), so no import mistakes them for members.
fn release(inner: &Imported, leaves: &[Arc<Leaf>]) {
    for leaf in leaves {
        if leaf.is_distributed_spare()
            || inner.pool.spares().iter().any(|s| s.guid() == leaf.guid())
        {
            continue;
        }
        if let Some(device) = leaf.usable_device() {
            // Best effort: a device that fails here is out of the pool anyway.
            let _ = tarn_pool::labels::clear_labels(device.as_ref());
        }
    }
}

/// The end of a resilver: leaves complete, replaced ones detached and released.
pub(crate) fn resilver_done(inner: &mut Imported) {
    let mut removed = Vec::new();
    for top in inner.pool.tops() {
        removed.extend(top.finish_resilver());
    }
    release(inner, &removed);
    inner.pool.set_config_dirty();
}

/// At import: a leaf marked resilvering without a resilver recorded gets one. Returns
/// whether a resilver was started (not one resumed from before the export or crash).
pub(crate) fn resume_at_import(inner: &mut Imported, now: u64) -> bool {
    let was = inner.scan.resilvering();
    catch_up_returned_leaves(inner, now);
    let pending = inner.pool.tops().iter().any(|t| t.needs_resilver());
    if pending && !inner.scan.resilvering() {
        scrub::restart(inner, ScanFunction::Resilver, now);
    }
    !was && inner.scan.resilvering()
}

/// Leaves that are back after missing txgs (the newest uberblock in their own labels is
/// older than the imported one by more than the one txg a crash can leave half written) are
/// marked resilvering and resilvered from what they missed, as `online` does, while their
/// vdev stays readable without them; otherwise reads keep relying on checksums, and a scrub
/// repairs them.
fn catch_up_returned_leaves(inner: &mut Imported, now: u64) {
    let Some(opened) = inner.pool.imported_txg() else {
        return;
    };
    let mut from: Option<Txg> = None;
    for top in inner.pool.tops() {
        let leaves = top.leaves();
        let behind: Vec<&Arc<Leaf>> = leaves
            .iter()
            .filter(|l| l.is_readable() && l.synced_txg().0 > 0)
            .filter(|l| l.synced_txg().0 + 1 < opened.0)
            .collect();
        let out = leaves.iter().filter(|l| !l.is_readable()).count();
        if behind.is_empty() || out + behind.len() > top.layout().tolerated(top.width()) {
            continue;
        }
        for leaf in behind {
            leaf.set_resilvering(true);
            let missed = Txg(leaf.synced_txg().0 + 1);
            from = Some(from.map_or(missed, |f| f.min(missed)));
        }
    }
    if let Some(from) = from {
        inner.pool.set_config_dirty();
        scrub::restart_resilver_from(inner, now, from);
    }
}

fn vdev_error(error: VdevError) -> EngineError {
    match error {
        VdevError::InvalidConfig {
            why: "no valid replicas",
            ..
        } => EngineError::NoValidReplicas,
        VdevError::InvalidConfig { why, .. } => EngineError::InvalidArgument(why.to_string()),
        VdevError::DeviceTooSmall { .. } => EngineError::InvalidArgument(
            "the new device is smaller than the device it replaces".into(),
        ),
        other => EngineError::InvalidArgument(other.to_string()),
    }
}
