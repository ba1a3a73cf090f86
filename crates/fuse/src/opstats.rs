//! Per-opcode request statistics of a mount: how many requests of each kind arrived, how long
//! the server spent on them (from the handler's first line until its reply was written to
//! /dev/fuse), how much of that was spent in `Engine::fs_op` (waiting for the pool lock,
//! admission, settings, the intent-log records, the dirty check) and how much of that was
//! POSIX work inside the engine's lock (the closure `fs_op` runs). What is left of the
//! server time is the front end's own work and writing the reply. `docs/PERFORMANCE.md`
//! breaks a create and an unlink down with these; [`crate::Mount::op_stats`] reads them,
//! and with the environment variable [`OPSTATS_ENV`] naming a file, a mount appends its
//! table there when it is unmounted.
//!
//! The server time is also kept as a latency histogram (the device layer's power-of-two
//! buckets), which the daemon's metrics expose as `tarn_fuse_request_seconds`.
//!
//! Cost: six clock reads and four relaxed atomic adds per request; the clock is only read
//! to measure, nothing waits on it.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use tarn_engine::{Histogram, Latencies};

/// Names the file a mount appends its per-opcode table to when it is unmounted (unset: no
/// table is written).
pub const OPSTATS_ENV: &str = "TARN_FUSE_OPSTATS";

macro_rules! opcodes {
    ($($variant:ident => $name:literal,)*) => {
        /// The FUSE requests the server answers, one counter each.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Opcode {
            $(
                #[doc = concat!("`FUSE_", $name, "`")]
                $variant,
            )*
        }

        impl Opcode {
            /// Every opcode, in the order [`OpCounters`] keeps them.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$variant,)*];

            /// The opcode's FUSE name without the `FUSE_` prefix.
            #[must_use]
            pub fn name(self) -> &'static str {
                match self {
                    $(Opcode::$variant => $name,)*
                }
            }
        }
    };
}

opcodes! {
    Lookup => "LOOKUP",
    Forget => "FORGET",
    Getattr => "GETATTR",
    Setattr => "SETATTR",
    Readlink => "READLINK",
    Mknod => "MKNOD",
    Mkdir => "MKDIR",
    Unlink => "UNLINK",
    Rmdir => "RMDIR",
    Symlink => "SYMLINK",
    Rename => "RENAME",
    Link => "LINK",
    Open => "OPEN",
    Read => "READ",
    Write => "WRITE",
    Flush => "FLUSH",
    Release => "RELEASE",
    Fsync => "FSYNC",
    Opendir => "OPENDIR",
    Readdir => "READDIR",
    Readdirplus => "READDIRPLUS",
    Releasedir => "RELEASEDIR",
    Fsyncdir => "FSYNCDIR",
    Statfs => "STATFS",
    Setxattr => "SETXATTR",
    Getxattr => "GETXATTR",
    Listxattr => "LISTXATTR",
    Removexattr => "REMOVEXATTR",
    Access => "ACCESS",
    Create => "CREATE",
    Fallocate => "FALLOCATE",
    Lseek => "LSEEK",
    CopyFileRange => "COPY_FILE_RANGE",
}

/// One opcode's statistics since the mount was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpStat {
    /// Which requests.
    pub opcode: Opcode,
    /// How many arrived.
    pub count: u64,
    /// Nanoseconds from the handler's start to its reply, summed.
    pub server_nanos: u64,
    /// Nanoseconds in `Engine::fs_op`, summed (part of `server_nanos`).
    pub engine_nanos: u64,
    /// Nanoseconds of POSIX work inside the engine's lock, summed (part of `engine_nanos`).
    pub posix_nanos: u64,
    /// The server times as a histogram (`count` and `server_nanos` are its totals).
    pub server: Latencies,
}

#[derive(Debug, Default)]
struct Slot {
    server: Histogram,
    engine_nanos: AtomicU64,
    posix_nanos: AtomicU64,
}

/// The counters of one mount, one slot per [`Opcode`] (lock-free).
#[derive(Debug)]
pub(crate) struct OpCounters {
    slots: Vec<Slot>,
}

impl Default for OpCounters {
    fn default() -> OpCounters {
        OpCounters {
            slots: Opcode::ALL.iter().map(|_| Slot::default()).collect(),
        }
    }
}

thread_local! {
    /// POSIX time of the request this session thread is serving (a thread serves one
    /// request at a time), handed from `posix_timed` to the request's [`Timed`].
    static POSIX_NANOS: Cell<u64> = const { Cell::new(0) };
    /// The same for the time in `Engine::fs_op` (`engine_timed`).
    static ENGINE_NANOS: Cell<u64> = const { Cell::new(0) };
}

fn nanos_since(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

// The clock here only measures; nothing waits on it or decides by it.
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

/// Runs `work` (a request's POSIX work) and adds its time to the current request's.
pub(crate) fn posix_timed<R>(work: impl FnOnce() -> R) -> R {
    let start = now();
    let result = work();
    let spent = nanos_since(start);
    POSIX_NANOS.with(|nanos| nanos.set(nanos.get().saturating_add(spent)));
    result
}

/// Runs `work` (a call of `Engine::fs_op`) and adds its time to the current request's.
pub(crate) fn engine_timed<R>(work: impl FnOnce() -> R) -> R {
    let start = now();
    let result = work();
    let spent = nanos_since(start);
    ENGINE_NANOS.with(|nanos| nanos.set(nanos.get().saturating_add(spent)));
    result
}

/// A request being served; dropping it (after the reply) records it.
pub(crate) struct Timed<'a> {
    slot: &'a Slot,
    opcode: Opcode,
    start: Instant,
}

/// A request whose reply another thread sends ([`Timed::suspend`], [`OpCounters::resume`]):
/// when it began, and the engine and POSIX time it has had so far.
pub(crate) struct Suspended {
    opcode: Opcode,
    start: Instant,
    engine_nanos: u64,
    posix_nanos: u64,
}

impl Timed<'_> {
    /// Hands the request on to another thread, unrecorded: its time goes on there.
    pub(crate) fn suspend(self) -> Suspended {
        let suspended = Suspended {
            opcode: self.opcode,
            start: self.start,
            engine_nanos: ENGINE_NANOS.with(|nanos| nanos.replace(0)),
            posix_nanos: POSIX_NANOS.with(|nanos| nanos.replace(0)),
        };
        // Recorded by the `Timed` that `resume` makes of it, not here.
        std::mem::forget(self);
        suspended
    }
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        let server = nanos_since(self.start);
        let posix = POSIX_NANOS.with(|nanos| nanos.replace(0));
        let engine = ENGINE_NANOS.with(|nanos| nanos.replace(0));
        self.slot.server.add(server);
        self.slot.engine_nanos.fetch_add(engine, Ordering::Relaxed);
        self.slot.posix_nanos.fetch_add(posix, Ordering::Relaxed);
    }
}

impl OpCounters {
    /// A request of `opcode` starts being served.
    pub(crate) fn timed(&self, opcode: Opcode) -> Timed<'_> {
        self.resume(Suspended {
            opcode,
            start: now(),
            engine_nanos: 0,
            posix_nanos: 0,
        })
    }

    /// A request [`Timed::suspend`]ed on another thread goes on being served on this one.
    pub(crate) fn resume(&self, suspended: Suspended) -> Timed<'_> {
        ENGINE_NANOS.with(|nanos| nanos.set(suspended.engine_nanos));
        POSIX_NANOS.with(|nanos| nanos.set(suspended.posix_nanos));
        Timed {
            slot: &self.slots[suspended.opcode as usize],
            opcode: suspended.opcode,
            start: suspended.start,
        }
    }

    /// Every opcode's statistics, in [`Opcode::ALL`] order.
    pub(crate) fn snapshot(&self) -> Vec<OpStat> {
        Opcode::ALL
            .iter()
            .zip(&self.slots)
            .map(|(&opcode, slot)| {
                let server = slot.server.snapshot();
                OpStat {
                    opcode,
                    count: server.count(),
                    server_nanos: server.total_ns,
                    engine_nanos: slot.engine_nanos.load(Ordering::Relaxed),
                    posix_nanos: slot.posix_nanos.load(Ordering::Relaxed),
                    server,
                }
            })
            .collect()
    }
}

/// The table of the opcodes that arrived: count, mean server, engine and POSIX
/// microseconds.
#[must_use]
pub fn render(stats: &[OpStat]) -> String {
    let mut out = String::from("opcode count server_us_mean engine_us_mean posix_us_mean\n");
    for stat in stats.iter().filter(|stat| stat.count > 0) {
        let mean = |nanos: u64| nanos as f64 / stat.count as f64 / 1000.0;
        out.push_str(&format!(
            "{} {} {:.1} {:.1} {:.1}\n",
            stat.opcode.name(),
            stat.count,
            mean(stat.server_nanos),
            mean(stat.engine_nanos),
            mean(stat.posix_nanos)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_per_opcode_with_their_posix_share() {
        let counters = OpCounters::default();
        for _ in 0..3 {
            let _request = counters.timed(Opcode::Create);
            engine_timed(|| {
                posix_timed(|| std::thread::sleep(std::time::Duration::from_millis(1)));
            });
        }
        drop(counters.timed(Opcode::Getattr));
        let stats = counters.snapshot();
        let create = stats[Opcode::Create as usize];
        assert_eq!(create.opcode, Opcode::Create);
        assert_eq!(create.count, 3);
        assert!(create.posix_nanos >= 3_000_000, "{create:?}");
        assert!(create.engine_nanos >= create.posix_nanos, "{create:?}");
        assert!(create.server_nanos >= create.engine_nanos, "{create:?}");
        // 1 ms lies in bucket 19 ([2^19, 2^20) ns) or, with a slow host, above it.
        let slow: u64 = create.server.buckets[19..].iter().sum();
        assert_eq!(slow, 3, "{:?}", create.server);
        let getattr = stats[Opcode::Getattr as usize];
        assert_eq!((getattr.count, getattr.posix_nanos), (1, 0));
        let table = render(&stats);
        assert!(table.contains("\nCREATE 3 "), "{table}");
        assert!(table.contains("\nGETATTR 1 "), "{table}");
        assert!(!table.contains("UNLINK"), "{table}");
    }
}
