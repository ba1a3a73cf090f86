//! Changing the vdev tree of an imported pool: `tarn pool add` (new data, log and special
//! top-level vdevs, new hot spares) and `tarn pool remove` (hot spares, log devices).
//!
//! Both follow the synctask shape: every check runs first and writes nothing (I4); then the
//! change is made in memory and the config is marked dirty, so the next [`Pool::sync`]
//! writes the new config to every label around its uberblock (even labels before it, odd
//! ones after). An add first writes and flushes all labels of the new devices (with the new
//! config, stamped with the txg that will commit it), so that once any label is trusted
//! that names a new vdev, its device has a label too. [`crate::discover`] trusts only a
//! config whose txg committed: a crash before the commit's uberblock leaves the old pool
//! (the new devices' labels are ignored, and a retried add takes them without `-f`), a
//! crash after it the new pool, whose added vdevs may simply hold nothing yet
//! (`add_then_power_cut_at_every_step` in tests/pool.rs cuts at every device operation).
//! The caller (the engine) commits the txg right away.
//!
//! Removing a log device needs more: its id is a DVA vdev number, so only the last
//! top-level vdev can go (ids stay dense; ZFS leaves a hole vdev instead, which tarn's
//! format does not have yet), it must hold no block, and no space-log record may name it.
//! [`Pool::begin_remove_log`] stops allocation there; the engine then commits txgs until
//! the intent log has moved off it ([`Pool::vdev_allocated`] is 0), asks for a condensed
//! space log ([`Pool::condense_space_log`]) and commits it, and only then
//! [`Pool::finish_remove_log`] drops the vdev (committed by one more txg). At every crash
//! point the newest config and the newest uberblock's space log agree on which vdevs exist.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tarn_base::{Guid, SeededRng, limits};
use tarn_device::Device;
use tarn_format::label::{PoolState, VdevKind, VdevTree};
use tarn_space::{VdevClass, VdevGeometry};
use tarn_vdev::{Layout, Leaf, TopVdev};
use tarn_zio::Pipeline;

use crate::labels::LabelHalf;
use crate::spec::{CreateSpec, TopLayout, TopSpec, check_replication};
use crate::{DeviceProvider, Pool, PoolError, build_tops, open_new_devices, read_labels};

impl Pool {
    /// The pool's data top-level vdevs as specs (layout and width), for the replication
    /// check.
    fn data_top_specs(&self) -> Vec<TopSpec> {
        self.tops
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.is_log_vdev(*i) && !self.is_special_vdev(*i))
            .map(|(_, top)| {
                let tree = top.to_tree();
                let (layout, width) = match tree.kind {
                    VdevKind::Mirror => (TopLayout::Mirror, tree.children.len()),
                    VdevKind::Raidz { parity } => (TopLayout::Raidz(parity), tree.children.len()),
                    VdevKind::Draid(c) => {
                        let (parity, data, spares) = (c.parity, c.data, c.spares);
                        let layout = TopLayout::Draid {
                            parity,
                            data,
                            spares,
                        };
                        (layout, tree.children.len())
                    }
                    _ => (TopLayout::Disk, 1),
                };
                TopSpec {
                    layout,
                    devices: vec![String::new(); width],
                }
            })
            .collect()
    }

    /// Refuses a change to a suspended or read-only pool.
    fn check_changeable(&self) -> Result<(), PoolError> {
        if let Some(why) = &self.suspended {
            return Err(PoolError::Suspended(why.clone()));
        }
        if self.readonly {
            return Err(PoolError::ReadOnly);
        }
        Ok(())
    }

    /// The check half of [`Pool::add`]: everything that can refuse, writing nothing. Returns
    /// the opened devices by path.
    pub fn check_add(
        &self,
        spec: &CreateSpec,
        provider: &dyn DeviceProvider,
    ) -> Result<BTreeMap<String, Arc<dyn Device>>, PoolError> {
        self.check_changeable()?;
        spec.validate_add(self.tops.len())?;
        if self.spares.len() + spec.spares.len() > limits::VDEV_CHILDREN_MAX {
            return Err(PoolError::InvalidSpec(format!(
                "a pool has at most {} spares",
                limits::VDEV_CHILDREN_MAX
            )));
        }
        let tree = self.vdev_tree();
        let in_pool = tree.leaves();
        if let Some(path) = spec
            .all_devices()
            .find(|path| in_pool.iter().any(|leaf| leaf.path == **path))
        {
            return Err(self.in_this_pool(path));
        }
        check_replication(&self.data_top_specs(), spec)?;
        let devices = open_new_devices(spec, provider, Some((self.guid, &tree)))?;
        // Even with -f, a device whose labels say it belongs to this very pool (under
        // another path) is not taken twice.
        for (path, device) in &devices {
            if read_labels(device.as_ref())
                .config
                .is_some_and(|c| c.pool_guid == self.guid && tree.find(c.this_guid).is_some())
            {
                return Err(self.in_this_pool(path));
            }
        }
        Ok(devices)
    }

    fn in_this_pool(&self, path: &str) -> PoolError {
        PoolError::AlreadyInPool {
            path: path.to_string(),
        }
    }

    /// Adds the top-level vdevs and spares of `spec` (its name and ashift are ignored: new
    /// vdevs get the pool's ashift). Checks first ([`Pool::check_add`]); then the change is
    /// in memory and the config dirty: the caller commits a txg, which writes the labels of
    /// every device, old and new. Allocation starts using the new vdevs at once (the rotor
    /// is biased by free space, so empty vdevs take more).
    pub fn add(
        &mut self,
        spec: &CreateSpec,
        provider: &dyn DeviceProvider,
        rng: &mut SeededRng,
    ) -> Result<(), PoolError> {
        let devices = self.check_add(spec, provider)?;
        let first_id = u32::try_from(self.tops.len()).expect("TOP_VDEVS_MAX fits u32");
        let (nodes, mut spare_leaves) = build_tops(spec, &devices, first_id, self.ashift, rng);
        let cache_count = spec.caches.len();
        spare_leaves.extend(crate::aux_leaves(&spec.caches, &devices, self.ashift, rng));
        let by_guid: HashMap<Guid, Arc<dyn Device>> = nodes
            .iter()
            .flat_map(|node| node.leaves())
            .chain(&spare_leaves)
            .filter_map(|leaf| devices.get(&leaf.path).map(|d| (leaf.guid, Arc::clone(d))))
            .collect();
        // Fresh GUIDs must be new to this pool (import matches devices by GUID).
        let existing = self.vdev_tree();
        let fresh = nodes.iter().flat_map(|n| n.leaves()).chain(&spare_leaves);
        if fresh
            .into_iter()
            .any(|leaf| existing.find(leaf.guid).is_some())
            || nodes.iter().any(|n| existing.find(n.guid).is_some())
        {
            return Err(PoolError::InvalidSpec(
                "a new vdev GUID collides with one of the pool's; try again".into(),
            ));
        }
        let mut new_tops = Vec::new();
        for node in &nodes {
            new_tops.push(Arc::new(TopVdev::from_tree(node, &by_guid)?));
        }
        let before = (self.tops.len(), self.spares.len(), self.spares_guid);
        let caches_before = self.caches().len();
        let (spare_leaves, cache_leaves) = spare_leaves.split_at(spare_leaves.len() - cache_count);
        let mut new_leaves = self.apply_add(&nodes, new_tops, spare_leaves, &by_guid, rng);
        new_leaves.extend(self.add_caches(cache_leaves, &by_guid, rng));
        if let Err(e) = self.label_new_leaves(&new_leaves) {
            for cache in self.caches().iter().skip(caches_before) {
                self.pipeline.l2().remove(cache.guid());
            }
            self.undo_add(before);
            return Err(e);
        }
        self.config_dirty = true;
        Ok(())
    }

    /// The apply half of [`Pool::add`] in memory: the new top-level vdevs join the space
    /// manager in their class, the spares the spare list. Returns every new leaf with the
    /// GUID of its top-level vdev (a spare: its own).
    fn apply_add(
        &mut self,
        nodes: &[VdevTree],
        new_tops: Vec<Arc<TopVdev>>,
        spare_leaves: &[VdevTree],
        by_guid: &HashMap<Guid, Arc<dyn Device>>,
        rng: &mut SeededRng,
    ) -> Vec<(Arc<Leaf>, Guid)> {
        let mut new_leaves = Vec::new();
        for (node, top) in nodes.iter().zip(new_tops) {
            let id = node.id;
            assert_eq!(
                id as usize,
                self.tops.len(),
                "new top-level vdev ids are dense"
            );
            for leaf in top.leaves() {
                leaf.set_clock(Arc::clone(&self.clock));
                new_leaves.push((leaf, top.guid()));
            }
            let class = if node.log {
                self.log_tops.insert(id);
                VdevClass::Log
            } else if node.special {
                self.special_tops.insert(id);
                VdevClass::Special
            } else {
                VdevClass::Normal
            };
            let geometry = Arc::clone(&top) as Arc<dyn VdevGeometry>;
            self.space.add_vdev(geometry, node.metaslab_shift, class);
            self.tops.push(top);
        }
        for node in spare_leaves {
            let leaf = Leaf::missing(node.guid, node.path.clone(), node.asize);
            if let Some(device) = by_guid.get(&node.guid)
                && leaf.set_device(Some(Arc::clone(device))).is_ok()
            {
                leaf.set_state(tarn_vdev::LeafState::Online);
            }
            leaf.set_clock(Arc::clone(&self.clock));
            let leaf = Arc::new(leaf);
            new_leaves.push((Arc::clone(&leaf), leaf.guid()));
            self.spares.push(leaf);
        }
        if self.spares_guid.0 == 0 && !self.spares.is_empty() {
            self.spares_guid = rng.guid();
        }
        self.pipeline = Pipeline::new(self.tops.clone()).with_l2(Arc::clone(self.pipeline.l2()));
        new_leaves
    }

    /// Cache devices join the pool's second-level read cache (empty); returns them as new
    /// leaves (each its own "top").
    fn add_caches(
        &mut self,
        nodes: &[VdevTree],
        by_guid: &HashMap<Guid, Arc<dyn Device>>,
        rng: &mut SeededRng,
    ) -> Vec<(Arc<Leaf>, Guid)> {
        let mut new_leaves = Vec::new();
        for node in nodes {
            let leaf = crate::aux_leaf(node, by_guid);
            leaf.set_clock(Arc::clone(&self.clock));
            new_leaves.push((Arc::clone(&leaf), leaf.guid()));
            self.pipeline.l2().add(leaf);
        }
        if self.l2cache_guid.0 == 0 && !nodes.is_empty() {
            self.l2cache_guid = rng.guid();
        }
        new_leaves
    }

    /// Removes the cache device `name` (path or GUID): reads stop using it at once. The
    /// caller commits a txg and then may clear the returned device's labels.
    pub fn remove_cache_device(
        &mut self,
        name: &str,
    ) -> Result<Option<Arc<dyn Device>>, PoolError> {
        self.check_changeable()?;
        let cache = self
            .caches()
            .into_iter()
            .find(|c| c.path() == name || c.guid().0.to_string() == name);
        let Some(cache) = cache else {
            return Err(self.not_removable(name));
        };
        self.pipeline.l2().remove(cache.guid());
        self.config_dirty = true;
        Ok(cache.device())
    }

    /// Writes all four labels of each new leaf with the new config (stamped with the txg
    /// that will commit it) and flushes, before any old device's label changes: once some
    /// label anywhere names the new vdevs, every new device carries its label, so an import
    /// after a crash finds all of them (ZFS labels new vdevs at add time too).
    fn label_new_leaves(&self, leaves: &[(Arc<Leaf>, Guid)]) -> Result<(), PoolError> {
        let tree = self.vdev_tree();
        let txg = self.txg.next();
        for (leaf, top) in leaves {
            let device = leaf.usable_device().ok_or_else(|| PoolError::DeviceOpen {
                path: leaf.path(),
                source: tarn_device::DeviceError::Gone,
            })?;
            let aux = *top == leaf.guid();
            let state = if aux && self.spares.iter().any(|s| Arc::ptr_eq(s, leaf)) {
                PoolState::Spare
            } else if aux {
                PoolState::L2cache
            } else {
                PoolState::Active
            };
            let config = self.config_for(state, txg, leaf.guid(), *top, &tree);
            for half in [LabelHalf::Even, LabelHalf::Odd] {
                crate::labels::write_config(device.as_ref(), &config, half)?;
            }
            device.flush()?;
        }
        Ok(())
    }

    /// Takes back an [`Pool::add`] whose new devices could not be labelled: the pool is as
    /// it was (`before`: top-level vdev count, spare count, spares GUID).
    fn undo_add(&mut self, before: (usize, usize, Guid)) {
        let (tops, spares, spares_guid) = before;
        while self.tops.len() > tops {
            let index = self.tops.len() - 1;
            self.space.set_removing(index, true);
            self.space.remove_last_vdev();
            self.tops.pop();
            self.log_tops.remove(&(index as u32));
            self.special_tops.remove(&(index as u32));
        }
        self.spares.truncate(spares);
        self.spares_guid = spares_guid;
        self.pipeline = Pipeline::new(self.tops.clone()).with_l2(Arc::clone(self.pipeline.l2()));
    }

    /// Index of the top-level vdev named `name` as status prints it (a disk vdev's leaf
    /// path, `mirror-N`, `raidzP-N`) or by GUID.
    fn top_named(&self, name: &str) -> Option<usize> {
        self.tops.iter().position(|top| {
            let id = top.id().0;
            let shown = match top.layout() {
                Layout::Disk => top.leaves().first().map(|l| l.path()).unwrap_or_default(),
                layout => layout.display_name(top.width(), id),
            };
            shown == name || top.guid().0.to_string() == name
        })
    }

    /// Removes the unused hot spare `name` (path or GUID) from the config; the caller commits
    /// a txg and then may clear the returned device's labels.
    pub fn remove_spare_device(
        &mut self,
        name: &str,
    ) -> Result<Option<Arc<dyn Device>>, PoolError> {
        self.check_changeable()?;
        let spare = self
            .spares
            .iter()
            .find(|s| s.path() == name || s.guid().0.to_string() == name)
            .cloned();
        let Some(spare) = spare else {
            return Err(self.not_removable(name));
        };
        if self.spare_in_use(spare.guid()) {
            return Err(PoolError::CannotRemove(
                "the hot spare is in use; detach it (or the device it stands in for) first".into(),
            ));
        }
        self.remove_spare(spare.guid());
        self.config_dirty = true;
        Ok(spare.device())
    }

    /// Why `name` cannot be removed: not in the pool, a data or special vdev (that needs
    /// device evacuation), or a leaf inside a vdev.
    fn not_removable(&self, name: &str) -> PoolError {
        if let Some(index) = self.top_named(name) {
            let what = if self.is_special_vdev(index) {
                "special"
            } else {
                "data"
            };
            return PoolError::CannotRemove(format!(
                "removing a {what} top-level vdev needs device evacuation, which is not \
                 supported yet (log and cache devices and unused spares can be removed)"
            ));
        }
        let in_tree = self
            .tops
            .iter()
            .flat_map(|t| t.leaves())
            .any(|l| l.path() == name);
        if in_tree {
            return PoolError::CannotRemove(
                "only hot spares, cache and log devices can be removed; use 'tarn pool detach' \
                 for a mirror side"
                    .into(),
            );
        }
        PoolError::CannotRemove("no such device in pool".into())
    }

    /// Finds the log device `name` and stops allocation on it: the first step of removing
    /// it (see the module comment). Refuses anything else, and a log device that is not the
    /// last top-level vdev. Returns its index.
    pub fn begin_remove_log(&mut self, name: &str) -> Result<usize, PoolError> {
        self.check_changeable()?;
        let Some(index) = self.top_named(name).filter(|&i| self.is_log_vdev(i)) else {
            return Err(self.not_removable(name));
        };
        if index + 1 != self.tops.len() {
            return Err(PoolError::CannotRemove(
                "only the last top-level vdev can be removed for now (log devices added later \
                 must go first)"
                    .into(),
            ));
        }
        self.space.set_removing(index, true);
        Ok(index)
    }

    /// Undoes [`Pool::begin_remove_log`] (the removal was refused on the way).
    pub fn cancel_remove_log(&mut self, index: usize) {
        self.space.set_removing(index, false);
    }

    /// Bytes allocated on top-level vdev `index` (deferred frees included).
    #[must_use]
    pub fn vdev_allocated(&self, index: usize) -> u64 {
        self.space.vdev_allocated(index)
    }

    /// Makes the next sync write the space log as a new base (no records of freed space
    /// survive in the chain).
    pub fn condense_space_log(&mut self) {
        self.space.condense_next_sync();
    }

    /// Drops the log device `index` (the last top-level vdev, empty, with a condensed space
    /// log committed since it emptied) and marks the config dirty: the last step of removing
    /// it. Returns its leaves' devices so the caller can clear their labels once the txg
    /// committed.
    pub fn finish_remove_log(&mut self, index: usize) -> Vec<Arc<dyn Device>> {
        assert_eq!(
            index + 1,
            self.tops.len(),
            "only the last top-level vdev is removed"
        );
        assert!(
            self.is_log_vdev(index),
            "only a log device is removed without evacuation"
        );
        assert_eq!(
            self.space.vdev_allocated(index),
            0,
            "a removed vdev holds no block"
        );
        let top = self.tops.pop().expect("index is the last top-level vdev");
        self.space.remove_last_vdev();
        self.log_tops.remove(&(index as u32));
        self.pipeline = Pipeline::new(self.tops.clone()).with_l2(Arc::clone(self.pipeline.l2()));
        self.config_dirty = true;
        top.leaves().iter().filter_map(|l| l.device()).collect()
    }
}
