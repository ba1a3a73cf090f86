//! Per-leaf I/O timing: latency histograms with log2 buckets (the shape of `zpool iostat -w`;
//! the buckets are tarn-device's `timing` module), total latency for averages, the number of
//! accesses in flight, and request-size histograms (`zpool iostat -r`'s rows, 512 B to 16M).
//!
//! Time comes only from the leaf's `Clock` (set once by the pool), so a `SimDevice` with
//! injected latency on a `ManualClock` shows up here exactly and deterministically. A leaf
//! without a clock counts accesses and in-flight numbers but records no latency.
//!
//! The counters only grow (except in-flight numbers); windows are taken by subtracting two
//! snapshots ([`IoStatsSnapshot::since`]), which is what the slow-device detector and
//! `tarn pool iostat` intervals do.

use std::sync::atomic::{AtomicU64, Ordering};

pub use tarn_device::timing::{LATENCY_BUCKETS, bucket_floor_ns, latency_bucket};

/// Buckets of a request-size histogram (`zpool iostat -r`): 512 B, 1K, ... 16M and larger.
pub const SIZE_BUCKETS: usize = 16;
/// The smallest size the first request-size bucket counts (smaller ones count there too).
const SIZE_FLOOR_SHIFT: u32 = 9;

/// The request-size bucket of an access of `len` bytes: `[512 << b, 512 << (b + 1))`, the
/// first also below, the last also above.
#[must_use]
pub fn size_bucket(len: u64) -> usize {
    let log2 = 63 - len.max(1).leading_zeros();
    (log2.saturating_sub(SIZE_FLOOR_SHIFT) as usize).min(SIZE_BUCKETS - 1)
}

/// The smallest size (bytes) request-size bucket `bucket` holds (its row label).
#[must_use]
pub fn size_bucket_floor(bucket: usize) -> u64 {
    assert!(bucket < SIZE_BUCKETS, "size bucket {bucket} out of range");
    1u64 << (bucket as u32 + SIZE_FLOOR_SHIFT)
}

/// Live timing counters of one leaf, for reads and for writes (index 0 and 1).
#[derive(Debug)]
pub struct IoStats {
    histograms: [[AtomicU64; LATENCY_BUCKETS]; 2],
    sizes: [[AtomicU64; SIZE_BUCKETS]; 2],
    latency_ns_total: [AtomicU64; 2],
    in_flight: [AtomicU64; 2],
    slow_ios: AtomicU64,
}

/// Which way an access went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    /// A read.
    Read = 0,
    /// A write (including healing and resilver writes).
    Write = 1,
}

/// A copy of [`IoStats`] at one instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoStatsSnapshot {
    /// Read latency histogram (see the module docs for the buckets).
    pub read_histogram: [u64; LATENCY_BUCKETS],
    /// Write latency histogram.
    pub write_histogram: [u64; LATENCY_BUCKETS],
    /// Sum of all read latencies, in ns.
    pub read_latency_ns: u64,
    /// Sum of all write latencies, in ns.
    pub write_latency_ns: u64,
    /// Reads being serviced now.
    pub reads_in_flight: u64,
    /// Writes being serviced now.
    pub writes_in_flight: u64,
    /// Accesses the slow-device detector counted as slow (`status -s`, SLOW column).
    pub slow_ios: u64,
    /// Reads per request-size bucket ([`size_bucket`]).
    pub read_sizes: [u64; SIZE_BUCKETS],
    /// Writes per request-size bucket.
    pub write_sizes: [u64; SIZE_BUCKETS],
}

impl Default for IoStatsSnapshot {
    fn default() -> Self {
        IoStatsSnapshot {
            read_histogram: [0; LATENCY_BUCKETS],
            write_histogram: [0; LATENCY_BUCKETS],
            read_latency_ns: 0,
            write_latency_ns: 0,
            reads_in_flight: 0,
            writes_in_flight: 0,
            slow_ios: 0,
            read_sizes: [0; SIZE_BUCKETS],
            write_sizes: [0; SIZE_BUCKETS],
        }
    }
}

impl Default for IoStats {
    fn default() -> Self {
        IoStats {
            histograms: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            sizes: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
            latency_ns_total: std::array::from_fn(|_| AtomicU64::new(0)),
            in_flight: std::array::from_fn(|_| AtomicU64::new(0)),
            slow_ios: AtomicU64::new(0),
        }
    }
}

impl IoStats {
    /// Counts an access of `len` bytes as started.
    pub(crate) fn begin(&self, kind: IoKind, len: u64) {
        self.in_flight[kind as usize].fetch_add(1, Ordering::Relaxed);
        self.sizes[kind as usize][size_bucket(len)].fetch_add(1, Ordering::Relaxed);
    }

    /// Counts an access as finished after `latency_ns` (None: the leaf has no clock).
    pub(crate) fn end(&self, kind: IoKind, latency_ns: Option<u64>) {
        let before = self.in_flight[kind as usize].fetch_sub(1, Ordering::Relaxed);
        assert!(before > 0, "an access ended that never began");
        if let Some(ns) = latency_ns {
            self.histograms[kind as usize][latency_bucket(ns)].fetch_add(1, Ordering::Relaxed);
            self.latency_ns_total[kind as usize].fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Adds accesses found slow by the engine's detector.
    pub fn add_slow_ios(&self, count: u64) {
        self.slow_ios.fetch_add(count, Ordering::Relaxed);
    }

    /// Resets the slow count (`tarn pool clear`); histograms keep running.
    pub fn clear_slow_ios(&self) {
        self.slow_ios.store(0, Ordering::Relaxed);
    }

    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> IoStatsSnapshot {
        let histogram = |kind: usize| {
            let mut out = [0u64; LATENCY_BUCKETS];
            for (slot, counter) in out.iter_mut().zip(&self.histograms[kind]) {
                *slot = counter.load(Ordering::Relaxed);
            }
            out
        };
        IoStatsSnapshot {
            read_histogram: histogram(0),
            write_histogram: histogram(1),
            read_latency_ns: self.latency_ns_total[0].load(Ordering::Relaxed),
            write_latency_ns: self.latency_ns_total[1].load(Ordering::Relaxed),
            reads_in_flight: self.in_flight[0].load(Ordering::Relaxed),
            writes_in_flight: self.in_flight[1].load(Ordering::Relaxed),
            slow_ios: self.slow_ios.load(Ordering::Relaxed),
            read_sizes: std::array::from_fn(|b| self.sizes[0][b].load(Ordering::Relaxed)),
            write_sizes: std::array::from_fn(|b| self.sizes[1][b].load(Ordering::Relaxed)),
        }
    }
}

impl IoStatsSnapshot {
    /// What happened between `earlier` and this snapshot (in-flight numbers are this one's).
    #[must_use]
    pub fn since(&self, earlier: &IoStatsSnapshot) -> IoStatsSnapshot {
        let diff = |now: &[u64; LATENCY_BUCKETS], then: &[u64; LATENCY_BUCKETS]| {
            let mut out = [0u64; LATENCY_BUCKETS];
            for ((slot, a), b) in out.iter_mut().zip(now).zip(then) {
                *slot = a.saturating_sub(*b);
            }
            out
        };
        IoStatsSnapshot {
            read_histogram: diff(&self.read_histogram, &earlier.read_histogram),
            write_histogram: diff(&self.write_histogram, &earlier.write_histogram),
            read_latency_ns: self.read_latency_ns.saturating_sub(earlier.read_latency_ns),
            write_latency_ns: self
                .write_latency_ns
                .saturating_sub(earlier.write_latency_ns),
            reads_in_flight: self.reads_in_flight,
            writes_in_flight: self.writes_in_flight,
            slow_ios: self.slow_ios.saturating_sub(earlier.slow_ios),
            read_sizes: std::array::from_fn(|b| {
                self.read_sizes[b].saturating_sub(earlier.read_sizes[b])
            }),
            write_sizes: std::array::from_fn(|b| {
                self.write_sizes[b].saturating_sub(earlier.write_sizes[b])
            }),
        }
    }

    /// Read and write histograms added together.
    #[must_use]
    pub fn combined(&self) -> [u64; LATENCY_BUCKETS] {
        let mut out = self.read_histogram;
        for (slot, w) in out.iter_mut().zip(&self.write_histogram) {
            *slot += w;
        }
        out
    }
}

/// Accesses counted in `histogram`.
#[must_use]
pub fn histogram_count(histogram: &[u64; LATENCY_BUCKETS]) -> u64 {
    histogram.iter().sum()
}

/// The latency (ns) below which at least `per_mille` / 1000 of the accesses in `histogram`
/// fall, as the upper end of the bucket that reaches it (so within a factor of two); 0 for an
/// empty histogram.
#[must_use]
pub fn histogram_quantile_ns(histogram: &[u64; LATENCY_BUCKETS], per_mille: u64) -> u64 {
    assert!(
        per_mille <= 1000,
        "quantile {per_mille} is beyond 1000 per mille"
    );
    let total = histogram_count(histogram);
    if total == 0 {
        return 0;
    }
    let wanted = (u128::from(total) * u128::from(per_mille))
        .div_ceil(1000)
        .max(1);
    let mut seen = 0u128;
    for (bucket, &count) in histogram.iter().enumerate() {
        seen += u128::from(count);
        if seen >= wanted {
            return bucket_floor_ns(bucket).saturating_mul(2);
        }
    }
    unreachable!("the cumulative count reaches the total")
}

/// Accesses in `histogram` in buckets whose floor is at least `threshold_ns`.
#[must_use]
pub fn histogram_count_at_least(histogram: &[u64; LATENCY_BUCKETS], threshold_ns: u64) -> u64 {
    let first = if threshold_ns == 0 {
        0
    } else {
        let b = latency_bucket(threshold_ns);
        if bucket_floor_ns(b) == threshold_ns {
            b
        } else {
            b + 1
        }
    };
    histogram.iter().skip(first).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_bucket(ns: u64, bucket: usize) {
        assert_eq!(latency_bucket(ns), bucket, "{ns} ns");
    }

    /// Goal: request sizes fall in ZFS's -r rows (512, 1K, ... 16M).
    #[test]
    fn size_buckets() {
        assert_eq!(size_bucket(0), 0);
        assert_eq!(size_bucket(511), 0);
        assert_eq!(size_bucket(512), 0);
        assert_eq!(size_bucket(1024), 1);
        assert_eq!(size_bucket(4095), 2);
        assert_eq!(size_bucket(128 << 10), 8);
        assert_eq!(size_bucket(16 << 20), 15);
        assert_eq!(size_bucket(u64::MAX), 15);
        assert_eq!(size_bucket_floor(15), 16 << 20);
    }

    /// Goal: bucket edges are powers of two and the ends are clamped.
    #[test]
    fn buckets() {
        check_bucket(0, 0);
        check_bucket(1, 0);
        check_bucket(2, 1);
        check_bucket(3, 1);
        check_bucket(4, 2);
        check_bucket(1_000_000, 19);
        check_bucket(u64::MAX, LATENCY_BUCKETS - 1);
    }

    /// Goal: quantiles come from the bucket that reaches them; windows subtract.
    #[test]
    fn quantiles_and_windows() {
        let stats = IoStats::default();
        for _ in 0..99 {
            stats.begin(IoKind::Read, 4096);
            stats.end(IoKind::Read, Some(1000));
        }
        stats.begin(IoKind::Read, 100);
        stats.end(IoKind::Read, Some(1 << 20));
        let first = stats.snapshot();
        assert_eq!(histogram_count(&first.read_histogram), 100);
        assert_eq!(histogram_quantile_ns(&first.read_histogram, 500), 1024);
        assert_eq!(histogram_quantile_ns(&first.read_histogram, 990), 1024);
        assert_eq!(histogram_quantile_ns(&first.read_histogram, 1000), 2 << 20);
        assert_eq!(histogram_count_at_least(&first.read_histogram, 1 << 20), 1);
        assert_eq!(histogram_count_at_least(&first.read_histogram, 1025), 1);
        assert_eq!(histogram_count_at_least(&first.read_histogram, 512), 100);
        stats.begin(IoKind::Write, 64 << 20);
        let second = stats.snapshot();
        assert_eq!(second.read_sizes[size_bucket(4096)], 99);
        assert_eq!(second.read_sizes[0], 1, "below 512 counts in the first row");
        assert_eq!(
            second.write_sizes[SIZE_BUCKETS - 1],
            1,
            "above 16M in the last"
        );
        assert_eq!(second.writes_in_flight, 1);
        let window = second.since(&first);
        assert_eq!(histogram_count(&window.read_histogram), 0);
        assert_eq!(histogram_quantile_ns(&window.read_histogram, 990), 0);
        stats.end(IoKind::Write, None);
        assert_eq!(stats.snapshot().writes_in_flight, 0);
        assert_eq!(histogram_count(&stats.snapshot().write_histogram), 0);
    }
}
