//! The daemon's memory: the report of `tarn memory` (every category counted where it is
//! held, beside the process's RSS) and the ARC's size under memory pressure.
//!
//! # The bound
//! RSS stays under `arc_max + dirty_max + overhead` (`MemoryInfo::bound`): the ARC charges
//! its entries' whole cost against its limit (tarn-objects), the pools' dirty and kept data
//! is bounded by the write throttle (tarn-engine `memory`), and [`OVERHEAD_BASE`] plus each
//! mount's FUSE request buffers and the buffer stock's budget (tarn-base `stock`, drained
//! while memory is short) cover the rest (the program, thread stacks, in-memory pool
//! state). jemalloc (tarn-cli's global allocator) keeps freed pages for reuse while the heap
//! takes them again and gives them back to the system once they lie unused for a few seconds
//! or the bound would not hold (`heap`, run from the `arc-adjust` thread), so RSS follows what
//! is held; glibc's malloc kept an ARC's worth of freed blocks resident in its per-thread
//! arenas (docs/PERFORMANCE.md, "Memory"). The report measures those free pages by giving
//! them back ([`report`]): jemalloc's own figure counts freed pages never touched as well.
//!
//! # Pressure
//! [`ArcControl::adjust`] runs every [`ADJUST_INTERVAL`] on the `arc-adjust` thread: while
//! the machine's `MemAvailable` is below an eighth of `MemTotal` (or the memory PSI shows
//! tasks stalled), the ARC's target shrinks, by the shortfall and at least a sixteenth, never
//! below `arc_min`; while more than a quarter is available it grows back by a sixteenth of
//! `arc_max` per step up to `arc_max` (ZFS's `arc_c` between `arc_c_min` and `arc_c_max`).
//! The target is the cache's limit, so a shrink evicts at once and the freed pages go back
//! to the system at the same tick (memory is short, so `heap` keeps no free pages).
//!
//! `TARN_ARC_MAX` sets `arc_max` when the daemon starts; `tarn memory set arc_max=SIZE
//! arc_min=SIZE` changes them while it runs and keeps them in `tarn.memory` in the rundir for
//! the next start (the environment variable, when set, still wins at start).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tarn_base::stock::StockConfig;
use tarn_engine::Engine;
use tarn_proto::MemoryInfo;

/// How often the ARC's target follows the machine's free memory.
pub const ADJUST_INTERVAL: Duration = Duration::from_secs(1);
/// The fixed part of the bound: the program's own pages, thread stacks and the in-memory
/// state of pools and datasets (measured: docs/PERFORMANCE.md "Memory").
pub const OVERHEAD_BASE: u64 = 96 << 20;
/// Resident stack of one thread, as counted in the report (an estimate: the daemon's
/// threads recurse little; measured with /proc/PID/smaps, docs/PERFORMANCE.md "Memory").
pub const STACK_RESIDENT: u64 = 64 << 10;
/// The ARC's floor when no `arc_min` is set: ZFS's, the larger of 32 MiB and 1/32 of the
/// machine, but never above `arc_max`.
pub const ARC_MIN_FLOOR: u64 = 32 << 20;
/// The ARC's room below its target that the allocator's free pages may not take: a
/// quarter, what the ARC may grow by between two ticks ([`ArcControl::heap_cap`]).
const ARC_GROWTH_SHARE: u64 = 4;
/// File in the rundir keeping `arc_max` and `arc_min` set at run time.
pub const SETTINGS_FILE: &str = "tarn.memory";

/// The machine's memory as the kernel reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MachineMemory {
    /// `MemTotal`, bytes.
    pub total: u64,
    /// `MemAvailable`, bytes.
    pub available: u64,
    /// Share of the last 10 s in which some task stalled on memory, in hundredths of a
    /// percent (`some avg10` of /proc/pressure/memory); 0 where PSI is absent.
    pub stall: u64,
}

impl MachineMemory {
    /// Whether memory is short: less than an eighth of it available, or tasks stalled on
    /// it for [`STALL_SHRINK`] of the last 10 s. The ARC shrinks and `heap` keeps no free
    /// pages while it is.
    #[must_use]
    pub fn is_short(&self) -> bool {
        self.available < self.total / 8 || self.stall >= STALL_SHRINK
    }

    /// Reads /proc/meminfo and /proc/pressure/memory; `None` without them.
    #[must_use]
    pub fn read() -> Option<MachineMemory> {
        let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
        let psi = std::fs::read_to_string("/proc/pressure/memory").unwrap_or_default();
        Some(MachineMemory {
            total: kib_field(&meminfo, "MemTotal:")?,
            available: kib_field(&meminfo, "MemAvailable:")?,
            stall: psi_some_avg10(&psi),
        })
    }
}

/// A `Name:  N kB` field of /proc/meminfo or /proc/self/status, in bytes.
#[must_use]
pub fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `some avg10=P` of a PSI file, in hundredths of a percent.
fn psi_some_avg10(text: &str) -> u64 {
    let Some(line) = text.lines().find(|l| l.starts_with("some ")) else {
        return 0;
    };
    let Some(value) = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("avg10="))
    else {
        return 0;
    };
    let (whole, frac) = value.split_once('.').unwrap_or((value, "0"));
    let whole: u64 = whole.parse().unwrap_or(0);
    let frac: u64 = frac.get(..2).unwrap_or(frac).parse().unwrap_or(0);
    whole * 100 + frac
}

/// Stall share (hundredths of a percent) at which the ARC shrinks even with memory
/// available: tasks waited on memory for a tenth of the last 10 s.
const STALL_SHRINK: u64 = 1000;

/// The ARC's next target from the current one, its limits and the machine (module doc).
#[must_use]
pub fn next_target(current: u64, min: u64, max: u64, machine: MachineMemory) -> u64 {
    let min = min.min(max);
    let low = machine.total / 8;
    let high = machine.total / 4;
    let target = if machine.is_short() {
        let shortfall = low.saturating_sub(machine.available);
        current.saturating_sub(shortfall.max(current / 16))
    } else if machine.available > high {
        current.saturating_add(max / 16)
    } else {
        current
    };
    target.clamp(min, max)
}

/// The ARC's limits and target, shared by the request handler and the `arc-adjust` thread.
#[derive(Debug)]
pub struct ArcControl {
    engine: Arc<Engine>,
    state: Mutex<ArcLimits>,
    settings: Option<PathBuf>,
}

/// `arc_max`, `arc_min` (0: the default floor) and the target now.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ArcLimits {
    /// Upper limit, bytes.
    pub max: u64,
    /// Floor under pressure, bytes; 0 means [`ARC_MIN_FLOOR`] or 1/32 of the machine.
    #[serde(default)]
    pub min: u64,
    /// The cache's limit now.
    #[serde(skip)]
    pub target: u64,
}

impl ArcLimits {
    /// The floor in effect.
    #[must_use]
    pub fn floor(&self, machine_total: u64) -> u64 {
        let default = ARC_MIN_FLOOR.max(machine_total / 32);
        let min = if self.min == 0 { default } else { self.min };
        min.min(self.max)
    }
}

impl ArcControl {
    /// Limits for `engine`: `arc_max` from `TARN_ARC_MAX`, else the rundir's settings file,
    /// else a quarter of the machine; the cache's limit set to it.
    #[must_use]
    pub fn new(engine: Arc<Engine>, rundir: Option<&Path>) -> ArcControl {
        let settings = rundir.map(|dir| dir.join(SETTINGS_FILE));
        let saved: Option<ArcLimits> = settings
            .as_ref()
            .and_then(|path| std::fs::read(path).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let env = crate::backend::env_arc_max();
        let mut limits = saved.unwrap_or_default();
        limits.max = match (env, saved) {
            (Some(max), _) => max,
            (None, Some(saved)) if saved.max > 0 => saved.max,
            _ => crate::backend::cache_limit(),
        };
        limits.target = limits.max;
        engine.set_cache_limit(limits.max);
        ArcControl {
            engine,
            state: Mutex::new(limits),
            settings,
        }
    }

    /// Limits taken from what `engine`'s cache is set to now, kept nowhere (front ends that
    /// run the engine in their own process, tests); no thread adjusts them.
    #[must_use]
    pub fn adopt(engine: Arc<Engine>) -> ArcControl {
        let max = engine.cache_stats().limit;
        ArcControl {
            engine,
            state: Mutex::new(ArcLimits {
                max,
                min: 0,
                target: max,
            }),
            settings: None,
        }
    }

    /// The limits now.
    pub fn limits(&self) -> ArcLimits {
        *self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `tarn memory set`: new limits from now on, kept in the settings file. Refuses an
    /// `arc_min` above `arc_max` (changing nothing).
    pub fn set(&self, max: Option<u64>, min: Option<u64>) -> Result<(), String> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next = *state;
        if let Some(max) = max {
            if max < tarn_base::limits::CACHE_BYTES_MIN {
                return Err(format!(
                    "arc_max must be at least {}",
                    tarn_base::units::format_size(tarn_base::limits::CACHE_BYTES_MIN)
                ));
            }
            next.max = max;
        }
        if let Some(min) = min {
            next.min = min;
        }
        if next.min > next.max {
            return Err("arc_min must not be above arc_max".into());
        }
        if let Some(path) = &self.settings {
            let text = serde_json::to_vec(&next).map_err(|e| e.to_string())?;
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text)
                .and_then(|()| std::fs::rename(&tmp, path))
                .map_err(|e| format!("cannot keep the setting: {}", crate::describe_io(&e)))?;
        }
        // A new maximum applies at once (an admin lowering it wants the memory back now);
        // raising it lets the target grow at the next adjustment.
        next.target = next.target.min(next.max);
        if max.is_some() && max > Some(state.max) {
            next.target = next.max;
        }
        *state = next;
        self.engine.set_cache_limit(next.target);
        Ok(())
    }

    /// One step of the pressure loop (module doc).
    pub fn adjust(&self, machine: MachineMemory) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let floor = state.floor(machine.total);
        let target = next_target(state.target, floor, state.max, machine);
        if target != state.target {
            state.target = target;
            self.engine.set_cache_limit(target);
        }
    }

    /// The free pages the allocator may keep now (tarn-daemon `heap`): the part of the
    /// bound's `dirty_max` that dirty and kept data leave, and the ARC's room below its
    /// target less a quarter ([`ARC_GROWTH_SHARE`]); none while memory is short.
    ///
    /// The ARC's room counts because each sync of a random-write load frees about as much
    /// as it writes (the records it rewrites leave the ARC: tarn-objects `cache`); with
    /// only the dirty share to keep them in, those pages went back to the system at the
    /// next tick and the next txg faulted them in again (docs/PERFORMANCE.md, "One version
    /// of a record in the ARC"). The quarter of the target left out is what the ARC may
    /// grow by before the next tick gives the pages back.
    fn heap_cap(&self, machine: Option<MachineMemory>) -> u64 {
        if machine.is_some_and(|m| m.is_short()) {
            return 0;
        }
        let engine = self.engine.memory_use();
        let arc = engine.arc;
        let arc_room =
            (arc.limit - arc.limit / ARC_GROWTH_SHARE).saturating_sub(arc.bytes + arc.headers);
        engine
            .dirty_max()
            .saturating_sub(engine.dirty + engine.syncing)
            + arc_room
    }

    /// Starts the `arc-adjust` thread; it ends when `control` is the last handle.
    pub fn start(control: &Arc<ArcControl>) -> Result<(), String> {
        // From here on this thread, not jemalloc's decay timer, decides when freed pages go
        // back to the system (`heap`). An allocator other than jemalloc ignores both.
        let _ = tikv_jemalloc_ctl::background_thread::write(true);
        crate::heap::take_over();
        tarn_base::stock::install(StockConfig::default())
            .map_err(|e| format!("cannot start the buffer stock's thread: {e}"))?;
        let weak = Arc::downgrade(control);
        std::thread::Builder::new()
            .name("arc-adjust".into())
            .spawn(move || {
                let mut trim = crate::heap::Trim::default();
                while let Some(control) = weak.upgrade() {
                    let machine = MachineMemory::read();
                    if let Some(machine) = machine {
                        control.adjust(machine);
                        if machine.is_short() {
                            tarn_base::stock::drain();
                        }
                    }
                    if trim.step(crate::heap::free_bytes(), control.heap_cap(machine)) {
                        crate::heap::purge();
                    }
                    drop(control);
                    std::thread::sleep(ADJUST_INTERVAL);
                }
            })
            .map(|_| ())
            .map_err(|e| format!("cannot start the arc-adjust thread: {e}"))
    }
}

/// What the process holds as the kernel and the allocator see it.
#[derive(Clone, Copy, Debug, Default)]
struct ProcessMemory {
    rss: u64,
    file: u64,
    threads: u64,
    allocated: u64,
    resident: u64,
}

impl ProcessMemory {
    fn read() -> ProcessMemory {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name| kib_field(&status, name).unwrap_or(0);
        let threads = status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        // jemalloc's statistics are refreshed by advancing its epoch. Without jemalloc as
        // the global allocator (tests of this crate) they read 0: the heap then shows in
        // `other`.
        let _ = tikv_jemalloc_ctl::epoch::advance();
        let allocated = tikv_jemalloc_ctl::stats::allocated::read().unwrap_or(0) as u64;
        let resident = tikv_jemalloc_ctl::stats::resident::read().unwrap_or(0) as u64;
        ProcessMemory {
            rss: field("VmRSS:"),
            file: field("RssFile:") + field("RssShmem:"),
            threads,
            allocated,
            resident,
        }
    }
}

/// The report of `tarn memory` (module doc); `fuse_buffers` is what the mounts' session
/// threads hold for requests.
#[must_use]
pub fn report(control: &ArcControl, fuse_buffers: u64) -> MemoryInfo {
    let engine = control.engine.memory_use();
    let process = ProcessMemory::read();
    // jemalloc's `resident` counts the freed pages it never touched too (an untouched
    // buffer freed, machine-dependent in amount), so its free pages are measured instead:
    // given back now (as the heap governor would within its window), the RSS they take
    // with them is what they held; what stays over the bytes allocated is its metadata.
    crate::heap::purge();
    let purged = ProcessMemory::read();
    let allocator_free =
        process.rss.saturating_sub(purged.rss) + purged.resident.saturating_sub(purged.allocated);
    let machine = MachineMemory::read().unwrap_or_default();
    let limits = control.limits();
    let arc = engine.arc;
    let mut info = MemoryInfo {
        rss: process.rss,
        arc_data: arc.data_bytes,
        arc_metadata: arc.bytes - arc.data_bytes,
        arc_headers: arc.headers,
        dirty: engine.dirty,
        syncing: engine.syncing,
        intent_log: engine.intent_log,
        l2arc_headers: engine.l2arc_headers,
        scan_queue: engine.scan_queue,
        fuse_buffers,
        buffer_stock: tarn_base::stock::stats().bytes as u64,
        allocator_free,
        program: process.file,
        stacks: process.threads * STACK_RESIDENT,
        dirty_max: engine.dirty_max(),
        arc_size: arc.bytes + arc.headers,
        arc_target: arc.limit,
        arc_lent: arc.reserved,
        arc_min: limits.floor(machine.total),
        arc_max: limits.max,
        arc_entries: arc.entries,
        arc_hits: arc.hits,
        arc_misses: arc.misses,
        arc_evictions: arc.evictions,
        heap_allocated: process.allocated,
        mem_available: machine.available,
        mem_total: machine.total,
        threads: process.threads,
        ..MemoryInfo::default()
    };
    let counted = info.arc_data
        + info.arc_metadata
        + info.arc_headers
        + info.dirty
        + info.syncing
        + info.intent_log
        + info.l2arc_headers
        + info.scan_queue
        + info.fuse_buffers
        + info.buffer_stock
        + info.allocator_free
        + info.program
        + info.stacks;
    info.other =
        i64::try_from(info.rss).unwrap_or(i64::MAX) - i64::try_from(counted).unwrap_or(i64::MAX);
    info.overhead = OVERHEAD_BASE + fuse_buffers + StockConfig::default().budget as u64;
    info.bound = info.arc_max + info.dirty_max + info.overhead;
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn machine(total: u64, available: u64, stall: u64) -> MachineMemory {
        MachineMemory {
            total,
            available,
            stall,
        }
    }

    /// Goal: the target shrinks while memory is short (by the shortfall, at least a
    /// sixteenth), never below the floor, holds in between and grows back to the maximum.
    #[test]
    fn the_target_follows_available_memory_between_floor_and_max() {
        let (min, max) = (GIB / 2, 6 * GIB);
        let short = machine(24 * GIB, GIB, 0);
        let shrunk = next_target(max, min, max, short);
        assert_eq!(
            shrunk,
            max - (3 * GIB - GIB),
            "by the shortfall below 1/8 of total"
        );
        let mut target = shrunk;
        for _ in 0..100 {
            target = next_target(target, min, max, short);
        }
        assert_eq!(target, min, "never below the floor");
        assert_eq!(
            next_target(target, min, max, machine(24 * GIB, 4 * GIB, 0)),
            min
        );
        let slightly = next_target(4 * GIB, min, max, machine(24 * GIB, 3 * GIB - 1, 0));
        assert_eq!(slightly, 4 * GIB - GIB / 4, "at least a sixteenth");
        let plenty = machine(24 * GIB, 20 * GIB, 0);
        assert_eq!(next_target(min, min, max, plenty), min + max / 16);
        let mut target = min;
        for _ in 0..100 {
            target = next_target(target, min, max, plenty);
        }
        assert_eq!(target, max, "grows back to the maximum, not past it");
        let stalled = machine(24 * GIB, 20 * GIB, 2500);
        assert_eq!(
            next_target(max, min, max, stalled),
            max - max / 16,
            "PSI stalls shrink"
        );
        assert_eq!(
            next_target(GIB, 2 * GIB, GIB, plenty),
            GIB,
            "a floor above max is max"
        );
    }

    /// Goal: the pressure loop moves the engine's cache limit: down while memory is short
    /// (evicting at once), back up to `arc_max` when it is not.
    #[test]
    fn adjust_moves_the_cache_limit() {
        let engine = Arc::new(crate::backend::file_engine(false));
        engine.set_cache_limit(GIB);
        let control = ArcControl::adopt(Arc::clone(&engine));
        let short = machine(16 * GIB, 2 * GIB - (1 << 20), 0);
        control.adjust(short);
        let shrunk = engine.cache_stats().limit;
        assert_eq!(shrunk, GIB - GIB / 16, "by a sixteenth at least");
        for _ in 0..64 {
            control.adjust(short);
        }
        assert_eq!(
            engine.cache_stats().limit,
            GIB / 2,
            "1/32 of the machine is the floor"
        );
        assert_eq!(control.limits().target, GIB / 2);
        for _ in 0..64 {
            control.adjust(machine(16 * GIB, 12 * GIB, 0));
        }
        assert_eq!(engine.cache_stats().limit, GIB, "grown back to arc_max");
    }

    #[test]
    fn proc_fields_parse() {
        let meminfo = "MemTotal:       24000000 kB\nMemFree: 1 kB\nMemAvailable:   1000 kB\n";
        assert_eq!(kib_field(meminfo, "MemTotal:"), Some(24_000_000 * 1024));
        assert_eq!(kib_field(meminfo, "MemAvailable:"), Some(1000 * 1024));
        assert_eq!(kib_field(meminfo, "Swap:"), None);
        let psi = "some avg10=12.34 avg60=1.00 avg300=0.00 total=1\nfull avg10=0.00 total=0\n";
        assert_eq!(psi_some_avg10(psi), 1234);
        assert_eq!(psi_some_avg10(""), 0);
        assert_eq!(psi_some_avg10("some avg10=x"), 0);
    }

    /// Goal: `set` keeps a lowered maximum at once, refuses a floor above the maximum
    /// without changing anything, and the settings file brings the limits back.
    #[test]
    fn set_applies_refuses_and_persists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let engine = Arc::new(crate::backend::file_engine(false));
        let control = ArcControl::new(Arc::clone(&engine), Some(dir.path()));
        control.set(Some(256 << 20), Some(64 << 20)).expect("set");
        assert_eq!(engine.cache_stats().limit, 256 << 20);
        let before = std::fs::read(dir.path().join(SETTINGS_FILE)).expect("saved");
        let refused = control.set(None, Some(GIB)).expect_err("min above max");
        assert_eq!(refused, "arc_min must not be above arc_max");
        assert!(
            control.set(Some(1 << 20), None).is_err(),
            "below the cache's minimum"
        );
        assert_eq!(
            std::fs::read(dir.path().join(SETTINGS_FILE)).expect("kept"),
            before
        );
        assert_eq!(
            (control.limits().max, control.limits().min),
            (256 << 20, 64 << 20)
        );
        if std::env::var_os("TARN_ARC_MAX").is_none() {
            let again = ArcControl::new(engine, Some(dir.path()));
            assert_eq!(
                (again.limits().max, again.limits().min),
                (256 << 20, 64 << 20)
            );
        }
    }
}
