//! Distributed spares: the spare space of a dRAID vdev seen as a leaf, so that the hot-spare
//! machinery (a `spare` node over the failed leaf and its stand-in, resilver, replace, detach)
//! works unchanged.
//!
//! # Model
//! Distributed spare `k` of a dRAID vdev is a [`Leaf`] (named `draid<p>-<top id>-<k>`, as
//! ZFS names them) whose device is a [`DraidSpareDevice`]. Byte `DATA_START + o` of that
//! device is byte `DATA_START + o` of child `perm_i[u + k]`, the child holding spare `k` in
//! the slice `i` that `o` falls in (`draid_map`). A failed child's column at child offset
//! `o` thus lands in the same slice on a child that holds no column of that slice, so no
//! group ever has two columns on one child.
//! ```text
//!  spare{ d5 (FAULTED), draid2-0-0 }          column of d5 at o (slice i)
//!                         └── DraidSpareDevice ──► child perm_i[u + 0], byte DATA_START + o
//! ```
//! The device reaches the children through a weak reference to the vdev's child list, and
//! uses only their real leaves (never another distributed spare): spare space on a child
//! that is itself out of service is simply unavailable (I/O error there: parity covers it).
//!
//! # Invariants
//! - I1: a distributed spare's GUID and name follow from its vdev (GUID, id, index): the
//!   same on every import. Its vdev-tree node has kind `dspare` and no device is searched for
//!   it at import.
//! - I2: its label area holds nothing: label writes are dropped, label reads return zeros;
//!   the pool writes no labels to it (`Leaf::is_distributed_spare`).
//! - I3: an access never crosses a slice (split here), so each piece lands on one child.
//!
//! # Not here
//! When a spare steps in or is released (the engine), the sequential rebuild of the spare
//! (`rebuild`).

use std::sync::{Arc, RwLock, Weak};

use tarn_device::{Device, DeviceError};
use tarn_format::label::{DATA_START, LABEL_SIZE};

use crate::child::Child;
use crate::draid_map::DraidGeometry;
use crate::leaf::Leaf;

/// One slice-sized piece of an access: the real leaf, its device, the data-area offset
/// there and the range of the caller's buffer.
type Piece<'a> = (&'a Leaf, &'a dyn Device, u64, std::ops::Range<usize>);
type Io = Result<(), DeviceError>;

/// The children list a spare device reaches through (shared with its `TopVdev`).
pub(crate) type ChildList = RwLock<Vec<Arc<Child>>>;

/// The device behind distributed spare `spare` of one dRAID vdev (module docs).
#[derive(Debug)]
pub struct DraidSpareDevice {
    name: String,
    spare: usize,
    geometry: Arc<DraidGeometry>,
    children: Weak<ChildList>,
    /// Bytes of the child data area the spare covers (the vdev's smallest leaf).
    data_bytes: u64,
    /// The GUIDs of every distributed spare of the vdev, by index (to follow a chain).
    spare_guids: Vec<tarn_base::Guid>,
}

impl DraidSpareDevice {
    pub(crate) fn new(
        name: String,
        spare: usize,
        geometry: Arc<DraidGeometry>,
        children: Weak<ChildList>,
        data_bytes: u64,
        top: tarn_base::Guid,
    ) -> DraidSpareDevice {
        assert!(
            spare < geometry.spares,
            "spare {spare} of {}",
            geometry.spares
        );
        let spare_guids = (0..geometry.spares).map(|k| spare_guid(top, k)).collect();
        DraidSpareDevice {
            name,
            spare,
            geometry,
            children,
            data_bytes,
            spare_guids,
        }
    }

    /// The real leaf holding this spare's bytes at data offset `at`, and the bytes left in
    /// its slice from there. When the child at this spare's position is out of service and
    /// another distributed spare stands in for it, the bytes are in that spare's space of
    /// the same slice (free: a child at a spare position has no columns there), and so on;
    /// the chain only visits spare positions, so it ends within `s` steps.
    fn target(&self, at: u64) -> Result<(Arc<Leaf>, u64), DeviceError> {
        let gone = || DeviceError::Io {
            offset: DATA_START + at,
            source: std::io::Error::other("distributed spare space unavailable"),
        };
        let children = self.children.upgrade().ok_or(DeviceError::Gone)?;
        let sector = at >> self.geometry.ashift;
        let slice_bytes = self.geometry.slice_child_sectors() << self.geometry.ashift;
        let left = slice_bytes - at % slice_bytes;
        let list = children
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut spare = self.spare;
        for _ in 0..self.geometry.spares {
            let child = self.geometry.spare_child(spare, sector);
            let members = list.get(child).ok_or_else(gone)?.members();
            if let Some(leaf) = members
                .iter()
                .find(|leaf| !leaf.is_distributed_spare() && leaf.is_usable())
            {
                return Ok((Arc::clone(leaf), left));
            }
            let next = members.iter().find_map(|leaf| {
                let index = self.spare_guids.iter().position(|g| *g == leaf.guid())?;
                (leaf.is_usable() && index != spare).then_some(index)
            });
            spare = next.ok_or_else(gone)?;
        }
        Err(gone())
    }

    /// Runs `io` on each slice-sized piece of `[offset, offset + len)` (I3); label-area
    /// pieces are skipped (I2).
    fn pieces(&self, offset: u64, len: usize, mut io: impl FnMut(Piece<'_>) -> Io) -> Io {
        tarn_device::check_range(offset, len as u64, self.size_bytes())?;
        let mut done = 0usize;
        while done < len {
            let at = offset + done as u64;
            if at < DATA_START || at >= DATA_START + self.data_bytes {
                let step = if at < DATA_START {
                    (DATA_START - at).min((len - done) as u64)
                } else {
                    (len - done) as u64
                };
                done += usize::try_from(step).expect("step <= len");
                continue;
            }
            let data_at = at - DATA_START;
            let (leaf, left) = self.target(data_at)?;
            let end_of_data = self.data_bytes - data_at;
            let step = left.min(end_of_data).min((len - done) as u64);
            let step = usize::try_from(step).expect("step <= len");
            let device = leaf.usable_device().ok_or(DeviceError::Gone)?;
            io((&leaf, device.as_ref(), data_at, done..done + step))?;
            done += step;
        }
        Ok(())
    }
}

impl Device for DraidSpareDevice {
    fn size_bytes(&self) -> u64 {
        (DATA_START + self.data_bytes).next_multiple_of(LABEL_SIZE) + 2 * LABEL_SIZE
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        buf.fill(0);
        self.pieces(offset, buf.len(), |(leaf, device, at, range)| {
            leaf.read(device, at, &mut buf[range])
        })
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.pieces(offset, data.len(), |(leaf, device, at, range)| {
            leaf.write(device, at, &data[range])
        })
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let children = self.children.upgrade().ok_or(DeviceError::Gone)?;
        let list = children
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for leaf in list.iter().flat_map(|c| c.members()) {
            if !leaf.is_distributed_spare()
                && let Some(device) = leaf.usable_device()
            {
                // A child's own flush failure is reported by its own leaf's flush.
                let _ = device.flush();
            }
        }
        Ok(())
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        tarn_device::check_range(offset, len, self.size_bytes())
    }

    fn path(&self) -> &str {
        &self.name
    }
}

/// The GUID of distributed spare `spare` of the dRAID vdev with GUID `top` (I1): SplitMix64
/// of the two, never zero.
#[must_use]
pub fn spare_guid(top: tarn_base::Guid, spare: usize) -> tarn_base::Guid {
    let mut z = top.0 ^ (spare as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    tarn_base::Guid((z ^ (z >> 31)).max(1))
}

/// The name of distributed spare `spare` of dRAID vdev `id` with parity `parity`.
#[must_use]
pub fn spare_name(parity: usize, id: u32, spare: usize) -> String {
    format!("draid{parity}-{id}-{spare}")
}
