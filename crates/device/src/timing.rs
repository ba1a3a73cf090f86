//! Latency histograms with log2 buckets (the rows of `zpool iostat -w`), and what a device
//! with its own queue measures about it: how long accesses waited in the queue and how long
//! the backend took ([`QueueTiming`], behind `tarn pool iostat -l`, `-q` and `-w`).
//!
//! ```text
//!  bucket b counts accesses that took [2^b, 2^(b+1)) ns; bucket 0 also takes 0 and 1 ns;
//!  the last bucket, LATENCY_BUCKETS - 1 (2^36 ns, about 69 s), takes everything longer.
//!  `zpool iostat -w` labels each row by its upper end: 1ns, 3ns, 7ns, ... 68s, 137s.
//! ```
//!
//! Time comes only from a [`Clock`] the pool hands down ([`crate::Device::set_clock`]): a
//! device without one counts accesses and queue depths but times nothing.

use std::sync::atomic::{AtomicU64, Ordering};

/// Buckets of a latency histogram: 2^0 .. 2^36 ns and beyond.
pub const LATENCY_BUCKETS: usize = 37;

/// The bucket a latency of `ns` nanoseconds falls in.
#[must_use]
pub fn latency_bucket(ns: u64) -> usize {
    let bucket = (63 - ns.max(1).leading_zeros()) as usize;
    bucket.min(LATENCY_BUCKETS - 1)
}

/// The smallest latency (ns) bucket `bucket` holds; its upper end is twice that.
#[must_use]
pub fn bucket_floor_ns(bucket: usize) -> u64 {
    assert!(bucket < LATENCY_BUCKETS, "bucket {bucket} out of range");
    1u64 << bucket
}

/// A latency histogram that many threads add to.
#[derive(Debug)]
pub struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS],
    total_ns: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            total_ns: AtomicU64::new(0),
        }
    }
}

impl Histogram {
    /// Counts one access that took `ns`.
    pub fn add(&self, ns: u64) {
        self.buckets[latency_bucket(ns)].fetch_add(1, Ordering::Relaxed);
        self.total_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// The counts now.
    #[must_use]
    pub fn snapshot(&self) -> Latencies {
        let mut buckets = [0u64; LATENCY_BUCKETS];
        for (slot, counter) in buckets.iter_mut().zip(&self.buckets) {
            *slot = counter.load(Ordering::Relaxed);
        }
        Latencies {
            buckets,
            total_ns: self.total_ns.load(Ordering::Relaxed),
        }
    }
}

/// A histogram's counts at one instant, with the sum of the latencies it counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Latencies {
    /// Accesses per bucket (module docs).
    pub buckets: [u64; LATENCY_BUCKETS],
    /// Sum of the latencies counted, in ns (average: divide by [`Latencies::count`]).
    pub total_ns: u64,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            buckets: [0; LATENCY_BUCKETS],
            total_ns: 0,
        }
    }
}

impl Latencies {
    /// Accesses counted.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// Both added together.
    #[must_use]
    pub fn plus(&self, other: &Latencies) -> Latencies {
        let mut out = *self;
        for (slot, more) in out.buckets.iter_mut().zip(&other.buckets) {
            *slot += more;
        }
        out.total_ns += other.total_ns;
        out
    }
}

/// What a device with its own queue (`QueuedDevice`) measured, since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueTiming {
    /// Reads: time spent waiting for the queued writes before them to be applied (a read
    /// never overtakes a queued write), ZFS's `syncq_wait` for reads.
    pub read_queue: Latencies,
    /// Reads: time in the backend.
    pub read_disk: Latencies,
    /// Writes: time from acknowledgement to the start of the backend write (the write-behind
    /// queue), ZFS's `asyncq_wait` for writes.
    pub write_queue: Latencies,
    /// Writes: time in the backend.
    pub write_disk: Latencies,
    /// Writes: acknowledgement to applied (queue plus backend, per write).
    pub write_total: Latencies,
    /// Reads waiting for the queue now.
    pub reads_waiting: u64,
    /// Reads in the backend now.
    pub reads_active: u64,
    /// Writes in the backend now (the I/O thread's one, or none).
    pub writes_active: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_bucket(ns: u64, bucket: usize) {
        assert_eq!(latency_bucket(ns), bucket, "{ns} ns");
    }

    /// Goal: bucket edges are powers of two and the ends are clamped; sums and counts add.
    #[test]
    fn buckets_and_sums() {
        check_bucket(0, 0);
        check_bucket(1, 0);
        check_bucket(2, 1);
        check_bucket(3, 1);
        check_bucket(4, 2);
        check_bucket(1_000_000, 19);
        check_bucket(u64::MAX, LATENCY_BUCKETS - 1);
        let histogram = Histogram::default();
        histogram.add(3);
        histogram.add(1_000_000);
        let seen = histogram.snapshot();
        assert_eq!(seen.count(), 2);
        assert_eq!(seen.total_ns, 1_000_003);
        assert_eq!((seen.buckets[1], seen.buckets[19]), (1, 1));
        let twice = seen.plus(&seen);
        assert_eq!((twice.count(), twice.total_ns), (4, 2_000_006));
    }
}
