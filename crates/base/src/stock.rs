//! A stock of record buffers made resident ahead of need by a thread of their own, so that
//! the thread that copies a written record in does not take the page faults of new memory.
//!
//! # Purpose
//! A streaming write (a FUSE `WRITE` of 1 MiB, an NBD write payload) is copied into new
//! record-sized buffers (tarn-objects `tree::write`, tarn-nbd `read_payload`) while the
//! writer waits for the reply: a `dd` into a mount has one request in flight, so the time
//! of that copy is the stream's rate. With the ARC keeping every record it writes, each
//! such buffer is memory the process never touched, and the copy took one page fault per
//! 4 KiB: 56% of the request threads' CPU in session 28's profile (docs/PERFORMANCE.md,
//! "Streaming write CPU"). Here a filler thread allocates buffers of the size being asked
//! for and makes their pages resident (`madvise(MADV_POPULATE_WRITE)`: one call per
//! buffer instead of a fault per page) before anyone asks, on whichever CPU is free; the
//! copying thread takes one ready and copies at memory speed. Writes decide what is
//! stocked ([`take`]), and so do reads' buffers of [`READ_DEMAND_MIN`] and more (a file's
//! records, filling the ARC as a cold read goes); smaller new buffers (`buf::zeroed`:
//! volume blocks read, the pool's own metadata at import) take a ready one when it is of
//! their size and never decide it ([`take_ready`]), so a daemon that starts, imports or
//! serves small reads keeps no stock.
//!
//! # Model
//! ```text
//!   take(len) ──hit──► a ready buffer of capacity len (len 0, pages resident)
//!       └──miss─► Vec::with_capacity(len), and the miss is demand (take_ready's only
//!                 from READ_DEMAND_MIN up):
//!                 the stock's size becomes len (at once when nothing is stocked,
//!                 after SWITCH_AFTER misses of it with no hit between)
//!   filler: while ready < count(size) and not idle: allocate, populate, push
//!           nothing taken for `idle`: every ready buffer freed, size forgotten
//! ```
//! Only one size is stocked at a time: a pool's records are mostly of one size (the
//! dataset's `recordsize`, the volume's `volblocksize`), and a second size in use at once
//! takes plain allocations, as before.
//!
//! # Invariants
//! - S1: [`Stock::copied`]`(s)` equals `s.to_vec()`, with or without a stock, hit or miss.
//! - S2: the ready buffers' capacities add up to at most the budget.
//! - S3: a ready buffer has length 0 and a capacity of exactly the stocked size.
//! - S4: the state's mutex is never held while memory is allocated, populated or freed.
//!
//! # Failure model
//! Best effort throughout: on a kernel without `MADV_POPULATE_WRITE` (or any failed
//! populate) the filler stops at its first buffer and every take is a plain allocation, as
//! without a stock; a filler thread that cannot be spawned leaves
//! [`install`] failing and every take a plain allocation.
//!
//! # Not here
//! Reuse of freed buffers (the allocator recycles them; the daemon's `heap` decides when
//! free pages go back to the system); buffers below [`STOCK_MIN`], whose few faults cost
//! about what stocking them would.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::page_align::PAGE;

/// Smallest buffer worth stocking: 16 pages (records are 128 KiB by default).
pub const STOCK_MIN: usize = 16 * PAGE;
/// Misses of one size, with no hit of the stocked size between, that make it the stocked
/// size in place of another (sizes used side by side do not take turns).
pub const SWITCH_AFTER: u32 = 8;
/// Smallest buffer whose [`take_ready`] is demand: a record of the default `recordsize`.
/// Below it, the buffers an import or a pool's metadata use (64 KiB among them) stocked
/// 16 MiB at every daemon start for nothing.
pub const READ_DEMAND_MIN: usize = 128 << 10;
/// Largest buffer stocked, as a share of the budget: at least four of a size.
const SIZE_SHARE: usize = 4;

/// How much to stock and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StockConfig {
    /// Bytes of ready buffers at most (S2).
    pub budget: usize,
    /// Nothing taken for this long: the stock is freed.
    pub idle: Duration,
}

impl Default for StockConfig {
    /// 16 MiB (128 records of 128 KiB: about 30 ms of a 500 MB/s stream), freed after 5 s
    /// without a take.
    fn default() -> StockConfig {
        StockConfig {
            budget: 16 << 20,
            idle: Duration::from_secs(5),
        }
    }
}

/// What the stock holds and has done, for `tarn memory` and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StockStats {
    /// The size being stocked (0: none).
    pub size: usize,
    /// Ready buffers.
    pub ready: usize,
    /// Bytes of ready buffers (their capacities).
    pub bytes: usize,
    /// Takes served from the stock.
    pub hits: u64,
    /// Takes of a stockable size served by a plain allocation.
    pub misses: u64,
}

#[derive(Debug)]
struct State {
    size: usize,
    ready: Vec<Vec<u8>>,
    /// The size of the latest misses of a size other than `size`, and how many in a row.
    wanted: usize,
    wanted_in_row: u32,
    last_take: Instant,
    closed: bool,
    hits: u64,
    misses: u64,
}

/// A stock of resident buffers of one size, filled by its own thread (module docs).
#[derive(Debug)]
pub struct Stock {
    config: StockConfig,
    state: Mutex<State>,
    /// `state.size`, readable without the lock: a [`Stock::take_ready`] of another small
    /// size returns at once.
    stocked: AtomicUsize,
    /// The filler waits here for demand; takes and [`Stock::stop`] wake it.
    wake: Condvar,
}

impl Stock {
    /// A stock and its filler thread (`buf-stock`), which runs until [`Stock::stop`].
    pub fn start(config: StockConfig) -> std::io::Result<Arc<Stock>> {
        let stock = Arc::new(Stock {
            config,
            state: Mutex::new(State {
                size: 0,
                ready: Vec::new(),
                wanted: 0,
                wanted_in_row: 0,
                last_take: now(),
                closed: false,
                hits: 0,
                misses: 0,
            }),
            stocked: AtomicUsize::new(0),
            wake: Condvar::new(),
        });
        let filler = Arc::clone(&stock);
        std::thread::Builder::new()
            .name("buf-stock".into())
            .spawn(move || filler.fill())?;
        Ok(stock)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Nothing panics while holding it; a poisoned state is still a valid stock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How many buffers of `size` the budget stocks (0: the size is not stocked).
    fn count(&self, size: usize) -> usize {
        if size < STOCK_MIN || size > self.config.budget / SIZE_SHARE {
            return 0;
        }
        self.config.budget / size
    }

    /// An empty vector with a capacity of `len`: a ready buffer when one of that size is
    /// stocked (its pages resident), otherwise a plain allocation; a miss is demand
    /// (module docs). For the copies of written data.
    #[must_use]
    pub fn take(&self, len: usize) -> Vec<u8> {
        self.take_with(len, true)
    }

    /// [`Stock::take`] for buffers other than written data (reads' blocks): demand only
    /// from [`READ_DEMAND_MIN`] up; below it, a ready buffer only if `len` is the size
    /// stocked anyway.
    #[must_use]
    pub fn take_ready(&self, len: usize) -> Vec<u8> {
        self.take_with(len, len >= READ_DEMAND_MIN)
    }

    fn take_with(&self, len: usize, demand: bool) -> Vec<u8> {
        let other = !demand && self.stocked.load(Ordering::Relaxed) != len;
        if other || self.count(len) == 0 {
            return Vec::with_capacity(len);
        }
        let mut dropped = Vec::new();
        let taken = {
            let mut state = self.lock();
            let taken = if state.size == len {
                state.ready.pop()
            } else {
                None
            };
            match &taken {
                Some(_) => {
                    state.hits += 1;
                    state.last_take = now();
                    // The stocked size is in use: another size needs misses in a row.
                    state.wanted_in_row = 0;
                }
                None if demand => {
                    state.misses += 1;
                    state.last_take = now();
                    self.note_miss(&mut state, len, &mut dropped);
                }
                None => {}
            }
            // Woken at half, the filler tops the stock up in one go.
            if state.size == len && state.ready.len() <= self.count(len) / 2 {
                self.wake.notify_one();
            }
            taken
        };
        drop(dropped); // S4: freed without the lock.
        taken.unwrap_or_else(|| Vec::with_capacity(len))
    }

    /// A miss of `len` is demand: it becomes the stocked size when nothing is stocked, or
    /// after [`SWITCH_AFTER`] misses of it with no hit between; the old size's buffers go
    /// to `dropped`.
    fn note_miss(&self, state: &mut State, len: usize, dropped: &mut Vec<Vec<u8>>) {
        if state.size == len {
            return; // The filler is behind; it was or will be woken.
        }
        if state.wanted == len {
            state.wanted_in_row += 1;
        } else {
            state.wanted = len;
            state.wanted_in_row = 1;
        }
        if state.size == 0 || state.wanted_in_row >= SWITCH_AFTER {
            self.set_size(state, len);
            state.wanted_in_row = 0;
            *dropped = std::mem::take(&mut state.ready);
        }
    }

    fn set_size(&self, state: &mut State, size: usize) {
        state.size = size;
        self.stocked.store(size, Ordering::Relaxed);
    }

    /// `source` copied into a buffer from [`Stock::take`] (S1).
    #[must_use]
    pub fn copied(&self, source: &[u8]) -> Vec<u8> {
        let mut out = self.take(source.len());
        out.extend_from_slice(source);
        out
    }

    /// Frees every ready buffer now (memory is short); demand stocks again later.
    pub fn drain(&self) {
        let dropped = {
            let mut state = self.lock();
            self.set_size(&mut state, 0);
            std::mem::take(&mut state.ready)
        };
        drop(dropped);
    }

    /// Ends the filler thread and frees the stock; takes are plain allocations from then on.
    pub fn stop(&self) {
        self.lock().closed = true;
        self.drain();
        self.wake.notify_all();
    }

    /// What the stock holds now.
    #[must_use]
    pub fn stats(&self) -> StockStats {
        let state = self.lock();
        StockStats {
            size: state.size,
            ready: state.ready.len(),
            bytes: state.ready.iter().map(Vec::capacity).sum(),
            hits: state.hits,
            misses: state.misses,
        }
    }

    /// The filler thread's loop (module docs, Model).
    fn fill(&self) {
        loop {
            let Some(size) = self.next_size() else {
                return;
            };
            // S4: allocated and populated without the lock.
            let mut buffer = Vec::with_capacity(size);
            if !populate_spare(&mut buffer) {
                // A buffer the kernel would not make resident is worth nothing stocked (and
                // would be counted as resident memory that is not): no stock at all.
                self.stop();
                return;
            }
            let mut state = self.lock();
            if state.size == size && state.ready.len() < self.count(size) && !state.closed {
                state.ready.push(buffer);
            } else {
                drop(state);
                drop(buffer);
            }
        }
    }

    /// Waits until a buffer is wanted and returns its size; None once stopped. Frees the
    /// stock when nothing was taken for `idle`.
    fn next_size(&self) -> Option<usize> {
        let mut state = self.lock();
        loop {
            if state.closed {
                return None;
            }
            let idle = state.last_take.elapsed() >= self.config.idle;
            if state.size != 0 && idle {
                self.set_size(&mut state, 0);
                let dropped = std::mem::take(&mut state.ready);
                drop(state);
                drop(dropped);
                state = self.lock();
                continue;
            }
            if state.size != 0 && state.ready.len() < self.count(state.size) {
                return Some(state.size);
            }
            let (next, _) = (self.wake.wait_timeout(state, self.config.idle))
                .unwrap_or_else(PoisonError::into_inner);
            state = next;
        }
    }
}

/// Makes the whole pages of `buffer`'s spare capacity resident and writable, in one system
/// call. Best effort (module docs); returns whether the kernel did it.
pub fn populate_spare(buffer: &mut Vec<u8>) -> bool {
    let spare = buffer.spare_capacity_mut();
    let start = spare.as_mut_ptr() as usize;
    let first = start.next_multiple_of(PAGE);
    let last = (start + spare.len()) / PAGE * PAGE;
    if last <= first {
        return false;
    }
    // SAFETY: [first, last) lies inside the spare capacity of `buffer`, memory held
    // mutably borrowed here and holding no initialised value. MADV_POPULATE_WRITE faults
    // those pages in as a write would, without writing or changing the mapping; on any
    // error it leaves the memory as it was.
    let done = unsafe {
        libc::madvise(
            first as *mut libc::c_void,
            last - first,
            libc::MADV_POPULATE_WRITE,
        )
    };
    done == 0
}

/// The real clock: the stock's idle time decides only when memory goes back, nothing an
/// engine or the simulator could observe, so it is not the engine's `Clock`.
#[allow(clippy::disallowed_methods)]
fn now() -> Instant {
    Instant::now()
}

static GLOBAL: OnceLock<Arc<Stock>> = OnceLock::new();

/// Starts the process's stock, used by [`take`] and [`copied`] (the daemon does, once its
/// memory governor runs). A second call changes nothing.
pub fn install(config: StockConfig) -> std::io::Result<()> {
    if GLOBAL.get().is_some() {
        return Ok(());
    }
    let stock = Stock::start(config)?;
    if let Err(extra) = GLOBAL.set(stock) {
        extra.stop(); // Lost a race with another install.
    }
    Ok(())
}

/// [`Stock::take`] of the process's stock; a plain allocation without one.
#[must_use]
pub fn take(len: usize) -> Vec<u8> {
    match GLOBAL.get() {
        Some(stock) => stock.take(len),
        None => Vec::with_capacity(len),
    }
}

/// [`Stock::take_ready`] of the process's stock; a plain allocation without one.
#[must_use]
pub fn take_ready(len: usize) -> Vec<u8> {
    match GLOBAL.get() {
        Some(stock) => stock.take_ready(len),
        None => Vec::with_capacity(len),
    }
}

/// `len` zero bytes in a buffer of [`take`] (demand): written data's buffer that is read
/// into whole (a socket's payload), zero-filled on resident pages.
#[must_use]
pub fn zeroed(len: usize) -> Vec<u8> {
    let mut buffer = take(len);
    buffer.resize(len, 0);
    buffer
}

/// [`Stock::copied`] of the process's stock; `source.to_vec()` without one (S1).
#[must_use]
pub fn copied(source: &[u8]) -> Vec<u8> {
    match GLOBAL.get() {
        Some(stock) => stock.copied(source),
        None => source.to_vec(),
    }
}

/// [`Stock::drain`] of the process's stock, if any.
pub fn drain() {
    if let Some(stock) = GLOBAL.get() {
        stock.drain();
    }
}

/// The process's stock's figures (all zero without one).
#[must_use]
pub fn stats() -> StockStats {
    GLOBAL.get().map(|stock| stock.stats()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: usize = 128 << 10;

    /// Minor page faults of the calling thread so far.
    fn minor_faults() -> i64 {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage fills the rusage it is given; RUSAGE_THREAD is valid on Linux.
        let ok = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
        assert_eq!(ok, 0);
        // SAFETY: getrusage succeeded, so the struct is initialised (it was zeroed anyway).
        unsafe { usage.assume_init() }.ru_minflt
    }

    fn config(budget: usize) -> StockConfig {
        StockConfig {
            budget,
            idle: Duration::from_millis(300),
        }
    }

    /// Waits (up to 10 s) until `done` holds of the stock's figures.
    fn wait_for(stock: &Stock, done: impl Fn(&StockStats) -> bool) -> StockStats {
        let deadline = now() + Duration::from_secs(10);
        loop {
            let stats = stock.stats();
            if done(&stats) || now() > deadline {
                return stats;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + seed) as u8).collect()
    }

    #[test]
    fn copied_is_to_vec_hit_or_miss() {
        let stock = Stock::start(config(4 << 20)).unwrap();
        for round in 0..3 {
            for len in [
                0,
                1,
                4095,
                STOCK_MIN - 1,
                STOCK_MIN,
                RECORD,
                RECORD + 1,
                1 << 20,
            ] {
                let source = pattern(len, round);
                assert_eq!(stock.copied(&source), source, "len {len}");
            }
        }
        let source = pattern(RECORD, 9);
        wait_for(&stock, |s| s.ready > 0);
        assert_eq!(stock.copied(&source), source);
        assert_eq!(copied(&source), source); // The process's stock, installed or not.
        stock.stop();
    }

    /// The filler stocks the size asked for within the budget, and the buffers it hands
    /// out fill without page faults. (With `populate_spare` made a no-op, every page of
    /// the filler's fresh buffers faults at the copy instead and this fails.)
    #[test]
    fn stocked_buffers_fill_without_page_faults() {
        const BUDGET: usize = 8 << 20;
        if !populate_spare(&mut Vec::with_capacity(RECORD)) {
            eprintln!("SKIP: this kernel has no MADV_POPULATE_WRITE (Linux 5.14)");
            return;
        }
        let stock = Stock::start(config(BUDGET)).unwrap();
        let source = pattern(RECORD, 3);
        let taken = std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    drop(stock.copied(&source)); // The miss that makes RECORD the size.
                    let full = wait_for(&stock, |s| s.ready == BUDGET / RECORD);
                    assert_eq!((full.size, full.bytes), (RECORD, BUDGET), "S2, S3");
                    let before = minor_faults();
                    let kept: Vec<Vec<u8>> = (0..BUDGET / RECORD / 2)
                        .map(|_| stock.copied(&source))
                        .collect();
                    (minor_faults() - before, kept)
                })
                .join()
                .unwrap()
        });
        let (faults, kept) = taken;
        assert!(kept.iter().all(|b| b == &source));
        let pages = (kept.len() * RECORD / PAGE) as i64;
        assert!(
            faults < pages / 16,
            "{faults} faults in {pages} stocked pages"
        );
        assert!(stock.stats().hits >= kept.len() as u64);
        stock.stop();
    }

    #[test]
    fn another_size_takes_over_only_alone_and_idle_frees_all() {
        let stock = Stock::start(config(4 << 20)).unwrap();
        drop(stock.take(RECORD));
        wait_for(&stock, |s| s.ready == 32);
        // Two sizes side by side: the stocked one keeps being hit and stays.
        for _ in 0..2 * SWITCH_AFTER {
            drop(stock.take(1 << 20));
            drop(stock.take(RECORD));
        }
        assert_eq!(
            stock.stats().size,
            RECORD,
            "sizes used side by side do not take turns"
        );
        for _ in 0..SWITCH_AFTER - 1 {
            drop(stock.take(1 << 20));
        }
        assert_eq!(
            stock.stats().size,
            RECORD,
            "one size at a time, not switched yet"
        );
        drop(stock.take(1 << 20));
        let switched = wait_for(&stock, |s| s.size == 1 << 20 && s.ready == 4);
        assert_eq!((switched.size, switched.bytes), (1 << 20, 4 << 20));
        // Small and oversize lengths are never stocked.
        drop(stock.take(STOCK_MIN - 1));
        drop(stock.take(2 << 20));
        assert_eq!(stock.stats().size, 1 << 20);
        let idle = wait_for(&stock, |s| s.ready == 0);
        assert_eq!((idle.size, idle.bytes), (0, 0), "freed once idle");
        stock.stop();
    }

    #[test]
    fn small_reads_are_no_demand() {
        const SMALL: usize = READ_DEMAND_MIN / 2;
        let stock = Stock::start(config(4 << 20)).unwrap();
        for _ in 0..2 * SWITCH_AFTER {
            drop(stock.take_ready(SMALL));
        }
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(
            stock.stats(),
            StockStats::default(),
            "small reads stock nothing"
        );
        drop(stock.take(SMALL));
        wait_for(&stock, |s| s.ready == 64);
        let ready = stock.take_ready(SMALL);
        assert_eq!((ready.len(), ready.capacity()), (0, SMALL));
        assert_eq!(
            stock.stats().hits,
            1,
            "a read takes a ready buffer of the size"
        );
        for _ in 0..2 * SWITCH_AFTER {
            drop(stock.take_ready(SMALL + PAGE));
        }
        assert_eq!(stock.stats().size, SMALL, "and never switches the size");
        // A record read is demand like a write.
        for _ in 0..SWITCH_AFTER {
            drop(stock.take_ready(RECORD));
        }
        let switched = wait_for(&stock, |s| s.size == RECORD && s.ready == 32);
        assert_eq!((switched.size, switched.ready), (RECORD, 32));
        stock.stop();
    }

    /// Four threads copy and drop buffers of mixed sizes (so the stocked size switches back
    /// and forth under them, drains run and the filler races the takes): every copy equals
    /// its source (S1), every buffer has exactly its length's capacity, and the stock never
    /// holds more than its budget (S2).
    #[test]
    fn concurrent_takes_of_switching_sizes_stay_exact_and_bounded() {
        const BUDGET: usize = 4 << 20;
        let stock = Stock::start(config(BUDGET)).unwrap();
        let sizes = [STOCK_MIN, RECORD, 1 << 20, 1000];
        std::thread::scope(|scope| {
            for t in 0..4usize {
                let stock = &stock;
                scope.spawn(move || {
                    let mut seed = t as u64 * 0x9E37_79B9 + 1;
                    for i in 0..600usize {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        // Runs of one size, so that switches happen.
                        let len = sizes[(i / 40 + t) % sizes.len()];
                        let source = pattern(len, seed as usize);
                        let copy = if seed.is_multiple_of(3) {
                            let mut b = stock.take_ready(len);
                            b.extend_from_slice(&source);
                            b
                        } else {
                            stock.copied(&source)
                        };
                        assert_eq!(copy, source, "S1");
                        assert_eq!(copy.capacity(), len);
                        if seed.is_multiple_of(97) {
                            stock.drain();
                        }
                        assert!(stock.stats().bytes <= BUDGET, "S2");
                    }
                });
            }
        });
        let end = stock.stats();
        assert!(end.bytes <= BUDGET && end.hits > 0, "{end:?}");
        stock.stop();
    }

    #[test]
    fn populate_leaves_small_and_full_buffers_alone() {
        let mut small: Vec<u8> = Vec::with_capacity(100);
        small.push(1);
        let _ = populate_spare(&mut small);
        assert_eq!(small, [1]);
        let mut full = vec![7u8; RECORD];
        full.shrink_to_fit();
        let _ = populate_spare(&mut full);
        assert!(full.iter().all(|&b| b == 7));
    }
}
