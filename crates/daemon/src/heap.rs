//! The allocator's free pages under the daemon's memory governor: kept while the heap
//! reuses them, given back to the system once they lie unused or would break the bound.
//!
//! # Purpose
//! A streaming write makes a 128 KiB record buffer per record (tarn-objects `tree::write`);
//! the ARC takes the buffers at sync and frees the oldest records when it is full, in the
//! order they were made. Those frees are of neighbouring extents, so jemalloc coalesces them
//! into free runs of tens of MiB. With jemalloc's own decay (timer-based, 1 s) every freed
//! byte went back to the kernel before the next txg asked for it again, and came back as
//! one page fault, one page clear and one memcg charge per 4 KiB written: its decay purges
//! whole extents from the oldest end, and a coalesced run is one extent, so a few MiB over
//! the decay curve purged a whole run (docs/PERFORMANCE.md, "Written bytes in reused
//! memory"). So the daemon turns jemalloc's dirty decay off ([`take_over`]) and decides
//! itself, once per tick of the `arc-adjust` thread ([`Trim::step`]), when to purge.
//!
//! # Model
//! ```text
//!   each tick:  free = jemalloc's dirty pages (freed, still resident)
//!               cap  = what the bound leaves: dirty_max - (dirty + syncing),
//!                      0 while the machine is short of memory
//!   purge all   if free > cap
//!           or  if free stayed >= FLOOR for the whole WINDOW (nothing reused it)
//! ```
//! While writes run, the free pages of one txg's evictions are taken by the next txg's
//! records within a txg's time, so `free` falls low inside every window and nothing is
//! purged; when writes stop, `free` stays flat and goes back after [`WINDOW`] ticks.
//!
//! # Invariants
//! - I1: free pages never exceed the cap at a tick's end: the bound of `tarn memory`
//!   (`arc_max + dirty_max + overhead`) holds as it did with jemalloc's decay, since the
//!   dirty and kept data they stand in for is counted against `dirty_max`.
//! - I2: free pages of at least [`FLOOR`] are not kept for more than [`WINDOW`] ticks
//!   unless some tick of the window saw fewer (the heap reused them).
//!
//! # Failure model
//! Without jemalloc (another global allocator: this crate's tests) the statistics read 0
//! and the controls fail; the governor then never purges and nothing changes.
//!
//! # Not here
//! The compiled-in allocator options (.cargo/config.toml: one arena, no oversize arena,
//! free runs split for any size), the ARC's target (`memory`).

use std::collections::VecDeque;

use tikv_jemalloc_ctl::{Access, AsName};

/// Ticks a free page may stay unused before it is purged (I2): longer than a txg of
/// streaming writes takes to reuse what its sync evicted (a few seconds at `DIRTY_MAX`).
pub const WINDOW: usize = 5;
/// Free pages below this are never worth a purge (the small-size caches hold about this).
pub const FLOOR: u64 = 16 << 20;

/// jemalloc's `MALLCTL_ARENAS_ALL`: the merged statistics of every arena.
const ARENAS_ALL: &str = "4096";
const PAGE: u64 = 4096;

/// Turns jemalloc's dirty decay off in every arena (and in arenas made later): from now
/// on freed pages stay until [`purge`]. Returns whether jemalloc took it.
pub fn take_over() -> bool {
    let default = b"arenas.dirty_decay_ms\0".name().write(-1isize).is_ok();
    set_arenas_decay(-1);
    default
}

/// Gives every arena's free (dirty) pages back to the system now.
pub fn purge() {
    // jemalloc purges an arena's dirty pages at once when its decay time becomes 0; the
    // decay then goes back off. (Its `arena.N.purge` control takes no value, which the safe
    // interface cannot call.)
    set_arenas_decay(0);
    set_arenas_decay(-1);
}

fn set_arenas_decay(ms: isize) {
    let count = tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0);
    for arena in 0..count {
        let name = format!("arena.{arena}.dirty_decay_ms\0");
        // An arena not made yet refuses; it takes the default set by `take_over`.
        let _ = name.as_bytes().name().write(ms);
    }
}

/// Bytes of freed pages jemalloc keeps resident (its dirty pages), 0 without jemalloc.
#[must_use]
pub fn free_bytes() -> u64 {
    let _ = tikv_jemalloc_ctl::epoch::advance();
    let name = format!("stats.arenas.{ARENAS_ALL}.pdirty\0");
    let pages: usize = name.as_bytes().name().read().unwrap_or(0);
    pages as u64 * PAGE
}

/// The purge decision over the last ticks (module doc); pure, so that it can be tested
/// without an allocator.
#[derive(Debug, Default)]
pub struct Trim {
    seen: VecDeque<u64>,
}

impl Trim {
    /// One tick with `free` bytes of free pages and `cap` allowed: whether to purge now.
    pub fn step(&mut self, free: u64, cap: u64) -> bool {
        self.seen.push_back(free);
        if self.seen.len() > WINDOW {
            self.seen.pop_front();
        }
        let unused = self.seen.len() == WINDOW && self.seen.iter().all(|&f| f >= FLOOR);
        let purge = free > cap || unused;
        if purge {
            self.seen.clear();
        }
        purge
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// Goal: free pages over the cap go at once (I1); free pages that a busy heap drains
    /// inside every window stay; pages left flat go after exactly WINDOW ticks (I2), and
    /// small amounts never.
    #[test]
    fn trim_purges_over_the_cap_and_what_lies_unused() {
        let mut trim = Trim::default();
        assert!(trim.step(300 * MIB, 256 * MIB), "over the cap");
        // A write stream: evictions free 200 MiB at a sync, the next txg drains them.
        for tick in 0..40 {
            let free = [200, 120, 40, 2][tick % 4] * MIB;
            assert!(
                !trim.step(free, 400 * MIB),
                "tick {tick}: reused pages kept"
            );
        }
        // The writes stop: the pages lie unused.
        for tick in 1..WINDOW {
            assert!(!trim.step(180 * MIB, 400 * MIB), "tick {tick}");
        }
        assert!(trim.step(180 * MIB, 400 * MIB), "unused for the window");
        for _ in 0..3 * WINDOW {
            assert!(!trim.step(FLOOR - 1, 400 * MIB), "below the floor");
        }
        assert!(trim.step(1, 0), "a cap of 0 (memory short) purges anything");
    }
}
