//! tarn-base: the vocabulary every other layer shares.
//!
//! # Purpose
//! Newtypes that keep easily confused numbers apart (`Txg`, `Guid`, `VdevId`, `ObjectId`),
//! the limits every queue and loop is bounded by, the deterministic random generator and
//! clock that engine code must use instead of the world's, and ZFS-style size parsing and
//! printing (`7T`, `1.5G`, `290K`). `page_align` is the global-allocator wrapper that
//! places whole-page buffers at page-aligned addresses, for `O_DIRECT` device files; the
//! binaries install it, this crate only defines it. `stock` keeps record-sized buffers
//! made resident ahead of need for the threads that copy written data in.
//!
//! # Model
//! Nothing here does I/O or keeps state beyond a generator's seed, one thread-local hint
//! (`wait`: a serving thread's "I am about to block", which lower layers call without
//! knowing who listens) and the buffer stock, whose one filler thread a binary starts
//! (`stock::install`; without it every buffer is a plain allocation). Everything is `Copy`
//! and cheap; converting between kinds of number is an explicit function, never an `as`.
//!
//! # Invariants
//! - I1: `limits` relate to each other as the const assertions in that module state.
//! - I2: `SeededRng` is a pure function of its seed: the same seed yields the same stream on
//!   every platform (xoshiro256** seeded through splitmix64).
//!
//! # Failure model
//! Parsing user input returns `ParseSizeError`; nothing here panics on input.
//!
//! # Not here
//! I/O, serialization, threads beyond the stock's filler: see tarn-device, tarn-format and
//! tarn-proto.

pub mod buf;
pub mod limits;
pub mod page_align;
pub mod rng;
pub mod stock;
pub mod units;
pub mod wait;

pub use rng::SeededRng;
pub use units::{ParseSizeError, format_size, parse_size};

/// Transaction group number. Txg 0 never commits anything; the first txg a pool writes is 1
/// ("creation txg"). Txgs only move forward on a pool (checked when writing uberblocks and when
/// importing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Txg(pub u64);

impl Txg {
    /// The txg after this one.
    #[must_use]
    pub fn next(self) -> Txg {
        Txg(self.0 + 1)
    }
}

impl std::fmt::Display for Txg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Globally unique identifier of a pool or a vdev, chosen at random when it is created.
/// Zero is never a valid GUID (it means "unset" on disk).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Guid(pub u64);

impl std::fmt::Display for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// Index of a top-level vdev in the pool's vdev tree (the `vdev` field of a DVA).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct VdevId(pub u32);

/// Number of an object (dnode) inside an object set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ObjectId(pub u64);

/// A source of wall-clock time. Engine code takes time only from a `Clock` so that the
/// simulator can run a whole pool on virtual time (STYLE.md §7).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Seconds since the Unix epoch.
    fn now_unix_secs(&self) -> u64;
    /// Monotonic nanoseconds from an arbitrary origin, for latencies and intervals.
    fn monotonic_ns(&self) -> u64;
    /// Nanoseconds since the Unix epoch, for file timestamps. Clocks without a finer source
    /// report whole seconds.
    fn now_unix_nanos(&self) -> u128 {
        u128::from(self.now_unix_secs()) * 1_000_000_000
    }
    /// Waits `ns` nanoseconds of this clock's time (the multihost import check waits for a
    /// heartbeat this way). A manual clock just moves forward.
    fn sleep_ns(&self, ns: u64);
}

/// The real clock, for the daemon and the CLI.
#[derive(Debug)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    /// A clock whose monotonic origin is now.
    #[must_use]
    #[allow(clippy::disallowed_methods)] // The one place real time enters the engine.
    pub fn new() -> Self {
        SystemClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // The one place real time enters the engine.
    fn now_unix_secs(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    fn monotonic_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn sleep_ns(&self, ns: u64) {
        std::thread::sleep(std::time::Duration::from_nanos(ns));
    }

    #[allow(clippy::disallowed_methods)] // The one place real time enters the engine.
    fn now_unix_nanos(&self) -> u128 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    }
}

/// A clock that only moves when told to, for the simulator and tests.
#[derive(Debug, Default)]
pub struct ManualClock {
    ns: std::sync::atomic::AtomicU64,
}

impl ManualClock {
    /// A clock at `unix_secs` seconds past the epoch.
    #[must_use]
    pub fn new(unix_secs: u64) -> Self {
        ManualClock {
            ns: std::sync::atomic::AtomicU64::new(unix_secs * 1_000_000_000),
        }
    }

    /// Moves time forward by `ns` nanoseconds.
    pub fn advance_ns(&self, ns: u64) {
        self.ns.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_unix_secs(&self) -> u64 {
        self.ns.load(std::sync::atomic::Ordering::Relaxed) / 1_000_000_000
    }

    fn monotonic_ns(&self) -> u64 {
        self.ns.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn sleep_ns(&self, ns: u64) {
        self.advance_ns(ns);
    }
}

/// Rounds `value` up to a multiple of `align`, which must be a power of two.
#[must_use]
pub fn round_up_pow2(value: u64, align: u64) -> u64 {
    assert!(
        align.is_power_of_two(),
        "alignment {align} is not a power of two"
    );
    (value + align - 1) & !(align - 1)
}

/// Integer division rounding up.
#[must_use]
pub fn div_ceil(value: u64, divisor: u64) -> u64 {
    assert!(divisor > 0, "division by zero");
    value.div_ceil(divisor)
}
