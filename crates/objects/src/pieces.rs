//! [`Pieces`]: a record dirtied by partial writes, kept as the byte ranges written instead
//! of a whole copy of the record (issue 18, "Small random writes").
//!
//! # Purpose
//! A 4K write into a 128K record used to dirty a copy of the whole record: 128K of dirty
//! memory per 4K written, so the dirty limit started a txg after about a thousand writes
//! spread over a file and every txg rewrote whole records. A record kept as its pieces costs
//! the dirty limit what was written, a txg absorbs many more small writes, and repeated
//! writes to one record in a txg cost one record write at sync.
//!
//! # Model
//! A base and a set of disjoint, non-adjacent byte ranges over it (a `BTreeMap` from start
//! to bytes; a write that overlaps or touches ranges merges with them into one). The base
//! is either zeros (the record is a hole, committed or punched in this txg) or the record's
//! committed block: the block the synced tree points to, which cannot change before the
//! sync that consumes the pieces. The record's current bytes are the base with every range
//! laid over it. Whoever needs them whole (the sync, a write-ahead, a read not wholly inside
//! the ranges) merges: reads the base (the clean-block cache or the devices), copies the
//! ranges over it.
//!
//! # Invariants
//! - P1: ranges are disjoint and not adjacent, each non-empty and inside the record.
//! - P2: `bytes` is the sum of the ranges' lengths; [`Pieces::cost`] (what the dirty limit
//!   counts) is `bytes` plus [`PIECE_OVERHEAD`] per range, so that many tiny pieces cannot
//!   hold more memory than the limit says.
//! - P3: pieces never cover the whole record: the owner turns such a record into a whole
//!   dirty block (`tree`), which needs no base.
//!
//! # Failure model
//! The merge returns the base's read error unchanged and leaves the pieces as they were;
//! deciding what an unreadable base means is the owner's (`tree`'s `//!` block and
//! `crate::lib`'s failure model: the write that made the pieces read the base first).
//!
//! # Not here
//! Reading the base, the dirty map, the accounting of dirty bytes (`tree`).

use std::collections::BTreeMap;

/// Memory a range costs besides its bytes (its vector's header, its map entry, allocator
/// rounding), counted against the dirty limit with the bytes (P2).
pub(crate) const PIECE_OVERHEAD: u64 = 64;

/// A record dirtied by partial writes (module docs).
#[derive(Debug, Clone)]
pub(crate) struct Pieces {
    /// The base is zeros, not the committed block.
    over_zero: bool,
    /// Start within the record -> bytes written there (P1).
    ranges: BTreeMap<usize, Vec<u8>>,
    bytes: usize,
    record: usize,
}

impl Pieces {
    /// No pieces yet over a record of `record` bytes whose base is zeros (`over_zero`) or
    /// its committed block.
    pub(crate) fn new(record: usize, over_zero: bool) -> Self {
        Pieces {
            over_zero,
            ranges: BTreeMap::new(),
            bytes: 0,
            record,
        }
    }

    /// Whether the base is zeros (no read needed to merge).
    pub(crate) fn over_zero(&self) -> bool {
        self.over_zero
    }

    /// What the dirty limit counts for these pieces (P2).
    pub(crate) fn cost(&self) -> u64 {
        self.bytes as u64 + PIECE_OVERHEAD * self.ranges.len() as u64
    }

    /// Whether the pieces cover every byte of the record.
    pub(crate) fn covers_record(&self) -> bool {
        self.covers(0, self.record)
    }

    /// Whether `[start, start + len)` lies inside one range (ranges do not touch, P1).
    pub(crate) fn covers(&self, start: usize, len: usize) -> bool {
        len == 0
            || self
                .ranges
                .range(..=start)
                .next_back()
                .is_some_and(|(&at, bytes)| at + bytes.len() >= start + len)
    }

    /// Lays `data` over the record at `start`, merging with every range it overlaps or
    /// touches (P1).
    pub(crate) fn insert(&mut self, start: usize, data: &[u8]) {
        let end = start + data.len();
        assert!(
            !data.is_empty() && end <= self.record,
            "P1: piece {start}+{} outside a record of {}",
            data.len(),
            self.record
        );
        let mut first = start;
        let mut buf = Vec::new();
        let before = self.ranges.range(..start).next_back();
        if let Some((&at, bytes)) = before
            && at + bytes.len() >= start
            && let Some(bytes) = self.ranges.remove(&at)
        {
            first = at;
            self.bytes -= bytes.len();
            buf = bytes;
        }
        let within: Vec<usize> = self.ranges.range(start..=end).map(|(&at, _)| at).collect();
        let mut tail: Option<(usize, Vec<u8>)> = None;
        for at in within {
            if let Some(bytes) = self.ranges.remove(&at) {
                self.bytes -= bytes.len();
                if at + bytes.len() > end {
                    tail = Some((at, bytes));
                }
            }
        }
        let last = tail
            .as_ref()
            .map_or(end, |(at, bytes)| at + bytes.len())
            .max(first + buf.len())
            .max(end);
        buf.resize(last - first, 0);
        if let Some((at, bytes)) = tail {
            buf[at - first..at - first + bytes.len()].copy_from_slice(&bytes);
        }
        buf[start - first..end - first].copy_from_slice(data);
        self.bytes += buf.len();
        self.ranges.insert(first, buf);
        assert!(
            self.bytes <= self.record,
            "P2: pieces larger than the record"
        );
    }

    /// Copies the pieces' bytes that fall in `[start, start + target.len())` over `target`
    /// (the rest of `target` is left as it is: the base's bytes).
    pub(crate) fn overlay(&self, start: usize, target: &mut [u8]) {
        let end = start + target.len();
        let from = match self.ranges.range(..=start).next_back() {
            Some((&at, _)) => at,
            None => start,
        };
        for (&at, bytes) in self.ranges.range(from..end) {
            let lo = at.max(start);
            let hi = (at + bytes.len()).min(end);
            if lo < hi {
                target[lo - start..hi - start].copy_from_slice(&bytes[lo - at..hi - at]);
            }
        }
    }

    /// The record's bytes: the pieces over `base` (`None`: zeros; required unless
    /// [`Pieces::over_zero`] or the pieces cover the record).
    pub(crate) fn merge(&self, base: Option<&[u8]>) -> Vec<u8> {
        let mut bytes = match base {
            Some(base) if !self.over_zero => {
                assert_eq!(base.len(), self.record, "base of a pieced record");
                base.to_vec()
            }
            _ => tarn_base::buf::zeroed(self.record),
        };
        self.overlay(0, &mut bytes);
        bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tarn_base::SeededRng;

    /// Goal: overlapping, adjacent, nested and distant pieces read back as a byte array
    /// written the same way, with P1 and P2 kept after every insert. Method: 20,000 seeded
    /// random pieces over 32 records of 4 KiB, each checked in full and by random windows.
    #[test]
    fn pieces_match_a_byte_array() {
        let mut rng = SeededRng::new(7);
        for _ in 0..32 {
            let record = 4096;
            let mut pieces = Pieces::new(record, false);
            let base: Vec<u8> = (0..record).map(|i| (i % 251) as u8).collect();
            let mut model = base.clone();
            let mut written = vec![false; record];
            for _ in 0..600 {
                let start = rng.below(record as u64) as usize;
                let len = 1 + rng.below((record - start).min(300) as u64) as usize;
                let mut data = vec![0u8; len];
                rng.fill(&mut data);
                pieces.insert(start, &data);
                model[start..start + len].copy_from_slice(&data);
                written[start..start + len].fill(true);
                let mut last_end = None;
                let mut sum = 0;
                for (&at, bytes) in &pieces.ranges {
                    assert!(!bytes.is_empty() && at + bytes.len() <= record, "P1 bounds");
                    assert!(last_end.is_none_or(|end| end < at), "P1 disjoint, apart");
                    last_end = Some(at + bytes.len());
                    sum += bytes.len();
                }
                assert_eq!(sum, pieces.bytes, "P2 bytes");
                assert_eq!(sum, written.iter().filter(|w| **w).count(), "bytes written");
                let at = rng.below(record as u64) as usize;
                let len = rng.below((record - at) as u64) as usize;
                let covered = written[at..at + len].iter().all(|w| *w);
                assert_eq!(pieces.covers(at, len), covered, "covers");
                let mut window = base[at..at + len].to_vec();
                pieces.overlay(at, &mut window);
                assert_eq!(window, model[at..at + len], "overlay window");
            }
            assert_eq!(pieces.merge(Some(&base)), model, "merge");
            assert_eq!(pieces.covers_record(), written.iter().all(|w| *w));
        }
    }

    /// Goal: a base of zeros merges without one; adjacent pieces join into one range.
    #[test]
    fn adjacent_pieces_join_and_zero_bases_need_no_block() {
        let mut pieces = Pieces::new(1024, true);
        pieces.insert(100, &[1; 100]);
        pieces.insert(200, &[2; 100]);
        pieces.insert(0, &[3; 100]);
        assert_eq!(
            pieces.ranges.len(),
            1,
            "three touching pieces are one range"
        );
        assert_eq!(pieces.cost(), 300 + PIECE_OVERHEAD);
        assert!(pieces.covers(0, 300) && !pieces.covers(0, 301));
        let merged = pieces.merge(None);
        assert_eq!(&merged[..100], &[3; 100][..]);
        assert_eq!(&merged[200..300], &[2; 100][..]);
        assert!(tarn_format::compress::is_all_zero(&merged[300..]));
        pieces.insert(300, &[0; 724]);
        assert!(pieces.covers_record());
    }
}
