//! Slow-device detection: a leaf whose latency stays well above its siblings' is read around,
//! reported, and after a sustained period faulted so a hot spare takes its place.
//!
//! ```text
//!  every fault_check (daemon: at least every 5 s), per top-level vdev:
//!    window closed (SLOW_WINDOW_NS since it opened)?
//!      per online leaf and per kind (read, write) with >= SLOW_WINDOW_OPS_MIN accesses:
//!        p99 = 99th percentile of the window's latency histogram (tarn-vdev stats)
//!        median = median of the siblings' p99 (the other leaves of the same top-level vdev)
//!        threshold = slow_io_ratio * median
//!        accesses >= threshold are counted as slow I/Os (status -s, SLOW column)
//!        p99 > threshold and p99 >= SLOW_LATENCY_FLOOR_NS: the leaf is SLOW for this kind
//!      SLOW for a kind  -> leaf marked slow (reads avoid it), `ereport.fs.zfs.delay` once
//!      slow, and its reads measured and under the threshold -> recovered, mark cleared
//!      slow, and too few reads to tell (it was read around) -> trial: the mark is lifted
//!                          for the next window, the slow period keeps running
//!    a leaf slow for slow_io_period seconds, when an AVAIL hot spare can take its place
//!      and its vdev stays readable -> FAULTED; Engine::fault_check then activates the
//!      spare as for any faulted leaf. Without a spare it stays in service, read around:
//!      a slow copy still beats less redundancy (integrity first, speed second).
//! ```
//!
//! The floor keeps fast devices from being judged by noise: on file-backed pools one
//! device's reads may come from the page cache while another's go to the disk, a ratio of a
//! hundred at latencies nobody would call slow.
//!
//! Comparing with the siblings, not with a fixed limit, is the point: a pool of slow disks is
//! not sick, one disk four times slower than its five neighbours is (the genomics centre's
//! case, seed 003). Only reads clear a slow leaf: its write samples (which `QueuedDevice`
//! acknowledges from memory) say little, and would otherwise clear it every window so the
//! period never ran out. But a leaf that is read around has no read samples; hence the trial
//! windows, every other window at worst, in which it is read again: a slow leaf is re-marked
//! (no new event, its period running on), a recovered one is cleared. So a leaf is faulted
//! only if no read in the whole period showed it fast again; `tarn pool clear` also resets
//! the watch.
//!
//! While a device in service is held slow, `tarn pool status` says so (TARN-0007) unless it
//! has a graver problem to report.
//!
//! State is in memory only (as ZFS keeps its delay counters): windows restart at import, and
//! export forgets the pool's (`Engine::slow_drop`).
//! The thresholds are pool properties (`slow_io_ratio`, `slow_io_period`; props.rs).

use std::collections::BTreeMap;
use std::sync::Arc;

use tarn_base::Guid;
use tarn_vdev::stats::{histogram_count, histogram_count_at_least, histogram_quantile_ns};
use tarn_vdev::{Health, IoStatsSnapshot, LATENCY_BUCKETS, Leaf, LeafState, TopVdev};

/// Length of one measuring window.
pub const SLOW_WINDOW_NS: u64 = 5_000_000_000;
/// Accesses of one kind a leaf needs in a window for its latency to be judged.
pub const SLOW_WINDOW_OPS_MIN: u64 = 16;
/// The p99 below which no device is slow, whatever its siblings do.
pub const SLOW_LATENCY_FLOOR_NS: u64 = 10_000_000;
/// The percentile compared, in per mille.
const PERCENTILE_PER_MILLE: u64 = 990;

/// The thresholds in force (pool properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlowSettings {
    /// `slow_io_ratio`: how many times the siblings' median p99 is slow; `None` is `off`.
    pub(crate) ratio: Option<u64>,
    /// `slow_io_period` in nanoseconds: how long a leaf may stay slow before it is faulted.
    pub(crate) period_ns: u64,
}

/// What a check found about one leaf.
#[derive(Clone, Debug)]
pub(crate) enum Finding {
    /// The leaf became slow: its p99 and the siblings' median (ns), slow I/Os in the window.
    Slow {
        leaf: Arc<Leaf>,
        p99_ns: u64,
        median_ns: u64,
        slow_ios: u64,
    },
    /// A slow leaf's reads are fast again.
    Recovered { leaf: Arc<Leaf> },
    /// A leaf slow for the whole period was faulted.
    Faulted { leaf: Arc<Leaf> },
}

#[derive(Debug)]
struct Window {
    start_ns: u64,
    base: BTreeMap<Guid, IoStatsSnapshot>,
}

/// The detector's memory for the pools of one engine: the open window of each top-level
/// vdev and since when each slow leaf has been slow.
#[derive(Debug, Default)]
pub(crate) struct SlowWatch {
    windows: BTreeMap<Guid, Window>,
    slow_since: BTreeMap<Guid, u64>,
}

/// A leaf's judged latency for one kind in one window.
#[derive(Clone, Copy, Debug)]
struct Judged {
    histogram: [u64; LATENCY_BUCKETS],
    p99_ns: Option<u64>,
}

impl Judged {
    fn new(histogram: [u64; LATENCY_BUCKETS]) -> Judged {
        let p99_ns = (histogram_count(&histogram) >= SLOW_WINDOW_OPS_MIN)
            .then(|| histogram_quantile_ns(&histogram, PERCENTILE_PER_MILLE));
        Judged { histogram, p99_ns }
    }
}

/// The lower median of `values` (which must not be empty).
fn median(mut values: Vec<u64>) -> u64 {
    assert!(!values.is_empty(), "median of nothing");
    values.sort_unstable();
    values[(values.len() - 1) / 2]
}

impl SlowWatch {
    /// Forgets everything about `leaf` (cleared, or out of service).
    pub(crate) fn forget(&mut self, leaf: &Leaf) {
        self.slow_since.remove(&leaf.guid());
        leaf.set_slow(false);
    }

    /// One look at every top-level vdev of a pool at `now_ns` (module docs).
    pub(crate) fn check(
        &mut self,
        tops: &[Arc<TopVdev>],
        now_ns: u64,
        settings: SlowSettings,
        spares: &mut Vec<u64>,
    ) -> Vec<Finding> {
        let mut findings = Vec::new();
        for top in tops {
            for leaf in top.leaves() {
                if leaf.state() != LeafState::Online && self.slow_since.contains_key(&leaf.guid()) {
                    self.forget(&leaf);
                }
            }
            let Some(ratio) = settings.ratio else {
                for leaf in top.leaves() {
                    self.forget(&leaf);
                }
                self.windows.remove(&top.guid());
                continue;
            };
            if let Some(window) = self.close_window(top, now_ns) {
                self.judge(top, &window, ratio, now_ns, &mut findings);
            }
            self.fault_expired(top, now_ns, settings.period_ns, spares, &mut findings);
        }
        findings
    }

    /// Returns the window of `top` if it is due (and opens the next), or opens the first.
    fn close_window(&mut self, top: &TopVdev, now_ns: u64) -> Option<BTreeMap<Guid, Judge>> {
        let snapshots: BTreeMap<Guid, IoStatsSnapshot> = top
            .leaves()
            .iter()
            .map(|leaf| (leaf.guid(), leaf.io_stats().snapshot()))
            .collect();
        let open = Window {
            start_ns: now_ns,
            base: snapshots.clone(),
        };
        let Some(window) = self.windows.get(&top.guid()) else {
            self.windows.insert(top.guid(), open);
            return None;
        };
        if now_ns.saturating_sub(window.start_ns) < SLOW_WINDOW_NS {
            return None;
        }
        let judged = snapshots
            .iter()
            .map(|(guid, now)| {
                let delta = now.since(&window.base.get(guid).copied().unwrap_or_default());
                let judge = Judge {
                    read: Judged::new(delta.read_histogram),
                    write: Judged::new(delta.write_histogram),
                };
                (*guid, judge)
            })
            .collect();
        self.windows.insert(top.guid(), open);
        Some(judged)
    }

    fn judge(
        &mut self,
        top: &TopVdev,
        window: &BTreeMap<Guid, Judge>,
        ratio: u64,
        now_ns: u64,
        findings: &mut Vec<Finding>,
    ) {
        for leaf in top.leaves() {
            let Some(own) = window.get(&leaf.guid()) else {
                continue;
            };
            if leaf.state() != LeafState::Online {
                continue;
            }
            let siblings: Vec<&Judge> = window
                .iter()
                .filter(|(guid, _)| **guid != leaf.guid())
                .map(|(_, judge)| judge)
                .collect();
            let read = verdict(&own.read, siblings.iter().map(|j| &j.read), ratio);
            let write = verdict(&own.write, siblings.iter().map(|j| &j.write), ratio);
            let slow_ios = read.map_or(0, |v| v.slow_ios) + write.map_or(0, |v| v.slow_ios);
            leaf.io_stats().add_slow_ios(slow_ios);
            let worst = [read, write].into_iter().flatten().find(|v| v.slow);
            let known = self.slow_since.contains_key(&leaf.guid());
            if let Some(found) = worst {
                // Marked again after a trial window (module docs) without a new event.
                leaf.set_slow(true);
                if !known {
                    self.slow_since.insert(leaf.guid(), now_ns);
                    findings.push(Finding::Slow {
                        leaf: Arc::clone(&leaf),
                        p99_ns: found.p99_ns,
                        median_ns: found.median_ns,
                        slow_ios,
                    });
                }
            } else if known && read.is_some_and(|v| !v.slow) {
                self.forget(&leaf);
                findings.push(Finding::Recovered { leaf });
            } else if known && read.is_none() {
                // A trial window: reads go to it again, so the next window can tell.
                leaf.set_slow(false);
            }
        }
    }

    /// Faults leaves slow for at least `period_ns`, when one of the free `spares` (their
    /// sizes) can replace them and their vdev stays readable; takes that spare's size out.
    fn fault_expired(
        &mut self,
        top: &TopVdev,
        now_ns: u64,
        period_ns: u64,
        spares: &mut Vec<u64>,
        findings: &mut Vec<Finding>,
    ) {
        for leaf in top.leaves() {
            let Some(&since) = self.slow_since.get(&leaf.guid()) else {
                continue;
            };
            if now_ns.saturating_sub(since) < period_ns || leaf.state() != LeafState::Online {
                continue;
            }
            let Some(spare) = spares.iter().position(|&asize| asize >= leaf.asize()) else {
                continue;
            };
            leaf.set_state(LeafState::Faulted);
            if matches!(top.health(), Health::Online | Health::Degraded) {
                spares.swap_remove(spare);
                self.slow_since.remove(&leaf.guid());
                findings.push(Finding::Faulted { leaf });
            } else {
                // The vdev needs it: a slow leaf beats an unreadable vdev.
                leaf.set_state(LeafState::Online);
            }
        }
    }
}

/// Both kinds of one leaf in one window.
#[derive(Clone, Copy, Debug)]
struct Judge {
    read: Judged,
    write: Judged,
}

/// The outcome of comparing one leaf's kind with its siblings'.
#[derive(Clone, Copy, Debug)]
struct Verdict {
    slow: bool,
    p99_ns: u64,
    median_ns: u64,
    slow_ios: u64,
}

/// Compares `own` with the siblings that have enough samples; `None` without a measure.
fn verdict<'a>(
    own: &Judged,
    siblings: impl Iterator<Item = &'a Judged>,
    ratio: u64,
) -> Option<Verdict> {
    let others: Vec<u64> = siblings.filter_map(|j| j.p99_ns).collect();
    let p99_ns = own.p99_ns?;
    if others.is_empty() {
        return None;
    }
    let median_ns = median(others);
    let threshold = median_ns.saturating_mul(ratio);
    assert!(threshold >= median_ns, "ratio is at least 1");
    Some(Verdict {
        slow: p99_ns > threshold && p99_ns >= SLOW_LATENCY_FLOOR_NS,
        p99_ns,
        median_ns,
        slow_ios: histogram_count_at_least(&own.histogram, threshold.saturating_add(1)),
    })
}

/// The value of pool property `name` (its default when not set locally).
pub(crate) fn pool_prop(inner: &mut crate::Imported, name: &str) -> String {
    let crate::Imported { pool, mos, .. } = inner;
    let local = mos.props(&pool.reader()).unwrap_or_default();
    local
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, value)| value)
        .or_else(|| crate::props::find(name).map(|d| d.default.to_string()))
        .unwrap_or_default()
}

/// The thresholds of a pool (`slow_io_ratio`, `slow_io_period`); a value that does not parse
/// (it passed validation when set, so only a damaged MOS can hold one) means the default.
pub(crate) fn settings(inner: &mut crate::Imported) -> SlowSettings {
    let ratio = pool_prop(inner, "slow_io_ratio");
    let period = pool_prop(inner, "slow_io_period");
    let ratio = if ratio == "off" {
        None
    } else {
        Some(ratio.parse().unwrap_or(crate::props::SLOW_IO_RATIO_DEFAULT))
    };
    let period_secs = period
        .parse()
        .unwrap_or(crate::props::SLOW_IO_PERIOD_DEFAULT);
    SlowSettings {
        ratio,
        period_ns: period_secs * 1_000_000_000,
    }
}

/// `io_n`: read plus write errors after which a leaf is faulted.
pub(crate) fn io_errors_fault(inner: &mut crate::Imported) -> u64 {
    pool_prop(inner, "io_n")
        .parse()
        .unwrap_or(crate::replace::IO_ERRORS_FAULT)
}

impl crate::Engine {
    /// Runs the slow-device detector over one pool and posts what it found: a `delay`
    /// ereport for a leaf that became slow, a `statechange` for one faulted for it.
    pub(crate) fn slow_check(&self, name: &str, inner: &mut crate::Imported) {
        let settings = settings(inner);
        let now_ns = self.clock.monotonic_ns();
        let now = self.clock.now_unix_secs();
        let pool = &inner.pool;
        let mut spares: Vec<u64> = pool
            .spares()
            .iter()
            .filter(|s| s.is_usable() && !pool.spare_in_use(s.guid()))
            .map(|s| s.asize())
            .collect();
        let findings = self.slow.lock().expect("slow watch lock poisoned").check(
            pool.tops(),
            now_ns,
            settings,
            &mut spares,
        );
        for finding in findings {
            let event = match finding {
                Finding::Slow {
                    leaf,
                    p99_ns,
                    median_ns,
                    slow_ios,
                } => {
                    let payload = vec![
                        ("p99_ns".to_string(), p99_ns.to_string()),
                        ("siblings_median_ns".to_string(), median_ns.to_string()),
                        ("slow_ios".to_string(), slow_ios.to_string()),
                    ];
                    crate::events::leaf_event(name, &leaf, now, "ereport.fs.zfs.delay", payload)
                }
                Finding::Recovered { leaf } => {
                    let payload = vec![("slow".to_string(), "cleared".to_string())];
                    crate::events::leaf_event(name, &leaf, now, "ereport.fs.zfs.delay", payload)
                }
                Finding::Faulted { leaf } => {
                    let payload = vec![
                        ("vdev_state".to_string(), "FAULTED".to_string()),
                        ("reason".to_string(), "slow".to_string()),
                    ];
                    let class = "sysevent.fs.zfs.statechange";
                    crate::events::leaf_event(name, &leaf, now, class, payload)
                }
            };
            self.post(event);
        }
    }

    /// Forgets everything about `pool` (export, destroy): a later import starts afresh, and
    /// no slow period begun before counts after it.
    pub(crate) fn slow_drop(&self, pool: &tarn_pool::Pool) {
        let mut watch = self.slow.lock().expect("slow watch lock poisoned");
        for top in pool.tops() {
            watch.windows.remove(&top.guid());
            for leaf in top.leaves() {
                watch.slow_since.remove(&leaf.guid());
            }
        }
    }

    /// Adds the slow-device problem (TARN-0007) to a status that reports no other: some leaf
    /// of `pool` is slow (marked, or in a trial window) and still in service.
    pub(crate) fn slow_problem(&self, pool: &tarn_pool::Pool, status: &mut crate::PoolStatus) {
        if status.status.is_some() {
            return;
        }
        let watch = self.slow.lock().expect("slow watch lock poisoned");
        let slow =
            pool.tops().iter().flat_map(|t| t.leaves()).any(|l| {
                l.state() == LeafState::Online && watch.slow_since.contains_key(&l.guid())
            });
        if !slow {
            return;
        }
        status.status = Some(
            concat!(
                "One or more devices are slow: their latency stays well above that of\n",
                "the other devices of their vdev. Reads avoid them while redundancy allows."
            )
            .to_string(),
        );
        status.action = Some(
            concat!(
                "Check the device. A free hot spare replaces it after 'slow_io_period';\n",
                "'tarn pool status -s' counts its slow I/Os, 'tarn pool clear' resets them."
            )
            .to_string(),
        );
        status.see = Some("TARN-0007".to_string());
    }

    /// Forgets the detector's memory of `leaves` (`tarn pool clear`).
    pub(crate) fn slow_forget(&self, leaves: &[Arc<Leaf>]) {
        let mut watch = self.slow.lock().expect("slow watch lock poisoned");
        for leaf in leaves {
            watch.forget(leaf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn judged(bucket: usize, count: u64) -> Judged {
        let mut histogram = [0u64; LATENCY_BUCKETS];
        histogram[bucket] = count;
        Judged::new(histogram)
    }

    fn check(own: Judged, siblings: &[Judged], ratio: u64, expected: Option<(bool, u64)>) {
        let found = verdict(&own, siblings.iter(), ratio).map(|v| (v.slow, v.slow_ios));
        assert_eq!(found, expected);
    }

    /// Goal: the verdict compares p99 with ratio times the siblings' median, needs samples
    /// on both sides, and counts the accesses beyond the threshold.
    #[test]
    fn verdicts() {
        let fast = judged(10, 100);
        check(judged(24, 100), &[fast, fast, fast], 8, Some((true, 100)));
        check(judged(12, 100), &[fast, fast, fast], 8, Some((false, 0)));
        check(judged(24, 5), &[fast, fast], 8, None);
        check(judged(24, 100), &[judged(10, 3)], 8, None);
        check(fast, &[judged(24, 100), fast, fast], 8, Some((false, 0)));
        // A hundred times its siblings but under the floor (p99 of bucket 20 is 2 ms): the
        // accesses count as slow I/Os, the device is not slow.
        check(judged(20, 100), &[fast, fast, fast], 8, Some((false, 100)));
        assert_eq!(median(vec![5, 1, 3, 2]), 2);
    }
}
