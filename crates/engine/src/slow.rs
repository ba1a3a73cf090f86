//! Slow-device detection: a leaf whose latency stays well above its siblings' is read around,
//! reported, and after a sustained period faulted so a hot spare takes its place.
//!
//! ```text
//!  every fault_check (daemon: every second), per top-level vdev:
//!    window closed (slow_io_t seconds since it opened)?
//!      per online leaf and per kind (read, write) with >= SLOW_WINDOW_OPS_MIN accesses:
//!        p99 = 99th percentile of the window's latency histogram (tarn-vdev stats)
//!        median = median of the siblings' p99 (the other leaves of the same top-level vdev)
//!        threshold = max(slow_io_ratio * median, slow_io_ms)
//!        accesses above threshold are counted as slow I/Os (status -s, SLOW column)
//!        p99 > threshold and slow I/Os >= slow_io_n: the leaf is SLOW for this kind
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
//! The floor (`slow_io_ms`) keeps fast devices from being judged by noise: on file-backed
//! pools one device's reads may come from the page cache while another's go to the disk, a
//! ratio of a hundred at latencies nobody would call slow. `slow_io_n` asks for that many
//! slow I/Os in one window (ZFS's `slow_io_n` slow I/Os in `slow_io_t` seconds), so a
//! window with a handful of slow accesses does not count. Only `SLOW_WINDOW_OPS_MIN` stays
//! a constant: it is what a 99th percentile needs to mean anything, not a policy.
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
//! The thresholds are pool properties (`slow_io_ratio`, `slow_io_period`, `slow_io_n`,
//! `slow_io_t`, `slow_io_ms`; props.rs), read at every check, so a change applies from the
//! next window. The same watch keeps each leaf's I/O error history for `io_n` errors within
//! `io_t` seconds ([`SlowWatch::errors_within`]; replace.rs faults such a leaf).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use tarn_base::Guid;
use tarn_vdev::stats::{histogram_count, histogram_count_at_least, histogram_quantile_ns};
use tarn_vdev::{Health, IoStatsSnapshot, LATENCY_BUCKETS, Leaf, LeafState, TopVdev};

/// Length of one measuring window by default (`slow_io_t`).
pub const SLOW_WINDOW_NS: u64 = crate::props::SLOW_IO_T_DEFAULT * 1_000_000_000;
/// Accesses of one kind a leaf needs in a window for its latency to be judged.
pub const SLOW_WINDOW_OPS_MIN: u64 = 16;
/// The percentile compared, in per mille.
const PERCENTILE_PER_MILLE: u64 = 990;
/// Error-count changes kept per leaf for `io_t`; beyond it the oldest are taken as older
/// than the window (a fault comes later, never falsely).
const ERROR_SAMPLES_MAX: usize = 4096;

/// The thresholds in force (pool properties).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlowSettings {
    /// `slow_io_ratio`: how many times the siblings' median p99 is slow; `None` is `off`.
    pub(crate) ratio: Option<u64>,
    /// `slow_io_period` in nanoseconds: how long a leaf may stay slow before it is faulted.
    pub(crate) period_ns: u64,
    /// `slow_io_t` in nanoseconds: the length of one window.
    pub(crate) window_ns: u64,
    /// `slow_io_n`: slow I/Os of one kind a window must hold for its leaf to be slow.
    pub(crate) count_min: u64,
    /// `slow_io_ms` in nanoseconds: no access faster is a slow I/O.
    pub(crate) floor_ns: u64,
}

impl Default for SlowSettings {
    fn default() -> Self {
        SlowSettings {
            ratio: Some(crate::props::SLOW_IO_RATIO_DEFAULT),
            period_ns: crate::props::SLOW_IO_PERIOD_DEFAULT * 1_000_000_000,
            window_ns: SLOW_WINDOW_NS,
            count_min: crate::props::SLOW_IO_N_DEFAULT,
            floor_ns: crate::props::SLOW_IO_MS_DEFAULT * 1_000_000,
        }
    }
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
    errors: BTreeMap<Guid, ErrorHistory>,
}

/// When a leaf's I/O error total grew, for `io_n` errors within `io_t`.
#[derive(Debug, Default)]
struct ErrorHistory {
    /// The total before the oldest sample kept (errors older than the window).
    base: u64,
    /// (monotonic ns first seen, total then), oldest first, totals increasing.
    samples: VecDeque<(u64, u64)>,
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
        self.errors.remove(&leaf.guid());
        leaf.set_slow(false);
    }

    /// Read plus write errors of `leaf` first seen within the last `window_ns` (`io_t`).
    /// Errors are timed when a check first sees them, so the daemon's checks every second
    /// time them to the second; a `clear` (counters back to zero) starts a new history.
    pub(crate) fn errors_within(&mut self, leaf: &Leaf, now_ns: u64, window_ns: u64) -> u64 {
        let stats = leaf.stats().snapshot();
        let total = stats.read_errors + stats.write_errors;
        let history = self.errors.entry(leaf.guid()).or_default();
        let last = history.samples.back().map_or(history.base, |&(_, t)| t);
        if total < last {
            *history = ErrorHistory::default();
        }
        if total > history.samples.back().map_or(history.base, |&(_, t)| t) {
            if history.samples.len() == ERROR_SAMPLES_MAX
                && let Some((_, oldest)) = history.samples.pop_front()
            {
                history.base = oldest;
            }
            history.samples.push_back((now_ns, total));
        }
        while let Some(&(seen, at)) = history.samples.front() {
            if now_ns.saturating_sub(seen) < window_ns {
                break;
            }
            history.base = at;
            history.samples.pop_front();
        }
        assert!(
            history.base <= total,
            "error totals only grow between clears"
        );
        total - history.base
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
            if let Some(window) = self.close_window(top, now_ns, settings.window_ns) {
                self.judge(top, &window, ratio, now_ns, settings, &mut findings);
            }
            self.fault_expired(top, now_ns, settings.period_ns, spares, &mut findings);
        }
        findings
    }

    /// Returns the window of `top` if it is due (and opens the next), or opens the first.
    fn close_window(
        &mut self,
        top: &TopVdev,
        now_ns: u64,
        window_ns: u64,
    ) -> Option<BTreeMap<Guid, Judge>> {
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
        if now_ns.saturating_sub(window.start_ns) < window_ns {
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
        settings: SlowSettings,
        findings: &mut Vec<Finding>,
    ) {
        let limits = Limits {
            ratio,
            count_min: settings.count_min,
            floor_ns: settings.floor_ns,
        };
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
            let read = verdict(&own.read, siblings.iter().map(|j| &j.read), limits);
            let write = verdict(&own.write, siblings.iter().map(|j| &j.write), limits);
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

/// What makes an access slow and a leaf slow (the pool's properties).
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// `slow_io_ratio`.
    ratio: u64,
    /// `slow_io_n`.
    count_min: u64,
    /// `slow_io_ms`, in ns.
    floor_ns: u64,
}

/// Compares `own` with the siblings that have enough samples; `None` without a measure.
fn verdict<'a>(
    own: &Judged,
    siblings: impl Iterator<Item = &'a Judged>,
    limits: Limits,
) -> Option<Verdict> {
    let others: Vec<u64> = siblings.filter_map(|j| j.p99_ns).collect();
    let p99_ns = own.p99_ns?;
    if others.is_empty() {
        return None;
    }
    let median_ns = median(others);
    let relative = median_ns.saturating_mul(limits.ratio);
    assert!(relative >= median_ns, "ratio is at least 1");
    let threshold = relative.max(limits.floor_ns);
    assert!(
        threshold >= limits.floor_ns,
        "the floor bounds the threshold"
    );
    let slow_ios = histogram_count_at_least(&own.histogram, threshold.saturating_add(1));
    Some(Verdict {
        slow: p99_ns > threshold && slow_ios >= limits.count_min,
        p99_ns,
        median_ns,
        slow_ios,
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

/// Pool property `name` as a whole number; a value that does not parse (it passed
/// validation when set, so only a damaged MOS can hold one) means `default`.
fn number_prop(inner: &mut crate::Imported, name: &str, default: u64) -> u64 {
    pool_prop(inner, name).parse().unwrap_or(default)
}

/// The thresholds of a pool (`slow_io_ratio`, `slow_io_period`, `slow_io_n`, `slow_io_t`,
/// `slow_io_ms`).
pub(crate) fn settings(inner: &mut crate::Imported) -> SlowSettings {
    use crate::props::{
        SLOW_IO_MS_DEFAULT, SLOW_IO_N_DEFAULT, SLOW_IO_PERIOD_DEFAULT, SLOW_IO_RATIO_DEFAULT,
        SLOW_IO_T_DEFAULT,
    };
    let ratio = pool_prop(inner, "slow_io_ratio");
    let ratio = if ratio == "off" {
        None
    } else {
        Some(ratio.parse().unwrap_or(SLOW_IO_RATIO_DEFAULT))
    };
    let seconds = 1_000_000_000;
    SlowSettings {
        ratio,
        period_ns: number_prop(inner, "slow_io_period", SLOW_IO_PERIOD_DEFAULT) * seconds,
        window_ns: number_prop(inner, "slow_io_t", SLOW_IO_T_DEFAULT) * seconds,
        count_min: number_prop(inner, "slow_io_n", SLOW_IO_N_DEFAULT),
        floor_ns: number_prop(inner, "slow_io_ms", SLOW_IO_MS_DEFAULT) * 1_000_000,
    }
}

/// `io_n` and `io_t` (in ns): that many read plus write errors within that long fault a
/// leaf.
pub(crate) fn io_errors_fault(inner: &mut crate::Imported) -> (u64, u64) {
    let count = number_prop(inner, "io_n", crate::replace::IO_ERRORS_FAULT);
    let seconds = number_prop(inner, "io_t", crate::props::IO_T_DEFAULT);
    (count, seconds * 1_000_000_000)
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
                    let why = vec![("reason".to_string(), "slow".to_string())];
                    let mut log = self.events.lock().expect("event lock poisoned");
                    log.state(name, &leaf, now, why);
                    continue;
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

    const LIMITS: Limits = Limits {
        ratio: 8,
        count_min: 10,
        floor_ns: 10_000_000,
    };

    fn check(own: Judged, siblings: &[Judged], limits: Limits, expected: Option<(bool, u64)>) {
        let found = verdict(&own, siblings.iter(), limits).map(|v| (v.slow, v.slow_ios));
        assert_eq!(found, expected);
    }

    /// Goal: the verdict compares p99 with ratio times the siblings' median (at least the
    /// floor), needs samples on both sides, counts the accesses beyond the threshold and
    /// asks for `slow_io_n` of them.
    #[test]
    fn verdicts() {
        let fast = judged(10, 100);
        check(
            judged(24, 100),
            &[fast, fast, fast],
            LIMITS,
            Some((true, 100)),
        );
        check(
            judged(12, 100),
            &[fast, fast, fast],
            LIMITS,
            Some((false, 0)),
        );
        check(judged(24, 5), &[fast, fast], LIMITS, None);
        check(judged(24, 100), &[judged(10, 3)], LIMITS, None);
        check(
            fast,
            &[judged(24, 100), fast, fast],
            LIMITS,
            Some((false, 0)),
        );
        // A hundred times its siblings but under the floor (p99 of bucket 20 is 2 ms): no
        // access is a slow I/O, the device is not slow; a lower floor makes it slow.
        check(
            judged(20, 100),
            &[fast, fast, fast],
            LIMITS,
            Some((false, 0)),
        );
        let low_floor = Limits {
            floor_ns: 1_000_000,
            ..LIMITS
        };
        check(judged(20, 100), &[fast, fast], low_floor, Some((true, 100)));
        // 5 slow accesses of 100 put the p99 beyond the threshold; slow_io_n decides.
        let mut histogram = [0u64; LATENCY_BUCKETS];
        histogram[10] = 95;
        histogram[24] = 5;
        let few = Judged::new(histogram);
        check(few, &[fast, fast], LIMITS, Some((false, 5)));
        let five = Limits {
            count_min: 5,
            ..LIMITS
        };
        check(few, &[fast, fast], five, Some((true, 5)));
        assert_eq!(median(vec![5, 1, 3, 2]), 2);
    }

    /// Goal: `io_n` counts errors first seen within `io_t`: old ones age out, a clear
    /// (counters back to zero) starts afresh. Method: a leaf's counters driven through
    /// failing writes to a gone SimDevice, checked at chosen instants.
    #[test]
    fn errors_age_out_of_the_window() {
        use tarn_device::{FaultPlan, SimDevice};
        let device = SimDevice::new("/sim/e", 64 << 20, FaultPlan::default());
        let leaf = Leaf::new(Guid(9), device.clone()).unwrap();
        let top = TopVdev::new(
            tarn_base::VdevId(0),
            Guid(9),
            12,
            tarn_vdev::Layout::Disk,
            vec![Arc::new(leaf)],
        )
        .unwrap();
        let leaf = top.leaves()[0].clone();
        let fail = |n: usize| {
            for _ in 0..n {
                leaf.set_state(LeafState::Online);
                let _ = top.write(0, &[0u8; 4096]);
            }
        };
        let mut watch = SlowWatch::default();
        let second = 1_000_000_000;
        device.set_gone(true);
        fail(3);
        assert_eq!(watch.errors_within(&leaf, 10 * second, 60 * second), 3);
        fail(2);
        assert_eq!(watch.errors_within(&leaf, 40 * second, 60 * second), 5);
        assert_eq!(watch.errors_within(&leaf, 69 * second, 60 * second), 5);
        assert_eq!(watch.errors_within(&leaf, 70 * second, 60 * second), 2);
        assert_eq!(watch.errors_within(&leaf, 100 * second, 60 * second), 0);
        leaf.clear();
        fail(1);
        assert_eq!(watch.errors_within(&leaf, 101 * second, 60 * second), 1);
    }
}
