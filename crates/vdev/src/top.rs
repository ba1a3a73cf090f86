//! Top-level vdevs: construction and validation, the on-disk tree form, health, allocation
//! size, and the dispatch of writes, reads, scrubs and flushes to the layouts.

use crate::child::{Child, ChildKind};
use crate::draid_map::{self, DraidGeometry};
use crate::draid_spare::{self, ChildList, DraidSpareDevice};
use crate::error::VdevError;
use crate::leaf::{Leaf, LeafState};
use crate::raidz_math::Impl;
use crate::{mirror, raidz_io, raidz_map};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use tarn_base::limits::{
    ASHIFT_MAX, ASHIFT_MIN, BLOCK_SIZE_MAX, RAIDZ_PARITY_MAX, VDEV_CHILDREN_MAX,
};
use tarn_base::{Guid, VdevId};
use tarn_device::{Device, SharedBytes};
use tarn_format::label::{DraidConfig, VdevKind, VdevTree};

/// How a top-level vdev spreads a block over its leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    /// One leaf, no redundancy.
    Disk,
    /// Every leaf holds a full copy.
    Mirror,
    /// Data plus `parity` parity columns per row, spread over all leaves.
    Raidz {
        /// Parity columns (1..=3).
        parity: u8,
    },
    /// Fixed-width groups of `data + parity` columns over permuted rows of the children,
    /// with `spares` columns of distributed spare space per row (`draid_map`).
    Draid(DraidConfig),
}

impl Layout {
    /// How many unusable leaves a vdev of `children` leaves survives.
    #[must_use]
    pub fn tolerated(self, children: usize) -> usize {
        match self {
            Layout::Disk => 0,
            Layout::Mirror => children.saturating_sub(1),
            Layout::Raidz { parity } => usize::from(parity),
            Layout::Draid(config) => usize::from(config.parity),
        }
    }

    /// Parity columns of a raidz or dRAID layout (0 for disks and mirrors).
    #[must_use]
    pub fn parity(self) -> usize {
        match self {
            Layout::Disk | Layout::Mirror => 0,
            Layout::Raidz { parity } => usize::from(parity),
            Layout::Draid(config) => usize::from(config.parity),
        }
    }

    /// The vdev-tree kind of this layout.
    #[must_use]
    pub fn kind(self) -> VdevKind {
        match self {
            Layout::Disk => VdevKind::Disk,
            Layout::Mirror => VdevKind::Mirror,
            Layout::Raidz { parity } => VdevKind::Raidz { parity },
            Layout::Draid(config) => VdevKind::Draid(config),
        }
    }

    /// The name `status` shows for top-level vdev `id`: `mirror-0`, `raidz2-1`,
    /// `draid2:8d:90c:2s-0` (dRAID names its child count, as ZFS does).
    #[must_use]
    pub fn display_name(self, children: usize, id: u32) -> String {
        match self {
            Layout::Disk => format!("disk-{id}"),
            Layout::Mirror => format!("mirror-{id}"),
            Layout::Raidz { parity } => format!("raidz{parity}-{id}"),
            Layout::Draid(c) => {
                format!(
                    "draid{}:{}d:{children}c:{}s-{id}",
                    c.parity, c.data, c.spares
                )
            }
        }
    }
}

/// Health of a top-level vdev, from its leaves' states and its redundancy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Health {
    /// Every leaf is usable.
    Online,
    /// Some leaves are unusable but every block is still readable.
    Degraded,
    /// Too many leaves are faulted or offline for the data to be readable.
    Faulted,
    /// Too many leaves are missing (could not be opened or were removed).
    Unavail,
}

/// What a write did not reach.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Leaves that did not take their part of the block (I/O error, missing or not online):
    /// resilver must bring them up to date.
    pub missed: Vec<Guid>,
}

/// What healing rewrote during a read or scrub.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Healing {
    /// Leaves rewritten with good data (their copy or column was bad or unreadable).
    pub repaired: Vec<Guid>,
    /// Bytes rewritten.
    pub repaired_bytes: u64,
    /// Leaves whose repair write failed.
    pub heal_failed: Vec<Guid>,
    /// Bytes written to leaves being resilvered ([`TopVdev::resilver`]).
    pub resilvered_bytes: u64,
}

/// A verified block and what healing did while reading it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadReport {
    /// The block's bytes; they passed the caller's verification.
    pub data: Vec<u8>,
    /// Repairs made on the way.
    pub healing: Healing,
}

/// What a scrub of one block found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScrubReport {
    /// Repairs made.
    pub healing: Healing,
    /// Leaves holding part of the block that could not be checked (missing or not online).
    pub skipped: Vec<Guid>,
}

/// A top-level vdev: a disk, a mirror or a raidz group of leaves, with its own address space
/// of `asize` bytes. Shared between threads (`&self` everywhere).
#[derive(Debug)]
pub struct TopVdev {
    id: VdevId,
    /// Changes when a disk becomes a mirror, or a replace of a disk vdev collapses.
    guid: AtomicU64,
    ashift: u8,
    /// Changes between disk and mirror by attach and detach.
    layout: RwLock<Layout>,
    /// Swapped whole under the write lock (never held across I/O); see `child`.
    children: Arc<ChildList>,
    asize: u64,
    metaslab_shift: AtomicU8,
    next_child: AtomicUsize,
    parity_impl: Impl,
    /// The dRAID layout (computed once: it holds the base permutations).
    draid: Option<Arc<DraidGeometry>>,
    /// dRAID: the distributed spares, in index order (`draid_spare`).
    spares: Vec<Arc<Leaf>>,
    /// What raidz and dRAID reads allocated besides their blocks' buffers.
    raidz_reads: crate::raidz_io::ReadCounters,
}

impl TopVdev {
    /// Builds a top-level vdev over `children`, checking the width the layout needs
    /// (disk: 1 leaf with the vdev's GUID; mirror: 2 or more; raidz1/2/3: at least 2/3/4)
    /// and the ashift. Its size follows from the smallest leaf.
    pub fn new(
        id: VdevId,
        guid: Guid,
        ashift: u8,
        layout: Layout,
        children: Vec<Arc<Leaf>>,
    ) -> Result<TopVdev, VdevError> {
        let children = children.into_iter().map(Child::leaf).collect();
        TopVdev::with_children(id, guid, ashift, layout, children)
    }

    fn with_children(
        id: VdevId,
        guid: Guid,
        ashift: u8,
        layout: Layout,
        children: Vec<Child>,
    ) -> Result<TopVdev, VdevError> {
        let invalid = |why| VdevError::InvalidConfig { guid, why };
        if guid.0 == 0 {
            return Err(invalid("the GUID must not be zero"));
        }
        if !(ASHIFT_MIN..=ASHIFT_MAX).contains(&ashift) {
            return Err(invalid("ashift must be between 9 and 16"));
        }
        check_width(layout, &children, guid).map_err(invalid)?;
        let sector = 1u64 << ashift;
        let smallest = children
            .iter()
            .flat_map(|child| child.members().iter().map(|leaf| leaf.asize()))
            .min()
            .unwrap_or(0)
            / sector
            * sector;
        if smallest == 0 {
            return Err(invalid("a leaf has no room for a single sector"));
        }
        let draid = match layout {
            Layout::Draid(c) => Some(Arc::new(DraidGeometry::new(
                children.len(),
                usize::from(c.parity),
                usize::from(c.data),
                usize::from(c.spares),
                ashift,
                c.seed,
            ))),
            _ => None,
        };
        let asize = match (&draid, layout) {
            (Some(geometry), _) => geometry.asize(smallest),
            (None, Layout::Raidz { .. }) => smallest * children.len() as u64,
            (None, _) => smallest,
        };
        if asize == 0 {
            return Err(invalid("the leaves are too small for one dRAID slice"));
        }
        let list: Arc<ChildList> = Arc::new(RwLock::new(Vec::new()));
        let spares = match &draid {
            Some(geometry) => distributed_spares(id, guid, geometry, &list, smallest),
            None => Vec::new(),
        };
        let children = children
            .into_iter()
            .map(|child| Arc::new(with_spares(child, &spares)))
            .collect();
        *list.write().unwrap_or_else(PoisonError::into_inner) = children;
        Ok(TopVdev {
            id,
            guid: AtomicU64::new(guid.0),
            ashift,
            layout: RwLock::new(layout),
            children: list,
            asize,
            metaslab_shift: AtomicU8::new(0),
            next_child: AtomicUsize::new(0),
            parity_impl: Impl::best(),
            draid,
            spares,
            raidz_reads: crate::raidz_io::ReadCounters::default(),
        })
    }

    /// dRAID: the distributed spares, in index order (empty for other layouts).
    #[must_use]
    pub fn distributed_spares(&self) -> &[Arc<Leaf>] {
        &self.spares
    }

    /// Whether distributed spare `guid` stands in for a child now.
    #[must_use]
    pub fn distributed_spare_in_use(&self, guid: Guid) -> bool {
        self.children()
            .iter()
            .any(|c| c.kind() != ChildKind::Leaf && c.members().iter().any(|l| l.guid() == guid))
    }

    /// Rebuilds a top-level vdev from its label form, attaching the devices found for its
    /// leaves by GUID. A leaf without a device (or with one too small) is
    /// [`LeafState::Unavail`]; one recorded offline stays [`LeafState::Offline`]. The recorded
    /// `asize` is kept (block addresses depend on it) after checking the leaves can hold it.
    /// A `replacing` or `spare` node may stand at a child position, or be the whole top-level
    /// vdev of a disk being replaced.
    pub fn from_tree(
        tree: &VdevTree,
        devices: &HashMap<Guid, Arc<dyn Device>>,
    ) -> Result<TopVdev, VdevError> {
        let layout = match tree.kind {
            VdevKind::Disk | VdevKind::Replacing | VdevKind::SpareInUse => Layout::Disk,
            VdevKind::Mirror => Layout::Mirror,
            VdevKind::Raidz { parity } => Layout::Raidz { parity },
            VdevKind::Draid(config) => Layout::Draid(config),
            kind => {
                return Err(VdevError::UnsupportedKind {
                    guid: tree.guid,
                    kind,
                });
            }
        };
        let children = if layout == Layout::Disk {
            vec![child_from_tree(tree, devices)?]
        } else {
            tree.children
                .iter()
                .map(|node| child_from_tree(node, devices))
                .collect::<Result<_, _>>()?
        };
        let mut top =
            TopVdev::with_children(VdevId(tree.id), tree.guid, tree.ashift, layout, children)?;
        if tree.asize > top.asize {
            return Err(VdevError::InvalidConfig {
                guid: tree.guid,
                why: "recorded size is larger than the leaves can hold",
            });
        }
        if tree.asize != 0 {
            top.asize = tree.asize;
        }
        top.set_metaslab_shift(tree.metaslab_shift);
        Ok(top)
    }

    /// The label form of this vdev (for [`Layout::Disk`], the child's own node).
    #[must_use]
    pub fn to_tree(&self) -> VdevTree {
        let children = self.children();
        let mut node = match self.layout() {
            Layout::Disk => self.child_tree(0, &children[0]),
            Layout::Mirror | Layout::Raidz { .. } | Layout::Draid(_) => VdevTree {
                kind: self.layout().kind(),
                guid: self.guid(),
                id: 0,
                ashift: self.ashift,
                asize: 0,
                metaslab_shift: 0,
                path: String::new(),
                children: children
                    .iter()
                    .enumerate()
                    .map(|(i, c)| self.child_tree(i, c))
                    .collect(),
                offline: false,
                resilvering: false,
                log: false,
                special: false,
            },
        };
        node.id = self.id.0;
        node.asize = self.asize;
        node.metaslab_shift = self.metaslab_shift();
        node
    }

    fn leaf_tree(&self, index: usize, leaf: &Leaf) -> VdevTree {
        VdevTree {
            kind: if leaf.is_distributed_spare() {
                VdevKind::DraidSpare
            } else {
                VdevKind::Disk
            },
            guid: leaf.guid(),
            id: u32::try_from(index).expect("children <= VDEV_CHILDREN_MAX"),
            ashift: self.ashift,
            asize: leaf.asize(),
            metaslab_shift: 0,
            path: leaf.path(),
            children: Vec::new(),
            offline: leaf.state() == LeafState::Offline,
            resilvering: leaf.is_resilvering(),
            log: false,
            special: false,
        }
    }

    fn child_tree(&self, index: usize, child: &Child) -> VdevTree {
        let members = child.members();
        match child.kind().tree_kind() {
            None => self.leaf_tree(index, &members[0]),
            Some(kind) => VdevTree {
                kind,
                guid: child.guid(),
                id: u32::try_from(index).expect("children <= VDEV_CHILDREN_MAX"),
                ashift: self.ashift,
                asize: members[0].asize(),
                metaslab_shift: 0,
                path: String::new(),
                children: members
                    .iter()
                    .enumerate()
                    .map(|(i, leaf)| self.leaf_tree(i, leaf))
                    .collect(),
                offline: false,
                resilvering: false,
                log: false,
                special: false,
            },
        }
    }

    /// Index in the pool (the DVA vdev number).
    #[must_use]
    pub fn id(&self) -> VdevId {
        self.id
    }

    /// GUID.
    #[must_use]
    pub fn guid(&self) -> Guid {
        Guid(self.guid.load(Ordering::Acquire))
    }

    /// Sector size shift.
    #[must_use]
    pub fn ashift(&self) -> u8 {
        self.ashift
    }

    /// Layout.
    #[must_use]
    pub fn layout(&self) -> Layout {
        *self.layout.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// Size of the address space in bytes.
    #[must_use]
    pub fn asize(&self) -> u64 {
        self.asize
    }

    /// Log2 of the metaslab size, chosen by the space layer (0 until it does).
    #[must_use]
    pub fn metaslab_shift(&self) -> u8 {
        self.metaslab_shift.load(Ordering::Relaxed)
    }

    /// Records the metaslab size chosen by the space layer (kept in the vdev tree).
    pub fn set_metaslab_shift(&self, shift: u8) {
        self.metaslab_shift.store(shift, Ordering::Relaxed);
    }

    /// Every leaf, in tree order (both members of a replacing or spare child).
    #[must_use]
    pub fn leaves(&self) -> Vec<Arc<Leaf>> {
        self.children()
            .iter()
            .flat_map(|child| child.members().iter().cloned())
            .collect()
    }

    /// The child positions as they are now (a snapshot: the tree may change after).
    #[must_use]
    pub fn children(&self) -> Vec<Arc<Child>> {
        self.children
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Number of child positions.
    #[must_use]
    pub fn width(&self) -> usize {
        self.children
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The leaf with `guid`, if it is in this vdev.
    #[must_use]
    pub fn leaf(&self, guid: Guid) -> Option<Arc<Leaf>> {
        self.leaves().into_iter().find(|leaf| leaf.guid() == guid)
    }

    /// Health from the children: a position no member can be read from is lost; a member
    /// out of service where another serves (a spare in use) still degrades.
    #[must_use]
    pub fn health(&self) -> Health {
        let children = self.children();
        let lost: Vec<&Arc<Child>> = children.iter().filter(|c| !c.is_readable()).collect();
        let degraded = children
            .iter()
            .any(|c| c.members().iter().any(|l| !l.is_usable()));
        if lost.is_empty() && !degraded {
            Health::Online
        } else if lost.len() <= self.layout().tolerated(children.len()) {
            Health::Degraded
        } else if lost.iter().all(|c| {
            c.members()
                .iter()
                .all(|l| matches!(l.state(), LeafState::Unavail | LeafState::Removed))
        }) {
            Health::Unavail
        } else {
            Health::Faulted
        }
    }

    /// Whether some leaf of this vdev is being resilvered.
    #[must_use]
    pub fn needs_resilver(&self) -> bool {
        self.children().iter().any(|c| c.needs_resilver())
    }

    /// Bytes of address space a block of `psize` bytes occupies (sector-rounded; for raidz
    /// with parity and padding, see [`raidz_map::allocation_size`]).
    #[must_use]
    pub fn allocation_size(&self, psize: u64) -> u64 {
        match self.layout() {
            Layout::Disk | Layout::Mirror => psize.max(1).div_ceil(self.sector()) * self.sector(),
            Layout::Raidz { parity } => {
                raidz_map::allocation_size(self.width(), usize::from(parity), self.ashift, psize)
            }
            Layout::Draid(_) => self.draid().allocation_size(psize),
        }
    }

    /// The dRAID geometry of a dRAID vdev.
    pub(crate) fn draid(&self) -> &DraidGeometry {
        self.draid
            .as_deref()
            .expect("a dRAID layout has its geometry")
    }

    /// The dRAID geometry, if this is a dRAID vdev.
    #[must_use]
    pub fn draid_geometry(&self) -> Option<&DraidGeometry> {
        self.draid.as_deref()
    }

    /// Alignment of every allocation: a sector, or a dRAID row (`w` sectors).
    #[must_use]
    pub fn allocation_align(&self) -> u64 {
        match &self.draid {
            Some(geometry) => geometry.width() as u64 * self.sector(),
            None => self.sector(),
        }
    }

    /// Allocations must not cross a multiple of this (a dRAID group; 0: no such bound).
    #[must_use]
    pub fn allocation_boundary(&self) -> u64 {
        match &self.draid {
            Some(geometry) => geometry.group_sectors() * self.sector(),
            None => 0,
        }
    }

    /// Where the block allocated at `offset` with `asize` bytes (its DVA) lies: for each
    /// child holding part of it, the child's index and the byte range on that child's
    /// leaves, labels counted. Raidz ranges cover the whole allocation, padding included; a
    /// block shorter than its allocation wrote a subset of them. What `zdb -R` works out by
    /// hand: the simulator checks every loss the engine reports against it.
    pub fn placement(
        &self,
        offset: u64,
        asize: u64,
    ) -> Result<Vec<(usize, std::ops::Range<u64>)>, VdevError> {
        let sector = self.sector();
        let out_of_range = VdevError::OutOfRange {
            guid: self.guid(),
            offset,
            len: asize,
            asize: self.asize,
        };
        if asize == 0 || !offset.is_multiple_of(sector) || !asize.is_multiple_of(sector) {
            return Err(out_of_range);
        }
        match offset.checked_add(asize) {
            Some(end) if end <= self.asize => {}
            _ => return Err(out_of_range),
        }
        let start = tarn_format::label::DATA_START;
        match self.layout() {
            Layout::Disk | Layout::Mirror => Ok((0..self.width())
                .map(|c| (c, start + offset..start + offset + asize))
                .collect()),
            Layout::Raidz { .. } => {
                // Sector i of the allocation is row i / n of child i % n.
                let n = self.width() as u64;
                let (first, last) = (offset / sector, (offset + asize) / sector - 1);
                Ok((0..n)
                    .filter_map(|c| {
                        let low = first.saturating_sub(c).div_ceil(n);
                        let high = last.checked_sub(c)? / n;
                        let row = |r: u64| start + r * sector;
                        (low <= high).then(|| (c as usize, row(low)..row(high + 1)))
                    })
                    .collect())
            }
            Layout::Draid(config) => {
                let geometry = self.draid();
                let width = geometry.width() as u64;
                let len = asize / width * config.data as u64;
                let rows = asize.is_multiple_of(width * sector);
                if !rows || geometry.check_block(offset, len).is_err() {
                    return Err(out_of_range);
                }
                let map = geometry.map(offset, len);
                Ok((0..map.columns.len())
                    .map(|c| {
                        let at = map.leaf_offset(c);
                        (map.columns[c].child, at..at + map.column_bytes(c) as u64)
                    })
                    .collect())
            }
        }
    }

    /// The column map of a raidz block, or of a dRAID block whose `len` is already padded
    /// to whole rows.
    pub(crate) fn column_map(&self, parity: usize, offset: u64, len: u64) -> raidz_map::RaidzMap {
        match &self.draid {
            Some(geometry) => geometry.map(offset, len),
            None => raidz_map::RaidzMap::new(self.width(), parity, self.ashift, offset, len),
        }
    }

    pub(crate) fn sector(&self) -> u64 {
        1u64 << self.ashift
    }

    pub(crate) fn parity_impl(&self) -> Impl {
        self.parity_impl
    }

    pub(crate) fn raidz_counters(&self) -> &crate::raidz_io::ReadCounters {
        &self.raidz_reads
    }

    /// What raidz and dRAID reads of this vdev allocated besides their blocks' buffers
    /// (tests; always zero for disks and mirrors).
    #[must_use]
    pub fn raidz_read_counts(&self) -> crate::raidz_io::ReadCounts {
        self.raidz_reads.snapshot()
    }

    pub(crate) fn next_child(&self, width: usize) -> usize {
        self.next_child.fetch_add(1, Ordering::Relaxed) % width
    }

    /// Checks an access of `len` bytes at `offset`: sector aligned, not empty, at most one
    /// maximum-size block, and inside the address space with its allocated size.
    fn check_access(&self, offset: u64, len: u64) -> Result<(), VdevError> {
        let sector = self.sector();
        if len == 0 || !offset.is_multiple_of(sector) || !len.is_multiple_of(sector) {
            return Err(VdevError::Misaligned {
                guid: self.guid(),
                offset,
                len,
                sector,
            });
        }
        let out_of_range = VdevError::OutOfRange {
            guid: self.guid(),
            offset,
            len,
            asize: self.asize,
        };
        if len > BLOCK_SIZE_MAX {
            return Err(out_of_range);
        }
        match offset.checked_add(self.allocation_size(len)) {
            Some(end) if end <= self.asize => {}
            _ => return Err(out_of_range),
        }
        if let Some(geometry) = &self.draid
            && geometry.check_block(offset, len).is_err()
        {
            return Err(VdevError::Misaligned {
                guid: self.guid(),
                offset,
                len,
                sector: self.allocation_align(),
            });
        }
        Ok(())
    }

    /// Writes one block (`data.len()` a multiple of the sector size) at top-level `offset`.
    /// Succeeds if the block is readable afterwards: at least one mirror child, or all but at
    /// most `parity` raidz columns, took it. Unusable leaves are skipped and reported.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<WriteReport, VdevError> {
        self.check_access(offset, data.len() as u64)?;
        self.write_shared(offset, &SharedBytes::from(data.to_vec()))
    }

    /// [`TopVdev::write`] of bytes the caller shares: the devices' queues keep the block's
    /// columns (mirror copies, raidz data columns) as ranges of `data`, without copying them
    /// (`tarn_device::Device::write_shared`).
    pub fn write_shared(&self, offset: u64, data: &SharedBytes) -> Result<WriteReport, VdevError> {
        self.check_access(offset, data.len() as u64)?;
        match self.layout() {
            Layout::Disk | Layout::Mirror => mirror::write(self, offset, data),
            Layout::Raidz { parity } => raidz_io::write(self, usize::from(parity), offset, data),
            Layout::Draid(config) if self.padded_len(data.len()) == data.len() => {
                raidz_io::write(self, usize::from(config.parity), offset, data)
            }
            Layout::Draid(config) => {
                let mut padded = data.to_vec();
                padded.resize(self.padded_len(data.len()), 0);
                let padded = SharedBytes::from(padded);
                raidz_io::write(self, usize::from(config.parity), offset, &padded)
            }
        }
    }

    /// Reads `len` bytes at `offset` and returns them only once `verify` accepts them,
    /// trying other copies, reconstruction from parity and, for raidz, combinations of
    /// silently corrupt columns. Bad copies or columns found on the way are rewritten.
    pub fn read(
        &self,
        offset: u64,
        len: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<ReadReport, VdevError> {
        self.start_read(offset, len)?.finish(verify)
    }

    /// The first half of [`TopVdev::read`]: submits the first device reads of the block (a
    /// mirror's first side, a raidz block's data columns) and returns at once on devices
    /// with their own I/O thread, so that a caller can have many blocks in flight from one
    /// thread and the device queues see them together. [`StartedRead::finish`] does the
    /// rest. On synchronous devices the reads are done before this returns.
    pub fn start_read(&self, offset: u64, len: u64) -> Result<StartedRead<'_>, VdevError> {
        self.check_access(offset, len)?;
        let size = usize::try_from(len).expect("len <= BLOCK_SIZE_MAX fits in usize");
        Ok(StartedRead(match self.layout() {
            Layout::Disk | Layout::Mirror => Started::Mirror(mirror::start(self, offset, size)),
            Layout::Raidz { parity } => {
                Started::Raidz(raidz_io::start(self, usize::from(parity), offset, size))
            }
            Layout::Draid(config) => {
                let padded = self.padded_len(size);
                let parity = usize::from(config.parity);
                Started::Draid(raidz_io::start(self, parity, offset, padded), size)
            }
        }))
    }

    /// Checks every copy (mirror) or every column including parity (raidz) of one block and
    /// repairs what is wrong. Fails only if no good version of the block exists.
    pub fn scrub(
        &self,
        offset: u64,
        len: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<ScrubReport, VdevError> {
        self.check_access(offset, len)?;
        let size = usize::try_from(len).expect("len <= BLOCK_SIZE_MAX fits in usize");
        match self.layout() {
            Layout::Disk | Layout::Mirror => mirror::scrub(self, offset, size, verify, false),
            Layout::Raidz { parity } => {
                raidz_io::scrub(self, usize::from(parity), offset, size, verify, false)
            }
            Layout::Draid(config) => {
                let padded = self.padded_len(size);
                let verify = padded_verify(size, verify);
                let parity = usize::from(config.parity);
                raidz_io::scrub(self, parity, offset, padded, &verify, false)
            }
        }
    }

    /// Resilvers one block: like [`TopVdev::scrub`] (every copy or column checked and
    /// repaired), and then the block's copy or columns are written to every member being
    /// resilvered ([`Healing::resilvered_bytes`]). A block with nothing on such a member is
    /// not read at all.
    pub fn resilver(
        &self,
        offset: u64,
        len: u64,
        verify: &dyn Fn(&[u8]) -> bool,
    ) -> Result<ScrubReport, VdevError> {
        self.check_access(offset, len)?;
        let size = usize::try_from(len).expect("len <= BLOCK_SIZE_MAX fits in usize");
        let children = self.children();
        match self.layout() {
            Layout::Disk | Layout::Mirror => {
                if !children.iter().any(|c| c.needs_resilver()) {
                    return Ok(ScrubReport::default());
                }
                mirror::scrub(self, offset, size, verify, true)
            }
            Layout::Raidz { .. } | Layout::Draid(_) => {
                let parity = self.layout().parity();
                let padded = self.padded_len(size);
                let map = self.column_map(parity, offset, padded as u64);
                if !map
                    .columns
                    .iter()
                    .any(|c| children[c.child].needs_resilver())
                {
                    return Ok(ScrubReport::default());
                }
                let verify = padded_verify(size, verify);
                raidz_io::scrub(self, parity, offset, padded, &verify, true)
            }
        }
    }

    /// Whether every usable leaf's device serves submitted reads on its own thread
    /// (`Device::reads_in_parallel`), so that blocks read from several threads at once are
    /// in flight together. False when no leaf is usable, and for simulated devices, whose
    /// callers stay on one thread to keep runs deterministic.
    #[must_use]
    pub fn reads_in_parallel(&self) -> bool {
        // Asked before every read of the object layer (whether to read ahead), so it walks
        // the tree in place rather than collecting leaves and devices into vectors (those
        // allocations were a tenth of the daemon's CPU in a create loop). The children
        // lock is only ever read after construction, and a leaf's device lock is taken
        // under it only for reading.
        let children = self.children.read().unwrap_or_else(PoisonError::into_inner);
        let mut usable = false;
        for leaf in children.iter().flat_map(|child| child.members()) {
            if let Some(device) = leaf.usable_device() {
                if !device.reads_in_parallel() {
                    return false;
                }
                usable = true;
            }
        }
        usable
    }

    /// Flushes every usable leaf. Fails if more leaves failed (or are unusable) than the
    /// layout tolerates, because then acknowledged blocks may not survive.
    ///
    /// Leaves whose devices all serve I/O on threads of their own (files and disks behind
    /// `QueuedDevice`) are flushed together, one scoped thread each: a flush is an
    /// `fdatasync` that waits for the disk (a journal commit of the host filesystem for a
    /// file), and ten of them one after another made every intent-log commit and every
    /// txg's flush rounds ten times one. Other devices (the simulator's) are flushed in
    /// order, so a seeded run stays the same run.
    pub fn flush(&self) -> Result<(), VdevError> {
        let mut failed = Vec::new();
        let children = self.children();
        let flushed = self.flush_leaves(&children);
        let mut results = flushed.into_iter();
        let mut lost = 0;
        for child in &children {
            let mut any = false;
            for leaf in child.members() {
                let flushed = results.next().unwrap_or(false);
                if flushed {
                    any = true;
                } else {
                    failed.push(leaf.guid());
                }
            }
            lost += usize::from(!any);
        }
        let tolerated = self.layout().tolerated(children.len());
        if lost > tolerated {
            return Err(VdevError::FlushFailed {
                guid: self.guid(),
                failed,
                tolerated,
            });
        }
        Ok(())
    }

    /// Flushes every member leaf of `children` (in the order of `children` and their
    /// members) and says which succeeded. Devices with their own I/O threads
    /// ([`TopVdev::reads_in_parallel`]) are flushed all at once, so a commit waits for the
    /// slowest leaf rather than for the sum of them (a raidz2 of 10 files is 10 `fsync`s);
    /// simulated devices are flushed in order on this thread, which keeps runs
    /// deterministic.
    fn flush_leaves(&self, children: &[Arc<Child>]) -> Vec<bool> {
        let leaves: Vec<Arc<Leaf>> = children
            .iter()
            .flat_map(|c| c.members().iter().cloned())
            .collect();
        let flush_one = |leaf: &Arc<Leaf>| match leaf.usable_device() {
            Some(device) => leaf.flush(device.as_ref()).is_ok(),
            None => false,
        };
        if leaves.len() <= 1 || !self.reads_in_parallel() {
            return leaves.iter().map(flush_one).collect();
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> = leaves
                .iter()
                .map(|leaf| scope.spawn(move || flush_one(leaf)))
                .collect();
            handles
                .into_iter()
                // A panic in a flush is a broken invariant there: pass it on.
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    }

    /// Rewrites `data` at `data_offset` on the child positions `targets` (self-healing).
    pub(crate) fn heal(
        children: &[Arc<Child>],
        targets: &[(usize, u64, &[u8])],
        healing: &mut Healing,
    ) {
        for &(child, data_offset, data) in targets {
            children[child].heal(data_offset, data, healing);
        }
    }
}

/// A block read in flight ([`TopVdev::start_read`]).
pub struct StartedRead<'v>(Started<'v>);

enum Started<'v> {
    Mirror(mirror::Started<'v>),
    Raidz(raidz_io::Started<'v>),
    /// A dRAID block read at its padded length; the block's own length.
    Draid(raidz_io::Started<'v>, usize),
}

impl StartedRead<'_> {
    /// Waits for the reads [`TopVdev::start_read`] submitted and completes the read as
    /// [`TopVdev::read`] does: other copies, reconstruction, healing.
    pub fn finish(self, verify: &dyn Fn(&[u8]) -> bool) -> Result<ReadReport, VdevError> {
        match self.0 {
            Started::Mirror(started) => started.finish(verify),
            Started::Raidz(started) => started.finish(verify),
            Started::Draid(started, size) => {
                let verify = padded_verify(size, verify);
                let mut report = started.finish(&verify)?;
                report.data.truncate(size);
                Ok(report)
            }
        }
    }
}

/// A dRAID block is read as its padded rows: they verify when the padding is zero and the
/// block itself verifies (so a corrupt padding sector is found and healed like data).
fn padded_verify<'a>(
    size: usize,
    verify: &'a dyn Fn(&[u8]) -> bool,
) -> impl Fn(&[u8]) -> bool + 'a {
    move |data: &[u8]| data[size..].iter().all(|&b| b == 0) && verify(&data[..size])
}

impl TopVdev {
    /// The length a block of `size` bytes is written as: itself, or for dRAID padded with
    /// zeros to whole rows.
    fn padded_len(&self, size: usize) -> usize {
        match &self.draid {
            Some(geometry) => usize::try_from(geometry.padded_size(size as u64))
                .expect("a padded block fits in memory"),
            None => size,
        }
    }
}

fn check_width(layout: Layout, children: &[Child], guid: Guid) -> Result<(), &'static str> {
    if children.len() > VDEV_CHILDREN_MAX {
        return Err("a vdev has at most 255 children");
    }
    match layout {
        Layout::Disk if children.len() != 1 => return Err("a disk vdev has exactly one leaf"),
        Layout::Disk if children[0].guid() != guid => {
            return Err("a disk vdev and its leaf share one GUID");
        }
        Layout::Mirror if children.len() < 2 => return Err("a mirror needs at least 2 leaves"),
        Layout::Raidz { parity } if !(1..=RAIDZ_PARITY_MAX).contains(&usize::from(parity)) => {
            return Err("raidz parity must be 1, 2 or 3");
        }
        Layout::Raidz { parity } if children.len() <= usize::from(parity) => {
            return Err("raidz1/2/3 needs at least 2/3/4 leaves");
        }
        Layout::Draid(c) => {
            let (p, d, s) = (c.parity, c.data, c.spares);
            draid_map::check_config(children.len(), p.into(), d.into(), s.into())?;
        }
        _ => {}
    }
    let mut guids: Vec<Guid> = children
        .iter()
        .flat_map(|c| c.members().iter().map(|leaf| leaf.guid()))
        .collect();
    guids.sort_unstable();
    if guids.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err("a leaf appears twice");
    }
    Ok(())
}

/// The distributed spares of a dRAID vdev (`draid_spare`), each online on its spare device.
fn distributed_spares(
    id: VdevId,
    guid: Guid,
    geometry: &Arc<DraidGeometry>,
    list: &Arc<ChildList>,
    data_bytes: u64,
) -> Vec<Arc<Leaf>> {
    (0..geometry.spares)
        .map(|k| {
            let name = draid_spare::spare_name(geometry.parity, id.0, k);
            let spare_guid = draid_spare::spare_guid(guid, k);
            let leaf = Leaf::missing(spare_guid, name.clone(), data_bytes);
            let geometry = Arc::clone(geometry);
            let list = Arc::downgrade(list);
            let device = DraidSpareDevice::new(name, k, geometry, list, data_bytes, guid);
            leaf.set_device(Some(Arc::new(device)))
                .expect("a spare device covers the data area it was made for");
            leaf.set_distributed_spare();
            leaf.set_state(LeafState::Online);
            Arc::new(leaf)
        })
        .collect()
}

/// `child` with any placeholder of a distributed spare (read from the tree, without a
/// device) swapped for the spare itself, keeping the placeholder's resilvering mark.
fn with_spares(child: Child, spares: &[Arc<Leaf>]) -> Child {
    let [first, second] = child.members() else {
        return child;
    };
    let swap = |member: &Arc<Leaf>| match spares.iter().find(|s| s.guid() == member.guid()) {
        Some(spare) => {
            spare.set_resilvering(member.is_resilvering());
            Arc::clone(spare)
        }
        None => Arc::clone(member),
    };
    Child::interior(child.kind(), child.guid(), swap(first), swap(second))
}

fn child_from_tree(
    node: &VdevTree,
    devices: &HashMap<Guid, Arc<dyn Device>>,
) -> Result<Child, VdevError> {
    let kind = match node.kind {
        VdevKind::Replacing => ChildKind::Replacing,
        VdevKind::SpareInUse => ChildKind::Spare,
        _ => return Ok(Child::leaf(leaf_from_tree(node, devices)?)),
    };
    let [first, second] = node.children.as_slice() else {
        return Err(VdevError::InvalidConfig {
            guid: node.guid,
            why: "a replacing or spare vdev has exactly two leaves",
        });
    };
    if node.guid.0 == 0 || first.guid == second.guid {
        return Err(VdevError::InvalidConfig {
            guid: node.guid,
            why: "a replacing or spare vdev needs a GUID and two distinct leaves",
        });
    }
    let first = leaf_from_tree(first, devices)?;
    let second = leaf_from_tree(second, devices)?;
    Ok(Child::interior(kind, node.guid, first, second))
}

fn leaf_from_tree(
    node: &VdevTree,
    devices: &HashMap<Guid, Arc<dyn Device>>,
) -> Result<Arc<Leaf>, VdevError> {
    if !matches!(node.kind, VdevKind::Disk | VdevKind::DraidSpare) {
        return Err(VdevError::UnsupportedKind {
            guid: node.guid,
            kind: node.kind,
        });
    }
    if node.guid.0 == 0 {
        return Err(VdevError::InvalidConfig {
            guid: node.guid,
            why: "a leaf GUID is zero",
        });
    }
    let leaf = Leaf::missing(node.guid, node.path.clone(), node.asize);
    if let Some(device) = devices.get(&node.guid) {
        // A device too small for the recorded size is treated as missing, not as an import
        // failure: the rest of the vdev may still carry the data.
        if leaf.set_device(Some(Arc::clone(device))).is_ok() {
            leaf.set_state(LeafState::Online);
        }
    }
    if node.offline {
        leaf.set_state(LeafState::Offline);
    }
    leaf.set_resilvering(node.resilvering);
    Ok(Arc::new(leaf))
}

/// Changes to the tree: replace, spare, attach, detach and the end of a resilver. The caller
/// (the pool, under its lock, while no txg syncs) persists the new tree in the labels.
impl TopVdev {
    fn set_children(&self, children: Vec<Arc<Child>>) {
        *self
            .children
            .write()
            .unwrap_or_else(PoisonError::into_inner) = children;
    }

    fn set_layout(&self, layout: Layout, guid: Guid) {
        assert!(guid.0 != 0, "a top-level vdev has a GUID");
        *self.layout.write().unwrap_or_else(PoisonError::into_inner) = layout;
        self.guid.store(guid.0, Ordering::Release);
    }

    /// After a change of child 0 of a disk vdev, the vdev's GUID is that child's.
    fn sync_disk_guid(&self) {
        if self.layout() == Layout::Disk {
            let guid = self.children()[0].guid();
            self.guid.store(guid.0, Ordering::Release);
        }
    }

    fn position_of(&self, guid: Guid) -> Option<usize> {
        self.children()
            .iter()
            .position(|c| c.members().iter().any(|leaf| leaf.guid() == guid))
    }

    /// Puts `new` beside the plain leaf `old` under an interior node of `kind` (replacing or
    /// spare) with GUID `node_guid`; `new` is marked resilvering. When `old` stands inside a
    /// spare node, the new device replaces the whole position: `replacing { spare, new }`,
    /// and the failed original leaves the tree. Returns the leaves that left the tree.
    pub fn begin_replace(
        &self,
        old: Guid,
        new: Arc<Leaf>,
        kind: ChildKind,
        node_guid: Guid,
    ) -> Result<Vec<Arc<Leaf>>, VdevError> {
        let invalid = |why| VdevError::InvalidConfig {
            guid: self.guid(),
            why,
        };
        let index = self.position_of(old).ok_or(invalid("no such leaf"))?;
        let mut children = self.children();
        let child = Arc::clone(&children[index]);
        let (source, dropped) = match child.kind() {
            ChildKind::Leaf => (Arc::clone(&child.members()[0]), Vec::new()),
            ChildKind::Spare if kind == ChildKind::Replacing => {
                let [original, spare] = child.members() else {
                    return Err(invalid("a spare node has two leaves"));
                };
                if original.guid() != old {
                    return Err(invalid("replace the original leaf of a spare node"));
                }
                (Arc::clone(spare), vec![Arc::clone(original)])
            }
            _ => return Err(invalid("the leaf is already being replaced")),
        };
        // A distributed spare covers every slice of the vdev, whatever the failed leaf's size.
        if new.asize() < source.asize() && !new.is_distributed_spare() {
            return Err(VdevError::DeviceTooSmall {
                guid: new.guid(),
                size: new.asize(),
            });
        }
        new.set_resilvering(true);
        children[index] = Arc::new(Child::interior(kind, node_guid, source, new));
        self.set_children(children);
        self.sync_disk_guid();
        Ok(dropped)
    }

    /// Adds `new` as a mirror side beside leaf `existing` (a disk becomes a mirror with GUID
    /// `mirror_guid`); `new` is marked resilvering.
    pub fn attach(
        &self,
        existing: Guid,
        new: Arc<Leaf>,
        mirror_guid: Guid,
    ) -> Result<(), VdevError> {
        let invalid = |why| VdevError::InvalidConfig {
            guid: self.guid(),
            why,
        };
        if self.position_of(existing).is_none() {
            return Err(invalid("no such leaf"));
        }
        let layout = self.layout();
        if matches!(layout, Layout::Raidz { .. } | Layout::Draid(_)) {
            return Err(invalid("can only attach to mirrors and top-level disks"));
        }
        if self.width() >= VDEV_CHILDREN_MAX {
            return Err(invalid("a vdev has at most 255 children"));
        }
        let smallest = self.leaves().iter().map(|l| l.asize()).min().unwrap_or(0);
        if new.asize() < smallest.min(self.asize) {
            return Err(VdevError::DeviceTooSmall {
                guid: new.guid(),
                size: new.asize(),
            });
        }
        new.set_resilvering(true);
        let mut children = self.children();
        children.push(Arc::new(Child::leaf(new)));
        self.set_children(children);
        if layout == Layout::Disk {
            self.set_layout(Layout::Mirror, mirror_guid);
        }
        Ok(())
    }

    /// Removes leaf `guid`: a member of a replacing or spare node (the other member takes its
    /// position) or a mirror side (a mirror of two becomes a disk). Refused when no readable
    /// copy of the data would remain. Returns the leaf removed.
    pub fn detach(&self, guid: Guid) -> Result<Arc<Leaf>, VdevError> {
        let invalid = |why| VdevError::InvalidConfig {
            guid: self.guid(),
            why,
        };
        let index = self.position_of(guid).ok_or(invalid("no such leaf"))?;
        let mut children = self.children();
        let child = Arc::clone(&children[index]);
        let leaf = child
            .members()
            .iter()
            .find(|l| l.guid() == guid)
            .cloned()
            .expect("position_of found the leaf in this child");
        if let Some(rest) = child.without(guid) {
            let lost = children.iter().filter(|c| !c.is_readable()).count();
            let was_readable = child.is_readable();
            if was_readable && !rest.is_readable() && lost + 1 > self.tolerated() {
                return Err(invalid("no valid replicas"));
            }
            children[index] = Arc::new(rest);
        } else {
            if self.layout() != Layout::Mirror {
                return Err(invalid(
                    "can only detach from mirrors, replacing and spare vdevs",
                ));
            }
            let others_readable = children
                .iter()
                .enumerate()
                .any(|(i, c)| i != index && c.is_readable());
            if !others_readable {
                return Err(invalid("no valid replicas"));
            }
            children.remove(index);
        }
        let single = children.len() == 1;
        self.set_children(children);
        if single {
            let guid = self.children()[0].guid();
            self.set_layout(Layout::Disk, guid);
        }
        self.sync_disk_guid();
        Ok(leaf)
    }

    fn tolerated(&self) -> usize {
        self.layout().tolerated(self.width())
    }

    /// Ends a resilver: every usable member being resilvered is complete; a replacing node
    /// drops its old member (the new one takes the position). Returns the leaves that left
    /// the tree.
    pub fn finish_resilver(&self) -> Vec<Arc<Leaf>> {
        let mut removed = Vec::new();
        let mut children = self.children();
        for child in &mut children {
            let mut done = false;
            for leaf in child.members() {
                if leaf.is_resilvering() && leaf.is_usable() {
                    leaf.set_resilvering(false);
                    done = true;
                }
            }
            if done && child.kind() == ChildKind::Replacing {
                let old = Arc::clone(&child.members()[0]);
                if let Some(rest) = child.without(old.guid()) {
                    *child = Arc::new(rest);
                    removed.push(old);
                }
            }
        }
        self.set_children(children);
        self.sync_disk_guid();
        removed
    }
}
