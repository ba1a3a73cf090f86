//! [`KernelCache`]: what the kernel caches of one mount, as far as the server must know it to
//! invalidate it ([`crate::Mount::invalidate_all`]) and to let it keep file pages across
//! opens (`FOPEN_KEEP_CACHE`); and [`Counters`], the mount's request statistics.
//!
//! The kernel holds an inode as long as its lookup count is above zero: every reply that
//! hands it an entry (lookup, create, mknod, mkdir, symlink, link, each readdirplus entry but
//! `.` and `..`) adds one, `forget` takes some away. The table mirrors those counts, so it
//! holds exactly the inodes the kernel may have cached and never grows past the kernel's own
//! inode cache. For each it keeps up to [`NAMES_PER_INODE`] names the kernel looked it up by
//! (the dentries to invalidate) and the file's stamp at its last open.
//!
//! Negative entries: a lookup of a missing name is answered with inode 0 and [`ENTRY_TTL`],
//! which the kernel keeps as a negative dentry, so asking again for the same missing name
//! (a `$PATH` search, a build probing for headers) costs no request. The kernel replaces
//! such a dentry itself when the name is made through the mount; a name made behind its
//! back needs an invalidation, so every negative answer is recorded here (parent, name,
//! when) and [`KernelCache::everything`] hands them to `invalidate_all`. The record is
//! bounded by [`NEGATIVES_MAX`]: entries older than the TTL (the kernel has dropped them)
//! are pruned when it fills, and while it is still full a missing name is answered with a
//! plain ENOENT, which the kernel does not keep.
//!
//! [`ENTRY_TTL`]: crate::ENTRY_TTL

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use tarn_engine::posix::{Attr, Timespec};

/// Names remembered per inode. A hard-linked file looked up by more names loses the oldest:
/// that dentry is then not invalidated by `invalidate_all` and lives out its TTL.
pub(crate) const NAMES_PER_INODE: usize = 4;

/// What a file's cached pages were read under: when its mtime, ctime or size differ at the
/// next open, the pages may be stale and the kernel must drop them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    mtime: Timespec,
    ctime: Timespec,
    size: u64,
}

impl Stamp {
    pub(crate) fn of(attr: &Attr) -> Stamp {
        Stamp {
            mtime: attr.mtime,
            ctime: attr.ctime,
            size: attr.size,
        }
    }
}

#[derive(Debug, Default)]
struct Known {
    lookups: u64,
    /// (kernel parent inode, name), newest last.
    names: Vec<(u64, Vec<u8>)>,
    /// The stamp at the last open.
    opened: Option<Stamp>,
}

/// Negative entries recorded at once at most (about 100 bytes each with a short name).
pub(crate) const NEGATIVES_MAX: usize = 16 << 10;

/// The negative entries the kernel may hold: (kernel parent inode, name) -> when answered.
#[derive(Debug, Default)]
struct Negatives {
    names: HashMap<(u64, Vec<u8>), Instant>,
}

/// The inodes and names the kernel may hold (kernel inode numbers).
#[derive(Debug, Default)]
pub(crate) struct KernelCache {
    table: Mutex<HashMap<u64, Known>>,
    negatives: Mutex<Negatives>,
}

/// What the kernel must forget: every inode it may cache and the names it may have them
/// under.
#[derive(Debug, Default)]
pub(crate) struct Everything {
    pub(crate) inodes: Vec<u64>,
    pub(crate) names: Vec<(u64, Vec<u8>)>,
}

impl KernelCache {
    fn lock(&self) -> MutexGuard<'_, HashMap<u64, Known>> {
        // Plain counts and names: a panic elsewhere cannot leave them half-changed.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn negatives(&self) -> MutexGuard<'_, Negatives> {
        // Plain names and instants, as above.
        self.negatives
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A lookup of `name` in `parent` found nothing at `now`: true when the answer may be a
    /// negative entry the kernel keeps for `ttl` (it is recorded), false when the record is
    /// full of entries younger than `ttl` (answer a plain ENOENT).
    pub(crate) fn missing(&self, parent: u64, name: &[u8], now: Instant, ttl: Duration) -> bool {
        let mut negatives = self.negatives();
        let key = (parent, name.to_vec());
        if negatives.names.len() >= NEGATIVES_MAX && !negatives.names.contains_key(&key) {
            negatives
                .names
                .retain(|_, at| now.saturating_duration_since(*at) < ttl);
            if negatives.names.len() >= NEGATIVES_MAX {
                return false;
            }
        }
        negatives.names.insert(key, now);
        assert!(
            negatives.names.len() <= NEGATIVES_MAX,
            "negative entries bounded"
        );
        true
    }

    /// The kernel got `ino` under `name` in `parent` (one more lookup); a negative entry of
    /// that name is gone (the kernel replaced it).
    pub(crate) fn looked_up(&self, parent: u64, name: &[u8], ino: u64) {
        {
            let mut negatives = self.negatives();
            if !negatives.names.is_empty() {
                negatives.names.remove(&(parent, name.to_vec()));
            }
        }
        let mut table = self.lock();
        let known = table.entry(ino).or_default();
        known.lookups = known.lookups.saturating_add(1);
        if !known.names.iter().any(|(p, n)| *p == parent && n == name) {
            if known.names.len() == NAMES_PER_INODE {
                known.names.remove(0);
            }
            known.names.push((parent, name.to_vec()));
        }
    }

    /// Whether the kernel holds inode `ino` (a lookup not yet forgotten).
    pub(crate) fn holds(&self, ino: u64) -> bool {
        self.lock().contains_key(&ino)
    }

    /// The kernel dropped `count` lookups of `ino`.
    pub(crate) fn forgot(&self, ino: u64, count: u64) {
        let mut table = self.lock();
        if let Some(known) = table.get_mut(&ino) {
            known.lookups = known.lookups.saturating_sub(count);
            if known.lookups == 0 {
                table.remove(&ino);
            }
        }
    }

    /// A file is opened with `stamp`: true when its stamp at the previous open was the same,
    /// so the pages the kernel cached then are still the file's contents. An inode the
    /// kernel does not hold (no lookups counted) keeps nothing.
    pub(crate) fn opened(&self, ino: u64, stamp: Stamp) -> bool {
        let mut table = self.lock();
        let Some(known) = table.get_mut(&ino) else {
            return false;
        };
        let keep = known.opened == Some(stamp);
        known.opened = Some(stamp);
        keep
    }

    /// Every inode and name the kernel may cache, negative entries included (the record of
    /// those is emptied: the caller invalidates them); forgets every open stamp, so no file
    /// keeps its pages at its next open.
    pub(crate) fn everything(&self) -> Everything {
        let negatives = std::mem::take(&mut self.negatives().names);
        let mut table = self.lock();
        let mut all = Everything::default();
        for (ino, known) in table.iter_mut() {
            known.opened = None;
            all.inodes.push(*ino);
            all.names.extend(known.names.iter().cloned());
        }
        let mut seen: HashSet<(u64, Vec<u8>)> = all.names.iter().cloned().collect();
        for (name, _) in negatives {
            if seen.insert(name.clone()) {
                all.names.push(name);
            }
        }
        all
    }

    /// Every name in directory `parent` the kernel may hold, positive or negative (the
    /// positive ones as far as [`NAMES_PER_INODE`] remembers them).
    pub(crate) fn names_in(&self, parent: u64) -> Vec<Vec<u8>> {
        let mut names: Vec<Vec<u8>> = self
            .negatives()
            .names
            .keys()
            .filter(|(p, _)| *p == parent)
            .map(|(_, name)| name.clone())
            .collect();
        let table = self.lock();
        for known in table.values() {
            let in_parent = known.names.iter().filter(|(p, _)| *p == parent);
            names.extend(in_parent.map(|(_, name)| name.clone()));
        }
        names
    }

    /// How many negative entries are recorded.
    #[cfg(test)]
    pub(crate) fn negatives_len(&self) -> usize {
        self.negatives().names.len()
    }

    /// How many inodes the table holds.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

/// Request statistics of one mount (lock-free; read with [`Counters::snapshot`]).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    requests: AtomicU64,
    in_flight: AtomicU64,
    in_flight_max: AtomicU64,
    read_bytes_max: AtomicU64,
    write_bytes_max: AtomicU64,
    keep_cache_opens: AtomicU64,
    negative_entries: AtomicU64,
}

/// A request inside the engine; dropping it ends it.
pub(crate) struct InFlight<'a>(&'a Counters);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Counters {
    /// A request enters the engine.
    pub(crate) fn enter(&self) -> InFlight<'_> {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.resume()
    }

    /// A request handed to another thread enters the engine again there (counted once, in
    /// [`Counters::enter`]).
    pub(crate) fn resume(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.in_flight_max.fetch_max(now, Ordering::Relaxed);
        InFlight(self)
    }

    pub(crate) fn read(&self, len: u32) {
        self.read_bytes_max
            .fetch_max(u64::from(len), Ordering::Relaxed);
    }

    pub(crate) fn write(&self, len: usize) {
        self.write_bytes_max
            .fetch_max(len as u64, Ordering::Relaxed);
    }

    pub(crate) fn kept_cache(&self) {
        self.keep_cache_opens.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn negative(&self) {
        self.negative_entries.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self, cached_inodes: usize) -> crate::MountStats {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        crate::MountStats {
            requests: get(&self.requests),
            in_flight_max: get(&self.in_flight_max),
            read_bytes_max: get(&self.read_bytes_max),
            write_bytes_max: get(&self.write_bytes_max),
            keep_cache_opens: get(&self.keep_cache_opens),
            negative_entries: get(&self.negative_entries),
            cached_inodes: cached_inodes as u64,
        }
    }
}

#[cfg(test)]
// Instants here are only stored and compared, never waited on: the real clock is fine.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn names_in_a_directory_are_found_positive_and_negative() {
        let cache = KernelCache::default();
        cache.looked_up(1, b"a", 7);
        cache.looked_up(2, b"b", 8);
        cache.looked_up(1, b"c", 8);
        assert!(cache.missing(1, b"gone", Instant::now(), Duration::from_secs(10)));
        let mut names = cache.names_in(1);
        names.sort();
        assert_eq!(names, [b"a".to_vec(), b"c".to_vec(), b"gone".to_vec()]);
        assert_eq!(cache.names_in(2), [b"b".to_vec()]);
        assert!(cache.names_in(3).is_empty());
    }

    #[test]
    fn lookups_are_counted_until_forgotten() {
        let cache = KernelCache::default();
        cache.looked_up(1, b"a", 7);
        cache.looked_up(1, b"a", 7);
        cache.looked_up(1, b"b", 7);
        let all = cache.everything();
        assert_eq!(all.inodes, vec![7]);
        assert_eq!(all.names, vec![(1, b"a".to_vec()), (1, b"b".to_vec())]);
        cache.forgot(7, 2);
        assert_eq!(cache.len(), 1);
        cache.forgot(7, 1);
        assert_eq!(cache.len(), 0);
        cache.forgot(7, 1);
        assert_eq!(cache.len(), 0, "a forget of an unknown inode is harmless");
    }

    #[test]
    fn names_per_inode_are_bounded_oldest_out() {
        let cache = KernelCache::default();
        for i in 0..=NAMES_PER_INODE {
            cache.looked_up(1, format!("n{i}").as_bytes(), 9);
        }
        let names = cache.everything().names;
        assert_eq!(names.len(), NAMES_PER_INODE);
        assert_eq!(names[0], (1, b"n1".to_vec()));
    }

    #[test]
    fn negative_entries_are_recorded_replaced_and_handed_over() {
        let cache = KernelCache::default();
        let (now, ttl) = (Instant::now(), Duration::from_secs(10));
        assert!(cache.missing(1, b"gone", now, ttl));
        assert!(cache.missing(1, b"made", now, ttl));
        assert!(
            cache.missing(1, b"gone", now, ttl),
            "asked again: one record"
        );
        assert_eq!(cache.negatives_len(), 2);
        cache.looked_up(1, b"made", 7);
        assert_eq!(
            cache.negatives_len(),
            1,
            "the kernel replaced the negative entry"
        );
        let names = cache.everything().names;
        assert_eq!(names, vec![(1, b"made".to_vec()), (1, b"gone".to_vec())]);
        assert_eq!(cache.negatives_len(), 0, "handed over to be invalidated");
    }

    #[test]
    fn negative_entries_are_bounded_and_expire() {
        let cache = KernelCache::default();
        let (start, ttl) = (Instant::now(), Duration::from_secs(10));
        for i in 0..NEGATIVES_MAX {
            assert!(cache.missing(1, format!("n{i}").as_bytes(), start, ttl));
        }
        assert!(
            !cache.missing(1, b"one more", start, ttl),
            "full of live entries"
        );
        assert!(
            cache.missing(1, b"n0", start, ttl),
            "a recorded name may be answered again"
        );
        let later = start + ttl;
        assert!(
            cache.missing(1, b"one more", later, ttl),
            "expired entries pruned"
        );
        assert_eq!(cache.negatives_len(), 1);
    }

    #[test]
    fn pages_are_kept_only_while_the_stamp_is_unchanged() {
        let cache = KernelCache::default();
        let t = |secs| Timespec { secs, nsecs: 0 };
        let stamp = |mtime, size| Stamp {
            mtime: t(mtime),
            ctime: t(mtime),
            size,
        };
        assert!(!cache.opened(5, stamp(1, 10)), "not held by the kernel");
        cache.looked_up(1, b"f", 5);
        assert!(!cache.opened(5, stamp(1, 10)), "first open: nothing cached");
        assert!(cache.opened(5, stamp(1, 10)));
        assert!(!cache.opened(5, stamp(2, 10)), "written since");
        assert!(cache.opened(5, stamp(2, 10)));
        let _ = cache.everything();
        assert!(!cache.opened(5, stamp(2, 10)), "invalidated since");
    }
}
