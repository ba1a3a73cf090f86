//! Top-level vdevs: construction and validation, the on-disk tree form, health, allocation
//! size, and the dispatch of writes, reads, scrubs and flushes to the layouts.

use crate::error::VdevError;
use crate::leaf::{Leaf, LeafState};
use crate::raidz_math::Impl;
use crate::{mirror, raidz_io, raidz_map};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use tarn_base::limits::{
    ASHIFT_MAX, ASHIFT_MIN, BLOCK_SIZE_MAX, RAIDZ_PARITY_MAX, VDEV_CHILDREN_MAX,
};
use tarn_base::{Guid, VdevId};
use tarn_device::Device;
use tarn_format::label::{VdevKind, VdevTree};

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
}

impl Layout {
    /// How many unusable leaves a vdev of `children` leaves survives.
    #[must_use]
    pub fn tolerated(self, children: usize) -> usize {
        match self {
            Layout::Disk => 0,
            Layout::Mirror => children.saturating_sub(1),
            Layout::Raidz { parity } => usize::from(parity),
        }
    }

    /// The vdev-tree kind of this layout.
    #[must_use]
    pub fn kind(self) -> VdevKind {
        match self {
            Layout::Disk => VdevKind::Disk,
            Layout::Mirror => VdevKind::Mirror,
            Layout::Raidz { parity } => VdevKind::Raidz { parity },
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
    guid: Guid,
    ashift: u8,
    layout: Layout,
    children: Vec<Arc<Leaf>>,
    asize: u64,
    metaslab_shift: AtomicU8,
    next_child: AtomicUsize,
    parity_impl: Impl,
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
        let invalid = |why| VdevError::InvalidConfig { guid, why };
        if guid.0 == 0 {
            return Err(invalid("the GUID must not be zero"));
        }
        if !(ASHIFT_MIN..=ASHIFT_MAX).contains(&ashift) {
            return Err(invalid("ashift must be between 9 and 16"));
        }
        check_width(layout, &children, guid).map_err(invalid)?;
        let sector = 1u64 << ashift;
        let smallest =
            children.iter().map(|leaf| leaf.asize()).min().unwrap_or(0) / sector * sector;
        if smallest == 0 {
            return Err(invalid("a leaf has no room for a single sector"));
        }
        let asize = match layout {
            Layout::Disk | Layout::Mirror => smallest,
            Layout::Raidz { .. } => smallest * children.len() as u64,
        };
        Ok(TopVdev {
            id,
            guid,
            ashift,
            layout,
            children,
            asize,
            metaslab_shift: AtomicU8::new(0),
            next_child: AtomicUsize::new(0),
            parity_impl: Impl::best(),
        })
    }

    /// Rebuilds a top-level vdev from its label form, attaching the devices found for its
    /// leaves by GUID. A leaf without a device (or with one too small) is
    /// [`LeafState::Unavail`]; one recorded offline stays [`LeafState::Offline`]. The recorded
    /// `asize` is kept (block addresses depend on it) after checking the leaves can hold it.
    pub fn from_tree(
        tree: &VdevTree,
        devices: &HashMap<Guid, Arc<dyn Device>>,
    ) -> Result<TopVdev, VdevError> {
        let layout = match tree.kind {
            VdevKind::Disk => Layout::Disk,
            VdevKind::Mirror => Layout::Mirror,
            VdevKind::Raidz { parity } => Layout::Raidz { parity },
            kind => {
                return Err(VdevError::UnsupportedKind {
                    guid: tree.guid,
                    kind,
                });
            }
        };
        let children = if layout == Layout::Disk {
            vec![leaf_from_tree(tree, devices)?]
        } else {
            tree.children
                .iter()
                .map(|node| leaf_from_tree(node, devices))
                .collect::<Result<_, _>>()?
        };
        let mut top = TopVdev::new(VdevId(tree.id), tree.guid, tree.ashift, layout, children)?;
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

    /// The label form of this vdev (a single `Disk` node for [`Layout::Disk`]).
    #[must_use]
    pub fn to_tree(&self) -> VdevTree {
        let leaf_node = |index: usize, leaf: &Leaf| VdevTree {
            kind: VdevKind::Disk,
            guid: leaf.guid(),
            id: u32::try_from(index).expect("children <= VDEV_CHILDREN_MAX"),
            ashift: self.ashift,
            asize: leaf.asize(),
            metaslab_shift: 0,
            path: leaf.path(),
            children: Vec::new(),
            offline: leaf.state() == LeafState::Offline,
        };
        let mut node = match self.layout {
            Layout::Disk => leaf_node(0, &self.children[0]),
            Layout::Mirror | Layout::Raidz { .. } => VdevTree {
                kind: self.layout.kind(),
                guid: self.guid,
                id: 0,
                ashift: self.ashift,
                asize: 0,
                metaslab_shift: 0,
                path: String::new(),
                children: self
                    .children
                    .iter()
                    .enumerate()
                    .map(|(i, l)| leaf_node(i, l))
                    .collect(),
                offline: false,
            },
        };
        node.id = self.id.0;
        node.asize = self.asize;
        node.metaslab_shift = self.metaslab_shift();
        node
    }

    /// Index in the pool (the DVA vdev number).
    #[must_use]
    pub fn id(&self) -> VdevId {
        self.id
    }

    /// GUID.
    #[must_use]
    pub fn guid(&self) -> Guid {
        self.guid
    }

    /// Sector size shift.
    #[must_use]
    pub fn ashift(&self) -> u8 {
        self.ashift
    }

    /// Layout.
    #[must_use]
    pub fn layout(&self) -> Layout {
        self.layout
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

    /// The leaves, in child order.
    #[must_use]
    pub fn leaves(&self) -> &[Arc<Leaf>] {
        &self.children
    }

    /// The leaf with `guid`, if it is a child of this vdev.
    #[must_use]
    pub fn leaf(&self, guid: Guid) -> Option<&Arc<Leaf>> {
        self.children.iter().find(|leaf| leaf.guid() == guid)
    }

    /// Health from the leaves' states.
    #[must_use]
    pub fn health(&self) -> Health {
        let unusable: Vec<&Arc<Leaf>> = self.children.iter().filter(|l| !l.is_usable()).collect();
        if unusable.is_empty() {
            Health::Online
        } else if unusable.len() <= self.layout.tolerated(self.children.len()) {
            Health::Degraded
        } else if unusable
            .iter()
            .all(|l| matches!(l.state(), LeafState::Unavail | LeafState::Removed))
        {
            Health::Unavail
        } else {
            Health::Faulted
        }
    }

    /// Bytes of address space a block of `psize` bytes occupies (sector-rounded; for raidz
    /// with parity and padding, see [`raidz_map::allocation_size`]).
    #[must_use]
    pub fn allocation_size(&self, psize: u64) -> u64 {
        match self.layout {
            Layout::Disk | Layout::Mirror => psize.max(1).div_ceil(self.sector()) * self.sector(),
            Layout::Raidz { parity } => raidz_map::allocation_size(
                self.children.len(),
                usize::from(parity),
                self.ashift,
                psize,
            ),
        }
    }

    pub(crate) fn sector(&self) -> u64 {
        1u64 << self.ashift
    }

    pub(crate) fn parity_impl(&self) -> Impl {
        self.parity_impl
    }

    pub(crate) fn next_child(&self) -> usize {
        self.next_child.fetch_add(1, Ordering::Relaxed) % self.children.len()
    }

    /// Checks an access of `len` bytes at `offset`: sector aligned, not empty, at most one
    /// maximum-size block, and inside the address space with its allocated size.
    fn check_access(&self, offset: u64, len: u64) -> Result<(), VdevError> {
        let sector = self.sector();
        if len == 0 || !offset.is_multiple_of(sector) || !len.is_multiple_of(sector) {
            return Err(VdevError::Misaligned {
                guid: self.guid,
                offset,
                len,
                sector,
            });
        }
        let out_of_range = VdevError::OutOfRange {
            guid: self.guid,
            offset,
            len,
            asize: self.asize,
        };
        if len > BLOCK_SIZE_MAX {
            return Err(out_of_range);
        }
        match offset.checked_add(self.allocation_size(len)) {
            Some(end) if end <= self.asize => Ok(()),
            _ => Err(out_of_range),
        }
    }

    /// Writes one block (`data.len()` a multiple of the sector size) at top-level `offset`.
    /// Succeeds if the block is readable afterwards: at least one mirror child, or all but at
    /// most `parity` raidz columns, took it. Unusable leaves are skipped and reported.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<WriteReport, VdevError> {
        self.check_access(offset, data.len() as u64)?;
        match self.layout {
            Layout::Disk | Layout::Mirror => mirror::write(self, offset, data),
            Layout::Raidz { parity } => raidz_io::write(self, usize::from(parity), offset, data),
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
        self.check_access(offset, len)?;
        let size = usize::try_from(len).expect("len <= BLOCK_SIZE_MAX fits in usize");
        match self.layout {
            Layout::Disk | Layout::Mirror => mirror::read(self, offset, size, verify),
            Layout::Raidz { parity } => {
                raidz_io::read(self, usize::from(parity), offset, size, verify)
            }
        }
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
        match self.layout {
            Layout::Disk | Layout::Mirror => mirror::scrub(self, offset, size, verify),
            Layout::Raidz { parity } => {
                raidz_io::scrub(self, usize::from(parity), offset, size, verify)
            }
        }
    }

    /// Flushes every usable leaf. Fails if more leaves failed (or are unusable) than the
    /// layout tolerates, because then acknowledged blocks may not survive.
    pub fn flush(&self) -> Result<(), VdevError> {
        let mut failed = Vec::new();
        for leaf in &self.children {
            let flushed = match leaf.usable_device() {
                Some(device) => leaf.flush(device.as_ref()).is_ok(),
                None => false,
            };
            if !flushed {
                failed.push(leaf.guid());
            }
        }
        let tolerated = self.layout.tolerated(self.children.len());
        if failed.len() > tolerated {
            return Err(VdevError::FlushFailed {
                guid: self.guid,
                failed,
                tolerated,
            });
        }
        Ok(())
    }

    /// Rewrites `data` at `data_offset` on the leaves `targets` (self-healing).
    pub(crate) fn heal(&self, targets: &[(usize, u64, &[u8])], healing: &mut Healing) {
        for &(child, data_offset, data) in targets {
            let leaf = &self.children[child];
            let written = match leaf.usable_device() {
                Some(device) => leaf.write(device.as_ref(), data_offset, data).is_ok(),
                None => false,
            };
            if written {
                healing.repaired.push(leaf.guid());
                healing.repaired_bytes += data.len() as u64;
            } else {
                healing.heal_failed.push(leaf.guid());
            }
        }
    }
}

fn check_width(layout: Layout, children: &[Arc<Leaf>], guid: Guid) -> Result<(), &'static str> {
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
        _ => {}
    }
    let mut guids: Vec<Guid> = children.iter().map(|leaf| leaf.guid()).collect();
    guids.sort_unstable();
    if guids.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err("a leaf appears twice");
    }
    Ok(())
}

fn leaf_from_tree(
    node: &VdevTree,
    devices: &HashMap<Guid, Arc<dyn Device>>,
) -> Result<Arc<Leaf>, VdevError> {
    if node.kind != VdevKind::Disk {
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
    Ok(Arc::new(leaf))
}
