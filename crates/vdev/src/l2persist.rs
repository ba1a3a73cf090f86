//! The persistent side of a cache device's ring (see `l2cache`'s module docs): logical ring
//! positions and the reservation, log blocks and headers, and the rebuild at import.

use std::collections::HashMap;
use std::sync::Arc;

use tarn_base::Guid;
use tarn_format::l2cache::{
    L2_ENTRY_SIZE, L2_HEADER_SLOTS, L2_LOG_BLOCK_MAX, L2_LOG_ENTRIES_MAX, L2_LOG_HEAD_SIZE,
    L2_RING_START, L2Entry, L2Header, L2LogBlock, L2LogPtr, l2_header_offset,
};

use crate::l2cache::{L2Key, L2Rebuild, Ring, Slot};
use crate::leaf::Leaf;

/// Room kept between the hand and the reservation: a log block and the tail it may skip.
const HEADROOM: u64 = 2 * L2_LOG_BLOCK_MAX as u64;

impl Ring {
    /// A ring on `leaf` that knows of no header (it starts empty at position 0).
    pub(crate) fn new(leaf: Arc<Leaf>, sector: u64) -> Ring {
        let capacity = leaf.asize().saturating_sub(L2_RING_START) / sector * sector;
        Ring {
            leaf,
            capacity,
            hand: 0,
            reserved: 0,
            sequence: 0,
            newest: L2LogPtr::default(),
            fresh: true,
            pending: Vec::new(),
            slots: std::collections::BTreeMap::new(),
        }
    }

    /// Data-area offset of logical position `position`.
    pub(crate) fn data_offset(&self, position: u64) -> u64 {
        L2_RING_START + position % self.capacity
    }

    /// Where a write of `len` bytes would start: the hand, or the next lap's start when it
    /// does not fit before the end of the ring (the tail is skipped).
    fn start_for(&self, len: u64) -> u64 {
        let at = self.hand % self.capacity;
        if at + len > self.capacity {
            self.hand + (self.capacity - at)
        } else {
            self.hand
        }
    }

    /// How far a header written now reserves, for a write of `len` bytes coming next.
    fn reservation_for(&self, len: u64) -> u64 {
        let step = (self.capacity / 16 / L2_LOG_BLOCK_MAX as u64).max(1) * L2_LOG_BLOCK_MAX as u64;
        self.start_for(len) + len + HEADROOM + step
    }

    /// Claims `len` bytes at the hand for a block copy, first persisting when the write would
    /// come too close to the reservation (I3). `None` when no header could be written.
    pub(crate) fn claim_data(
        &mut self,
        len: u64,
        pool: Guid,
        sector: u64,
        index: &mut HashMap<L2Key, Slot>,
    ) -> Option<u64> {
        if self.start_for(len) + len + HEADROOM > self.reserved {
            self.persist(pool, sector, len, index).ok()?;
        }
        let start = self.claim(len, index);
        assert!(
            start + len + HEADROOM <= self.reserved,
            "I3: write at {start}+{len} past the reservation {}",
            self.reserved
        );
        Some(start)
    }

    /// Moves the hand past `len` bytes (skipping the tail when they do not fit before the
    /// end) and forgets every block stored where they go (I1). Returns their position.
    fn claim(&mut self, len: u64, index: &mut HashMap<L2Key, Slot>) -> u64 {
        assert!(len > 0 && len <= self.capacity, "claim of {len} bytes");
        let start = self.start_for(len);
        let from = start % self.capacity;
        let to = from + len;
        // A slot that starts before `from` may reach into the claimed range.
        let first = self
            .slots
            .range(..from)
            .next_back()
            .filter(|(offset, (_, slot_len))| *offset + slot_len > from)
            .map_or(from, |(offset, _)| *offset);
        let doomed: Vec<u64> = self.slots.range(first..to).map(|(o, _)| *o).collect();
        for offset in doomed {
            if let Some((key, _)) = self.slots.remove(&offset) {
                index.remove(&key);
            }
        }
        self.hand = start + len;
        start
    }

    /// Remembers a copy written at `position` for the next log block; a full list is
    /// written at once.
    pub(crate) fn log_entry(
        &mut self,
        key: L2Key,
        psize: u64,
        position: u64,
        pool: Guid,
        sector: u64,
        index: &mut HashMap<L2Key, Slot>,
    ) {
        self.pending.push(L2Entry {
            vdev: key.vdev,
            psize: u32::try_from(psize).expect("a block's psize fits u32"),
            offset: key.offset,
            birth: key.birth,
            position,
            checksum: key.checksum,
        });
        if self.pending.len() >= L2_LOG_ENTRIES_MAX {
            let _ = self.persist(pool, sector, 0, index);
        }
        assert!(
            self.pending.len() <= L2_LOG_ENTRIES_MAX,
            "pending entries bounded"
        );
    }

    /// Flushes the copies, writes a log block of the pending entries (when it fits below the
    /// reservation), flushes, writes a header reserving room for a write of `next` bytes,
    /// and flushes (I3, I4). The pending entries are gone afterwards, logged or not.
    pub(crate) fn persist(
        &mut self,
        pool: Guid,
        sector: u64,
        next: u64,
        index: &mut HashMap<L2Key, Slot>,
    ) -> Result<(), ()> {
        let pending = std::mem::take(&mut self.pending);
        let device = self.leaf.usable_device().ok_or(())?;
        let device = device.as_ref();
        let flushed = self.leaf.flush(device).is_ok();
        let length = (L2_LOG_HEAD_SIZE + pending.len() * L2_ENTRY_SIZE + 32) as u64;
        let padded = length.next_multiple_of(sector);
        if flushed && !pending.is_empty() && self.start_for(padded) + padded <= self.reserved {
            // The block is not in the index, but what it overwrites is: claim forgets it.
            let position = self.claim(padded, index);
            let block = L2LogBlock {
                pool_guid: pool,
                device_guid: self.leaf.guid(),
                position,
                prev: self.newest,
                entries: pending,
            };
            let (mut bytes, ptr) = block.encode();
            bytes.resize(padded as usize, 0);
            let offset = self.data_offset(position);
            if self.leaf.write(device, offset, &bytes).is_ok() && self.leaf.flush(device).is_ok() {
                self.newest = ptr;
            }
        }
        self.sequence += 1;
        let header = L2Header {
            pool_guid: pool,
            device_guid: self.leaf.guid(),
            sequence: self.sequence,
            capacity: self.capacity,
            reserved: self.reserved.max(self.reservation_for(next)),
            newest: self.newest,
        };
        let mut slot = header.encode();
        slot.resize(sector as usize, 0);
        let slots = if self.fresh { L2_HEADER_SLOTS } else { 1 };
        for n in 0..slots {
            let offset = l2_header_offset(self.sequence + n);
            self.leaf.write(device, offset, &slot).map_err(|_| ())?;
        }
        self.leaf.flush(device).map_err(|_| ())?;
        self.fresh = false;
        self.reserved = header.reserved;
        Ok(())
    }
}

impl Ring {
    /// The newest header of this pool and this device in either slot, if one decodes and
    /// describes a ring of this capacity.
    fn newest_header(&self, pool: Guid, sector: u64) -> Option<L2Header> {
        let device = self.leaf.usable_device()?;
        let mut best: Option<L2Header> = None;
        for slot in 0..L2_HEADER_SLOTS {
            let mut buf = vec![0u8; sector as usize];
            if self
                .leaf
                .read(device.as_ref(), l2_header_offset(slot), &mut buf)
                .is_err()
            {
                continue;
            }
            let Ok(header) = L2Header::decode(&buf) else {
                continue;
            };
            let ours = header.pool_guid == pool && header.device_guid == self.leaf.guid();
            if ours
                && header.capacity == self.capacity
                && best.is_none_or(|b| header.sequence > b.sequence)
            {
                best = Some(header);
            }
        }
        best
    }

    /// Rebuilds this ring's part of the index from its header and log blocks, newest first
    /// (module docs of `l2cache`); a device without a header of its own starts empty.
    pub(crate) fn rebuild(
        &mut self,
        pool: Guid,
        sector: u64,
        index: &mut HashMap<L2Key, Slot>,
    ) -> L2Rebuild {
        let mut report = L2Rebuild {
            device: self.leaf.guid(),
            path: self.leaf.path(),
            stopped: "no header of this pool and device".into(),
            ..L2Rebuild::default()
        };
        if self.capacity == 0 {
            return report;
        }
        let Some(header) = self.newest_header(pool, sector) else {
            return report;
        };
        // Adopt the header: the ring goes on from its reservation (I3), since anything up
        // to it may have been written.
        self.sequence = header.sequence;
        self.reserved = header.reserved;
        self.hand = header.reserved;
        self.newest = header.newest;
        self.fresh = false;
        let oldest = header.reserved.saturating_sub(self.capacity);
        let mut ptr = header.newest;
        // Each log block takes at least one sector of the ring: a bound on the walk.
        let mut budget = self.capacity / sector + 1;
        report.stopped = "end of chain".into();
        while ptr.is_some() {
            if budget == 0 {
                report.stopped = "the chain is longer than the ring holds".into();
                break;
            }
            budget -= 1;
            let block = match self.read_log_block(&ptr, oldest, header.reserved, pool, sector) {
                Ok(block) => block,
                Err(why) => {
                    report.stopped = format!("log block at ring position {}: {why}", ptr.position);
                    break;
                }
            };
            report.log_blocks += 1;
            for entry in block.entries.iter().rev() {
                if let Some(len) = self.restore(entry, ptr.position, oldest, sector, index) {
                    report.entries += 1;
                    report.bytes += len;
                }
            }
            if block.prev.is_some() && block.prev.position >= ptr.position {
                report.stopped = format!("log block at {} names a newer one", ptr.position);
                break;
            }
            ptr = block.prev;
        }
        report
    }

    /// Reads and checks the log block `ptr` names: inside the part of the ring that may not
    /// have been overwritten (`oldest..reserved`), checksummed, of this pool and device.
    fn read_log_block(
        &self,
        ptr: &L2LogPtr,
        oldest: u64,
        reserved: u64,
        pool: Guid,
        sector: u64,
    ) -> Result<L2LogBlock, String> {
        let len = u64::from(ptr.length).next_multiple_of(sector);
        if ptr.position < oldest || ptr.position.saturating_add(len) > reserved {
            return Err("overwritten by the ring since".into());
        }
        if ptr.position % self.capacity + len > self.capacity || len > L2_LOG_BLOCK_MAX as u64 {
            return Err("does not fit the ring".into());
        }
        let device = self.leaf.usable_device().ok_or("device not usable")?;
        let mut buf = vec![0u8; len as usize];
        self.leaf
            .read(device.as_ref(), self.data_offset(ptr.position), &mut buf)
            .map_err(|e| e.to_string())?;
        let block = L2LogBlock::decode(&buf, ptr).map_err(|e| e.to_string())?;
        if block.pool_guid != pool || block.device_guid != self.leaf.guid() {
            return Err("belongs to another pool or device".into());
        }
        Ok(block)
    }

    /// Puts `entry` (of the log block at `block_at`) back into the index unless it may have
    /// been overwritten, lies outside the ring, overlaps a newer entry or its key is already
    /// there (a newer copy). Returns the bytes it takes.
    fn restore(
        &mut self,
        entry: &L2Entry,
        block_at: u64,
        oldest: u64,
        sector: u64,
        index: &mut HashMap<L2Key, Slot>,
    ) -> Option<u64> {
        let len = u64::from(entry.psize).next_multiple_of(sector);
        let from = entry.position % self.capacity;
        let valid = entry.psize > 0
            && entry.position >= oldest
            && entry.position.checked_add(len)? <= block_at
            && from + len <= self.capacity
            && len <= self.capacity / 4;
        let key = L2Key {
            vdev: entry.vdev,
            offset: entry.offset,
            birth: entry.birth,
            checksum: entry.checksum,
        };
        if !valid || index.contains_key(&key) {
            return None;
        }
        let before = self.slots.range(..from + len).next_back();
        if before.is_some_and(|(offset, (_, slot_len))| offset + slot_len > from) {
            return None;
        }
        self.slots.insert(from, (key, len));
        let slot = Slot {
            device: self.leaf.guid(),
            offset: L2_RING_START + from,
            len,
            restored: true,
        };
        index.insert(key, slot);
        Some(len)
    }
}
