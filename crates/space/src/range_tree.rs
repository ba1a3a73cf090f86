//! A set of disjoint, non-adjacent byte ranges kept in a B-tree keyed by start offset: the
//! in-memory form of a metaslab's free space (ZFS's range tree).

use std::collections::BTreeMap;

/// Disjoint ranges `[start, start + len)`; adjacent ranges are always merged, so the number of
/// entries is the number of fragments.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeTree {
    ranges: BTreeMap<u64, u64>,
    total: u64,
}

impl RangeTree {
    /// An empty tree.
    #[must_use]
    pub fn new() -> Self {
        RangeTree::default()
    }

    /// Total bytes covered.
    #[must_use]
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Number of separate ranges.
    #[must_use]
    pub fn count(&self) -> usize {
        self.ranges.len()
    }

    /// True when `[start, start + len)` is entirely inside the tree.
    #[must_use]
    pub fn contains(&self, start: u64, len: u64) -> bool {
        match self.ranges.range(..=start).next_back() {
            Some((&s, &l)) => s <= start && start + len <= s + l,
            None => false,
        }
    }

    /// True when any byte of `[start, start + len)` is inside the tree.
    #[must_use]
    pub fn intersects(&self, start: u64, len: u64) -> bool {
        if let Some((&s, &l)) = self.ranges.range(..=start).next_back()
            && s + l > start
        {
            return true;
        }
        self.ranges.range(start..start + len).next().is_some()
    }

    /// Adds a range that must not overlap any range already present (a double free is a bug:
    /// the caller checks `intersects` first when the input comes from disk).
    pub fn add(&mut self, start: u64, len: u64) {
        assert!(len > 0, "RangeTree::add of an empty range at {start}");
        assert!(
            !self.intersects(start, len),
            "RangeTree::add overlaps: [{start}, +{len})"
        );
        let mut new_start = start;
        let mut new_len = len;
        if let Some((&s, &l)) = self.ranges.range(..start).next_back()
            && s + l == start
        {
            self.ranges.remove(&s);
            new_start = s;
            new_len += l;
        }
        if let Some(&l) = self.ranges.get(&(start + len)) {
            self.ranges.remove(&(start + len));
            new_len += l;
        }
        self.ranges.insert(new_start, new_len);
        self.total += len;
    }

    /// Removes a range that must be entirely present.
    pub fn remove(&mut self, start: u64, len: u64) {
        assert!(len > 0, "RangeTree::remove of an empty range at {start}");
        let (s, l) = match self.ranges.range(..=start).next_back() {
            Some((&s, &l)) if s + l >= start + len => (s, l),
            _ => panic!("RangeTree::remove of [{start}, +{len}) that is not in the tree"),
        };
        self.ranges.remove(&s);
        if s < start {
            self.ranges.insert(s, start - s);
        }
        if start + len < s + l {
            self.ranges.insert(start + len, s + l - (start + len));
        }
        self.total -= len;
    }

    /// Finds the first range at or after `cursor` (wrapping to the start) that can hold `len`
    /// bytes aligned to `align`, and returns the aligned offset. Does not modify the tree.
    #[must_use]
    pub fn find_first_fit(&self, cursor: u64, len: u64, align: u64) -> Option<u64> {
        self.find_first_fit_within(cursor, len, align, 0)
    }

    /// [`RangeTree::find_first_fit`] for an extent that must not cross a multiple of
    /// `boundary` (0: no bound; otherwise a multiple of `align`, at least `len`): a place that
    /// would cross one moves up to it (a dRAID block stays inside its group).
    #[must_use]
    pub fn find_first_fit_within(
        &self,
        cursor: u64,
        len: u64,
        align: u64,
        boundary: u64,
    ) -> Option<u64> {
        assert!(
            boundary == 0 || (boundary.is_multiple_of(align) && boundary >= len),
            "boundary {boundary} for {len} bytes aligned to {align}"
        );
        let place = |from: u64| {
            let aligned = from.next_multiple_of(align);
            if boundary != 0 && aligned / boundary != (aligned + len - 1) / boundary {
                return aligned.next_multiple_of(boundary);
            }
            aligned
        };
        let fits = |(&s, &l): (&u64, &u64)| {
            let aligned = place(s);
            (aligned + len <= s + l).then_some(aligned)
        };
        // A range that contains the cursor counts from the cursor itself.
        if let Some((&s, &l)) = self.ranges.range(..cursor).next_back() {
            let aligned = place(cursor.max(s));
            if aligned + len <= s + l {
                return Some(aligned);
            }
        }
        self.ranges
            .range(cursor..)
            .find_map(fits)
            .or_else(|| self.ranges.range(..cursor).find_map(fits))
    }

    /// Largest single range.
    #[must_use]
    pub fn largest(&self) -> u64 {
        self.ranges.values().copied().max().unwrap_or(0)
    }

    /// Iterates `(start, len)` in address order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(&s, &l)| (s, l))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_merges_and_remove_splits() {
        let mut tree = RangeTree::new();
        tree.add(0, 10);
        tree.add(20, 10);
        tree.add(10, 10);
        assert_eq!(tree.count(), 1);
        assert_eq!(tree.total(), 30);
        tree.remove(5, 5);
        assert_eq!(tree.iter().collect::<Vec<_>>(), vec![(0, 5), (10, 20)]);
        assert!(tree.contains(10, 20));
        assert!(!tree.contains(4, 2));
        assert!(tree.intersects(4, 2));
        assert!(!tree.intersects(5, 5));
    }

    #[test]
    fn first_fit_honours_cursor_and_alignment() {
        let mut tree = RangeTree::new();
        tree.add(0, 4096);
        tree.add(10_000, 20_000);
        assert_eq!(tree.find_first_fit(0, 4096, 4096), Some(0));
        assert_eq!(tree.find_first_fit(1, 4096, 4096), Some(12288));
        assert_eq!(tree.find_first_fit(29_000, 4096, 4096), Some(0));
        assert_eq!(tree.find_first_fit(0, 1 << 20, 4096), None);
        // dRAID: rows of 3 sectors, groups of 12; a 6-sector block at 9 would cross 12.
        let mut draid = RangeTree::new();
        draid.add(9, 100);
        assert_eq!(draid.find_first_fit_within(0, 6, 3, 12), Some(12));
        assert_eq!(draid.find_first_fit_within(0, 3, 3, 12), Some(9));
        assert_eq!(draid.find_first_fit_within(0, 6, 1, 0), Some(9));
    }

    #[test]
    fn model_check_against_a_bitmap() {
        let mut rng = tarn_base::SeededRng::new(11);
        let mut tree = RangeTree::new();
        let mut model = vec![false; 512];
        for _ in 0..5000 {
            let start = rng.below(500);
            let len = 1 + rng.below(12).min(511 - start);
            let range = start as usize..(start + len) as usize;
            if model[range.clone()].iter().all(|&b| !b) {
                tree.add(start, len);
                model[range].iter_mut().for_each(|b| *b = true);
            } else if model[range.clone()].iter().all(|&b| b) {
                tree.remove(start, len);
                model[range].iter_mut().for_each(|b| *b = false);
            }
            assert_eq!(tree.total(), model.iter().filter(|&&b| b).count() as u64);
        }
        for (i, &set) in model.iter().enumerate() {
            assert_eq!(tree.contains(i as u64, 1), set, "byte {i}");
        }
    }
}
