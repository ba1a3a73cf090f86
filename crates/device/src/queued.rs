//! Write-behind and parallel reads for real devices: a [`QueuedDevice`] hands writes to the
//! device's I/O threads and returns at once, so the column writes of a raidz block go to all
//! its devices in parallel while the caller computes the next block (OpenZFS issues vdev I/O
//! from taskqs for the same reason). Reads submitted with [`Device::submit_read`] go through
//! the same queue, so the columns of a block (and of several blocks) are read by every
//! device's threads at once while the caller waits for them all.
//!
//! ```text
//!  write_at    ──► bounded queue (QUEUE_BYTES) ──► I/O threads ──► inner.write_at
//!  submit_read ──► same queue (FIFO) ───────────► I/O threads ──► inner.read_at ──► slot
//!  read_at     ──► waits until the queue is empty, then reads (never sees stale bytes)
//!  flush       ──► waits until the queue is empty, then inner.flush; reports the first error
//!                  any queued write hit since the last flush
//! ```
//!
//! Each I/O thread takes the op at the queue's front, with what continues it: reads next to
//! each other in the queue at adjacent offsets go to the device as one access
//! ([`Device::read_vectored_at`], `preadv` for files, into the callers' own buffers: no
//! copy), and so do adjacent writes, up to [`AGGREGATE_MAX`] bytes, as OpenZFS's vdev queue
//! aggregates. The columns a raidz stream puts on one device for consecutive blocks are
//! adjacent, so a sequential read or a txg's writes take one system call and one hand-off
//! per run instead of one per column. [`IO_THREADS`] threads apply reads at once (a
//! stream's next run is read while the one before is), and a write alone (I5).
//! A thread that holds a plug (plug.rs) defers the wake-up of its writes too, in batches
//! of `PLUG_WRITE_BYTES`, so that the I/O thread finds such runs queued instead of being
//! woken for each column; any wait on the queue wakes its I/O thread itself, so a plug
//! never holds another thread's drain back (P3).
//!
//! Writes given as [`SharedBytes`] ([`Device::write_shared`]: a txg's block, or a range
//! of it such as a raidz data column) are queued as they are, a reference and not a copy;
//! `write_at` copies its bytes into the queue. A shared range that is not page-aligned in
//! memory but is whole pages is copied too (the copy is page-aligned under
//! `tarn_base::page_align`), so that an `O_DIRECT` device never bounces what the queue
//! kept (tarn-device I6); such copies are counted ([`QueuedDevice::unaligned_copies`]).
//!
//! With a clock ([`Device::set_clock`]) it times both halves of every access
//! ([`QueueTiming`]): a write's wait in the queue (acknowledged to started) and its backend
//! time, a read's wait for the queue to drain and its backend time. That is what separates
//! `disk_wait` from the queue waits in `tarn pool iostat -l`; the leaf above only sees a
//! write's acknowledgement.
//!
//! Invariants:
//! - I1: a write acknowledged here is applied before any later read or flush of this device
//!   returns (reads and flushes drain the queue first; a submitted read queues behind every
//!   write acknowledged before it, and the threads take the queue in order: I5).
//! - I2: an error of a queued write is never lost: it is latched and returned by the next
//!   `flush` (and by every write until then), so a txg whose writes failed cannot commit.
//! - I3: at most `QUEUE_BYTES` of write data wait in memory per device; writers block beyond
//!   that. Reads are bounded by their submitters (each waits for what it submitted). A
//!   shared write counts its own range: the rest of its buffer is its owner's (the
//!   pipeline's journal keeps a txg's blocks until the commit anyway).
//! - I6: the bytes of a queued write are those the caller gave when it was queued: a copy,
//!   or shared bytes that cannot change (`shared` I1).
//! - I4: every submitted read completes exactly once, with the inner device's outcome
//!   (errors, `Gone`, out-of-range) unchanged: when an aggregated access fails, each read
//!   in it is read again alone, so one bad sector fails only the reads that cover it.
//! - I5: nothing is reordered across kinds: a thread takes only the ops at the queue's
//!   front, of the same kind, a read only while no write is being applied and a write only
//!   while nothing is, so a read never passes a write queued before it nor the other way
//!   round (I1). Reads may complete out of order among themselves.
//!
//! The simulator uses `SimDevice` directly (no thread), so runs stay deterministic.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

use tarn_base::Clock;

use crate::pending::{PendingRead, ReadSlot};
use crate::shared::SharedBytes;
use crate::timing::{Histogram, QueueTiming};
use crate::{Device, DeviceError};

/// Bytes that may wait in one device's queue.
pub const QUEUE_BYTES: u64 = 32 << 20;

/// The latched message of a write that found the device gone.
const GONE: &str = "device is gone";

/// One queued access, with when it was acknowledged (writes) or submitted (reads), when
/// the device has a clock.
#[derive(Debug)]
enum Op {
    Write(u64, SharedBytes, Option<u64>),
    Read(u64, ReadBuf, Arc<ReadSlot>, Option<u64>),
}

/// Where a queued read goes: its own buffer, given back filled, or a part of the caller's
/// buffer (`Device::submit_read_into`), dropped before the read completes so that the
/// caller can take its buffer back as soon as its reads are done (split S1).
#[derive(Debug)]
enum ReadBuf {
    Own(Vec<u8>),
    Part(crate::BufPart),
}

impl ReadBuf {
    fn len(&self) -> usize {
        match self {
            ReadBuf::Own(buf) => buf.len(),
            ReadBuf::Part(part) => part.len(),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            ReadBuf::Own(buf) => buf,
            ReadBuf::Part(part) => part,
        }
    }

    /// What the reader is given back: its own buffer, or an empty one for a part (which is
    /// dropped here, before the read completes).
    fn give_back(self) -> Vec<u8> {
        match self {
            ReadBuf::Own(buf) => buf,
            ReadBuf::Part(_) => Vec::new(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    queue: VecDeque<Op>,
    queued_bytes: u64,
    /// Writes in `queue` (reads are not counted by `queued_writes`).
    queued_write_ops: u64,
    /// The access being applied is a write (then it is the only one: I5).
    busy_writing: bool,
    /// Accesses the I/O threads are applying now: one write, or up to [`IO_THREADS`]
    /// reads.
    active: u32,
    error: Option<(u64, String)>,
    closing: bool,
    /// I/O threads sleeping on `work` (an empty queue, or a front op that must wait for
    /// the accesses being applied): a push must wake one.
    idle_workers: u32,
    /// Callers sleeping on `changed` (draining, or a full queue): a finished op must wake
    /// them. Both flags exist because a condvar's notify is a system call even when nobody
    /// waits, and a busy device would otherwise pay two per op.
    waiters: u32,
}

#[derive(Debug, Default)]
struct Shared {
    state: Mutex<State>,
    /// The I/O thread waits here for work.
    work: Condvar,
    /// Callers wait here for the queue to drain or make room.
    changed: Condvar,
    clock: OnceLock<Arc<dyn Clock>>,
    timing: Timing,
}

/// The live counters behind [`QueueTiming`].
#[derive(Debug, Default)]
struct Timing {
    read_queue: Histogram,
    read_disk: Histogram,
    write_queue: Histogram,
    write_disk: Histogram,
    write_total: Histogram,
    reads_waiting: AtomicU64,
    reads_active: AtomicU64,
    /// Shared writes copied because they were whole pages off a page boundary.
    unaligned_copies: AtomicU64,
}

impl Shared {
    fn now(&self) -> Option<u64> {
        self.clock.get().map(|c| c.monotonic_ns())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A caller's wait for the queue to change (see `State::waiters`). The I/O thread is
    /// woken first if it sleeps with work queued: another thread's plug may be holding its
    /// wake-up back (plug.rs, P3).
    fn wait<'a>(&self, mut guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        if !guard.queue.is_empty() {
            self.pushed(&guard);
        }
        guard.waiters += 1;
        let mut guard = self
            .changed
            .wait(guard)
            .unwrap_or_else(PoisonError::into_inner);
        guard.waiters -= 1;
        guard
    }

    /// Wakes an I/O thread after a push, if one sleeps.
    fn pushed(&self, state: &State) {
        if state.idle_workers > 0 {
            self.work.notify_one();
        }
    }

    /// Waits until every queued write has been applied.
    fn drain(&self) -> MutexGuard<'_, State> {
        crate::plug::flush();
        let mut state = self.lock();
        while !state.queue.is_empty() || state.active > 0 {
            state = self.wait(state);
        }
        state
    }
}

/// A device whose writes are applied by a background thread (see the module docs).
#[derive(Debug)]
pub struct QueuedDevice {
    inner: Arc<dyn Device>,
    shared: Arc<Shared>,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

fn latched(offset: u64, message: &str) -> DeviceError {
    if message == GONE {
        return DeviceError::Gone;
    }
    DeviceError::Io {
        offset,
        source: std::io::Error::other(message.to_string()),
    }
}

impl QueuedDevice {
    /// Wraps `inner` and starts its [`IO_THREADS`] I/O threads.
    pub fn new(inner: Arc<dyn Device>) -> Result<QueuedDevice, DeviceError> {
        let device = QueuedDevice {
            inner,
            shared: Arc::new(Shared::default()),
            workers: Mutex::new(Vec::with_capacity(IO_THREADS)),
        };
        for _ in 0..IO_THREADS {
            let worker_shared = Arc::clone(&device.shared);
            let worker_device = Arc::clone(&device.inner);
            let worker = std::thread::Builder::new()
                .name("tarn-io".into())
                .spawn(move || run_queue(&worker_shared, worker_device.as_ref()))
                .map_err(|source| DeviceError::Open {
                    path: device.inner.path().to_string(),
                    source,
                })?;
            lock_workers(&device.workers).push(worker);
        }
        // An error above drops `device`, which stops the threads already started.
        Ok(device)
    }

    /// How many shared writes ([`Device::write_shared`]) were copied because they were
    /// whole pages that did not start on a page boundary (module docs); 0 on the daemon's
    /// paths, where every block buffer is page-aligned.
    #[must_use]
    pub fn unaligned_copies(&self) -> u64 {
        self.shared.timing.unaligned_copies.load(Ordering::Relaxed)
    }

    /// Queues a read into `buf` (`submit_read`, `submit_read_into`).
    fn queue_read(&self, offset: u64, buf: ReadBuf) -> PendingRead {
        if let Err(e) = crate::check_range(offset, buf.len() as u64, self.inner.size_bytes()) {
            // A part goes back before the outcome is known (split S1).
            drop(buf);
            return PendingRead::done(Err(e));
        }
        let slot = Arc::new(ReadSlot::default());
        let asked = self.shared.now();
        self.shared
            .timing
            .reads_waiting
            .fetch_add(1, Ordering::Relaxed);
        let mut state = self.shared.lock();
        state
            .queue
            .push_back(Op::Read(offset, buf, Arc::clone(&slot), asked));
        let queue: Arc<dyn crate::plug::Wake> = Arc::clone(&self.shared) as _;
        if !crate::plug::defer(&queue) {
            self.shared.pushed(&state);
        }
        drop(state);
        PendingRead::queued(slot)
    }

    /// Queues a write of `data` at `offset` (range-checked by the caller) and wakes the
    /// I/O thread unless a plug defers it; waits while the queue is full (I3).
    fn queue_write(&self, offset: u64, data: SharedBytes) -> Result<(), DeviceError> {
        let len = data.len() as u64;
        let full = |state: &State| state.queued_bytes > 0 && state.queued_bytes + len > QUEUE_BYTES;
        let mut state = self.shared.lock();
        if let Some((at, message)) = &state.error {
            return Err(latched(*at, message));
        }
        if full(&state) {
            // P1: what this thread's plug holds back goes first (the lock is let go, since
            // waking a queue takes its lock and this one may be among them).
            drop(state);
            crate::plug::flush();
            state = self.shared.lock();
        }
        while full(&state) {
            state = self.shared.wait(state);
        }
        state.queued_bytes += len;
        state.queued_write_ops += 1;
        state
            .queue
            .push_back(Op::Write(offset, data, self.shared.now()));
        let queue: Arc<dyn crate::plug::Wake> = Arc::clone(&self.shared) as _;
        match crate::plug::defer_write(&queue, len) {
            crate::plug::WriteWake::Now => self.shared.pushed(&state),
            crate::plug::WriteWake::Deferred => {}
            crate::plug::WriteWake::Due(queues) => {
                drop(state);
                crate::plug::wake_all(queues);
            }
        }
        Ok(())
    }
}

impl crate::plug::Wake for Shared {
    fn wake(&self) {
        let state = self.lock();
        if !state.queue.is_empty() {
            self.pushed(&state);
        }
    }
}

fn lock_workers(
    workers: &Mutex<Vec<std::thread::JoinHandle<()>>>,
) -> MutexGuard<'_, Vec<std::thread::JoinHandle<()>>> {
    workers.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether an I/O thread may start the op at the queue's front now (I5): a read while no
/// write is being applied (other reads may be), a write only when nothing is.
fn startable(state: &State) -> Option<bool> {
    match state.queue.front()? {
        Op::Read(..) => Some(!state.busy_writing),
        Op::Write(..) => Some(state.active == 0),
    }
}

/// One I/O thread: takes the queue's front (with what continues it) whenever I5 lets it,
/// and applies it.
fn run_queue(shared: &Shared, device: &dyn Device) {
    let mut state = shared.lock();
    loop {
        match startable(&state) {
            Some(true) => {}
            None if state.closing => return,
            // Nothing queued, or the front waits for the accesses being applied: the
            // thread applying the last of them takes it next, without a wake-up.
            _ => {
                state.idle_workers += 1;
                state = shared
                    .work
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                state.idle_workers -= 1;
                continue;
            }
        }
        let op = state.queue.pop_front().expect("a startable op is queued");
        assert!(!state.busy_writing, "I5: nothing starts beside a write");
        state.active += 1;
        match op {
            Op::Read(offset, buf, slot, asked) => {
                let mut end = offset + buf.len() as u64;
                let mut reads = vec![(offset, buf, slot, asked)];
                while let Some(Op::Read(at, buf, slot, asked)) =
                    take_adjacent(&mut state, true, offset, end)
                {
                    end = at + buf.len() as u64;
                    reads.push((at, buf, slot, asked));
                }
                // What is left may be another read, for another thread to apply meanwhile.
                if !state.queue.is_empty() {
                    shared.pushed(&state);
                }
                drop(state);
                serve_reads(shared, device, reads);
                state = shared.lock();
            }
            Op::Write(offset, data, queued_at) => {
                let mut writes = vec![(data, queued_at)];
                let mut len = writes[0].0.len();
                while let Some(Op::Write(_, data, queued_at)) =
                    take_adjacent(&mut state, false, offset, offset + len as u64)
                {
                    len += data.len();
                    writes.push((data, queued_at));
                }
                state.queued_write_ops -= writes.len() as u64;
                assert_eq!(state.active, 1, "I5: a write is applied alone");
                state.busy_writing = true;
                drop(state);
                let (at, result) = apply_writes(shared, device, offset, &writes);
                state = shared.lock();
                state.busy_writing = false;
                state.queued_bytes -= len as u64;
                latch(&mut state, at, result);
            }
        }
        state.active -= 1;
        if state.waiters > 0 {
            shared.changed.notify_all();
        }
    }
}

/// Threads applying one device's queue. Reads are applied by up to this many at once, so
/// a device has this many accesses in flight while a stream keeps its queue full (the
/// virtual disks measured here read 1.2-1.3x faster with two than with one:
/// docs/PERFORMANCE.md, "Two reads in flight per device"); writes are applied one at a
/// time, alone (I5).
pub const IO_THREADS: usize = 2;

/// Most bytes one aggregated access covers (OpenZFS's `zfs_vdev_aggregation_limit`, which
/// is 1 MiB for disks). 2 MiB here: the virtual disks measured read and write faster in
/// fewer, larger requests (docs/PERFORMANCE.md, "Two reads in flight per device").
pub const AGGREGATE_MAX: usize = 2 << 20;

/// Largest hole between two reads that one access still covers, reading the hole's bytes
/// into a scratch buffer (OpenZFS's `zfs_vdev_read_gap_limit`): a raidz stream reads only
/// the data columns, so on each device the columns of consecutive blocks are separated by
/// the parity columns it holds, one block in every few.
pub const READ_GAP_MAX: u64 = 32 << 10;

/// The op at the queue's front if it continues the access `[start, end)`: the same kind (a
/// read after reads, a write after writes, so no write passes a read or the other way
/// round: I1), starting where it ends (a read: or at most [`READ_GAP_MAX`] after it), and
/// the whole within [`AGGREGATE_MAX`].
fn take_adjacent(state: &mut State, reads: bool, start: u64, end: u64) -> Option<Op> {
    let (is_read, at, more) = match state.queue.front()? {
        Op::Read(at, buf, ..) => (true, *at, buf.len()),
        Op::Write(at, data, _) => (false, *at, data.len()),
    };
    let gap_max = if reads { READ_GAP_MAX } else { 0 };
    // `end >= start`, so a continuing op also starts after `start`.
    let continues = at >= end && at - end <= gap_max;
    let within = continues && at + more as u64 - start <= AGGREGATE_MAX as u64;
    (is_read == reads && within)
        .then(|| state.queue.pop_front())
        .flatten()
}

/// A read waiting in the queue: its offset, its buffer, where its outcome goes, when it
/// was submitted.
type QueuedRead = (u64, ReadBuf, Arc<ReadSlot>, Option<u64>);

/// Serves reads in offset order, each starting at or after the previous one's end, as one
/// access; the holes between them are read into a scratch buffer and dropped. If the access
/// fails, each read is read again alone, so a bad sector fails only the reads that cover it
/// (I4).
fn serve_reads(shared: &Shared, device: &dyn Device, mut reads: Vec<QueuedRead>) {
    let timing = &shared.timing;
    let count = reads.len() as u64;
    timing.reads_waiting.fetch_sub(count, Ordering::Relaxed);
    timing.reads_active.fetch_add(count, Ordering::Relaxed);
    let started = shared.now();
    let together = match reads.len() {
        1 => device.read_at(reads[0].0, reads[0].1.as_mut_slice()),
        _ => read_together(device, &mut reads),
    };
    let ended = shared.now();
    timing.reads_active.fetch_sub(count, Ordering::Relaxed);
    // A lone read's error is its outcome; an aggregate's sends each read back alone.
    let (failed, mut own_error) = match together {
        Ok(()) => (false, None),
        Err(error) if count == 1 => (true, Some(error)),
        Err(_) => (true, None),
    };
    for (at, mut buf, slot, asked) in reads {
        if let (Some(asked), Some(started), Some(ended)) = (asked, started, ended) {
            timing.read_queue.add(started.saturating_sub(asked));
            timing.read_disk.add(ended.saturating_sub(started));
        }
        let result = match (failed, own_error.take()) {
            (false, _) => Ok(()),
            (true, Some(error)) => Err(error),
            (true, None) => device.read_at(at, buf.as_mut_slice()),
        };
        // The buffer (a part: dropped) leaves before the outcome is known (split S1).
        let buf = buf.give_back();
        slot.complete(result.map(|()| buf));
    }
}

/// One vectored read of `reads` (in offset order, none overlapping) and the holes between.
fn read_together(device: &dyn Device, reads: &mut [QueuedRead]) -> Result<(), DeviceError> {
    let start = reads[0].0;
    let gaps: Vec<usize> = reads
        .windows(2)
        .map(|pair| {
            let end = pair[0].0 + pair[0].1.len() as u64;
            assert!(pair[1].0 >= end, "I5: aggregated reads in offset order");
            usize::try_from(pair[1].0 - end).expect("a gap is at most READ_GAP_MAX")
        })
        .collect();
    // Not `vec![0u8; n]`: a zeroed request of this size had jemalloc hand the pages back to
    // the kernel first (a TLB shootdown per merged read; tarn-base `buf`).
    let mut scratch = tarn_base::buf::zeroed(gaps.iter().sum());
    let mut rest = scratch.as_mut_slice();
    let mut bufs: Vec<&mut [u8]> = Vec::with_capacity(reads.len() * 2);
    for (i, read) in reads.iter_mut().enumerate() {
        let gap = if i == 0 { 0 } else { gaps[i - 1] };
        if gap > 0 {
            let (hole, tail) = std::mem::take(&mut rest).split_at_mut(gap);
            bufs.push(hole);
            rest = tail;
        }
        bufs.push(read.1.as_mut_slice());
    }
    device.read_vectored_at(start, &mut bufs)
}

/// Applies adjacent writes starting at `offset` as one access: where the first error (if
/// any) was, and the outcome. If the access fails, each is written again alone, so the
/// latched error names the write that failed and every write that can land does.
fn apply_writes(
    shared: &Shared,
    device: &dyn Device,
    offset: u64,
    writes: &[(SharedBytes, Option<u64>)],
) -> (u64, Result<(), DeviceError>) {
    let started = shared.now();
    let pieces: Vec<&[u8]> = writes.iter().map(|w| &*w.0).collect();
    let outcome = match pieces.len() {
        1 => (offset, device.write_at(offset, pieces[0])),
        _ => match device.write_vectored_at(offset, &pieces) {
            Ok(()) => (offset, Ok(())),
            // Each alone: every write that can land does, and the first failure is latched.
            Err(_) => {
                let mut first = (offset, Ok(()));
                let mut at = offset;
                for piece in &pieces {
                    let result = device.write_at(at, piece);
                    if first.1.is_ok() && result.is_err() {
                        first = (at, result);
                    }
                    at += piece.len() as u64;
                }
                first
            }
        },
    };
    if let (Some(started), Some(ended)) = (started, shared.now()) {
        let timing = &shared.timing;
        for (_, queued_at) in writes {
            if let Some(queued_at) = queued_at {
                timing.write_queue.add(started.saturating_sub(*queued_at));
                timing.write_total.add(ended.saturating_sub(*queued_at));
            }
            timing.write_disk.add(ended.saturating_sub(started));
        }
    }
    outcome
}

/// Keeps the first error of a queued write (I2).
fn latch(state: &mut State, offset: u64, result: Result<(), DeviceError>) {
    if let (Err(error), None) = (&result, &state.error) {
        let message = match error {
            // A vanished device stays vanished: keep the kind, not only the text.
            DeviceError::Gone => GONE.to_string(),
            other => other.to_string(),
        };
        state.error = Some((offset, message));
    }
}

impl Drop for QueuedDevice {
    fn drop(&mut self) {
        let mut state = self.shared.drain();
        state.closing = true;
        self.shared.work.notify_all();
        drop(state);
        // Joining makes the close synchronous: once the device is dropped, the file is closed
        // and its lock released, so another process can import the pool at once.
        let workers = std::mem::take(&mut *lock_workers(&self.workers));
        for worker in workers {
            let _ = worker.join();
        }
    }
}

impl Device for QueuedDevice {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        let timing = &self.shared.timing;
        let asked = self.shared.now();
        timing.reads_waiting.fetch_add(1, Ordering::Relaxed);
        drop(self.shared.drain());
        timing.reads_waiting.fetch_sub(1, Ordering::Relaxed);
        let started = self.shared.now();
        timing.reads_active.fetch_add(1, Ordering::Relaxed);
        let result = self.inner.read_at(offset, buf);
        timing.reads_active.fetch_sub(1, Ordering::Relaxed);
        if let (Some(asked), Some(started), Some(ended)) = (asked, started, self.shared.now()) {
            timing.read_queue.add(started.saturating_sub(asked));
            timing.read_disk.add(ended.saturating_sub(started));
        }
        result
    }

    fn prefetch(&self, offset: u64, len: u64) {
        self.inner.prefetch(offset, len);
    }

    fn submit_read(&self, offset: u64, buf: Vec<u8>) -> PendingRead {
        self.queue_read(offset, ReadBuf::Own(buf))
    }

    fn submit_read_into(&self, offset: u64, part: crate::BufPart) -> PendingRead {
        self.queue_read(offset, ReadBuf::Part(part))
    }

    fn reads_in_parallel(&self) -> bool {
        true
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        crate::check_range(offset, data.len() as u64, self.inner.size_bytes())?;
        // Copied before the queue's lock is taken, so the I/O thread is not kept waiting.
        self.queue_write(offset, SharedBytes::from(data.to_vec()))
    }

    fn write_shared(&self, offset: u64, data: SharedBytes) -> Result<(), DeviceError> {
        crate::check_range(offset, data.len() as u64, self.inner.size_bytes())?;
        if data.aligned_enough() {
            return self.queue_write(offset, data);
        }
        self.shared
            .timing
            .unaligned_copies
            .fetch_add(1, Ordering::Relaxed);
        self.queue_write(offset, SharedBytes::from(data.to_vec()))
    }

    fn flush(&self) -> Result<(), DeviceError> {
        let mut state = self.shared.drain();
        if let Some((at, message)) = state.error.take() {
            return Err(latched(at, &message));
        }
        drop(state);
        self.inner.flush()
    }

    fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
        drop(self.shared.drain());
        self.inner.discard(offset, len)
    }

    fn path(&self) -> &str {
        self.inner.path()
    }

    fn probe_gone(&self) -> bool {
        self.inner.probe_gone()
    }

    fn set_clock(&self, clock: Arc<dyn Clock>) {
        let _ = self.shared.clock.set(clock);
    }

    fn queue_timing(&self) -> Option<QueueTiming> {
        let timing = &self.shared.timing;
        let writes_active = u64::from(self.shared.lock().busy_writing);
        Some(QueueTiming {
            read_queue: timing.read_queue.snapshot(),
            read_disk: timing.read_disk.snapshot(),
            write_queue: timing.write_queue.snapshot(),
            write_disk: timing.write_disk.snapshot(),
            write_total: timing.write_total.snapshot(),
            writes_active,
            reads_waiting: timing.reads_waiting.load(Ordering::Relaxed),
            reads_active: timing.reads_active.load(Ordering::Relaxed),
        })
    }

    fn queued_writes(&self) -> u64 {
        let state = self.shared.lock();
        state.queued_write_ops + u64::from(state.busy_writing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FaultPlan, PER_MILLION, SimDevice};

    #[test]
    fn reads_see_queued_writes_and_flush_makes_them_durable() {
        let sim = SimDevice::new(
            "q",
            1 << 20,
            FaultPlan {
                drop_on_crash: PER_MILLION,
                ..FaultPlan::default()
            },
        );
        let device = QueuedDevice::new(sim.clone()).unwrap();
        for i in 0..100u64 {
            device.write_at(i * 512, &[i as u8; 512]).unwrap();
        }
        let mut buf = [0u8; 512];
        device.read_at(99 * 512, &mut buf).unwrap();
        assert_eq!(buf, [99u8; 512]);
        assert_eq!(device.queued_writes(), 0, "a read drains the queue");
        device.flush().unwrap();
        sim.crash();
        let mut durable = [0u8; 512];
        sim.read_at(42 * 512, &mut durable).unwrap();
        assert_eq!(durable, [42u8; 512]);
    }

    #[test]
    fn a_failed_queued_write_fails_the_next_flush() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        let device = QueuedDevice::new(sim.clone()).unwrap();
        device.write_at(0, &[1u8; 512]).unwrap();
        device.flush().unwrap();
        sim.set_gone(true);
        device.write_at(512, &[2u8; 512]).unwrap_or(());
        assert!(
            matches!(device.flush(), Err(DeviceError::Gone)),
            "the queued write's error must surface at flush, still saying gone"
        );
        sim.set_gone(false);
        device.write_at(1024, &[3u8; 512]).unwrap();
        device.flush().unwrap();
    }

    /// Goal: with a clock, every write's queue wait and backend time and every read's wait
    /// for the queue and backend time are counted, and add up to what the clock saw. Method:
    /// a SimDevice with 1 ms of latency per access on the same manual clock; the clock only
    /// moves inside the device, so each backend time is exactly 1 ms and the waits are the
    /// backend times of the writes queued before. The writes leave gaps, so none aggregate.
    #[test]
    fn queue_and_disk_times_are_measured() {
        let clock = Arc::new(tarn_base::ManualClock::new(1));
        let plan = FaultPlan {
            latency_ns: 1_000_000,
            ..FaultPlan::default()
        };
        let sim = SimDevice::with_clock("q", 1 << 20, plan, clock.clone());
        let device = QueuedDevice::new(sim).unwrap();
        assert_eq!(device.queue_timing().unwrap().write_disk.count(), 0);
        device.set_clock(clock.clone());
        for i in 0..4u64 {
            device.write_at(i * 1024, &[1u8; 512]).unwrap();
        }
        let mut buf = [0u8; 512];
        device.read_at(0, &mut buf).unwrap();
        let timing = device.queue_timing().unwrap();
        assert_eq!(timing.write_disk.count(), 4);
        assert_eq!(timing.write_disk.total_ns, 4_000_000);
        assert_eq!(timing.write_queue.count(), 4);
        assert_eq!(
            timing.write_total.total_ns,
            timing.write_queue.total_ns + timing.write_disk.total_ns
        );
        assert_eq!(timing.writes_active, 0);
        assert!(timing.write_queue.total_ns <= 6_000_000, "{timing:?}");
        assert_eq!(timing.read_disk.count(), 1);
        assert_eq!(timing.read_disk.total_ns, 1_000_000);
        assert_eq!(timing.read_queue.count(), 1);
        assert!(timing.read_queue.total_ns <= 4_000_000, "{timing:?}");
        assert_eq!((timing.reads_waiting, timing.reads_active), (0, 0));
    }

    /// Goal: a read submitted right after writes were acknowledged (still queued) returns
    /// the new bytes, never the old ones (I1), and a read of a range written after it was
    /// submitted returns what was there at submission. Method: queue many writes, submit
    /// reads in between without waiting, then wait for all.
    #[test]
    fn a_submitted_read_sees_every_write_acknowledged_before_it() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        let device = QueuedDevice::new(sim.clone()).unwrap();
        assert!(device.reads_in_parallel());
        let mut reads = Vec::new();
        for round in 1..=20u8 {
            for i in 0..16u64 {
                device.write_at(i * 4096, &[round; 4096]).unwrap();
            }
            reads.push((round, device.submit_read(7 * 4096, vec![0u8; 4096])));
        }
        for (round, read) in reads {
            let buf = read.wait().unwrap();
            assert_eq!(buf, vec![round; 4096], "read after round {round}");
        }
        assert_eq!(device.queued_writes(), 0);
    }

    /// Goal: an error of a submitted read reaches its submitter unchanged (EIO with its
    /// offset, `Gone`, out of range) and latches nothing: the next flush succeeds (I4).
    #[test]
    fn submitted_read_errors_reach_the_submitter() {
        let sim = SimDevice::new(
            "q",
            1 << 20,
            FaultPlan {
                read_eio: PER_MILLION,
                ..FaultPlan::default()
            },
        );
        let device = QueuedDevice::new(sim.clone()).unwrap();
        let eio = device.submit_read(8192, vec![0u8; 512]).wait();
        assert!(matches!(eio, Err(DeviceError::Io { offset: 8192, .. })));
        sim.set_gone(true);
        let gone = device.submit_read(0, vec![0u8; 512]).wait();
        assert!(matches!(gone, Err(DeviceError::Gone)));
        sim.set_gone(false);
        let far = device.submit_read(1 << 20, vec![0u8; 512]);
        assert!(far.is_done(), "an out-of-range read is refused at submit");
        assert!(matches!(far.wait(), Err(DeviceError::OutOfRange { .. })));
        device.flush().unwrap();
    }

    /// A device whose reads wait until `parties` reads are inside `read_at` at once (or
    /// until a generous timeout, then fail): reads that were not served in parallel fail.
    #[derive(Debug)]
    struct Rendezvous {
        inner: Arc<SimDevice>,
        arrived: Arc<(Mutex<usize>, Condvar)>,
        parties: usize,
    }

    impl Device for Rendezvous {
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
            let (count, all) = &*self.arrived;
            let mut count = count.lock().unwrap();
            *count += 1;
            all.notify_all();
            let deadline = std::time::Duration::from_secs(20);
            let (count, timeout) = all
                .wait_timeout_while(count, deadline, |c| *c < self.parties)
                .unwrap();
            drop(count);
            if timeout.timed_out() {
                return Err(DeviceError::Io {
                    offset,
                    source: std::io::Error::other("reads were not in flight together"),
                });
            }
            self.inner.read_at(offset, buf)
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
            self.inner.write_at(offset, data)
        }
        fn flush(&self) -> Result<(), DeviceError> {
            self.inner.flush()
        }
        fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
            self.inner.discard(offset, len)
        }
        fn path(&self) -> &str {
            self.inner.path()
        }
    }

    /// Goal: reads submitted to several devices are in flight at the same time (each
    /// device's own I/O threads), and one slow device among them delays only its own read. Method:
    /// every device's read blocks until all devices are inside a read; a serial issue would
    /// time out and fail. Device 0 also sleeps 50 ms per access.
    #[test]
    fn reads_submitted_to_several_devices_are_in_flight_together() {
        const DEVICES: usize = 6;
        let arrived = Arc::new((Mutex::new(0usize), Condvar::new()));
        let devices: Vec<QueuedDevice> = (0..DEVICES)
            .map(|i| {
                let plan = FaultPlan {
                    latency_ns: if i == 0 { 50_000_000 } else { 0 },
                    ..FaultPlan::default()
                };
                let sim = SimDevice::new(&format!("d{i}"), 1 << 20, plan);
                sim.write_at(4096, &[i as u8 + 1; 4096]).unwrap();
                let rendezvous = Rendezvous {
                    inner: sim,
                    arrived: Arc::clone(&arrived),
                    parties: DEVICES,
                };
                QueuedDevice::new(Arc::new(rendezvous)).unwrap()
            })
            .collect();
        let reads: Vec<PendingRead> = devices
            .iter()
            .map(|d| d.submit_read(4096, vec![0u8; 4096]))
            .collect();
        for (i, read) in reads.into_iter().enumerate() {
            assert_eq!(read.wait().unwrap(), vec![i as u8 + 1; 4096], "device {i}");
        }
    }

    /// A device that sleeps in every access and records how many reads it served at once
    /// and whether a write ever overlapped another access.
    #[derive(Debug, Default)]
    struct Overlap {
        inner: Option<Arc<SimDevice>>,
        reads: std::sync::atomic::AtomicUsize,
        writes: std::sync::atomic::AtomicUsize,
        most_reads: std::sync::atomic::AtomicUsize,
        mixed: std::sync::atomic::AtomicBool,
    }

    impl Overlap {
        fn sim(&self) -> &SimDevice {
            self.inner.as_ref().unwrap()
        }
    }

    impl Device for Overlap {
        fn size_bytes(&self) -> u64 {
            self.sim().size_bytes()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
            let now = self.reads.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_reads.fetch_max(now, Ordering::SeqCst);
            if self.writes.load(Ordering::SeqCst) > 0 {
                self.mixed.store(true, Ordering::SeqCst);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            let result = self.sim().read_at(offset, buf);
            self.reads.fetch_sub(1, Ordering::SeqCst);
            result
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
            let now = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
            if now > 1 || self.reads.load(Ordering::SeqCst) > 0 {
                self.mixed.store(true, Ordering::SeqCst);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            let result = self.sim().write_at(offset, data);
            self.writes.fetch_sub(1, Ordering::SeqCst);
            result
        }
        fn flush(&self) -> Result<(), DeviceError> {
            self.sim().flush()
        }
        fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
            self.sim().discard(offset, len)
        }
        fn path(&self) -> &str {
            self.sim().path()
        }
    }

    /// Goal: a device's reads are served by its `IO_THREADS` threads at once, while a write
    /// is applied alone (I5): no read beside it, no second write, and the reads queued
    /// after it see its bytes while those before it do not. Method: 8 reads 1 MiB apart (too
    /// far to aggregate), a write over the first read's sector, 8 more reads (the first of
    /// them that sector), two writes, on a device that sleeps 10 ms in every access and
    /// counts what overlaps. Negative controls: a write startable beside reads
    /// (`startable`) sets `mixed`; one thread gives `most_reads` 1.
    #[test]
    fn reads_are_served_by_every_io_thread_and_a_write_alone() {
        let sim = SimDevice::new("q", 32 << 20, FaultPlan::default());
        for i in 0..16u64 {
            sim.write_at(i << 20, &[i as u8 + 1; 4096]).unwrap();
        }
        let overlap = Arc::new(Overlap {
            inner: Some(sim),
            ..Overlap::default()
        });
        let device = QueuedDevice::new(overlap.clone()).unwrap();
        let read = |i: u64| device.submit_read((i % 16) << 20, vec![0; 4096]);
        let before: Vec<_> = (0..8).map(read).collect();
        device.write_at(0, &[0xee; 4096]).unwrap();
        let after: Vec<_> = (16..24).map(read).collect();
        device.write_at(1 << 20, &[0xdd; 4096]).unwrap();
        device.write_at(2 << 20, &[0xcc; 4096]).unwrap();
        for (i, pending) in before.into_iter().enumerate() {
            assert_eq!(pending.wait().unwrap(), vec![i as u8 + 1; 4096], "read {i}");
        }
        for (i, pending) in after.into_iter().enumerate() {
            let want = if i == 0 { 0xee } else { i as u8 + 1 };
            assert_eq!(pending.wait().unwrap(), vec![want; 4096], "read {}", i + 16);
        }
        device.flush().unwrap();
        assert!(!overlap.mixed.load(Ordering::SeqCst), "a write overlapped");
        assert_eq!(overlap.most_reads.load(Ordering::SeqCst), IO_THREADS);
    }

    #[test]
    fn out_of_range_writes_are_refused_at_once() {
        let sim = SimDevice::new("q", 4096, FaultPlan::default());
        let device = QueuedDevice::new(sim).unwrap();
        assert!(matches!(
            device.write_at(4096, &[0u8; 512]),
            Err(DeviceError::OutOfRange { .. })
        ));
    }

    /// A device whose writes wait at a gate until the test opens it (so that the queue
    /// behind a write fills up deterministically), which fails reads covering `bad`, and
    /// counts the vectored accesses it is given with their pieces.
    #[derive(Debug)]
    struct Gated {
        inner: Arc<SimDevice>,
        open: Mutex<bool>,
        opened: Condvar,
        bad: Option<u64>,
        vectored: Mutex<Vec<(bool, usize)>>,
    }

    impl Gated {
        fn new(inner: Arc<SimDevice>, bad: Option<u64>) -> Arc<Gated> {
            Arc::new(Gated {
                inner,
                open: Mutex::new(false),
                opened: Condvar::new(),
                bad,
                vectored: Mutex::new(Vec::new()),
            })
        }

        fn open(&self) {
            *self.open.lock().unwrap() = true;
            self.opened.notify_all();
        }

        fn pass(&self) {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.opened.wait(open).unwrap();
            }
        }
    }

    impl Device for Gated {
        fn size_bytes(&self) -> u64 {
            self.inner.size_bytes()
        }
        fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
            if self
                .bad
                .is_some_and(|b| (offset..offset + buf.len() as u64).contains(&b))
            {
                let source = std::io::Error::other("bad sector");
                return Err(DeviceError::Io { offset, source });
            }
            self.inner.read_at(offset, buf)
        }
        fn write_at(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
            self.pass();
            self.inner.write_at(offset, data)
        }
        fn read_vectored_at(&self, offset: u64, bufs: &mut [&mut [u8]]) -> Result<(), DeviceError> {
            self.vectored.lock().unwrap().push((true, bufs.len()));
            crate::read_each(self, offset, bufs)
        }
        fn write_vectored_at(&self, offset: u64, data: &[&[u8]]) -> Result<(), DeviceError> {
            self.vectored.lock().unwrap().push((false, data.len()));
            crate::write_each(self, offset, data)
        }
        fn flush(&self) -> Result<(), DeviceError> {
            self.inner.flush()
        }
        fn discard(&self, offset: u64, len: u64) -> Result<(), DeviceError> {
            self.inner.discard(offset, len)
        }
        fn path(&self) -> &str {
            self.inner.path()
        }
    }

    /// Goal: reads queued one after another at adjacent offsets go to the device as one
    /// access, and so do adjacent writes; a read that starts at most READ_GAP_MAX after the
    /// previous one ends joins it (the hole read into scratch); a read further away, or
    /// behind, or not next in the queue, is its own access; every read gets its own bytes.
    /// Method: the queue is held behind a gated write while the accesses are queued, then
    /// opened. Negative control: a gap limit of 0 makes the first access 8 pieces.
    #[test]
    fn adjacent_queued_accesses_aggregate() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        for i in 0..48u64 {
            sim.write_at(i * 4096, &[i as u8; 4096]).unwrap();
        }
        let gated = Gated::new(sim.clone(), None);
        let device = QueuedDevice::new(gated.clone()).unwrap();
        device.write_at(512 << 10, &[9; 512]).unwrap();
        let reads: Vec<_> = (0..8u64)
            .chain([12, 40, 8])
            .map(|i| (i, device.submit_read(i * 4096, vec![0; 4096])))
            .collect();
        for i in 0..4u64 {
            device
                .write_at((600 << 10) + i * 4096, &[i as u8 + 100; 4096])
                .unwrap();
        }
        gated.open();
        for (i, read) in reads {
            assert_eq!(read.wait().unwrap(), vec![i as u8; 4096], "read {i}");
        }
        device.flush().unwrap();
        // Reads 0-7, the hole of 16 KiB, read 12: ten pieces; 40 and 8 alone.
        assert_eq!(
            *gated.vectored.lock().unwrap(),
            vec![(true, 10), (false, 4)]
        );
        let mut back = vec![0; 4 * 4096];
        sim.read_at(600 << 10, &mut back).unwrap();
        for (i, piece) in back.chunks(4096).enumerate() {
            assert_eq!(piece, vec![i as u8 + 100; 4096].as_slice());
        }
    }

    /// Goal: a plugged thread's reads wait in the queue until the plug ends, so the I/O
    /// thread finds them together and makes one access of them; a plugged thread that waits
    /// for its own read is not stuck behind its plug (P1). Method: four adjacent reads
    /// submitted under a plug to an idle queue, the plug dropped, the accesses counted;
    /// then a read submitted and waited for under a plug, on a thread the test gives 20 s.
    /// Negative control: without the flush in the read's wait the second part times out.
    #[test]
    fn a_plug_holds_reads_back_until_it_ends_or_its_thread_waits() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        for i in 0..4u64 {
            sim.write_at(i * 4096, &[i as u8 + 1; 4096]).unwrap();
        }
        let gated = Gated::new(sim, None);
        gated.open();
        let device = Arc::new(QueuedDevice::new(gated.clone()).unwrap());
        let plug = crate::plug();
        let reads: Vec<_> = (0..4u64)
            .map(|i| device.submit_read(i * 4096, vec![0; 4096]))
            .collect();
        drop(plug);
        for (i, read) in reads.into_iter().enumerate() {
            assert_eq!(read.wait().unwrap(), vec![i as u8 + 1; 4096]);
        }
        assert_eq!(*gated.vectored.lock().unwrap(), vec![(true, 4)]);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = Arc::clone(&device);
        std::thread::spawn(move || {
            let _plug = crate::plug();
            let _inner = crate::plug();
            let read = reader.submit_read(4096, vec![0; 4096]);
            tx.send(read.wait().unwrap()).unwrap();
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(20));
        assert_eq!(
            got.unwrap(),
            vec![2u8; 4096],
            "a waiting thread flushes its plug"
        );
    }

    /// Goal: a plugged thread's writes wake no I/O thread until the plug ends, so the I/O
    /// thread finds them together and writes them as one access. Method: four adjacent
    /// writes under a plug to an idle queue, 20 ms apart (time for a woken I/O thread to
    /// take each alone), the plug dropped, the accesses counted. Negative control: waking
    /// at every write (`WriteWake::Now` for all) makes four accesses, not one of four.
    #[test]
    fn a_plug_holds_writes_back_until_it_ends() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        let gated = Gated::new(Arc::clone(&sim), None);
        gated.open();
        let device = QueuedDevice::new(gated.clone()).unwrap();
        // The I/O thread started and asleep on its empty queue.
        device.write_at(512 << 10, &[9; 4096]).unwrap();
        device.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let plug = crate::plug();
        for i in 0..4u64 {
            device.write_at(i * 4096, &[i as u8 + 1; 4096]).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        drop(plug);
        device.flush().unwrap();
        assert_eq!(*gated.vectored.lock().unwrap(), vec![(false, 4)]);
        let mut back = vec![0; 4 * 4096];
        sim.read_at(0, &mut back).unwrap();
        for (i, piece) in back.chunks(4096).enumerate() {
            assert_eq!(piece, vec![i as u8 + 1; 4096].as_slice());
        }
    }

    /// Goal: a shared write waits in the queue as a reference to its owner's buffer, not a
    /// copy, until the I/O thread has written it; whole pages off a page boundary are copied
    /// (and counted) so that an O_DIRECT device gets them aligned. Method: the I/O thread
    /// is held at a gated write while a page-aligned column of a shared buffer and a
    /// misaligned page of it are queued; the buffer's reference count tells whether the
    /// queue kept it. Negative control: without `QueuedDevice::write_shared` (the trait's
    /// default, which copies through `write_at`) the count stays 1 while queued.
    #[test]
    fn a_shared_write_is_queued_without_a_copy() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        let gated = Gated::new(Arc::clone(&sim), None);
        let device = QueuedDevice::new(gated.clone()).unwrap();
        device.write_at(512 << 10, &[9; 4096]).unwrap();
        let mut bytes = tarn_base::buf::zeroed(3 * 4096);
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i / 7) as u8;
        }
        let block = Arc::new(bytes);
        let whole = SharedBytes::new(Arc::clone(&block));
        device.write_shared(0, whole.slice(4096..8192)).unwrap();
        let kept = Arc::strong_count(&block);
        device.write_shared(64 << 10, whole.slice(8..4104)).unwrap();
        let after_copy = Arc::strong_count(&block);
        drop(whole);
        // Opened before any assertion: a failing one would otherwise hang in the drop.
        gated.open();
        device.flush().unwrap();
        assert_eq!(kept, 3, "the queue keeps the column");
        assert_eq!(after_copy, 3, "a misaligned page is copied");
        assert_eq!(device.unaligned_copies(), 1);
        assert_eq!(Arc::strong_count(&block), 1, "let go once written");
        let mut back = vec![0; 4096];
        sim.read_at(0, &mut back).unwrap();
        assert_eq!(back, block[4096..8192]);
        sim.read_at(64 << 10, &mut back).unwrap();
        assert_eq!(back, block[8..4104]);
    }

    /// Goal: writes another thread's plug holds back never keep a drain waiting (P3), and a
    /// plug wakes its devices by itself once PLUG_WRITE_BYTES of writes are queued. Method:
    /// a thread queues writes under a plug that it keeps until told; meanwhile (1) another
    /// thread's `flush` of the device must return, (2) after more than PLUG_WRITE_BYTES of
    /// writes, the bytes must reach the device while the plug is still held; each within a
    /// 20 s limit. Negative controls: without the I/O thread's wake in `Shared::wait` part 1
    /// times out; without `WriteWake::Due` part 2 does.
    #[test]
    fn a_plug_holds_no_drain_back_and_wakes_by_itself_past_its_bytes() {
        let size = 2 * crate::plug::PLUG_WRITE_BYTES;
        let sim = SimDevice::new("q", size, FaultPlan::default());
        let device = Arc::new(QueuedDevice::new(Arc::clone(&sim) as Arc<dyn Device>).unwrap());
        let (step_tx, step_rx) = std::sync::mpsc::channel::<u64>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let writer = Arc::clone(&device);
        let plugged = std::thread::spawn(move || {
            let _plug = crate::plug();
            // Each message: write that many bytes of 0x5a from offset 0, then report.
            while let Ok(len) = step_rx.recv() {
                let chunk = vec![0x5au8; 64 << 10];
                let mut at = 0;
                while at < len {
                    writer.write_at(at, &chunk).unwrap();
                    at += chunk.len() as u64;
                }
                done_tx.send(()).unwrap();
            }
        });
        let limit = std::time::Duration::from_secs(20);
        step_tx.send(64 << 10).unwrap();
        done_rx.recv_timeout(limit).unwrap();
        let (flushed_tx, flushed_rx) = std::sync::mpsc::channel();
        let other = Arc::clone(&device);
        std::thread::spawn(move || flushed_tx.send(other.flush().is_ok()).unwrap());
        assert_eq!(
            flushed_rx.recv_timeout(limit),
            Ok(true),
            "a drain is not held back"
        );
        step_tx
            .send(crate::plug::PLUG_WRITE_BYTES + (64 << 10))
            .unwrap();
        done_rx.recv_timeout(limit).unwrap();
        let mut last = [0u8; 1];
        let end = crate::plug::PLUG_WRITE_BYTES - 1;
        // Polled every 5 ms for up to 20 s.
        for _ in 0..4000 {
            sim.read_at(end, &mut last).unwrap();
            if last[0] == 0x5a {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(last[0], 0x5a, "the plug woke the device past its bytes");
        drop(step_tx);
        plugged.join().unwrap();
        device.flush().unwrap();
    }

    /// Goal: a failed aggregated read fails only the reads whose range is bad; the others
    /// get their bytes (I4). Method: four adjacent reads queued behind a gated write, the
    /// second covering a bad sector.
    #[test]
    fn a_bad_sector_fails_only_its_own_read_in_an_aggregate() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        for i in 0..4u64 {
            sim.write_at(i * 4096, &[i as u8 + 1; 4096]).unwrap();
        }
        let gated = Gated::new(sim, Some(4096 + 100));
        let device = QueuedDevice::new(gated.clone()).unwrap();
        device.write_at(512 << 10, &[9; 512]).unwrap();
        let reads: Vec<_> = (0..4u64)
            .map(|i| device.submit_read(i * 4096, vec![0; 4096]))
            .collect();
        gated.open();
        let outcomes: Vec<_> = reads.into_iter().map(PendingRead::wait).collect();
        assert_eq!(*gated.vectored.lock().unwrap(), vec![(true, 4)]);
        for (i, outcome) in outcomes.into_iter().enumerate() {
            match (i, outcome) {
                (1, Err(DeviceError::Io { offset, .. })) => assert_eq!(offset, 4096),
                (1, other) => panic!("the bad read: {other:?}"),
                (i, outcome) => assert_eq!(outcome.unwrap(), vec![i as u8 + 1; 4096]),
            }
        }
        device.flush().unwrap();
    }

    /// Goal: a bad sector in the hole between two aggregated reads fails neither: the
    /// aggregate fails and each read is read again alone (I4). Method: reads of sectors 0,
    /// 1 and 3 queued behind a gated write, sector 2 bad.
    #[test]
    fn a_bad_sector_in_a_hole_fails_no_read() {
        let sim = SimDevice::new("q", 1 << 20, FaultPlan::default());
        for i in 0..4u64 {
            sim.write_at(i * 4096, &[i as u8 + 1; 4096]).unwrap();
        }
        let gated = Gated::new(sim, Some(2 * 4096 + 7));
        let device = QueuedDevice::new(gated.clone()).unwrap();
        device.write_at(512 << 10, &[9; 512]).unwrap();
        let reads: Vec<_> = [0u64, 1, 3]
            .into_iter()
            .map(|i| (i, device.submit_read(i * 4096, vec![0; 4096])))
            .collect();
        gated.open();
        for (i, read) in reads {
            assert_eq!(read.wait().unwrap(), vec![i as u8 + 1; 4096], "read {i}");
        }
        assert_eq!(*gated.vectored.lock().unwrap(), vec![(true, 4)]);
        device.flush().unwrap();
    }
}
