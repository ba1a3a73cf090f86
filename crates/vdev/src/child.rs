//! One child position of a top-level vdev: a leaf, or while a device is being replaced or a
//! hot spare stands in for it, an interior `replacing` or `spare` node over two leaves.
//!
//! ```text
//!  raidz2 ── child 0: leaf d0
//!         ├─ child 1: replacing-1 { d1 (old), d9 (new, resilvering) }
//!         └─ child 2: spare-2     { d2 (faulted), s0 (spare) }
//! ```
//! A child position is what raidz columns and mirror copies are addressed to, so the interior
//! node behaves like a small mirror: a write goes to every usable member, a read goes to the
//! first *readable* member (usable and not resilvering). A member that is resilvering has
//! incomplete data: it takes every write but is never read until the resilver finishes, so a
//! block it missed is reconstructed from the other children instead (the one-flag form of
//! ZFS's dirty-time log; coarser, never wrong).
//!
//! A [`Child`] is immutable; the top-level vdev swaps whole children when the tree changes,
//! so I/O in flight keeps the snapshot it started with.

use std::sync::Arc;

use tarn_base::Guid;
use tarn_device::SharedBytes;
use tarn_format::label::VdevKind;

use crate::leaf::Leaf;
use crate::top::Healing;

/// What a child position holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChildKind {
    /// One leaf.
    Leaf,
    /// A device being replaced: members old, new.
    Replacing,
    /// A hot spare in use: members original, spare.
    Spare,
}

impl ChildKind {
    /// The vdev-tree kind of an interior child (`None` for a plain leaf).
    #[must_use]
    pub fn tree_kind(self) -> Option<VdevKind> {
        match self {
            ChildKind::Leaf => None,
            ChildKind::Replacing => Some(VdevKind::Replacing),
            ChildKind::Spare => Some(VdevKind::SpareInUse),
        }
    }
}

/// One child position (see the module docs).
#[derive(Clone, Debug)]
pub struct Child {
    kind: ChildKind,
    guid: Guid,
    members: Vec<Arc<Leaf>>,
}

impl Child {
    /// A plain leaf.
    #[must_use]
    pub fn leaf(leaf: Arc<Leaf>) -> Child {
        Child {
            kind: ChildKind::Leaf,
            guid: leaf.guid(),
            members: vec![leaf],
        }
    }

    /// An interior node of `kind` (replacing or spare) over `first` and `second`.
    #[must_use]
    pub fn interior(kind: ChildKind, guid: Guid, first: Arc<Leaf>, second: Arc<Leaf>) -> Child {
        assert!(
            kind != ChildKind::Leaf,
            "an interior child is replacing or spare"
        );
        assert!(guid.0 != 0, "an interior child has a GUID");
        assert!(
            first.guid() != second.guid(),
            "the members of {guid} are distinct leaves"
        );
        Child {
            kind,
            guid,
            members: vec![first, second],
        }
    }

    /// Kind.
    #[must_use]
    pub fn kind(&self) -> ChildKind {
        self.kind
    }

    /// GUID: the leaf's for a plain leaf, the interior node's otherwise.
    #[must_use]
    pub fn guid(&self) -> Guid {
        self.guid
    }

    /// The leaves, in tree order (old or original first).
    #[must_use]
    pub fn members(&self) -> &[Arc<Leaf>] {
        &self.members
    }

    /// The leaf reads go to: the first usable, complete member.
    #[must_use]
    pub fn read_leaf(&self) -> Option<&Arc<Leaf>> {
        self.members.iter().find(|leaf| leaf.is_readable())
    }

    /// Whether some member can serve reads.
    #[must_use]
    pub fn is_readable(&self) -> bool {
        self.read_leaf().is_some()
    }

    /// Whether some member takes writes.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        self.members.iter().any(|leaf| leaf.is_usable())
    }

    /// Whether a member is being resilvered.
    #[must_use]
    pub fn needs_resilver(&self) -> bool {
        self.members
            .iter()
            .any(|leaf| leaf.is_resilvering() && leaf.is_usable())
    }

    /// Writes `data` to every usable member; returns whether a member that will be read took
    /// it (a complete one, or one being resilvered), and the members that missed it.
    pub(crate) fn write(
        &self,
        data_offset: u64,
        data: &SharedBytes,
        missed: &mut Vec<Guid>,
    ) -> bool {
        let mut taken = false;
        for leaf in &self.members {
            let ok = match leaf.usable_device() {
                Some(device) => leaf
                    .write_shared(device.as_ref(), data_offset, data)
                    .is_ok(),
                None => false,
            };
            if ok {
                taken = true;
            } else {
                missed.push(leaf.guid());
            }
        }
        taken
    }

    /// Rewrites `data` on every usable member (self-healing: the position held bad bytes).
    pub(crate) fn heal(&self, data_offset: u64, data: &[u8], healing: &mut Healing) {
        for leaf in &self.members {
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

    /// Writes `data` to the members being resilvered; returns the bytes written.
    pub(crate) fn resilver(&self, data_offset: u64, data: &[u8], healing: &mut Healing) -> u64 {
        let mut written = 0;
        for leaf in self.members.iter().filter(|leaf| leaf.is_resilvering()) {
            let ok = match leaf.usable_device() {
                Some(device) => leaf.write(device.as_ref(), data_offset, data).is_ok(),
                None => false,
            };
            if ok {
                written += data.len() as u64;
            } else {
                healing.heal_failed.push(leaf.guid());
            }
        }
        healing.resilvered_bytes += written;
        written
    }

    /// This child with member `guid` removed (the other member becomes a plain leaf), or
    /// `None` if `guid` is not a member of an interior child.
    #[must_use]
    pub fn without(&self, guid: Guid) -> Option<Child> {
        if self.kind == ChildKind::Leaf {
            return None;
        }
        let rest: Vec<&Arc<Leaf>> = self.members.iter().filter(|l| l.guid() != guid).collect();
        (rest.len() == 1).then(|| Child::leaf(Arc::clone(rest[0])))
    }
}
